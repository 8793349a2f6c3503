"""Client processes spawned once and reused (``loadclients.client_pool``): same results, fewer spawns, clean ends.

Spawns are counted at ``SpawnProcess.start`` (the ``starts`` fixture), not with the pool's own
counter, so a pool that spawned behind its own back would still be caught.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_loadgen import _launch

from pytest_p2p.errors import ServerError
from pytest_p2p.serve import loadclients
from pytest_p2p.serve.loadclients import Job, client_pool, current_pool, run_sharded
from pytest_p2p.serve.loadgen import generate_load, make_spec
from pytest_p2p.serve.loadspec import LoadSpec
from pytest_p2p.serve.result import LoadResult
from pytest_p2p.serve.server import RunningServer

SHAPE: dict[str, Any] = dict(concurrency=4, num_prompts=8, input_len=3, output_len=4, warmup=1, seed=3,
                             client_processes=2)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with _launch(tmp_path_factory.mktemp("pool")) as s:  # type: ignore[attr-defined]
        yield s


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every spawn-context process started from now on (one entry each, its pid)."""
    started: list[int] = []
    real = multiprocessing.context.SpawnProcess.start

    def counted(self: multiprocessing.context.SpawnProcess) -> None:
        real(self)
        started.append(self.pid or 0)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", counted)
    return started


@pytest.fixture(autouse=True)
def _no_pool_left() -> Iterator[None]:
    assert current_pool() is None
    yield
    assert current_pool() is None  # a test's pool never leaks into the next one


def _load(srv: RunningServer, **over: Any) -> LoadResult:
    return generate_load(srv.base_url, srv.api_key, srv.model, make_spec(**{**SHAPE, **over}))


def _complete(r: LoadResult, n: int = 8, out: int = 4) -> None:
    assert r.client_processes == 2 and r.completed == n and r.failed == 0 and r.warmup_failed == 0
    assert r.total_output_tokens == n * out and r.output_lens == [out] * n and r.total_input_tokens == n * 3


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists, a zombie included: a process ended but never joined counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_runs_in_a_pool_reuse_the_same_processes_and_are_complete(srv: RunningServer, starts: list[int]) -> None:
    """Two closed-loop runs and an open-loop one on one group: the request-id ticket starts again each run."""
    with client_pool() as pool:
        first = _load(srv)
        pids = pool.pids(2)
        assert len(pids) == 2 and sorted(starts) == sorted(pids)
        second = _load(srv, output_len=6)
        third = _load(srv, request_rate=500.0)  # open loop: no shared ticket
        assert pool.pids(2) == pids and len(starts) == 2 and pool.spawned == 2
        assert all(_alive(p) for p in pids)
    _complete(first)
    _complete(second, out=6)  # the second run's own shape, not the first's: the job really reached the worker
    _complete(third)


@pytest.mark.parametrize("over", [{}, {"request_rate": 400.0, "range_ratio": 0.5}], ids=["closed", "open-ranged"])
def test_pooled_results_equal_unpooled_in_counts(srv: RunningServer, over: dict[str, Any]) -> None:
    def counts(r: LoadResult) -> tuple[object, ...]:  # a closed loop's split over the processes is a race: summed
        return (r.client_processes, r.num_prompts, r.completed, r.failed, r.warmup_failed, r.total_input_tokens,
                r.total_output_tokens, r.input_lens, r.output_lens, sum(c.requests for c in r.clients))

    plain = _load(srv, **over)
    with client_pool():
        pooled = [_load(srv, **over) for _ in range(2)]
    assert plain.completed == 8
    assert counts(pooled[0]) == counts(plain) and counts(pooled[1]) == counts(plain)


def test_a_worker_killed_between_runs_fails_the_next_run_then_a_fresh_group_runs(srv: RunningServer,
                                                                                   starts: list[int]) -> None:
    with client_pool() as pool:
        _complete(_load(srv))
        old = pool.pids(2)
        os.kill(old[0], signal.SIGKILL)
        with pytest.raises(ServerError, match=r"load generator against http://.*: client process failed: "
                                              r".*client process died"):
            _load(srv)
        assert pool.pids(2) == () and not any(_alive(p) for p in old)  # the group ended, joined and dropped
        _complete(_load(srv))
        new = pool.pids(2)
        assert len(new) == 2 and not set(new) & set(old) and len(starts) == 4


def test_a_reported_error_drops_the_group_with_run_shardeds_message(srv: RunningServer, starts: list[int]) -> None:
    """A process that reports an error (not one that dies): the same ServerError text as a run of its own."""
    with client_pool() as pool:
        pool.ensure(2)
        old = pool.pids(2)
        with pytest.raises(ServerError, match="client process failed: ServerError: raw transport: base URL"):
            generate_load("ftp://127.0.0.1:9", "key", "m",
                          make_spec(**{**SHAPE, "warmup": 0, "tokenizer": "standin-words"}))
        assert pool.pids(2) == () and not any(_alive(p) for p in old)
        _complete(_load(srv))
        assert len(starts) == 4


