"""Pytest integration of the report stage: terminal summary, Allure, JUnit properties.

* The campaign publishes ``pytest_p2p_campaign_finished`` (contract 6); at the end of the
  session, after the probe checks whose results its proof shows, the process that prints
  the terminal summary renders each run's summary and plots once, then prints each run's
  glance table, uplift line and the seed's proof sections.
* Allure: labels (epic = stage, feature = check, story = pair/arm/point, severity), a
  readable title and parameters, evidence attached to every check, a history id that no
  rootdir changes, fixture failures as *broken*, and environment/categories/executor
  files at the end of the session (:mod:`.allure_meta`).
* JUnit: the numbers as properties valid under xunit2 (:mod:`.junit_props`).

Nothing heavy is imported at module load.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from ..errors import P2PError
from ..jsontypes import as_dict
from ..report.summary_types import Summary, is_summary
from .xdist_roles import is_worker

if TYPE_CHECKING:
    import pluggy

    from ..campaign.outcome import CampaignOutcome
    from ..report.allure_attach import AllureAPI


class _AllureTestResult(Protocol):
    """allure-pytest's bookkeeping of one test (``allure_commons.model2.TestResult``): what we rewrite."""

    fullName: str | None
    historyId: str | None
    testCaseId: str | None
    status: str | None


RUN_DIRS_KEY: pytest.StashKey[list[Path]] = pytest.StashKey[list[Path]]()
ATTACHED_KEY: pytest.StashKey[set[str]] = pytest.StashKey[set[str]]()  # files attached once per session
NOTES_KEY: pytest.StashKey[list[str]] = pytest.StashKey[list[str]]()
INFRA_KEY: pytest.StashKey[bool] = pytest.StashKey[bool]()
_CONFIG: list[pytest.Config] = []  # pytest_runtest_logreport gets no config; the session's one

_PARAM_KEYS = ("rig", "pair", "arm", "concurrency", "point", "size")


def record_run_dir(config: pytest.Config, path: str | Path) -> None:
    """Remember a campaign's run directory so the terminal summary shows its table (once)."""
    dirs = config.stash.setdefault(RUN_DIRS_KEY, [])
    p = Path(path)
    if p not in dirs:
        dirs.append(p)


def _label_value(value: object) -> str | None:
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
    for value in params.values():  # a ProbeCase(pair, arm) parameter
        pair, arm = getattr(value, "pair", None), getattr(value, "arm", None)
        if pair is not None and arm is not None:
            if (v := _label_value(pair)) is not None:
                out.setdefault("pair", v)
            if (v := _label_value(arm)) is not None:
                out.setdefault("arm", v)
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
        from .session import SESSION_KEY

        session = item.config.stash.get(SESSION_KEY, None)
        rig = getattr(getattr(session, "rig", None), "name", None)
        if isinstance(rig, str):
            out["rig"] = rig
    return out


def _alluredir(config: pytest.Config) -> Path | None:
    d = getattr(config.option, "allure_report_dir", None)
    return Path(d) if d else None


def _listener_result(config: pytest.Config, item: pytest.Item) -> _AllureTestResult | None:
    """allure-pytest's TestResult of this item (its listener's bookkeeping), or None."""
    listener = config.pluginmanager.getplugin("allure_listener")
    cache, logger = getattr(listener, "_cache", None), getattr(listener, "allure_logger", None)
    if cache is None or logger is None:
        return None
    with contextlib.suppress(Exception):  # private structures of allure-pytest: never fail a test over them
        uuid = cache.get(item.nodeid)
        return logger.get_test(uuid) if uuid else None
    return None


def _attach_for(item: pytest.Item, allure: AllureAPI, found: dict[str, str]) -> None:
    from . import allure_item

    attached = item.config.stash.setdefault(ATTACHED_KEY, set())
    funcargs = getattr(item, "funcargs", {}) or {}
    if funcargs.get("p2p_allreduce") is not None:
        allure_item.attach_probe(allure, funcargs["p2p_allreduce"], attached)
    if funcargs.get("p2p_copy") is not None:
        allure_item.attach_copy(allure, funcargs["p2p_copy"])
    if funcargs.get("p2p_evidence") is not None:
        allure_item.attach_evidence(allure, funcargs["p2p_evidence"], found)
    run_dir = getattr(funcargs.get("p2p_campaign"), "run_dir", None)
    if run_dir is not None:
        allure_item.attach_campaign(allure, Path(run_dir), found, attached)
        _attach_trend(item, allure, Path(run_dir), found, attached)
        if found.get("point") and (text := judged_numbers(Path(run_dir), found["point"])):
            allure.dynamic.description(text)


