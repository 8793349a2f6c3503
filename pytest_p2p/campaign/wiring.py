"""Build a :class:`~.runner.CampaignRunner` from a pytest session's rig and evidence.

Kept apart from the runner so the runner knows nothing of pytest or the session: tests
construct runners with everything explicit, the pytest hooks come through here. The
session and its rig are described by the Protocols below (what the campaign reads of
them), so campaign code never imports the shared integration modules ``session``/``rig``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import P2PError
from ..lease import GpuLease
from .backends import ModelBackend, ProbeBackend
from .config import CampaignConfig
from .outcome import CampaignOutcome
from .progress import Progress
from .runner import CampaignRunner

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from ..probes.arms import Arm
    from ..probes.config import ProbeConfig
    from ..serve.config import ServerConfig
    from ..stats import SpreadSeen, StartPrior
    from .backends import ProbeSlot, ServerSlot


class RigLike(Protocol):
    """What a campaign reads of ``rig.Rig``."""

    @property
    def name(self) -> str: ...

    @property
    def digest(self) -> str: ...

    @property
    def file_digest(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def arms(self) -> Mapping[str, Arm]: ...

    @property
    def server(self) -> ServerConfig: ...

    @property
    def probe(self) -> ProbeConfig: ...


class SessionLike(Protocol):
    """What a campaign reads of ``session.P2PSession``."""

    @property
    def results_root(self) -> Path: ...

    @property
    def rig(self) -> RigLike: ...

    @property
    def evidence(self) -> Evidence: ...

    @property
    def simulated(self) -> bool: ...

    @property
    def live(self) -> bool: ...

    def snapshot_dict(self) -> dict[str, object]: ...


def from_session(session: SessionLike, pair: tuple[int, int], config: CampaignConfig, kind: str, *,
                 run_id: str | None = None, progress: Progress | None = None, lease: GpuLease | None = None,
                 on_finished: Callable[[CampaignOutcome], None] | None = None,
                 start_priors: Mapping[str, StartPrior] | None = None,
                 prior_history: Mapping[str, SpreadSeen] | None = None,
                 ) -> CampaignRunner[ServerSlot] | CampaignRunner[ProbeSlot]:
    """Wire a runner from the session (rig, evidence, results root); ``start_priors``: per point, the start
    spread learned from earlier nights (the pytest glue reads them from the baseline store); ``prior_history``:
    per point, what the store held of earlier nights and the spreads they measured (for the plan line)."""
    rig = session.rig
    rig_env: dict[str, str] = dict(rig.env or {})
    arms = rig.arms
    snapshot: dict[str, object] | None = None
    with contextlib.suppress(P2PError):
        snapshot = session.snapshot_dict()
    common = {"pair": pair, "config": config, "kind": kind, "arms": arms, "results_root": Path(session.results_root),
              "rig_name": rig.name, "rig_digest": str(rig.digest or ""),
              "rig_file_digest": str(rig.file_digest or ""),
              "evidence": session.evidence, "snapshot": snapshot, "simulated": bool(session.simulated),
              "live": bool(session.live), "run_id": run_id, "lease": lease or GpuLease(), "progress": progress,
              "on_finished": on_finished, "start_priors": dict(start_priors or {}),
              "prior_history": dict(prior_history or {})}
    if kind == "model":
        return CampaignRunner(backend=ModelBackend(server=rig.server, campaign=config, pair=pair, rig_env=rig_env),
                              **common)  # type: ignore[arg-type]
    backend = ProbeBackend(probe=rig.probe, campaign=config, pair=pair, rig_env=rig_env,
                           out_root=Path(session.results_root))  # re-pointed into the run dir by run()
    return CampaignRunner(backend=backend, **common)  # type: ignore[arg-type]
