"""One rank of the multi-node probe: ``python -m pytest_p2p.probes._multinode_worker SPEC_JSON``.

Started by a Ray actor on its node (:mod:`.multinode`) with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` and the arm's NCCL environment; Ray's ``CUDA_VISIBLE_DEVICES``
leaves it one GPU, so it drives ``cuda:LOCAL_RANK`` (0). It runs what a pipeline-parallel
server crosses nodes with — NCCL send/recv between neighbours (rank r -> r+1) — and the
all-reduce that characterises the fabric (nccl-tests' bus bandwidth), checks the values, and
writes ``result<RANK>.json`` into the spec's ``out_dir``. Times are CUDA-event times of an eager
loop of ``iters`` calls after ``warmup`` (on the large messages that judge the line rate, the
Python launch cost is far below the transfer time). Lines start with ``[p2p-mn]``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_p2p.probes._worker_types import Tensor, Torch


def say(msg: str) -> None:
    print(f"[p2p-mn] rank {os.environ.get('RANK', '?')} on {os.environ.get('P2P_HOST', '?')}: {msg}", flush=True)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    say(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    max_bytes = max(spec["sizes"])
    buf = torch.ones(max_bytes // 4, dtype=torch.float32, device=device) * (rank + 1)
    dist.all_reduce(buf[:1024])
    correct = bool(torch.all(buf[:1024] == world * (world + 1) / 2).item())
    say(f"all-reduce check {'ok' if correct else 'WRONG'}")
    recv = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)
    if world > 1:  # every rank's buf[:1024] now holds the sum: rank r must receive it from rank r-1
        got = _pipeline_hop(buf[:1024], recv[:1024], rank, world)
        correct = correct and (rank == 0 or bool(torch.all(got == world * (world + 1) / 2).item()))
        say(f"send/recv check {'ok' if correct else 'WRONG'}")
    buf.zero_()  # timing adds zeros: values stay finite however often it runs
    rows = [{"bytes": n, "time_us": _time(torch, lambda b: dist.all_reduce(b), buf[: n // 4], spec)}
            for n in spec["sizes"]]
    sendrecv = []
    for n in spec["sizes"] if world > 1 else []:
        def hop(b: Tensor, n: int = n) -> None:
            _pipeline_hop(b, recv[: n // 4], rank, world)

        sendrecv.append({"bytes": n, "time_us": _time(torch, hop, buf[: n // 4], spec)})
    os.makedirs(spec["out_dir"], exist_ok=True)
    with open(os.path.join(spec["out_dir"], f"result{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump({"rank": rank, "world_size": world, "rows": rows, "sendrecv": sendrecv, "correct": correct,
                   "device": torch.cuda.get_device_name(device), "torch_version": torch.__version__}, fh)
    dist.barrier()
    dist.destroy_process_group()
    say("done")
    return 0


def _pipeline_hop(send: Tensor, recv: Tensor, rank: int, world: int) -> Tensor:
    """Rank r sends to r+1 and receives from r-1, as pipeline stages hand activations on."""
    from torch.distributed import P2POp, batch_isend_irecv, irecv, isend

    ops = []
    if rank + 1 < world:
        ops.append(P2POp(isend, send, rank + 1))
    if rank > 0:
        ops.append(P2POp(irecv, recv, rank - 1))
    for req in batch_isend_irecv(ops):
        req.wait()
    return recv


def _time(torch: Torch, op: object, buf: Tensor, spec: dict[str, int]) -> float:
    """Mean microseconds per call of ``op(buf)`` over ``iters`` calls, CUDA events around the loop."""
    call = op  # a callable of one tensor
    for _ in range(spec["warmup"]):
        call(buf)  # type: ignore[operator]
    torch.cuda.synchronize()
    from torch.cuda import Event

    start, end = Event(enable_timing=True), Event(enable_timing=True)
    start.record()
    for _ in range(spec["iters"]):
        call(buf)  # type: ignore[operator]
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) * 1000.0 / spec["iters"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