def judged_numbers(run_dir: Path, point: str) -> str:
    """The judged uplift at ``point`` as the terminal shows it: a passed check shows its number too.

    Why: Allure showed a failed uplift's message but nothing for a passed one (issue 26); the
    estimate, the decision's interval at its level, the threshold and the verdict are the same
    words as in the terminal and summary.md.
    """
    from ..report.terminal import verdict_rows

    try:
        summary = _load_summary(run_dir)
    except (P2PError, OSError):
        return ""
    headers, rows = verdict_rows({**summary, "uplift": [u for u in summary.get("uplift") or []
                                                        if u.get("point") == point]})
    return "\n".join(", ".join(f"{h}: {c}" for h, c in zip(headers, row, strict=True)) for row in rows)


def _attach_trend(item: pytest.Item, allure: AllureAPI, run_dir: Path, found: dict[str, str],
                  attached: set[str]) -> None:
    point = found.get("point")
    if not point or found.get("arm") or f"trend:{run_dir}:{point}" in attached:
        return
    attached.add(f"trend:{run_dir}:{point}")
    from ..report.trend import history, trend_png
    from ..results.read import run_head

    target = store_target(item.config)
    if target is None:  # the verdict stage is blocked (-p no:...): no store, no trend
        return
    head = run_head(run_dir)
    rig, pair = head.get("rig", ""), head.get("pair", {}).get("key", "")
    metric = "time_us" if head.get("kind") == "probe" else "output_throughput"
    png = trend_png(history(target, rig, pair, point, metric), f"{metric} at {point}, {rig} {pair}: stored runs",
                    metric)
    if png is not None:
        allure.attach(png, name=f"trend {metric} {point}", attachment_type=allure.attachment_type.PNG)


def store_target(config: pytest.Config) -> str | Path | None:
    """The baseline store the trend reads: the verdict stage's own resolution of ``--p2p-db``.

    Why not resolve the option here: a second reading once turned ``postgresql://...`` into a file
    path and ignored the rig's ``baseline.db`` (issue 25), so a fleet silently got no trend plot.
    """
    from .verdict import SESSION_KEY as VERDICT_KEY

    verdict = config.stash.get(VERDICT_KEY, None)
    return None if verdict is None else verdict.db_path.value


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    if item.get_closest_marker("p2p") is None:
        return
    from ..report.allure_attach import _allure

    allure = _allure()
    if allure is None:
        return
    from . import allure_item

    found = labels_for_item(item)
    for name, value in found.items():
        allure.dynamic.label(name, value)
    allure.dynamic.epic(allure_item.stage_of(item))
    allure.dynamic.feature((getattr(item, "originalname", None) or item.name).removeprefix("test_"))
    story = " ".join(v for k in ("pair", "arm", "point") if (v := found.get(k)))
    if story:
        allure.dynamic.story(story)
    allure.dynamic.severity(allure_item.severity_of(item))
    allure.dynamic.title(allure_item.title_of(item, found))
    for name, value in allure_item.readable_params(item).items():
        allure.dynamic.parameter(name, value)
    with contextlib.suppress(OSError, P2PError):  # an attachment is a convenience; never fail a check over it
        _attach_for(item, allure, found)


NOT_REQUESTED = "not requested"


def fold_not_requested(report: pytest.TestReport) -> None:
    """Skips that only mean "not requested" share one location, so ``-rs`` folds them into one line.

    Why: a run without ``--p2p-compare`` printed 13 lines saying "baseline comparison not
    requested" (one per check and file line); the reason is the same, so it is said once with its count.
    """
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3 and NOT_REQUESTED in str(longrepr[2]):
        report.longrepr = ("pytest-p2p", None, str(longrepr[2]))  # type: ignore[assignment]


