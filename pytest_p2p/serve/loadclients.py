"""The load generator's client side: one event loop per client process, sharded over spawned processes.

:mod:`.loadgen` says what to run (:class:`~.loadspec.LoadSpec`) and turns the records into a
:class:`~.result.LoadResult`; this module runs it. Each client process (:class:`Job`) warms up,
meets the others at one barrier, then sends its share of the measured requests with its own
connections (:mod:`.transport`), recording every request -- success or counted failure with
its reason -- and its own health: CPU time over the measured window and the lateness of its
event loop (:class:`~.result.ClientStats`). How many processes: :class:`ClientPlanner` -- one
until a run is late, then more, up to :func:`process_cap` (docs/performance.md).

Each run spawns its client processes afresh (:func:`run_sharded`) unless a :func:`client_pool`
is open: then the processes of a run of n are spawned once and reused run after run
(:class:`ClientPool`), so that a campaign's short windows do not pay for an interpreter's start
inside their clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import ServerError
from .loadspec import LoadSpec
from .metrics import RequestRecord, percentile
from .result import ClientStats
from .transport import ConnectTimeout, StreamError, StreamParser, Transport, make_transport

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import SpawnContext, SpawnProcess

__all__ = ["PLANNER", "ClientPlanner", "ClientPool", "CountPlanner", "HeldPlanner", "Job", "Shard", "client_pool",
           "current_pool", "drive", "free_cores", "process_cap", "run_coroutine", "run_sharded"]

#: a planner remembers this many workloads (oldest forgotten first)
_PLANNER_MEMORY = 256


class _Barrier(Protocol):
    """What a client process uses of ``multiprocessing``'s ``Barrier``."""

    def wait(self, timeout: float | None = None) -> int: ...

    def abort(self) -> None: ...


def free_cores(window_s: float = 0.05) -> float:
    """Idle cores among ours right now, from two /proc/stat readings (all of them where /proc cannot say)."""
    cpus = sorted(os.sched_getaffinity(0))

    def read() -> dict[int, tuple[int, int]]:
        out = {}
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                f = line.split()
                if f[0].startswith("cpu") and f[0] != "cpu" and int(f[0][3:]) in cpus:
                    ticks = [int(x) for x in f[1:8]]
                    out[int(f[0][3:])] = (sum(ticks), ticks[3] + ticks[4])  # total, idle + iowait
        return out

    try:
        a = read()
        time.sleep(window_s)
        b = read()
    except (OSError, ValueError, IndexError):
        return float(len(cpus))
    idle = 0.0
    for cpu, (total, free) in b.items():
        dt = total - a.get(cpu, (total, free))[0]
        idle += (free - a.get(cpu, (total, free))[1]) / dt if dt > 0 else 1.0
    return idle if b else float(len(cpus))


