"""What a finished campaign tells its subscribers (the verdict and report stages).

Why a small frozen record and not the :class:`~.result.CampaignResult`: data flows one
way — the campaign publishes, later stages subscribe (``pytest_p2p_campaign_finished``,
:mod:`.hookspecs`) and read the results directory, which stays the data contract. The
record says where that directory is and how the campaign ended; nothing else crosses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STATUSES = ("complete", "interrupted", "failed")


@dataclass(frozen=True)
class CampaignOutcome:
    """``status``: ``complete`` (every rep measured), ``interrupted`` (Ctrl-C, SIGTERM, SIGHUP) or ``failed``.

    ``worker`` is the xdist worker that ran the campaign when the hook fires again on the
    controller for a worker's campaign (the controller prints the terminal summary); ``None``
    in the process that ran it.
    """

    run_dir: Path
    pair_key: str
    status: str
    simulated: bool
    errors: tuple[str, ...] = ()
    worker: str | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-able (xdist ``workeroutput`` carries it from a worker to the controller)."""
        return {"run_dir": str(self.run_dir), "pair_key": self.pair_key, "status": self.status,
                "simulated": self.simulated, "errors": list(self.errors), "worker": self.worker}

    @classmethod
    def from_dict(cls, data: dict[str, object], worker: str | None = None) -> CampaignOutcome:
        errors = data.get("errors")
        return cls(run_dir=Path(str(data.get("run_dir"))), pair_key=str(data.get("pair_key")),
                   status=str(data.get("status")), simulated=bool(data.get("simulated")),
                   errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
                   worker=worker if worker is not None else (str(data["worker"]) if data.get("worker") else None))