@pytest.hookimpl(hookwrapper=True)  # old-style: pytest>=7.4 is supported
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if item.get_closest_marker("p2p") is None:
        return
    fold_not_requested(report)
    if report.when == "setup" and report.failed:
        item.stash[INFRA_KEY] = True  # a fixture could not provide the rig/server/probe: broken, not failed
    if report.when == "call":
        from .junit_props import item_numbers

        for name, value in item_numbers(item):
            if (name, value) not in item.user_properties:
                item.user_properties.append((name, value))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield  # after allure-pytest's own teardown wrapper (ours is outer) has set fullName/historyId
    if item.get_closest_marker("p2p") is None:
        return
    result = _listener_result(item.config, item)
    if result is None:
        return
    from . import allure_item

    ident = allure_item.stable_identity(item)
    result.fullName, result.historyId, result.testCaseId = ident.full_name, ident.history_id, ident.test_case_id
    readable = allure_item.readable_params(item)
    for param in getattr(result, "parameters", []) or []:
        if getattr(param, "name", None) in readable:  # allure's represent() quotes strings: 'gpu0-gpu1'
            param.value = readable[param.name]
    if item.stash.get(INFRA_KEY, False) and result.status == "failed":
        result.status = "broken"
    details = getattr(result, "statusDetails", None)
    if details is not None and isinstance(getattr(details, "message", None), str):
        details.message = allure_item.multiline_message(details.message)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG[-1] if _CONFIG else None
    if config is not None:
        from .junit_props import move_to_suite

        move_to_suite(config, report)


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG.append(config)  # a stack: an in-process pytester session inside a session pops only its own


def pytest_unconfigure(config: pytest.Config) -> None:
    if config in _CONFIG:
        _CONFIG.remove(config)


PENDING_KEY: pytest.StashKey[list[Path]] = pytest.StashKey[list[Path]]()  # run dirs to render at the end


@pytest.hookimpl(optionalhook=True)  # the spec comes with the campaign stage's hooks (pytest_addhooks)
def pytest_p2p_campaign_finished(config: pytest.Config, outcome: CampaignOutcome) -> None:
    """Contract 6: keep the run for the one render at the end of the session, the terminal table and JUnit.

    Why not render here: in the default order the probe checks run after the campaign and
    their results belong in the summary's proof, so a render now was followed by a second
    one at the end (issue 26). The process that prints the terminal summary (the xdist
    controller, or the only process) renders each run once, in :func:`render_pending`,
    when every stage that contributes to it has finished; a worker only hands its run on.
    """
    record_run_dir(config, outcome.run_dir)
    if is_worker(config):
        return  # the controller renders when the hook fires there for this worker's campaign
    pending = config.stash.setdefault(PENDING_KEY, [])
    if Path(outcome.run_dir) not in pending:
        pending.append(Path(outcome.run_dir))


def render_pending(config: pytest.Config) -> None:
    """Render each finished campaign's summary and plots once, then its JUnit properties.

    Called first thing in ``pytest_sessionfinish``: after every test (probe checks
    included) and before the verdict stage saves the session's runs, so a history plot
    shows the history the run was judged against, and before junitxml writes its file.
    """
    pending = config.stash.get(PENDING_KEY, [])
    while pending:
        run_dir = pending.pop(0)
        summary: Summary | None = None
        from ..report.render import render_report

        try:
            summary = render_report(run_dir).summary
        except (P2PError, OSError) as exc:  # disk full while rendering: said once, the reps stay on disk
            config.stash.setdefault(NOTES_KEY, []).append(f"{run_dir}: report not rendered: {exc}")
        from ..report.trend import write_history_plots

        target = store_target(config)  # the verdict stage's resolution of --p2p-db: one reader (issue 25)
        if target is not None:
            with contextlib.suppress(P2PError, OSError):
                write_history_plots(run_dir, target)
        from .junit_props import add_suite_property, campaign_properties

        with contextlib.suppress(P2PError, OSError):
            for name, value in campaign_properties(summary if summary is not None else _load_summary(run_dir)):
                add_suite_property(config, name, value)


SESSION_KEY = pytest.StashKey[pytest.Session]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_KEY] = session


@pytest.hookimpl(tryfirst=True)  # before the verdict stage's save and junitxml's file (see render_pending)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not is_worker(config):
        render_pending(config)
    if config.stash.get(NOTES_KEY, []) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a run whose report is missing did not succeed
    alluredir = _alluredir(config)
    if alluredir is None or is_worker(config):
        return
    from ..report.allure_meta import write_allure_meta

    with contextlib.suppress(OSError, P2PError):
        write_allure_meta(alluredir, environment(config))


SIMULATED_ENV = "yes: demo rig (a recorded snapshot replayed, a stand-in server); these numbers measure no interconnect"


