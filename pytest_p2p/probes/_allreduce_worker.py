"""One rank of the all-reduce probe: ``python -m pytest_p2p.probes._allreduce_worker SPEC.json``.

One process per GPU, as vLLM runs, so NCCL picks the inter-process transport
(P2P/CUMEM, P2P/IPC, SHM, NET) that serving will use, not the single-process
"direct pointer" path. The launcher sets the arm's environment, ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; both GPUs of the pair are visible
and rank r drives CUDA device r.

Timing measures the link, not Python, the way nccl-tests' loop does (``src/common.cu``:
``iters`` all-reduces launched back to back, the elapsed time divided by their count, averaged
over ranks as ``-a 1`` does), with three differences, each because of a measured failure:

* each size is measured as ``trials`` independent trials after a warm-up that is set aside
  (:mod:`pytest_p2p.probes.trials`), and before the first size a clock ramp of about
  ``RAMP_S`` all-reduces a large buffer — one cold batch had judged P2P slower than SHM;
* a trial is queued behind a gate kernel and timed by CUDA events (:class:`Gate`), so the
  device runs the all-reduces back to back instead of waiting for Python to launch each
  (nccl-tests times on the host clock from C, where launching keeps up);
* the all-reduces are direct ``ncclAllReduce`` calls through ctypes (``_nccl_direct``) on a
  communicator of our own, uncaptured by default; ``graph: true`` captures them in a CUDA
  graph (nccl-tests ``-G``), which adds NCCL's per-op graph nodes at small sizes;
  ``direct: false`` times torch's ``dist.all_reduce`` (captured, or eager) instead.

The result says which method and gate timed it, and keeps every trial and every set-aside
trial with its cause.
Progress lines start with ``[p2p-probe]`` so that a hang can be located from the last
line of the log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_p2p.probes._nccl_direct import DirectComm
    from pytest_p2p.probes._worker_types import AllReduceCheck, AllReduceSpec, CudaGraph, Device, Dist, Tensor, Torch
    from pytest_p2p.probes.trials import Trial, TrialRecord


def say(msg: str) -> None:
    print(f"[p2p-probe] rank {os.environ.get('RANK', '?')}: {msg}", flush=True)


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
    _DEVICE.append(device)
    torch.cuda.set_device(device)
    say(f"init torch {torch.__version__} device {torch.cuda.get_device_name(device)}")
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    try:
        nccl_version = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - informational only
        nccl_version = None
    max_bytes = max(spec["sizes"] + spec["check_sizes"])
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)

    checks = [_check(dist, torch, buf, n, rank, world, graph=False) for n in spec["check_sizes"]]
    if spec["graph"]:
        checks += [_check(dist, torch, buf, n, rank, world, graph=True) for n in spec["check_sizes"]]
    buf.zero_()  # timing adds zeros: values stay finite however often the graph replays

    direct, method = None, "graph-events" if spec["graph"] else "eager-events"
    if spec.get("direct", True):
        try:
            from pytest_p2p.probes._nccl_direct import DirectComm

            direct = DirectComm(dist, torch, rank, world)
            checks.append(_check_direct(direct, torch, buf, spec["check_sizes"][0], rank, world))
            method = "direct-graph-events" if spec["graph"] else "direct-events"
        except Exception as exc:  # noqa: BLE001 - fall back to torch timing, and say so
            say(f"direct NCCL timing unavailable ({type(exc).__name__}: {exc}); timing through torch ({method})")
            direct = None
    buf.zero_()

    gate = Gate(torch)
    small = buf[:1] if direct is None else torch.zeros(1, dtype=torch.float32, device=device)
    small_args = direct.prepare(small) if direct is not None else None

    def line_up() -> None:  # a 4-byte all-reduce: both GPUs leave the gate together
        if direct is not None and small_args is not None:
            direct.run(small_args, 1)
        else:
            dist.all_reduce(small)

    ramp_s = _ramp(torch, dist, buf, direct, gate, line_up, world, min(RAMP_BYTES, max_bytes))
    say(f"clock ramp {ramp_s:.2f} s; gate: {gate.label}")
    from pytest_p2p.probes.trials import median

    rows = []
    for nbytes in spec["sizes"]:
        record, method, mine = _measure(dist, torch, buf[: nbytes // 4], spec, direct, gate, line_up, world)
        mean_us = record.median
        rows.append({"bytes": nbytes, "time_us": mean_us, "rank_time_us": median(mine),
                     "trials_us": list(record.kept), "warmup_us": list(record.warmup),
                     "set_aside": [a.to_dict("time_us") for a in record.set_aside], "settled": record.settled,
                     "host_bound_kept": record.host_bound_kept, "method": method})
        say(f"size {nbytes} B time {mean_us:.2f} us (median of {len(record.kept)} trials; "
            f"{record.set_aside[0].cause})")
    if rank == 0:
        from pytest_p2p.util import atomic_write_json

        atomic_write_json(spec["out"], {
            "rows": rows,
            "checks": checks,
            "world_size": world,
            "graph": spec["graph"],
            "timing_method": method,
            "iters": spec["iters"],
            "warmup": spec["warmup"],
            "graph_launches": spec["graph_launches"],
            "trials": int(spec.get("trials", 10)),
            "gate": gate.label,
            "ramp_s": round(ramp_s, 3),
            "torch_version": torch.__version__,
            "nccl_version": nccl_version,
            "device_names": [torch.cuda.get_device_name(i) for i in range(world)],
        })
    dist.barrier()
    if direct is not None:
        direct.close()
    dist.destroy_process_group()
    say("done")
    return 0


def _check(dist: Dist, torch: Torch, buf: Tensor, nbytes: int, rank: int, world: int, graph: bool) -> AllReduceCheck:
    """Exact-value check: rank r contributes (r+1) * (i % 251); the sum is (i % 251) * n(n+1)/2.

    All values are small integers, exact in float32, so any wrong element is a real error.
    """
    n = nbytes // 4
    x = buf[:n]
    pattern = torch.arange(n, device=x.device, dtype=torch.int64).remainder(251).to(torch.float32)
    x.copy_(pattern * (rank + 1))
    if graph:
        g = _capture(dist, torch, x, 1, warmup=1, reset=lambda: x.copy_(pattern * (rank + 1)))
        g.replay()
    else:
        dist.all_reduce(x)
    torch.cuda.synchronize()
    expected = pattern * (world * (world + 1) / 2)
    local_bad = int((x != expected).sum().item())
    total = torch.tensor([local_bad], dtype=torch.int64, device=x.device)
    dist.all_reduce(total)  # wrong elements on any rank count
    bad = int(total.item())
    first_bad = None
    if local_bad:
        idx = int((x != expected).nonzero()[0].item())
        first_bad = {"index": idx, "got": float(x[idx].item()), "expected": float(expected[idx].item())}
    say(f"check {nbytes} B graph={graph}: {'ok' if not bad else f'{bad} wrong elements'}")
    return {"bytes": nbytes, "graph": graph, "wrong": bad, "first_wrong": first_bad}  # first_wrong: rank 0's


def _capture(dist: Dist, torch: Torch, x: Tensor, count: int, warmup: int,
             reset: Callable[[], object] | None = None) -> CudaGraph:
    """Capture ``count`` in-place all-reduces of ``x`` in a CUDA graph (warm-up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if reset is not None:
        reset()
        torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        # thread_local: the NCCL watchdog thread's event queries must not invalidate our capture
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for _ in range(count):
                dist.all_reduce(x)
        torch.cuda.synchronize()
    except Exception as exc:
        say(f"CUDA-graph capture of all_reduce failed: {type(exc).__name__}: {exc}; "
            "set 'probe: {graph: false}' in the rig file to time an eager loop instead")
        raise
    return g


def _check_direct(direct: DirectComm, torch: Torch, buf: Tensor, nbytes: int, rank: int, world: int) -> AllReduceCheck:
    """Exact-value check of the direct NCCL path before it is trusted for timing."""
    x = buf[: nbytes // 4]
    x.fill_(float(rank + 1))
    direct.all_reduce(x)
    torch.cuda.synchronize()
    bad = int((x != float(world * (world + 1) // 2)).sum().item())
    say(f"check {nbytes} B direct: {'ok' if not bad else f'{bad} wrong elements'}")
    if bad:
        raise RuntimeError(f"direct ncclAllReduce gave {bad} wrong elements at {nbytes} B")
    return {"bytes": nbytes, "graph": False, "direct": True, "wrong": bad, "first_wrong": None}


def _capture_direct(direct: DirectComm, torch: Torch, x: Tensor, count: int, warmup: int) -> CudaGraph | None:
    """``count`` direct ncclAllReduce calls captured in one CUDA graph (nccl-tests ``-G``), or None.

    No torch collective is involved, so the graph holds NCCL's kernels back to back without
    torch's per-collective event record/wait nodes.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        direct.run(direct.prepare(x), max(warmup, 5))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            direct.run(direct.prepare(x), count)  # prepared inside: the capture stream
    except Exception as exc:  # noqa: BLE001 - fall back to uncaptured direct calls, and say so
        say(f"capturing direct NCCL calls failed ({type(exc).__name__}: {exc}); timing them uncaptured")
        torch.cuda.synchronize()
        return None
    return g


RAMP_S = 0.5  # all-reduces of a large buffer before the first size: GPU clocks leave idle (tens to hundreds of ms)
RAMP_BYTES = 64 * 1024**2
TRIAL_BUDGET_US = 2000.0  # device time one trial aims at (it holds at most iters x graph_launches all-reduces)
MIN_OPS = 5  # all-reduces per trial however long one takes
GATE_MIN_US = 300.0  # shortest gate; it grows with the host time one trial takes to queue


class Gate:
    """A sleep kernel ahead of each trial, so the host queues every launch before the device reaches them.

    Why: a small all-reduce takes ~10 us on NVLink, about as long as launching it from Python;
    timed on arrival, the host sets the pace and the result moves with the CPU's mood (8.45 us
    in one process, 13.1 us in the next, docs/performance.md). Behind a sleep kernel of a few
    hundred microseconds the whole trial is queued first, then runs back to back on the
    device, and CUDA events around it time the device alone. A 4-byte all-reduce after the
    sleep lines both GPUs up (each waits for the other's), so neither rank's time includes
    the other's late start. ``clean`` says whether the gate held: the start event had not
    yet been reached when the last launch was queued.
    """

    def __init__(self, torch: Torch) -> None:
        self.torch = torch
        self.sleep: Callable[[int], None] | None = getattr(torch.cuda, "_sleep", None)
        self.cycles_per_us = self._calibrate() if self.sleep is not None else 0.0
        self.gate_us = 4 * GATE_MIN_US

    @property
    def label(self) -> str:
        if self.sleep is None:
            return "none: torch.cuda._sleep is missing, trials are timed as they are queued"
        return f"sleep kernel ({self.cycles_per_us:.0f} cycles/us) + 4-byte all-reduce, then CUDA events"

    def _calibrate(self) -> float:
        assert self.sleep is not None
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.sleep(1000)  # loads the kernel
        start.record()
        self.sleep(2_000_000)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        return 2_000_000 / (ms * 1000.0) if ms > 0 else 1000.0

    def time(self, enqueue: Callable[[], None], line_up: Callable[[], None]) -> tuple[float, bool]:
        """Seconds of device time for what ``enqueue`` queues, and whether the gate held."""
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        if self.sleep is not None:
            self.sleep(int(self.gate_us * self.cycles_per_us))
        line_up()
        start.record()
        t0 = time.perf_counter()
        enqueue()
        end.record()
        queued_us = (time.perf_counter() - t0) * 1e6
        clean = self.sleep is None or not start.query()
        end.synchronize()
        # next gate: three times this trial's queueing time, doubled after a trial it did not cover
        nxt = max(GATE_MIN_US, 3 * queued_us + 100)
        self.gate_us = min(200_000.0, nxt if clean else max(nxt, 2 * self.gate_us))
        return start.elapsed_time(end) * 1e-3, clean


def _agreed(dist: Dist, torch: Torch, seconds: float, clean: bool, world: int) -> Trial:
    """The ranks' mean time (us) and whether every rank's gate held: both ranks get the same Trial.

    Both ranks then make the same warm-up and retry decisions, so they issue the same
    collectives (a rank deciding on its own clock would leave the other waiting forever).
    """
    from pytest_p2p.probes.trials import Trial

    both = torch.tensor([seconds, 0.0 if clean else 1.0], dtype=torch.float64, device=_DEVICE[0])
    dist.all_reduce(both)
    total, unclean = both.tolist()
    return Trial(total / world * 1e6, unclean == 0)


_DEVICE: list[Device] = []  # this rank's CUDA device, set once by main()


class Method:
    """What one trial queues for one size: ``ops`` all-reduces, as direct calls or graph replays."""

    def __init__(self, name: str, per_unit: int, enqueue: Callable[[int], None]) -> None:
        self.name, self.per_unit, self.enqueue = name, per_unit, enqueue

    def units(self, ops: int) -> int:
        return max(1, -(-ops // self.per_unit))


def _method(dist: Dist, torch: Torch, x: Tensor, spec: AllReduceSpec, direct: DirectComm | None) -> Method:
    """The timing method for ``x``: direct calls (uncaptured or in a graph), else torch (graph or eager)."""
    iters = int(spec["iters"])
    if direct is not None and spec["graph"]:
        g = _capture_direct(direct, torch, x, iters, spec["warmup"])
        if g is not None:
            g.replay()  # the first launch uploads the graph
            return Method("direct-graph-events", iters, _replays(g))
    if direct is not None:
        args = direct.prepare(x)
        direct.run(args, max(spec["warmup"], 5))
        return Method("direct-events", 1, lambda n: direct.run(args, n))
    if spec["graph"]:
        tg = _capture(dist, torch, x, iters, spec["warmup"])
        tg.replay()
        return Method("graph-events", iters, _replays(tg))
    for _ in range(spec["warmup"]):
        dist.all_reduce(x)

    def eager(n: int) -> None:
        for _ in range(n):
            dist.all_reduce(x)
    return Method("eager-events", 1, eager)


def _replays(g: CudaGraph) -> Callable[[int], None]:
    def replay(n: int) -> None:
        for _ in range(n):
            g.replay()
    return replay


def _measure(dist: Dist, torch: Torch, x: Tensor, spec: AllReduceSpec, direct: DirectComm | None,
             gate: Gate, line_up: Callable[[], None], world: int) -> tuple[TrialRecord, str, list[float]]:
    """Trials of one size: (the record, the method's name, this rank's own kept times in us)."""
    from pytest_p2p.probes.trials import ops_for, run_trials

    method = _method(dist, torch, x, spec, direct)
    most = max(MIN_OPS, int(spec["iters"]) * int(spec["graph_launches"]))
    state = {"ops": min(most, 10)}  # the first (warm-up) trial is short; it sizes the others
    mine: list[float] = []

    def trial() -> Trial:
        units = method.units(state["ops"])
        seconds, clean = gate.time(lambda: method.enqueue(units), line_up)
        ops = units * method.per_unit
        t = _agreed(dist, torch, seconds / ops, clean, world)
        mine.append(seconds / ops * 1e6)
        state["ops"] = ops_for(t.value, TRIAL_BUDGET_US, MIN_OPS, most)
        return t

    torch.cuda.synchronize()
    dist.barrier()
    record = run_trials(trial, int(spec.get("trials", 10)))
    return record, method.name, mine[len(record.warmup):]


def _ramp(torch: Torch, dist: Dist, buf: Tensor, direct: DirectComm | None, gate: Gate,
          line_up: Callable[[], None], world: int, nbytes: int) -> float:
    """All-reduce ``nbytes`` for about RAMP_S before anything is timed: clocks up, NCCL's paths connected.

    Both ranks must issue the same number of collectives, so the count comes from an agreed
    (rank-averaged) first timing, never from each rank's own clock.
    """
    x = buf[: max(1, nbytes // 4)]
    if direct is not None:
        args = direct.prepare(x)

        def run(n: int) -> None:
            direct.run(args, n)
    else:
        def run(n: int) -> None:
            for _ in range(n):
                dist.all_reduce(x)
    seconds, clean = gate.time(lambda: run(3), line_up)
    per_op = _agreed(dist, torch, seconds / 3, clean, world).value * 1e-6
    n = max(1, min(20_000, int(RAMP_S / per_op) if per_op > 0 else 1))
    t0 = time.perf_counter()
    for done in range(0, n, 50):
        run(min(50, n - done))
        torch.cuda.synchronize()
    buf.zero_()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
