"""Build a :class:`~.runner.CampaignRunner` from a pytest session's rig and evidence.

Kept apart from the runner so the runner knows nothing of pytest or the session: tests
construct runners with everything explicit, the pytest hooks come through here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import P2PError
from ..lease import GpuLease
from .backends import ModelBackend, ProbeBackend
from .config import CampaignConfig
from .outcome import CampaignOutcome
from .progress import Progress
from .runner import CampaignRunner

if TYPE_CHECKING:
    from ..probes.arms import Arm
    from ..probes.config import ProbeConfig
    from ..serve.config import ServerConfig
    from ..session import P2PSession
    from .backends import ProbeSlot, ServerSlot


def from_session(session: P2PSession, pair: tuple[int, int], config: CampaignConfig, kind: str, *,
                 run_id: str | None = None, progress: Progress | None = None, lease: GpuLease | None = None,
                 on_finished: Callable[[CampaignOutcome], None] | None = None,
                 ) -> CampaignRunner[ServerSlot] | CampaignRunner[ProbeSlot]:
    """Wire a runner from the session (rig, evidence, results root)."""
    rig = session.rig
    rig_env: dict[str, str] = dict(rig.env or {})
    arms: Mapping[str, Arm] = rig.arms
    snapshot: dict[str, object] | None = None
    with contextlib.suppress(P2PError):
        snapshot = session.snapshot_dict()
    common = {"pair": pair, "config": config, "kind": kind, "arms": arms, "results_root": Path(session.results_root),
              "rig_name": rig.name, "rig_digest": str(getattr(rig, "digest", "") or ""),
              "evidence": session.evidence, "snapshot": snapshot, "simulated": bool(session.simulated),
              "live": bool(session.live), "run_id": run_id, "lease": lease or GpuLease(), "progress": progress,
              "on_finished": on_finished}
    if kind == "model":
        server: ServerConfig = rig.server
        return CampaignRunner(backend=ModelBackend(server=server, campaign=config, pair=pair, rig_env=rig_env),
                              **common)  # type: ignore[arg-type]
    probe: ProbeConfig = rig.probe
    backend = ProbeBackend(probe=probe, campaign=config, pair=pair, rig_env=rig_env,
                           out_root=Path(session.results_root))  # re-pointed into the run dir by run()
    return CampaignRunner(backend=backend, **common)  # type: ignore[arg-type]
