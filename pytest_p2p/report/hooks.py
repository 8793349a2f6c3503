"""Pytest integration of the report stage: the results-at-a-glance terminal summary, allure labels.

The campaign stage calls :func:`record_run_dir` when a campaign's run directory is
finished (or interrupted); at the end of the session we print each one's glance table
and uplift line, read back from its ``summary.json`` (rendered here if the campaign did
not get that far). Nothing heavy is imported at module load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..errors import P2PError

RUN_DIRS_KEY: pytest.StashKey[list[Path]] = pytest.StashKey[list[Path]]()

_PARAM_KEYS = ("rig", "pair", "arm", "concurrency", "point", "size")


def record_run_dir(config: pytest.Config, path: str | Path) -> None:
    """Remember a campaign's run directory so the terminal summary shows its table (once)."""
    dirs = config.stash.setdefault(RUN_DIRS_KEY, [])
    p = Path(path)
    if p not in dirs:
        dirs.append(p)


def _label_value(value: Any) -> str | None:
    if value is None:
        return None
    for attr in ("key", "name"):
        v = getattr(value, attr, None)
        if isinstance(v, str):
            return v
    return str(value)


def labels_for_item(item: pytest.Item) -> dict[str, str]:
    """rig / pair / arm / concurrency labels of a p2p test, from its ``p2p`` marker and its parameters.

    ``@pytest.mark.p2p(arm="p2p_on")`` and parameters named ``pair``/``p2p_pair``,
    ``arm``/``p2p_arm``, ``concurrency``... all count; marker keywords win.
    """
    out: dict[str, str] = {}
    callspec = getattr(item, "callspec", None)
    params = dict(getattr(callspec, "params", {}) or {})
    for key in _PARAM_KEYS:
        for name in (key, f"p2p_{key}"):
            if name in params and (v := _label_value(params[name])) is not None:
                out[key] = v
                break
    for marker in item.iter_markers("p2p"):
        for key, value in marker.kwargs.items():
            if key in _PARAM_KEYS and (v := _label_value(value)) is not None:
                out.setdefault(key, v)  # closest marker first
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    if item.get_closest_marker("p2p") is None:
        return
    from .allure_attach import available, labels

    if available():
        found = labels_for_item(item)
        if found:
            labels(**found)


def _load_summary(run_dir: Path) -> dict[str, Any]:
    from .results import read_json

    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        data = read_json(summary_path)
        if isinstance(data, dict):
            return data
    from .render import render_report

    return render_report(run_dir, plots=False).summary


def summary_lines(run_dir: Path) -> list[str]:
    """The lines printed for one run dir: table, uplift line, missing reps, where the files are."""
    from .terminal import glance_table, uplift_line

    try:
        summary = _load_summary(run_dir)
    except P2PError as exc:
        return [f"{run_dir}: no summary: {exc}"]
    lines = glance_table(summary).splitlines()
    lines += uplift_line(summary).splitlines()
    for m in summary.get("missing") or []:
        lines.append(f"missing: {m}")
    lines.append(f"results: {run_dir / 'summary.md'}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    dirs = config.stash.get(RUN_DIRS_KEY, [])
    if not dirs:
        return
    terminalreporter.write_sep("=", "p2p results at a glance")
    for i, run_dir in enumerate(dirs):
        if i:
            terminalreporter.write_line("")
        for line in summary_lines(run_dir):
            simulated = line.startswith("SIMULATED")
            terminalreporter.write_line(line, yellow=simulated, bold=simulated)
