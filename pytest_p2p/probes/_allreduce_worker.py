"""One rank of the all-reduce probe: ``python -m pytest_p2p.probes._allreduce_worker SPEC.json``.

One process per GPU, as vLLM runs, so NCCL picks the inter-process transport
(P2P/CUMEM, P2P/IPC, SHM, NET) that serving will use, not the single-process
"direct pointer" path. The launcher sets the arm's environment, ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; both GPUs of the pair are visible
and rank r drives CUDA device r.

Timing measures the link, not Python. By default the worker opens an NCCL communicator
of its own through ctypes (``_nccl_direct``), captures ``iters`` back-to-back
``ncclAllReduce`` calls in one CUDA graph (as nccl-tests ``-G`` does) and replays it
``graph_launches`` times between a barrier and a device synchronisation. ``graph: false``
times the direct calls uncaptured (nccl-tests' default loop); ``direct: false`` uses
torch's ``dist.all_reduce`` instead (captured, or an eager loop). Either way the time per
all-reduce is averaged over ranks, as nccl-tests does by default (``-a 1``), and the
result says which method timed it.
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
    from pytest_p2p.probes._worker_types import AllReduceCheck, AllReduceSpec, CudaGraph, Dist, Tensor, Torch


def say(msg: str) -> None:
    print(f"[p2p-probe] rank {os.environ.get('RANK', '?')}: {msg}", flush=True)


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", rank)
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

    direct, method = None, "graph" if spec["graph"] else "eager"
    if spec.get("direct", True):
        try:
            from pytest_p2p.probes._nccl_direct import DirectComm

            direct = DirectComm(dist, torch, rank, world)
            checks.append(_check_direct(direct, torch, buf, spec["check_sizes"][0], rank, world))
            method = "direct-graph" if spec["graph"] else "direct"
        except Exception as exc:  # noqa: BLE001 - fall back to torch timing, and say so
            say(f"direct NCCL timing unavailable ({type(exc).__name__}: {exc}); timing through torch ({method})")
            direct = None
    buf.zero_()

    rows = []
    for nbytes in spec["sizes"]:
        t = _time_size(dist, torch, buf[: nbytes // 4], spec, direct)
        times = torch.tensor([t], dtype=torch.float64, device=device)
        dist.all_reduce(times)
        mean_us = times.item() / world * 1e6
        rows.append({"bytes": nbytes, "time_us": mean_us, "rank_time_us": t * 1e6})
        say(f"size {nbytes} B time {mean_us:.2f} us")
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


def _time_replays(g: CudaGraph, dist: Dist, torch: Torch, launches: int) -> float:
    """Seconds per replay of graph ``g``: one untimed upload launch, then ``launches`` between barriers."""
    g.replay()  # first launch uploads the graph; not timed
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(launches):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / launches


def _time_size(dist: Dist, torch: Torch, x: Tensor, spec: AllReduceSpec, direct: DirectComm | None = None) -> float:
    """Seconds per all-reduce of ``x`` on this rank."""
    iters, launches = int(spec["iters"]), int(spec["graph_launches"])
    if direct is not None and spec["graph"]:
        g = _capture_direct(direct, torch, x, iters, spec["warmup"])
        if g is not None:
            return _time_replays(g, dist, torch, launches) / iters
    if direct is not None:
        args = direct.prepare(x)
        direct.run(args, max(spec["warmup"], 5))
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        direct.run(args, iters * launches)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / (iters * launches)
    if spec["graph"]:
        return _time_replays(_capture(dist, torch, x, iters, spec["warmup"]), dist, torch, launches) / iters
    for _ in range(spec["warmup"]):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters * launches):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (iters * launches)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
