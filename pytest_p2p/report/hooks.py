"""Pytest integration of the report stage: the results-at-a-glance terminal summary, allure labels.

The campaign stage calls :func:`record_run_dir` when a campaign's run directory is
finished (or interrupted); at the end of the session we print each one's glance table
and uplift line, read back from its ``summary.json`` (rendered here if the campaign did
not get that far). Nothing heavy is imported at module load.
"""

from __future__ import annotations

import contextlib
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
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"gpu{value[0]}-gpu{value[1]}"  # a pair of NVML indices, as in test ids
    for attr in ("key", "name"):
        v = getattr(value, attr, None)
        if isinstance(v, str):
            return v
    return str(value)


def labels_for_item(item: pytest.Item) -> dict[str, str]:
    """rig / pair / arm / concurrency (or size) labels of a p2p test.

    Sources, strongest first: ``@pytest.mark.p2p(arm="p2p_on", ...)`` keywords; parameters
    named ``pair``/``p2p_pair``, ``arm``/``p2p_arm``/``p2p_campaign_arm``, ``point``/``p2p_point``,
    ``p2p_scenario``/``scenario`` (``"p2p_on-c8"``, or with ``.arm``/``.point``); the session's rig name.
    A point ``c8`` also gives ``concurrency=8``, ``s8KiB`` gives ``size=8KiB``.
    """
    out: dict[str, str] = {}
    for marker in item.iter_markers("p2p"):
        for key, value in marker.kwargs.items():
            if key in _PARAM_KEYS and (v := _label_value(value)) is not None:
                out.setdefault(key, v)  # closest marker first
    callspec = getattr(item, "callspec", None)
    params = dict(getattr(callspec, "params", {}) or {})
    names: dict[str, tuple[str, ...]] = {key: (key, f"p2p_{key}") for key in _PARAM_KEYS}
    names["arm"] = ("arm", "p2p_arm", "p2p_campaign_arm")
    for key, candidates in names.items():
        for name in candidates:
            if name in params and (v := _label_value(params[name])) is not None:
                out.setdefault(key, v)
                break
    scenario = params.get("p2p_scenario", params.get("scenario"))
    if scenario is not None:
        arm, point = getattr(scenario, "arm", None), getattr(scenario, "point", None)
        if arm is None and isinstance(scenario, str) and "-" in scenario:
            arm, point = scenario.rsplit("-", 1)
        if arm:
            out.setdefault("arm", str(arm))
        if point:
            out.setdefault("point", str(point))
    point = out.get("point", "")
    if point[:1] == "c" and point[1:].isdigit():
        out.setdefault("concurrency", point[1:])
    elif point[:1] == "s" and len(point) > 1:
        out.setdefault("size", point[1:])
    if "rig" not in out:
        from ..session import SESSION_KEY

        session = item.config.stash.get(SESSION_KEY, None)
        rig = getattr(getattr(session, "rig", None), "name", None)
        if isinstance(rig, str):
            out["rig"] = rig
    return out


def _attach_evidence(item: pytest.Item, found: dict[str, str]) -> None:
    """Attach the files a campaign check is about: its scenario, its arm's proofs, or the summary."""
    from .allure_attach import attach_file, attach_run_dir, attach_scenario

    funcargs = getattr(item, "funcargs", {}) or {}
    run_dir = getattr(funcargs.get("p2p_campaign"), "run_dir", None)
    if run_dir is None:
        return
    run_dir = Path(run_dir)
    arm, point = found.get("arm"), found.get("point")
    if arm and point:
        attach_scenario(run_dir, arm, point)
    elif arm:
        for proof in sorted((run_dir / "scenarios").glob(f"{arm}-*/transport_proof.json")):
            attach_file(proof, f"{proof.parent.name}/{proof.name}")
    elif point:
        attach_file(run_dir / "plots" / "uplift.png", "plots/uplift.png")
        attach_file(run_dir / "summary.md")
    else:
        attach_run_dir(run_dir)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    if item.get_closest_marker("p2p") is None:
        return
    from .allure_attach import available, labels

    if not available():
        return
    found = labels_for_item(item)
    if found:
        labels(**found)
    with contextlib.suppress(OSError):  # an attachment is a convenience; never fail a check over it
        _attach_evidence(item, found)


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