def test_closing_leaves_no_worker_alive_also_when_the_body_raised(srv: RunningServer) -> None:
    with client_pool() as pool:
        _complete(_load(srv))
        pids = pool.pids(2)
    assert len(pids) == 2 and not any(_alive(p) for p in pids)
    with pytest.raises(RuntimeError, match="the body"), client_pool() as pool:
        pool.ensure(2)
        pids = pool.pids(2)
        assert all(_alive(p) for p in pids)
        raise RuntimeError("the body")
    assert len(pids) == 2 and not any(_alive(p) for p in pids)
    assert not {p.pid for p in multiprocessing.active_children()} & set(pids)


def test_a_nested_pool_is_the_open_one_and_leaves_it_open(srv: RunningServer, starts: list[int]) -> None:
    with client_pool() as outer:
        outer.ensure(2)
        pids = outer.pids(2)
        with client_pool() as inner:
            assert inner is outer and current_pool() is outer
        assert current_pool() is outer and all(_alive(p) for p in pids)
        _complete(_load(srv))
        assert outer.pids(2) == pids and len(starts) == 2
    assert not any(_alive(p) for p in pids)


def test_ensure_moves_the_spawn_out_of_the_next_run(srv: RunningServer, starts: list[int]) -> None:
    with client_pool() as pool:
        pool.ensure(2)
        assert len(starts) == 2 and pool.pids(2) == tuple(starts)
        pool.ensure(2)  # there already: nothing
        assert len(starts) == 2
        del starts[:]
        _complete(_load(srv))
        assert starts == [] and pool.spawned == 2


def test_without_a_pool_every_run_spawns(srv: RunningServer, starts: list[int]) -> None:
    _complete(_load(srv))
    _complete(_load(srv))
    assert len(starts) == 4 and len(set(starts)) == 4
    assert not any(_alive(p) for p in starts)  # each run's processes ended and were joined with it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc/self/task are Linux's")
def test_processes_spawned_from_a_short_lived_thread_outlive_it(srv: RunningServer, starts: list[int]) -> None:
    """A campaign runs each window in a thread of its own: a parent death signal would kill the pool with it."""
    with client_pool() as pool:
        box: dict[str, object] = {}
        t = threading.Thread(target=lambda: box.update(r=_load(srv)))
        t.start()
        t.join()
        tid = t.native_id
        for _ in range(500):  # the Python thread is done; wait until the kernel thread is gone too
            if not os.path.exists(f"/proc/self/task/{tid}"):
                break
            time.sleep(0.01)
        assert isinstance(box["r"], LoadResult)
        _complete(box["r"])
        pids = pool.pids(2)
        _complete(_load(srv))  # a process the thread's exit had killed fails this run
        assert pool.pids(2) == pids and len(starts) == 2


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs to choose from")
def test_a_pooled_process_pinned_for_one_run_is_unpinned_for_the_next(srv: RunningServer) -> None:
    home = os.sched_getaffinity(0)
    cpus = sorted(home)[:2]
    spec: LoadSpec = make_spec(concurrency=2, num_prompts=4, input_len=3, output_len=2, warmup=0)

    def jobs(pins: list[int | None]) -> list[Job]:
        return [Job(srv.base_url, srv.api_key, srv.model, spec, ("a b c",) * 4, (0.0,) * 4, (),
                    tuple(range(w, 4, 2)), 1, pins[w]) for w in range(2)]

    with client_pool() as pool:
        shards = run_sharded(jobs([cpus[1], cpus[0]]))
        pids = pool.pids(2)
        assert [sh.stats.cpu for sh in shards] == [cpus[1], cpus[0]]
        assert [os.sched_getaffinity(p) for p in pids] == [{cpus[1]}, {cpus[0]}]
        shards = run_sharded(jobs([None, None]))
        assert pool.pids(2) == pids and [sh.stats.cpu for sh in shards] == [None, None]
        assert [os.sched_getaffinity(p) for p in pids] == [home, home]  # the affinity each had at birth
        assert sum(len(sh.records) for sh in shards) == 4 and all(r.success for sh in shards
                                                                    for r in sh.records.values())


def test_a_closed_pool_spawns_nothing_more(starts: list[int]) -> None:
    with client_pool() as pool:
        pass
    pool.ensure(2)
    assert starts == [] and pool.pids(2) == () and loadclients.current_pool() is None
    with pytest.raises(ValueError, match="at least one process"), client_pool() as pool:
        pool.ensure(0)
