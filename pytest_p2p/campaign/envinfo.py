"""``env/`` of a run directory: what the machine and the software were when it was measured.

Why: a number without its driver, NCCL, kernel settings and topology cannot be compared
with another one later (the verdict's fingerprint reads these), and the seed report
recorded exactly these files by hand.
"""

from __future__ import annotations

import contextlib
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..results.write import RunWriter
from ..stats.summary import CI_KIND, STD_KIND, UPLIFT_KIND
from .config import CampaignConfig

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from ..probes.arms import Arm

Json = dict[str, object]

# Kernel settings that move P2P and serving numbers (the seed report recorded these).
SYSCTLS = ("kernel.numa_balancing", "vm.zone_reclaim_mode", "vm.nr_hugepages", "kernel.yama.ptrace_scope",
           "vm.overcommit_memory", "kernel.sched_autogroup_enabled")


def versions(evidence: Evidence | None, nccl_version: object = None) -> Json:
    """Driver, CUDA, NCCL, torch, vLLM, plugin, Python, kernel and git commit (``None`` where unknown)."""
    from importlib import metadata

    def ver(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    git = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        git = (out.stdout.strip() or None) if out.returncode == 0 else None
    return {
        "driver": getattr(evidence, "driver_version", None),
        "cuda_driver": getattr(evidence, "cuda_driver_version", None),
        "nccl": nccl_version,
        "torch": ver("torch"), "vllm": ver("vllm"), "plugin": ver("pytest-p2p"),
        "python": platform.python_version(), "kernel": platform.release(), "git_commit": git,
    }


def sysctl_text(root: Path = Path("/proc/sys")) -> str:
    """``name = value`` lines like ``sysctl`` prints, ``unavailable`` where this host has no such key."""
    lines = []
    for name in SYSCTLS:
        try:
            value = (root / name.replace(".", "/")).read_text().strip()
        except OSError:
            value = "unavailable"
        lines.append(f"{name} = {value}")
    return "\n".join(lines) + "\n"


def write_doctor(rd: RunWriter, envelope: Mapping[str, object]) -> None:
    """``doctor.json`` (as ``python -m pytest_p2p doctor --json`` prints it) and the human table."""
    from ..errors import SnapshotError
    from ..evidence.doctor import doctor_table
    from ..evidence.snapshot import evidence_from_envelope

    try:
        ev = evidence_from_envelope(dict(envelope), "campaign snapshot")
    except SnapshotError as exc:
        rd.write_env("doctor.txt", f"evidence could not be read back: {exc}\n")
        return
    rd.write_env("doctor.json", {"evidence": ev.to_dict()})
    rd.write_env("doctor.txt", doctor_table(ev) + "\n")


def write_env(rd: RunWriter, snapshot: Mapping[str, object] | None, version_info: Mapping[str, object]) -> None:
    """Every ``env/`` file: snapshot, doctor, kernel command line, sysctls, versions."""
    if snapshot is not None:
        rd.write_env("snapshot.json", dict(snapshot))
        write_doctor(rd, snapshot)
    with contextlib.suppress(OSError):
        rd.write_env("kernel_cmdline.txt", Path("/proc/cmdline").read_text())
    rd.write_env("sysctl.txt", sysctl_text())
    rd.write_env("versions.json", dict(version_info))


def run_meta(rig: str, digest: str, kind: str, pair: tuple[int, int], evidence: Evidence | None,
             arms: Mapping[str, Arm], config: CampaignConfig, points: list[str], schedule: str, simulated: bool,
             server: Mapping[str, object] | None, *, file_digest: str = "") -> Json:
    """The first full ``run.json``: what will be measured, on which GPUs (bus ids, UUIDs), how judged."""
    gpus = []
    for g in pair:
        ge = None
        with contextlib.suppress(KeyError, AttributeError):
            ge = evidence.gpu(g) if evidence is not None else None
        gpus.append({"index": g, "bus_id": getattr(ge, "bus_id", None), "uuid": getattr(ge, "uuid", None),
                     "name": getattr(ge, "name", None)})
    arm_meta = {name: {"env": dict(arms[name].env), "expect_transport": arms[name].expect_transport,
                       "custom_all_reduce": arms[name].custom_all_reduce} for name in config.arms}
    return {
        "rig": rig, "rig_digest": digest, "rig_file_digest": file_digest or None, "kind": kind,
        "pair": {"key": f"gpu{pair[0]}-gpu{pair[1]}", "gpus": gpus}, "arms": arm_meta, "points": points,
        "reps": config.reps, "schedule": schedule, "schedule_mode": config.schedule,
        "simulated": simulated, "status": "running", "missing": [], "rep_failures": [],
        "server": dict(server) if server is not None else None,
        "campaign": config.to_dict(),
        "uplift": {"metric": config.metric(kind), "direction": config.direction(kind),
                   "rule": config.uplift_rule_for(kind).to_dict(),
                   "exclude_throttled": config.exclude_throttled,
                   "faster_arm": config.arm_a, "slower_arm": config.arm_b},
        "statistics": {"std": STD_KIND, "ci95": CI_KIND, "uplift": UPLIFT_KIND},
        "versions": versions(evidence),
    }
