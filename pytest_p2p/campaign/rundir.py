"""The campaign's writing side of the results directory, as a typed interface.

The results directory is the data contract between campaign, verdict and report
(docs/results.md). The campaign only *writes* it, through :class:`RunWriter`; the one
implementation today is ``report.results.ResultsDir`` (reached lazily in
:func:`create_run_dir`, the campaign's single remaining edge into a later stage, kept
because that class also owns the disk-full handling the report stage reads back).
Moving that writer into a stage-free module removes the edge without touching the
campaign: only :func:`create_run_dir` changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class RunWriter(Protocol):
    """What the campaign writes into one run directory (every write atomic)."""

    @property
    def path(self) -> Path: ...

    def write_run_meta(self, meta: dict[str, object]) -> Path: ...

    def write_env(self, name: str, content: str | dict[str, object] | list[object]) -> Path: ...

    def scenario_dir(self, arm: str, point: str) -> Path: ...

    def write_scenario(self, arm: str, point: str, data: dict[str, object]) -> Path: ...

    def write_rep(self, arm: str, point: str, rep: int, data: dict[str, object]) -> Path: ...

    def write_aggregate(self, arm: str, point: str, data: dict[str, object]) -> Path: ...

    def write_proof(self, arm: str, point: str, data: dict[str, object]) -> Path: ...

    def telemetry_path(self, arm: str, point: str, rep: int) -> Path: ...

    def server_log_path(self, arm: str, point: str, rep: int) -> Path: ...


def create_run_dir(root: Path, rig: str, pair_key: str, kind: str, run_id: str | None) -> RunWriter:
    """``<root>/<run-id>/`` with a first ``run.json`` (status ``running``)."""
    from ..report.results import ResultsDir

    return ResultsDir.create(root, rig, pair_key, kind, run_id=run_id)


def safe_component(text: str) -> str:
    """Squash ``text`` to the characters a run id allows (letters, digits, ``._-``); same rule as the report's."""
    import re

    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return cleaned or "unnamed"
