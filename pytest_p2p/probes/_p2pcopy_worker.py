"""The P2P copy probe worker: ``python -m pytest_p2p.probes._p2pcopy_worker SPEC.json``.

The two GPUs of the pair are visible as ``cuda:0`` and ``cuda:1``. It measures what
cuda-samples' ``p2pBandwidthLatencyTest`` reports, for the pair:

* ``peer``: device-to-device copies with peer access enabled (torch enables it when
  ``cudaDeviceCanAccessPeer`` allows; the copy is then a direct DMA over NVLink/PCIe);
* ``host_staged``: the same bytes staged explicitly through pinned host memory
  (device -> host, then host -> device), the path a pair without peer access falls
  back to. (p2pBandwidthLatencyTest's "P2P disabled" lets the driver stage the copy in
  chunks; this explicit two-step copy is labelled as such in the result.)

Unidirectional bandwidth is measured in rounds (each round: peer and host-staged, both
directions, ``reps`` copies each); rounds before the measurement settles are set aside with
their cause (:mod:`pytest_p2p.probes.trials`) and ``trials`` rounds are kept, so the check
can judge peer against staged on a bound over paired rounds. Bandwidth is decimal GB/s;
bidirectional counts the bytes of both directions. Small-copy
latency uses 4-byte copies captured in a CUDA graph when capture works (falls back to
an eager loop, labelled) so that the number is the copy, not Python's launch overhead.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_p2p.probes._worker_types import CopyMode, CudaStream, Device, P2PCopyRaw, Tensor, Torch


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    import torch

    if torch.cuda.device_count() < 2:
        print(f"[p2p-probe] copy: need 2 visible GPUs, torch sees {torch.cuda.device_count()}", flush=True)
        return 3
    nbytes, reps, lat_reps = int(spec["bytes"]), int(spec["reps"]), int(spec.get("latency_reps", 100))
    trials = int(spec.get("trials", 10))
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    can = {"0->1": bool(torch.cuda.can_device_access_peer(0, 1)), "1->0": bool(torch.cuda.can_device_access_peer(1, 0))}
    big = {0: torch.ones(nbytes // 4, dtype=torch.float32, device=d0),
           1: torch.ones(nbytes // 4, dtype=torch.float32, device=d1)}
    dst = {0: torch.empty_like(big[0]), 1: torch.empty_like(big[1])}
    pinned = {0: torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=True),
              1: torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=True)}
    streams = {0: torch.cuda.Stream(d0), 1: torch.cuda.Stream(d1)}

    def sync() -> None:
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)

    def copy(src: int, mode: str, staging: Tensor | None = None) -> None:
        dst_dev = 1 - src
        with torch.cuda.stream(streams[src]):
            if mode == "peer":
                dst[dst_dev].copy_(big[src], non_blocking=True)
            else:
                p = pinned[src] if staging is None else staging
                p.copy_(big[src], non_blocking=True)
                streams[dst_dev].wait_stream(streams[src])
                with torch.cuda.stream(streams[dst_dev]):
                    dst[dst_dev].copy_(p, non_blocking=True)

    def bandwidth(mode: str, directions: list[int]) -> float:
        for _ in range(2):  # warm-up (enables peer access, faults in pinned pages)
            for s in directions:
                copy(s, mode)
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            for s in directions:
                copy(s, mode)
        sync()
        return nbytes * reps * len(directions) / (time.perf_counter() - t0) / 1e9

    result: P2PCopyRaw = {"bytes": nbytes, "reps": reps, "can_access_peer": can, "modes": {},
                              "device_names": [torch.cuda.get_device_name(i) for i in range(2)],
                              "torch_version": torch.__version__}
    from pytest_p2p.probes.trials import Trial, median, run_trials

    rounds: list[dict[str, dict[str, float]]] = []

    def one_round() -> Trial:
        """Both modes, both directions, side by side: round i of peer and of host-staged form a pair."""
        r = {mode: {"0->1": bandwidth(mode, [0]), "1->0": bandwidth(mode, [1])} for mode in ("peer", "host_staged")}
        rounds.append(r)
        return Trial(min(r["peer"].values()))

    record = run_trials(one_round, trials, unit="GB/s")
    kept = rounds[len(record.warmup):]
    result["trials"] = len(kept)
    result["warmup"] = {"set_aside": [a.to_dict("peer_gbs") for a in record.set_aside], "settled": record.settled}
    for mode in ("peer", "host_staged"):
        per_dir = {d: [r[mode][d] for r in kept] for d in ("0->1", "1->0")}
        m: CopyMode = {
            "unidir_gbs": {d: median(v) for d, v in per_dir.items()},
            "unidir_trials_gbs": per_dir,
            "bidir_gbs": bandwidth(mode, [0, 1]),
        }
        m["latency_us"], m["latency_timing"] = _latency(torch, mode, lat_reps)
        result["modes"][mode] = m
        print(f"[p2p-probe] copy {mode}: {json.dumps(m)}", flush=True)
    result["modes"]["host_staged"]["method"] = ("explicit D2H to pinned host memory, then H2D on the peer's stream "
                                                    "(consecutive reps may overlap)")
    result["modes"]["peer"]["method"] = "torch copy_ between devices (cudaMemcpyAsync, peer access enabled by torch)"
    from pytest_p2p.util import atomic_write_json

    atomic_write_json(spec["out"], result)
    return 0


def _latency(torch: Torch, mode: str, reps: int) -> tuple[dict[str, float], str]:
    """Microseconds per 4-byte copy, each direction."""
    out: dict[str, float] = {}
    how = "cuda-graph"
    for src in (0, 1):
        dsrc, ddst = torch.device("cuda", src), torch.device("cuda", 1 - src)
        a = torch.ones(1, dtype=torch.float32, device=dsrc)
        b = torch.zeros(1, dtype=torch.float32, device=ddst)
        h = torch.zeros(1, dtype=torch.float32, pin_memory=True)

        def once(a: Tensor = a, b: Tensor = b, h: Tensor = h, dsrc: Device = dsrc, ddst: Device = ddst) -> None:
            if mode == "peer":
                b.copy_(a, non_blocking=True)
            else:  # the H2D half must wait for the D2H half: order the two devices' streams
                h.copy_(a, non_blocking=True)
                torch.cuda.current_stream(ddst).wait_stream(torch.cuda.current_stream(dsrc))
                b.copy_(h, non_blocking=True)

        with torch.cuda.device(dsrc):
            stream = torch.cuda.Stream(dsrc)
            runner = None
            if mode == "peer":
                try:
                    with torch.cuda.stream(stream):
                        once()
                    torch.cuda.synchronize(dsrc)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=stream, capture_error_mode="thread_local"):
                        for _ in range(reps):
                            once()
                    g.replay()
                    torch.cuda.synchronize(dsrc)
                    torch.cuda.synchronize(ddst)
                    runner = g.replay
                except Exception as exc:  # noqa: BLE001 - capture is an optimisation, say why it was skipped
                    print(f"[p2p-probe] copy latency: graph capture failed ({exc}); eager loop", flush=True)
                    runner = None
            if runner is None:
                how = "eager loop (includes Python launch overhead)"

                def runner(stream: CudaStream = stream) -> None:
                    with torch.cuda.stream(stream):
                        for _ in range(reps):
                            once()

            runner()
            torch.cuda.synchronize(dsrc)
            torch.cuda.synchronize(ddst)
            t0 = time.perf_counter()
            runner()
            torch.cuda.synchronize(dsrc)
            torch.cuda.synchronize(ddst)
            out[f"{src}->{1 - src}"] = (time.perf_counter() - t0) / reps * 1e6
    return out, how


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