def environment(config: pytest.Config) -> dict[str, str]:
    """environment.properties: the stack and hardware of this session (rig, host, driver, GPUs, ...)."""
    import platform

    from .session import SESSION_KEY

    env: dict[str, str] = {"host": platform.node(), "python": platform.python_version()}
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        env["rig"] = str(getattr(getattr(session, "rig", None), "name", "") or "")
        ev = getattr(session, "_evidence", None)  # only if this session already read it: never probe here
        if ev is not None:
            env["evidence"] = f"{ev.source} ({'SIMULATED demo' if ev.simulated else ev.origin})"
            if ev.simulated:
                env["SIMULATED"] = SIMULATED_ENV
            env["driver"] = str(ev.driver_version or "")
            env["CUDA_driver"] = str(ev.cuda_driver_version or "")
            env["GPUs"] = ", ".join(f"GPU{g.index} {g.name} {g.bus_id}" for g in ev.gpus)
            env["topology"] = ", ".join(f"{p.key}={p.topology}" for p in ev.pairs if p.topology)
    for run_dir in config.stash.get(RUN_DIRS_KEY, []):
        with contextlib.suppress(P2PError, OSError):
            from ..results.read import run_meta

            meta = run_meta(run_dir)
            if meta.get("simulated") is True:
                env["SIMULATED"] = SIMULATED_ENV
            versions = as_dict(meta.get("versions"))
            for key, label in (("nccl", "NCCL"), ("vllm", "vLLM"), ("torch", "torch"), ("driver", "driver"),
                               ("cuda_driver", "CUDA_driver")):
                if versions.get(key) and not env.get(label):
                    env[label] = str(versions[key])
    return env


def _load_summary(run_dir: Path) -> Summary:
    """``summary.json`` as rendered; before the end-of-session render (or without it) built in memory.

    Never written from here: the summary is rendered once (:func:`render_pending`), and a
    check that reads its numbers mid-session (Allure's description) must not render it early.
    """
    from ..results.read import RunReader, read_json

    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        data = read_json(summary_path)
        if is_summary(data):
            return data
    from ..report.proof import proof_for_run
    from ..report.render import build_summary

    summary = build_summary(RunReader.open(run_dir))
    summary["proof"] = proof_for_run(run_dir, summary).to_dict()
    return summary


def summary_lines(run_dir: Path, verbose: bool = False) -> list[str]:
    """The lines printed for one run dir (``report/terminal_summary.py``), the verdict line last."""
    from ..report.terminal_summary import summary_lines as lines

    try:
        return lines(_load_summary(run_dir), run_dir, verbose=verbose)
    except P2PError as exc:
        return [f"{run_dir}: no summary: {exc}"]


def after_tests_error(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """An error after the tests (a failed save, a report not rendered) counts as one: red last line, exit 1.

    Why: the exit status was already 1 when a save failed, yet the last line read a green
    ``49 passed``, and a CI log reader stops at that line (issue 26).
    """
    session = config.stash.get(SESSION_KEY, None)
    stats = terminalreporter.stats
    if session is None or session.exitstatus == pytest.ExitCode.OK or "failed" in stats or "error" in stats:
        return
    if session.exitstatus not in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERNAL_ERROR):
        return
    notes = config.stash.get(NOTES_KEY, [])
    why = "; ".join(notes) if notes else f"exit status {int(session.exitstatus)}: see the pytest-p2p lines above"
    report = pytest.TestReport(nodeid="pytest-p2p", location=("pytest-p2p", None, "after the tests"), keywords={},
                               outcome="failed", longrepr=f"after the tests: {why}", when="teardown")
    stats.setdefault("error", []).append(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    after_tests_error(terminalreporter, config)
    dirs = config.stash.get(RUN_DIRS_KEY, [])
    if not dirs:
        return
    terminalreporter.write_sep("=", "p2p results at a glance")
    for note in config.stash.get(NOTES_KEY, []):
        terminalreporter.write_line(f"note: {note}")
    for i, run_dir in enumerate(dirs):
        if i:
            terminalreporter.write_line("")
        for line in summary_lines(run_dir, verbose=int(config.getoption("verbose", 0) or 0) > 0):
            simulated = line.startswith("SIMULATED")
            verdict = line.split("verdict: ", 1)[1][:4] if "verdict: " in line[:40] else ""
            terminalreporter.write_line(line, yellow=simulated or verdict in ("INCO", "NOT "),
                                        red=verdict == "FAIL", green=verdict == "PASS" and not simulated,
                                        bold=simulated or bool(verdict))
