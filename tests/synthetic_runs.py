"""Test helper (not a test module): a synthetic campaign results directory, written by the production writer.

Seeded per-rep noise, so store/compare/attribution tests can inject a cable downtrain (a
lower link in the snapshot), a slower server, a changed arm or model. The files go through
``results.write.RunDir``, the one writer: a fixture written any other way could drift from
what a campaign writes. Synthetic data, labelled ``simulated`` nowhere because the tests need
it to look like a real run; it never leaves tmp_path.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_p2p.evidence.model import (
    Evidence,
    GpuEvidence,
    NvLinkState,
    PairEvidence,
    PcieLink,
    PcieReading,
)
from pytest_p2p.evidence.snapshot import envelope
from pytest_p2p.results.write import RunDir

BUS = ("0000:09:00.0", "0000:0A:00.0")
UUIDS = ("GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-aaaaaaaa-0000-0000-0000-000000000002")
MODEL_METRICS = {"output_throughput": 190.9, "mean_ttft_ms": 45.0, "mean_tpot_ms": 12.0, "avg_watts": 210.0}
ARMS = {
    "p2p_on": {"env": {"NCCL_P2P_DISABLE": "0"}, "expect_transport": "P2P/CUMEM", "custom_all_reduce": True},
    "p2p_off": {"env": {"NCCL_P2P_DISABLE": "1"}, "expect_transport": "SHM", "custom_all_reduce": False},
}


def write_run(
    root: Path,
    run_id: str,
    *,
    started_at: str = "2026-06-16T10:00:00Z",
    seed: int = 0,
    cv: float = 0.02,
    reps: int = 3,
    scale: Mapping[str, float] | None = None,  # metric -> factor on its mean (a slower server)
    gen: tuple[int, int] = (4, 4),
    width: tuple[int, int] = (4, 4),
    driver: str = "595.71.05",
    nccl: str = "2.28.9",
    model: str = "Qwen/Qwen3-0.6B",
    arms: Mapping[str, Mapping[str, Any]] | None = None,
    transport: Mapping[str, str] | None = None,
    points: tuple[str, ...] = ("c8",),
    kind: str = "model",
    throttled: Mapping[str, list[int]] | None = None,
    gpu_names: tuple[str, str] = ("NVIDIA GeForce RTX 5060 Ti", "NVIDIA GeForce RTX 5060 Ti"),
    uuids: tuple[str, str] = UUIDS,
    load: Mapping[str, Any] | None = None,  # run.json server.load (None: a run saved before it was recorded)
    arm_scale: Mapping[str, float] | None = None,  # arm -> factor on every metric's mean (one arm slower)
) -> Path:
    rng = random.Random(seed)
    rd = RunDir.create(root, "demo-rig", "gpu1-gpu2", kind, run_id=run_id)
    arms = dict(arms or ARMS)
    gpus = []
    for i in range(2):
        reading = PcieReading(gen[i], width[i])
        gpus.append(GpuEvidence(
            index=i + 1, name=gpu_names[i], uuid=uuids[i], bus_id=BUS[i],
            pcie=PcieLink(idle=PcieReading(1, width[i]), loaded=reading, max=reading,
                          gpu_max=PcieReading(5, 8), load_method="cuda-kernel"),
            nvlinks=[NvLinkState(link=0, active=False)]))
    ev = Evidence(source="live", origin="testhost", recorded_at=started_at, host="testhost",
                  driver_version=driver, nvml_version="13." + driver, cuda_driver_version=13000, gpus=gpus,
                  pairs=[PairEvidence(a=1, b=2, topology="PHB", p2p_read="OK", p2p_write="OK")])
    rd.write_env("snapshot.json", dict(envelope(ev)))
    rd.write_env("kernel_cmdline.txt", "BOOT_IMAGE=/vmlinuz iommu=pt\n")
    metric_means = MODEL_METRICS if kind == "model" else {"busbw_gbs": 24.0, "time_us": 350.0}
    for arm in arms:
        for point in points:
            metrics = {}
            for name, mean in metric_means.items():
                mu = mean * (scale or {}).get(name, 1.0) * (0.8 if arm == "p2p_off" else 1.0) * (arm_scale or {}).get(
                    arm, 1.0)
                vals = [mu * rng.lognormvariate(0.0, cv) for _ in range(reps)]
                m = sum(vals) / len(vals)
                sd = (sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
                metrics[name] = {"mean": m, "std": sd, "median": sorted(vals)[len(vals) // 2],
                                 "ci95": [m - 2 * sd, m + 2 * sd], "n": len(vals), "values": vals}
            flags = {"throttled_reps": list((throttled or {}).get(f"{arm}-{point}", [])), "downtrained_reps": []}
            rd.write_aggregate(arm, point, {"metrics": metrics, "flags": flags})
            t = (transport or {}).get(arm) or str(arms[arm].get("expect_transport"))
            rd.write_proof(arm, point, {"nccl_version": nccl, "transport": t})
    rd.write_run_meta({
        "run_id": run_id, "rig": "demo-rig", "rig_digest": "sha256:abc", "kind": kind,
        "pair": {"key": "gpu1-gpu2", "gpus": [{"index": i + 1, "bus_id": BUS[i], "uuid": uuids[i],
                                                "name": gpu_names[i]} for i in range(2)]},
        "arms": arms, "points": list(points), "reps": reps, "schedule": "AB-AB-AB", "simulated": False,
        "status": "complete", "missing": [], "started_at": started_at, "finished_at": started_at,
        "server": {"command": ["vllm", "serve", model], "model": model, "args": ["--tensor-parallel-size", "2"],
                   "flags": {}, **({"load": dict(load)} if load is not None else {})} if kind == "model" else None,
        "versions": {"driver": driver, "cuda_driver": "13.0", "nccl": nccl, "torch": "2.11.0",
                     "vllm": "0.24.0", "plugin": "0.1.0", "python": "3.12.3", "kernel": "6.8.0-60-generic",
                     "git_commit": "deadbeef"},
    })
    return rd.path


def baseline_runs(root: Path, count: int = 10, **kw: Any) -> list[Path]:
    """``count`` unchanged runs on consecutive days, distinct seeds."""
    return [write_run(root, f"202606{10 + i:02d}-100000_demo-rig_gpu1-gpu2",
                      started_at=f"2026-06-{10 + i:02d}T10:00:00Z", seed=100 + i, **kw) for i in range(count)]
