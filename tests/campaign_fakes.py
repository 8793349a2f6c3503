"""A fake model backend for campaign tests: slots counted per (arm, rep), no server, no GPU.

Subclasses implement ``measure(handle, point, rep)``; the handle is ``(arm, rep, attempt)`` so a test can
make a rep's first attempt bad and its re-run normal.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS


class SlotBackend:
    kind = "model"

    def __init__(self) -> None:
        self.slots: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def slot(self, arm: Any, rep: int, log: Path) -> Iterator[tuple[str, int, int]]:
        self.slots.append((arm.name, rep))
        log.write_text("fake\n")
        yield (arm.name, rep, self.slots.count((arm.name, rep)))

    def smoke(self, arm: Any, log: Path) -> None:
        return None

    def warm(self, handle: Any, point: str) -> None:
        return None

    def prepare(self, handle: Any, point: str, rep: int) -> None:
        return None

    def death(self, handle: Any) -> str | None:
        return None

    def proof(self, handle: Any, arm: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"transport": arm.expect_transport, "nccl_version": "2.28.9"}, {"problems": []}

    def describe(self) -> dict[str, Any]:
        return {"command": ["fake"], "model": "fake", "args": {}, "flags": []}


def run_campaign(tmp_path: Path, backend: SlotBackend, rig: str, **cfg: Any) -> Any:
    """One model campaign over c1, 3 reps, no cooldown, judged at +5 %, with ``cfg`` overriding."""
    base = {"concurrency": [1], "reps": 3, "cooldown_s": 0, "idle_baseline_s": 0, "telemetry_hz": 10,
            "smoke": False, "min_uplift": "5%", "residency": "restart"}
    base.update(cfg)
    return CampaignRunner(pair=(0, 1), config=parse_campaign(base, f"{rig}-rig.yaml"), kind="model",
                          arms=PRESETS, backend=backend, results_root=tmp_path / "results", rig_name=rig,
                          simulated=True, lease=GpuLease(tmp_path / "locks")).run()


def forget_decisions(res: Any) -> None:
    """A finished campaign as one cut short before it decided leaves it: no decisions, in ``run.json`` or in ``res``
    (a ``CampaignResult``)."""
    run_json = res.run_dir / "run.json"
    meta = json.loads(run_json.read_text())
    meta["decisions"] = {}
    run_json.write_text(json.dumps(meta))
    res.decisions = {}