def process_cap(concurrency: int, cores: float | None = None) -> int:
    """The most client processes a run may use: half the idle cores (the rest is the server's), one a stream at most.

    ``cores`` defaults to the cores idle right now among those this process may use; a
    2-core box therefore always runs one in-process loop.
    """
    if concurrency <= 1:
        return 1  # one stream needs one loop: no 50 ms look at /proc
    n = free_cores() if cores is None else cores
    return max(1, min(int(n // 2), concurrency))


class ClientPlanner:
    """How many client processes a workload gets: one, as ``vllm bench serve`` uses, until a run shows it is late.

    Why not shard from the concurrency up front: against a real vLLM server at C = 256,
    four client processes (the old rule, one per 16 streams) got 0.87-0.94x the throughput
    of bench's one process, pinned or not, while one process of ours got 0.94-1.04x with its
    event loop late by < 1 ms (docs/performance.md). So a workload starts on one
    process; when a run comes back late (:attr:`~.result.LoadResult.client_lateness`),
    the next one -- or the immediate re-run, :func:`~.loadgen.generate_load` -- gets twice
    as many, up to :func:`process_cap`, and the count that was on time is remembered for
    the workload, so a campaign's warm-up pays for the search once.
    """

    def __init__(self) -> None:
        self._learned: dict[tuple[object, ...], int] = {}

    def start(self, workload: tuple[object, ...], cap: int) -> int:
        """Processes for the next run of ``workload``."""
        return max(1, min(cap, self._learned.get(workload, 1)))

    def after(self, workload: tuple[object, ...], n: int, late: bool, cap: int) -> int | None:
        """Record how a run of ``n`` processes went; the count to re-run with, or ``None`` to keep this run."""
        nxt = min(cap, 2 * n) if late else n
        self._remember(workload, nxt)
        return nxt if nxt > n else None

    def at_least(self, workload: tuple[object, ...], n: int) -> None:
        """Remember at least ``n`` processes for ``workload`` (a count learned elsewhere: :class:`HeldPlanner`)."""
        self._remember(workload, max(n, self._learned.get(workload, 1)))

    def _remember(self, workload: tuple[object, ...], n: int) -> None:
        """``n`` for ``workload``, as the newest entry; the oldest forgotten beyond :data:`_PLANNER_MEMORY`."""
        self._learned.pop(workload, None)
        self._learned[workload] = n
        while len(self._learned) > _PLANNER_MEMORY:
            del self._learned[next(iter(self._learned))]


class CountPlanner(Protocol):
    """What :func:`~.loadgen.generate_load` asks of a planner: a count to start on, and what a run taught."""

    def start(self, workload: tuple[object, ...], cap: int) -> int: ...

    def after(self, workload: tuple[object, ...], n: int, late: bool, cap: int) -> int | None: ...


class HeldPlanner:
    """The count of ``inner`` (a :class:`ClientPlanner`), held per workload from its first run until :meth:`release`.

    Why: a campaign compares its arms window pair by window pair, and a start is the unit its verdict counts.
    The plain planner changes the count at the run after a late one. On 2x H200 (2026-11-28, fifteenth night)
    p2p_on's c64 window 8 came back late (one process, busy 55-63 % of its windows), so p2p_off's window 8 ran
    on two processes and p2p_on's on one: one pair measured with two instruments, and starts 1-4 and 5-8 with
    different ones. A campaign's windows hold the count instead, and the campaign releases it where a launch
    begins, for every arm at once: a start is measured with one instrument. A late window still teaches
    ``inner`` (twice the count, up to the cap), so the next launch runs on more; it is kept and flagged as late,
    as before, never re-run (a window's telemetry must hold one run).
    """

    def __init__(self, inner: ClientPlanner) -> None:
        self.inner = inner
        self._held: dict[tuple[object, ...], int] = {}

    def start(self, workload: tuple[object, ...], cap: int) -> int:
        """The held count, or ``inner``'s now, held from here on."""
        n = self._held.get(workload)
        if n is None:
            n = self._held[workload] = self.inner.start(workload, cap)
        return n

    def after(self, workload: tuple[object, ...], n: int, late: bool, cap: int) -> None:
        """A late run raises ``inner``'s count for after the release; the held count stays, nothing is re-run."""
        if late:
            self.inner.at_least(workload, min(cap, 2 * n))

    def release(self) -> None:
        """Let every workload take ``inner``'s count at its next run (a campaign calls this where a launch begins)."""
        self._held.clear()


#: the planner :func:`~.loadgen.generate_load` uses unless given another (one per process: xdist workers learn apart)
PLANNER = ClientPlanner()


@dataclass(frozen=True)
class Job:
    """What one client process runs: its share of the measured requests and its concurrency."""

    base_url: str
    api_key: str
    model: str
    spec: LoadSpec
    prompts: tuple[str, ...]
    offsets: tuple[float, ...]
    warm_ids: tuple[int, ...]
    ids: tuple[int, ...]  # open loop: this process's requests; closed loop: its share if no shared ticket is given
    concurrency: int
    cpu: int | None = None
    rid_prefix: str = "req"  # request ids are f"{rid_prefix}-{i}": a re-run's differ from the run it replaces
    # (input, output) tokens of each prompt (workload.request_lengths); empty: the spec's lengths for all
    lengths: tuple[tuple[int, int], ...] = ()

    def request_lengths(self, k: int) -> tuple[int, int]:
        """Prompt ``k``'s input and output tokens."""
        return self.lengths[k] if self.lengths else (self.spec.input_len, self.spec.output_len)


@dataclass
class Shard:
    """What one client process brought back: its records, its measured window and its own health."""

    warm: list[RequestRecord]
    records: dict[int, RequestRecord]
    t0: float
    t1: float
    stats: ClientStats


def _payload(job: Job, prompt: str, output_len: int) -> dict[str, object]:
    s = job.spec
    opts: dict[str, object] = {"include_usage": True}
    if s.continuous_usage:
        opts["continuous_usage_stats"] = True
    # the request bench sends: no sampling parameters (the server's defaults), ignore_eos, usage at the end.
    # (Sending temperature 0 made greedy decoding of dummy weights repeat tokens: other server work per token.)
    body: dict[str, object] = {"model": job.model, "stream": True, "stream_options": opts, "ignore_eos": True}
    if s.endpoint == "chat":
        body.update(messages=[{"role": "user", "content": prompt}], max_completion_tokens=output_len)
    else:
        body.update(prompt=prompt, max_tokens=output_len)
    body.update(s.extra_body)  # the user's fields win, as bench's --extra-body does
    return body


async def _request(transport: Transport, job: Job, k: int, rid: str, keep_times: bool) -> RequestRecord:
    """Prompt ``k`` of ``job`` sent and streamed back; every failure is in the record, none escapes."""
    prompt = job.prompts[k]
    input_len, output_len = job.request_lengths(k)
    rec = RequestRecord(prompt_len=input_len, request_id=rid)
    parser = StreamParser(rec, chat=job.spec.endpoint == "chat", keep_times=keep_times)
    path = "chat/completions" if job.spec.endpoint == "chat" else "completions"
    timeout = job.spec.request_timeout_s
    rec.start_time = time.perf_counter()
    try:
        await asyncio.wait_for(transport.stream(path, _payload(job, prompt, output_len), rid, parser.feed), timeout)
        parser.finish()
        rec.success = True
    except (asyncio.TimeoutError, TimeoutError):
        rec.error = f"timeout: no complete response within {timeout:g} s"
    except StreamError as exc:
        rec.error = str(exc)
    except ConnectTimeout as exc:
        rec.error = f"connect timeout: {exc}"
    except (ConnectionError, OSError) as exc:
        rec.error = f"connection error: {type(exc).__name__}: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - every failure is counted with its reason, none escapes
        rec.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    rec.latency = (parser.last or rec.start_time) - rec.start_time
    rec.chunk_times = parser.times if keep_times else None
    rec.merged_chunks = parser.merged
    return rec


def run_queue_s() -> float | None:
    """Seconds this thread has waited on a run queue, runnable but off the CPU (``/proc/thread-self/schedstat``).

    Why: the OS taking the CPU away from the client is invisible to the lag probe between
    its samples, yet it makes every chunk that arrives meanwhile late (a loop-dated one by
    the whole wait). None where the kernel does not say (not Linux, schedstats off).
    """
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return None


async def _lag_probe(samples: list[float], stop: asyncio.Event) -> None:
    """How long a callback made ready now waits for the loop: how late a loop-dated chunk can be, and how late
    the loop reads a socket (a kernel-dated chunk is late only when that exceeds its stream's gap)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        await asyncio.sleep(0.005)
        fut: asyncio.Future[None] = loop.create_future()
        t = time.perf_counter()
        loop.call_soon(fut.set_result, None)
        await fut
        samples.append(time.perf_counter() - t)


async def drive(job: Job, gate: Callable[[], object] | None = None,
                take: Callable[[], int | None] | None = None) -> Shard:
    """Warm up, pass the ``gate`` (the other client processes), then run ``job.ids``.

    In a closed loop, ``take`` (when given) hands out the next request id of the whole run
    instead: every client process draws from one pool, as bench's single semaphore does.
    Fixed shares left a process with one extra wave when the requests did not divide
    evenly over its streams (3 processes at C = 64 ran 5 waves instead of 4: -16 %
    throughput on a real server, docs/performance.md).
    """
    s = job.spec
    transport = make_transport(s.transport, job.base_url, job.api_key, connections=job.concurrency + 4,
                               timeout_s=s.request_timeout_s, options=s.client_options())
    try:
        sem = asyncio.Semaphore(job.concurrency)

        async def warm_one(i: int) -> RequestRecord:
            async with sem:
                return await _request(transport, job, i, f"warmup-{i}", False)

        warm = list(await asyncio.gather(*(warm_one(i) for i in job.warm_ids)))
        await transport.open(job.concurrency)  # no handshakes inside the measured window
        if gate is not None:
            gate()
        records: dict[int, RequestRecord] = {}
        base = s.warmup

        async def one(i: int) -> None:
            records[i] = await _request(transport, job, base + i, f"{job.rid_prefix}-{i}",
                                        s.keep_chunk_times)

        lags: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.ensure_future(_lag_probe(lags, stop))
        del transport.read_lags[:]  # the measured window's reads only
        wait0 = run_queue_s()
        cpu0, t0 = time.process_time(), time.perf_counter()
        if math.isinf(s.request_rate):
            queue = list(reversed(job.ids))
            next_id = take or (lambda: queue.pop() if queue else None)

            async def worker() -> None:
                while (i := next_id()) is not None:
                    await one(i)

            streams = job.concurrency if take is not None else min(job.concurrency, len(job.ids))
            await asyncio.gather(*(worker() for _ in range(streams)))
        else:
            async def gated(i: int) -> None:
                async with sem:
                    await one(i)

            tasks = []
            for i in job.ids:
                delay = t0 + job.offsets[i] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(gated(i)))
            await asyncio.gather(*tasks)
        t1, cpu1 = time.perf_counter(), time.process_time()
        wait1 = run_queue_s()
        stop.set()
        await probe
    finally:
        await transport.close()
    read_lags = transport.read_lags
    stats = ClientStats(cpu_s=cpu1 - cpu0, wall_s=t1 - t0, lag_p99_ms=percentile(lags, 99.0) * 1e3,
                        requests=len(records), cpu=job.cpu, stamps=transport.stamps,
                        read_lag_p99_ms=percentile(read_lags, 99.0) * 1e3,
                        chunks=sum(len(r.itl) + 1 for r in records.values() if r.ttft > 0 or r.itl),
                        merged_chunks=sum(r.merged_chunks for r in records.values()),
                        run_queue_s=None if wait0 is None or wait1 is None else wait1 - wait0)
    return Shard(warm, records, t0, t1, stats)


class _Ticket(Protocol):
    """What a client process uses of a ``multiprocessing.Value``: a shared counter with its lock."""

    value: int

    def get_lock(self) -> contextlib.AbstractContextManager[object]: ...


def _taker(ticket: _Ticket, total: int) -> Callable[[], int | None]:
    """Next request id of the run from the shared counter; None once all ``total`` are handed out."""
    def take() -> int | None:
        with ticket.get_lock():
            i = ticket.value
            if i >= total:
                return None
            ticket.value = i + 1
        return i
    return take


def _run_job(conn: Connection, barrier: _Barrier, job: Job, ticket: _Ticket | None,
             home: set[int] | None = None) -> None:
    """One run of one client process: pinned, its own event loop and connections; the outcome sent on ``conn``.

    The body both kinds of client process run -- one spawned for this run (:func:`_shard_main`)
    and a pooled one between runs (:func:`_pool_worker`) -- so that a pooled run measures exactly
    what a fresh one does. ``home``: the CPUs a pooled process had at birth, restored for a run
    without a pin (its previous run may have pinned it elsewhere).
    """
    try:
        if job.cpu is not None:
            try:
                os.sched_setaffinity(0, {job.cpu})
            except OSError:
                job = dataclasses.replace(job, cpu=None)  # not pinned after all: the result says so
        if job.cpu is None and home is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, home)
        wait = barrier.wait
        take = _taker(ticket, job.spec.num_prompts) if ticket is not None else None
        out = asyncio.run(drive(job, gate=lambda: wait(job.spec.request_timeout_s + 60), take=take))
        conn.send(("ok", out))
    except (Exception, threading.BrokenBarrierError) as exc:  # noqa: BLE001 - reported to the parent
        with contextlib.suppress(Exception):
            barrier.abort()
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _shard_main(conn: object, barrier: _Barrier, job: Job, ticket: _Ticket | None = None) -> None:
    """One client process of a sharded run, spawned for this run alone."""
    import multiprocessing.connection

    assert isinstance(conn, multiprocessing.connection.Connection)
    from ..children import set_parent_death_signal

    set_parent_death_signal()  # the starting thread waits for every shard: safe (children.py says why)
    try:
        _run_job(conn, barrier, job, ticket)
    finally:
        conn.close()


def run_sharded(jobs: Sequence[Job]) -> list[Shard]:
    """Every job in its own spawned process; they warm up, meet at one barrier, then measure together.

    A closed loop's processes draw request ids from one shared counter (see :func:`drive`).
    While a :func:`client_pool` is open the run goes to its processes instead, spawned once.
    """
    pool = current_pool()
    if pool is not None:
        return pool.run(jobs)
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads or an event loop
    barrier = ctx.Barrier(len(jobs))
    closed = math.isinf(jobs[0].spec.request_rate)
    ticket = ctx.Value("q", 0) if closed else None  # one pool of request ids for a closed loop
    children, pipes = [], []
    for job in jobs:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_shard_main, daemon=True, args=(child, barrier, job, ticket))
        proc.start()
        child.close()
        children.append(proc)
        pipes.append(parent)
    outcomes: list[tuple[str, object]] = []
    try:
        for pipe in pipes:
            try:
                outcomes.append(pipe.recv())
            except EOFError:
                outcomes.append(("error", "client process died"))
    finally:
        for proc in children:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(1)
    return _shards(outcomes, jobs[0].base_url)


def _shards(outcomes: Sequence[tuple[str, object]], base_url: str) -> list[Shard]:
    """A run's shards from its client processes' ``("ok", shard)`` / ``("error", text)``, in job order; any
    failure is the run's :class:`ServerError`, naming every one (spawned per run or pooled alike)."""
    problems = [str(payload) for status, payload in outcomes if status != "ok" or not isinstance(payload, Shard)]
    if problems:
        raise ServerError(f"load generator against {base_url}: client process failed: {'; '.join(problems)}")
    return [payload for _, payload in outcomes if isinstance(payload, Shard)]


#: how long a pooled client process may take to start (an interpreter and our imports, on a loaded box)
_POOL_START_S = 120.0
#: how long a pool's processes get to leave on their own when it closes, before they are killed
_POOL_CLOSE_S = 2.0


def _pool_worker(conn: object, barrier: _Barrier, ticket: _Ticket) -> None:
    """A pooled client process: says it is ready, then runs each job it is sent until ``None`` or its pipe closes.

    No parent death signal, unlike :func:`_shard_main`: the kernel fires ``PR_SET_PDEATHSIG``
    when the *thread* that spawned the child exits (``pytest_p2p/children.py``), and a pool's
    processes are spawned by whichever thread runs first -- in a campaign a window's
    short-lived thread (``campaign.gpu.call_with_timeout``) -- and must outlive it. So this
    process leaves when its pipe says so: ``None``, or ``EOFError`` once the parent's end is
    closed, which the kernel also does when the parent process dies however it dies; and it
    is a daemon, which multiprocessing ends at the parent's exit. Only a run in flight when
    the parent is killed goes on until its requests end (the server then dies with pytest).
    SIGINT is ignored: ^C reaches the whole process group, and the parent's unwinding closes
    the pool (a traceback per idle process otherwise).
    """
    import multiprocessing.connection
    import signal

    assert isinstance(conn, multiprocessing.connection.Connection)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    home = os.sched_getaffinity(0)  # restored for a run without a pin
    try:
        conn.send(("ready", os.getpid()))  # our imports are done: the parent's ``ensure`` has really paid the start
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return  # the parent closed its end, or died
            if msg is None:
                return
            job, closed = msg
            _run_job(conn, barrier, job, ticket if closed else None, home)
    except OSError:
        return  # the parent's end went away while we reported: no one is left to tell
    finally:
        conn.close()


class _StartFailed(Exception):
    """A pooled client process did not come up; the text says how."""


class _Group:
    """n pooled client processes that run together: one barrier, one request-id ticket, a duplex pipe each.

    The barrier and the ticket are ``multiprocessing`` objects that can only be handed to a
    process at its spawn, so they belong to the group for its life: a multiprocessing barrier
    is cyclic (it refills after every release), and the parent resets the ticket before a run.
    """

    def __init__(self, ctx: SpawnContext, n: int) -> None:
        self.n = n
        self.barrier = ctx.Barrier(n)
        self.ticket = ctx.Value("q", 0)
        self.procs: list[SpawnProcess] = []
        self.conns: list[Connection] = []
        try:
            for _ in range(n):
                parent, child = ctx.Pipe()  # duplex: jobs down, outcomes up
                self.conns.append(parent)
                try:
                    proc = ctx.Process(target=_pool_worker, daemon=True, args=(child, self.barrier, self.ticket))
                    proc.start()
                finally:
                    child.close()  # the process holds the only other copy: its death is our EOFError
                self.procs.append(proc)
            self._await_ready()
        except BaseException:
            self.stop(0)
            raise

    def _await_ready(self) -> None:
        deadline = time.monotonic() + _POOL_START_S
        for conn, proc in zip(self.conns, self.procs, strict=True):
            try:
                ready = conn.poll(max(0.0, deadline - time.monotonic())) and conn.recv()[0] == "ready"
            except (EOFError, OSError):
                proc.join(1)
                raise _StartFailed(f"client process died while starting (exit code {proc.exitcode})") from None
            if not ready:
                raise _StartFailed(f"client process did not start within {_POOL_START_S:g} s")

    def pids(self) -> tuple[int, ...]:
        return tuple(proc.pid or 0 for proc in self.procs)

    def run(self, jobs: Sequence[Job]) -> list[tuple[str, object]]:
        """Job i to process i; each one's ``("ok", shard)`` or ``("error", text)``, in job order.

        Outcomes are read as they come: the first process that fails or dies aborts the
        barrier, so that the others stop waiting for it at once (not after their barrier
        timeout, the request timeout + 60 s) and report.
        """
        import multiprocessing.connection

        assert len(jobs) == self.n
        with self.ticket.get_lock():
            self.ticket.value = 0  # a closed loop's request ids start again from 0
        closed = math.isinf(jobs[0].spec.request_rate)
        outcomes: list[tuple[str, object]] = [("error", "client process died")] * self.n
        pending: dict[Connection, int] = {}
        for i, (conn, job) in enumerate(zip(self.conns, jobs, strict=True)):
            try:
                conn.send((job, closed))
            except OSError:  # its end is gone: the process died between runs
                self._abort()
            else:
                pending[conn] = i
        while pending:
            for ready in multiprocessing.connection.wait(list(pending)):
                assert isinstance(ready, multiprocessing.connection.Connection)
                i = pending.pop(ready)
                try:
                    outcomes[i] = ready.recv()
                except (EOFError, OSError):
                    outcomes[i] = ("error", "client process died")
                if outcomes[i][0] != "ok":
                    self._abort()
        return outcomes

    def _abort(self) -> None:
        with contextlib.suppress(Exception):
            self.barrier.abort()

    def stop(self, grace_s: float) -> None:
        """End every process: asked to leave (``None``) within ``grace_s``, or at once (0); then killed; joined."""
        if grace_s > 0:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.send(None)
        else:
            self._abort()
            for proc in self.procs:
                proc.terminate()
        deadline = time.monotonic() + max(grace_s, 1.0)
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(1)
            with contextlib.suppress(ValueError):
                proc.close()  # its sentinel's fd; refused (ValueError) only if even SIGKILL has not ended it yet
        for conn in self.conns:
            conn.close()


class ClientPool:
    """Client processes spawned once and reused run after run, one group per process count.

    Why: :func:`run_sharded` spawns its processes per run -- a fresh interpreter each,
    importing our modules -- and a campaign's window clock holds all of it: on the GPU
    machine a c64 window of 2 processes ran ~0.9 s beyond its load against ~0.37 s at c16
    (one in-process loop, no spawn), in 6 s windows, ~64 a night. Open one with
    :func:`client_pool`; every sharded run of n processes then goes to this pool's group of
    n, spawned at its first run or by :meth:`ensure` before a window's clock starts.

    A group that fails (a process reports an error or dies) is ended and dropped, and the
    run raises what :func:`run_sharded` raises; the next run of that size spawns afresh. A
    group is taken out while it runs, so a second thread's run of the same size (an
    abandoned window still running) gets a group of its own rather than waiting; only one
    of them is kept. Pooled processes arm no parent death signal (:func:`_pool_worker` says
    why): they leave on :meth:`close`, when their pipe closes, or with the parent.
    """

    def __init__(self) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads or a loop
        self._lock = threading.Lock()
        self._idle: dict[int, _Group] = {}  # by process count, ready for a run
        self._live: set[_Group] = set()  # idle and running: what close() ends
        self._closed = False
        #: processes this pool has started over its life (tests and benchmarks count spawns with it)
        self.spawned = 0

    def ensure(self, n: int) -> None:
        """Spawn the group of ``n`` processes now if there is none, and wait until they are ready.

        So that a caller pays the start before a timed window rather than inside it. A
        ``ServerError`` if they do not start; nothing once the pool is closed.
        """
        if n < 1:
            raise ValueError(f"client pool: a group needs at least one process, got {n}")
        with self._lock:
            if self._closed or n in self._idle:
                return
        try:
            group = self._spawn(n)
        except _StartFailed as exc:
            raise ServerError(f"load generator: client process failed: {exc}") from None
        self._give_back(group)

    def pids(self, n: int) -> tuple[int, ...]:
        """The process ids of the idle group of ``n`` (empty: none now)."""
        with self._lock:
            group = self._idle.get(n)
            return group.pids() if group is not None else ()

    def run(self, jobs: Sequence[Job]) -> list[Shard]:
        """:func:`run_sharded` on this pool's processes: the same shards, the same ``ServerError`` on a failure."""
        n = len(jobs)
        with self._lock:
            group = self._idle.pop(n, None)
        if group is None:
            try:
                group = self._spawn(n)
            except _StartFailed as exc:
                raise ServerError(f"load generator against {jobs[0].base_url}: client process failed: "
                                  f"{exc}") from None
        try:
            outcomes = group.run(jobs)
        except BaseException:
            self._drop(group)  # its processes may be anywhere in a run: none of them is reused
            raise
        try:
            shards = _shards(outcomes, jobs[0].base_url)
        except ServerError:
            self._drop(group)  # a process failed or died: none of the group is reused
            raise
        self._give_back(group)
        return shards

    def close(self) -> None:
        """Ask every process to leave, wait a moment, kill what is left; afterwards none of them is alive."""
        with self._lock:
            self._closed = True
            groups = list(self._live)
            self._live.clear()
            self._idle.clear()
        for group in groups:
            group.stop(_POOL_CLOSE_S)

    def _spawn(self, n: int) -> _Group:
        with self._lock:
            self.spawned += n
        group = _Group(self._ctx, n)
        with self._lock:
            self._live.add(group)
        return group

    def _give_back(self, group: _Group) -> None:
        """Keep ``group`` for the next run of its size; ended instead if the pool closed or has one already."""
        with self._lock:
            keep = not self._closed and group.n not in self._idle
            if keep:
                self._idle[group.n] = group
            else:
                self._live.discard(group)
        if not keep:
            group.stop(_POOL_CLOSE_S)

    def _drop(self, group: _Group) -> None:
        with self._lock:
            self._live.discard(group)
        group.stop(0)


_POOL: ClientPool | None = None  # the open pool, if any: every thread's sharded runs go to it
_POOL_LOCK = threading.Lock()


def current_pool() -> ClientPool | None:
    """The open :class:`ClientPool`, or ``None`` (each run spawns its own processes)."""
    with _POOL_LOCK:
        return _POOL


@contextlib.contextmanager
def client_pool() -> Iterator[ClientPool]:
    """Open a :class:`ClientPool` for the block: sharded runs reuse its processes; closed on the way out, however.

    Inside an open pool (any thread's) this yields that one and leaves it open: whoever
    opened it closes it.
    """
    global _POOL
    with _POOL_LOCK:
        outer = _POOL
        pool = outer or ClientPool()
        _POOL = pool
    if outer is not None:
        yield outer
        return
    try:
        yield pool
    finally:
        with _POOL_LOCK:
            _POOL = None
        pool.close()


def run_coroutine(job: Job) -> Shard:
    """Run ``job`` in this process, on a loop of its own (one client, no spawned process)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(drive(job))
    # called from inside an event loop (e.g. an async test): run on a private loop in a thread
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, drive(job)).result()
