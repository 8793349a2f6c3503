"""Pytest integration of the verdict stage: options, the ``p2p_baseline`` fixture, saving runs.

* ``--p2p-compare[=NAME]`` judges each scenario against the runs accepted under NAME
  (default ``accepted``) in ``test_no_regression``.
* ``--p2p-save-baseline[=NAME]`` stores the session's campaign runs at session end and
  accepts each under NAME only when it passes against NAME (:meth:`BaselineSession.acceptance`);
  the others are kept as history with the reason. With ``--p2p-compare`` alone, runs are
  kept as history only.
* ``--p2p-fail-on=regression|never``: ``never`` reports regressions without failing.
* ``--p2p-db PATH`` (ini ``p2p_db``, env ``PYTEST_P2P_DB``): the SQLite store.

Campaign runs come through the campaign's ``pytest_p2p_campaign_finished`` hook (the verdict
reads no fixture of another stage). Under xdist the hook fires again on the controller for
each worker's campaign, and only the controller saves: a failed save is reported on the
terminal the user reads, never only in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..errors import ConfigError, P2PError
from ..options import COMPARE, DB, FAIL_ON_CHOICES, SAVE_BASELINE, Resolved, resolve
from ..options import FAIL_ON as FAIL_ON_OPTION
from ..results.layout import AGGREGATE, SCENARIOS, scenario_name
from ..verdict.config import DEFAULT_DB, BaselineConfig, check_name
from ..verdict.store_base import redact, target_of
from .xdist_roles import is_worker

if TYPE_CHECKING:
    from ..campaign.outcome import CampaignOutcome
    from ..verdict.campaign_judge import CampaignComparison
    from ..verdict.compare import ScenarioComparison
    from ..verdict.store import Store

#: The rig loader may put the rig file's ``baseline:`` section (a BaselineConfig) here.
BASELINE_CONFIG_KEY = pytest.StashKey[BaselineConfig]()
SESSION_KEY = pytest.StashKey["BaselineSession"]()
FAIL_ON = FAIL_ON_CHOICES


@dataclass(eq=False)
class BaselineSession:
    """What this session does with baselines; the ``p2p_baseline`` fixture."""

    pytest_config: pytest.Config
    compare_name: str | None
    save_name: str | None
    fail_on: str
    run_dirs: dict[str, Path] = field(default_factory=dict)  # the session's finished campaigns
    unfinished: dict[str, str] = field(default_factory=dict)  # run dir -> status, for those that failed
    _store: Store | None = None
    verdict_lines: list[str] = field(default_factory=list)  # for the terminal summary
    _config: BaselineConfig | None = None
    _db_path: Resolved[str | Path] | None = None
    _campaigns: dict[str, CampaignComparison] = field(default_factory=dict)
    save_notes: list[str] = field(default_factory=list)  # runs saved but not accepted, with why

    @property
    def config(self) -> BaselineConfig:
        """The rig file's ``baseline:`` section, resolved on first use (the rig is loaded by then)."""
        if self._config is None:
            self._config = _rig_config(self.pytest_config)
        return self._config

    @property
    def db_path(self) -> Resolved[str | Path]:
        if self._db_path is None:
            self._db_path = _db_path(self.pytest_config, self.config)
        return self._db_path

    @property
    def saving(self) -> bool:
        """Runs go to the store when a baseline option is given or the database is set explicitly."""
        return self.save_name is not None or self.compare_name is not None or self.db_path.origin != "default"

    def store(self, create: bool = True) -> Store:
        from ..verdict.store import Store

        if self._store is None:
            self._store = Store(self.db_path.value, create=create)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def campaign(self, run_dir: Path) -> CampaignComparison:
        """The whole campaign judged once (Holm needs every primary), cached per run directory."""
        from ..verdict.campaign_judge import compare_campaign

        key = str(Path(run_dir).resolve())
        if key not in self._campaigns:
            assert self.compare_name is not None
            self._campaigns[key] = compare_campaign(self.store(create=False), Path(run_dir), self.config,
                                                    self.compare_name)
        return self._campaigns[key]

    def _judged(self, run_dir: Path) -> CampaignComparison:
        if self.compare_name is None:
            pytest.skip("baseline comparison not requested (use --p2p-compare[=NAME])")
        if not store_exists(self.db_path.value):
            pytest.skip(f"no baseline database yet at {redact(self.db_path.value)} ({self.db_path.origin}); "
                        f"save one with --p2p-save-baseline={self.compare_name}")
        problem = None
        try:
            camp = self.campaign(run_dir)
        except P2PError as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        return camp

    def check_scenario(self, run_dir: Path, arm: str, point: str,
                       node: pytest.Item | None = None) -> ScenarioComparison:
        """The body of ``test_no_regression``: skip, pass, inconclusive (skip / strict fail) or regression."""
        from ..verdict.compare import (
            IMPROVEMENT,
            INCONCLUSIVE,
            NO_BASELINE,
            NOT_COMPARABLE,
            REGRESSION,
            PerformanceRegression,
        )
        from .policy import inconclusive

        if self.compare_name is None:
            pytest.skip("baseline comparison not requested (use --p2p-compare[=NAME])")
        if not (Path(run_dir) / SCENARIOS / scenario_name(arm, point) / AGGREGATE).exists():
            pytest.skip(f"scenario {arm}-{point} has no aggregate.json in {run_dir} (missing from the campaign)")
        camp = self._judged(run_dir)
        result = camp.scenarios.get((arm, point))
        if result is None:
            pytest.skip(f"scenario {arm}-{point} is not part of the judged campaign in {run_dir}")
        if node is not None:
            node.user_properties.append(("p2p_verdict", result.summary()))
            node.user_properties.append(("p2p_verdict_line", result.summary()))
            for line in result.lines((REGRESSION, IMPROVEMENT, INCONCLUSIVE)):
                node.user_properties.append(("p2p_verdict_line", "  " + line.strip()))
            for reason in result.inconclusive_reasons():
                node.user_properties.append(("p2p_verdict_line", f"  inconclusive because: {reason}"))
        if result.verdict in (NO_BASELINE, NOT_COMPARABLE):
            pytest.skip(result.message)
        if result.verdict == REGRESSION and self.fail_on == "regression":
            raise PerformanceRegression(result.message)
        if result.verdict == INCONCLUSIVE:
            inconclusive(self.pytest_config, result.message)
        return result

    def check_uplift_history(self, run_dir: Path, point: str, node: pytest.Item | None = None) -> str:
        """The body of ``test_uplift_unchanged``: the on/off uplift at ``point`` against its own history."""
        from ..verdict.compare import INCONCLUSIVE, NO_BASELINE, NOT_COMPARABLE, REGRESSION, PerformanceRegression
        from .policy import inconclusive

        camp = self._judged(run_dir)
        verdict, text = camp.uplift_verdict(point)
        if node is not None:
            node.user_properties.append(("p2p_verdict_line", f"uplift history {point}: {verdict}"))
        if verdict in (NO_BASELINE, NOT_COMPARABLE):
            pytest.skip(text)
        if verdict == REGRESSION and self.fail_on == "regression":
            raise PerformanceRegression(f"interconnect regression (the uplift fell against its history): {text}")
        if verdict == INCONCLUSIVE:
            inconclusive(self.pytest_config, text)
        return verdict

    def check_links(self, run_dir: Path) -> list[tuple[str, str, str]]:
        """Link facts against the newest comparable baseline run; a drop is a regression."""
        from ..verdict.compare import REGRESSION, PerformanceRegression, compare_links
        from ..verdict.fingerprint import build_fingerprint

        if self.compare_name is None:
            pytest.skip("baseline comparison not requested (use --p2p-compare[=NAME])")
        if not store_exists(self.db_path.value):
            pytest.skip(f"no baseline database yet at {redact(self.db_path.value)} ({self.db_path.origin})")
        problem = None
        try:
            fp = build_fingerprint(run_dir)
            runs = self.store(create=False).baseline_runs(self.compare_name, fp["rig"], fp["pair"]["ident"],
                                                          fp.get("kind"), 1, exclude=fp["run_id"])
        except P2PError as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        if not runs:
            pytest.skip(f"no run of this rig and pair accepted under baseline {self.compare_name!r} yet")
        facts = compare_links(runs[0].fingerprint, fp)
        if not facts:
            pytest.skip("no link facts recorded in the baseline run or this run")
        worse = [text for _, v, text in facts if v == REGRESSION]
        if worse and self.fail_on == "regression":
            since = (runs[0].started_at or runs[0].saved_at)[:10]
            raise PerformanceRegression(f"link state dropped since baseline {since} ({runs[0].run_id}): "
                                        + "; ".join(worse))
        return facts

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect verdict lines from reports (also those xdist workers send to the controller)."""
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.verdict_lines.extend(str(v) for k, v in report.user_properties if k == "p2p_verdict_line")

    def save_runs(self) -> list[str]:
        """Store this session's runs; accept each under ``save_name`` only when it is safe (:meth:`acceptance`).

        Every run is kept as history; one that is not accepted is listed in ``save_notes``
        with the reason and the command a person runs to accept it after review.
        """
        from ..verdict.history import AUTO_NOTE

        saved: list[str] = []
        if not self.run_dirs or not self.saving:
            return saved
        store = self.store()
        for key, run_dir in self.run_dirs.items():
            decision = None if self.save_name is None else (
                (False, f"the campaign {self.unfinished[key]}") if key in self.unfinished
                else self.acceptance(store, run_dir))
            run_id = store.save_run_dir(run_dir)
            if self.save_name is not None and decision is not None:
                ok, why = decision
                if ok:
                    store.accept(run_id, self.save_name, f"{AUTO_NOTE} {why}")
                else:
                    self.save_notes.append(
                        f"run {run_id} kept as history but NOT accepted as baseline {self.save_name!r}: {why} "
                        f"(after review: python -m pytest_p2p baseline accept {run_id} --name {self.save_name})")
            saved.append(run_id)
        return saved

    def acceptance(self, store: Store, run_dir: Path) -> tuple[bool, str]:
        """``(accept?, why)``: the safe nightly rule of ``--p2p-save-baseline`` (docs/baselines.md).

        A run joins the baseline on its own only when it *passes* against it: every primary
        equivalent within the tolerance on bounds (``unchanged``), the baseline healthy and no
        adverse change point or trend in the history.  While the baseline has fewer than
        ``min_runs`` comparable runs (the first nights), a run that does not regress is accepted
        to start it.  Anything else -- a regression, an improvement beyond the tolerance, an
        inconclusive or not comparable verdict, a screened rep -- waits for a person.
        """
        from ..verdict.campaign_judge import compare_campaign, screen_run
        from ..verdict.compare import IMPROVEMENT, NO_BASELINE, NOT_COMPARABLE, REGRESSION, UNCHANGED

        assert self.save_name is not None
        problems = screen_run(run_dir, self.config)
        if problems:
            return False, "; ".join(problems)
        key = str(Path(run_dir).resolve())
        camp = self._campaigns.get(key) if self.compare_name == self.save_name else None
        camp = camp or compare_campaign(store, Path(run_dir), self.config, self.save_name)
        scen = list(camp.scenarios.values())
        if any(sc.verdict == NOT_COMPARABLE for sc in scen):
            return False, f"not comparable with baseline {self.save_name!r} (" + "; ".join(
                sc.message for sc in scen if sc.verdict == NOT_COMPARABLE)[:300] + ")"
        history = [t for sc in scen for t in sc.history_failures] + camp.uplift_history_failures
        if history:
            return False, "its history has an adverse change: " + "; ".join(history)[:400]
        health = sorted({h for sc in scen for h in sc.health})
        if health:
            return False, "the baseline it would join is unhealthy: " + "; ".join(health)[:400]
        k = max((len(sc.baseline_runs) for sc in scen), default=0)
        if camp.verdict == NO_BASELINE or k < self.config.min_runs:
            if camp.verdict == REGRESSION:
                return False, f"regression against the short baseline ({k} run(s)): {camp.message}"
            return True, f"bootstrap ({k} of {self.config.min_runs} baseline runs before it)"
        if camp.verdict == UNCHANGED:
            return True, f"passed against {k} baseline run(s)"
        if camp.verdict == IMPROVEMENT:
            return False, "better than the baseline by more than the tolerance (a new level: a person decides)"
        bad = [sc.message for sc in scen if sc.verdict == camp.verdict] or [camp.message]
        return False, f"{camp.verdict} against baseline {self.save_name!r}: " + " | ".join(bad)[:400]


def _db_path(config: pytest.Config, cfg: BaselineConfig) -> Resolved[str | Path]:
    """The store: an SQLite path made absolute, or a ``postgresql://`` URL passed through untouched.

    ``Path()`` would fold a URL's ``//`` and turn it, password included, into directory names.
    """
    got = resolve(config, DB)
    if got.value is None:
        base = config.rootpath
        raw, origin = (cfg.db, "rig baseline.db") if cfg.db else (DEFAULT_DB, "default")
    else:
        raw, origin = str(got.value), got.origin
        base = config.rootpath if origin.startswith("ini") else config.invocation_params.dir
    try:
        return Resolved(target_of(str(raw), base), origin)
    except P2PError as exc:
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None


def _rig_config(config: pytest.Config) -> BaselineConfig:
    """An explicit BASELINE_CONFIG_KEY, else the loaded rig's ``baseline`` section, else defaults.

    The p2p session (rig + evidence) is only read if another stage already created it:
    the verdict stage never triggers evidence gathering on its own.
    """
    if BASELINE_CONFIG_KEY in config.stash:
        return config.stash[BASELINE_CONFIG_KEY]
    try:
        from .session import SESSION_KEY as P2P_SESSION_KEY

        p2p = config.stash.get(P2P_SESSION_KEY, None)
        got = getattr(getattr(p2p, "rig", None), "baseline", None)
    except (ImportError, P2PError, KeyError, AttributeError):
        got = None
    return got if isinstance(got, BaselineConfig) else BaselineConfig()


def _session(config: pytest.Config) -> BaselineSession:
    if SESSION_KEY in config.stash:
        return config.stash[SESSION_KEY]
    fail_on = resolve(config, FAIL_ON_OPTION)
    if fail_on.value not in FAIL_ON:
        raise ConfigError(fail_on.origin, "", f"expected one of {', '.join(FAIL_ON)}, got {fail_on.value!r}")
    compare = resolve(config, COMPARE).value
    save = resolve(config, SAVE_BASELINE).value
    if compare is not None:
        check_name(compare, "--p2p-compare")
    if save is not None:
        check_name(save, "--p2p-save-baseline")
    sess = BaselineSession(config, compare, save, fail_on.value)
    config.stash[SESSION_KEY] = sess
    config.pluginmanager.register(sess, "p2p-verdict-session")
    return sess


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        _session(config)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def p2p_baseline(pytestconfig: pytest.Config) -> BaselineSession:
    """This session's baseline settings and store (see :class:`BaselineSession`)."""
    return _session(pytestconfig)


@pytest.hookimpl(optionalhook=True)  # the spec comes with the campaign's glue (pytest_addhooks)
def pytest_p2p_campaign_finished(config: pytest.Config, outcome: CampaignOutcome) -> None:
    """A campaign's run directory is final: keep it for the save at the end of the session.

    Only where the terminal summary is printed (an xdist worker's campaign comes again on the
    controller); an interrupted campaign is not saved, a failed one only as history.
    """
    if is_worker(config) or outcome.status == "interrupted":
        return
    sess = _session(config)
    key = str(Path(outcome.run_dir).resolve())
    sess.run_dirs[key] = Path(outcome.run_dir)
    if outcome.status != "complete":
        sess.unfinished[key] = outcome.status


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    sess = session.config.stash.get(SESSION_KEY, None)
    if sess is None:
        return
    if is_worker(session.config):  # the controller saves (its pytest_p2p_campaign_finished)
        sess.close()
        return
    try:
        saved = sess.save_runs()
    except P2PError as exc:
        tr = session.config.pluginmanager.getplugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"pytest-p2p: campaign runs NOT saved to the baseline store: {exc}", red=True)
        session.config.stash[_SAVED_KEY] = f"campaign runs NOT saved to the baseline store: {exc}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        saved = []
    finally:
        sess.close()
    if saved:
        refused = len(sess.save_notes)
        if sess.save_name and refused < len(saved):
            what = f"accepted as baseline {sess.save_name!r}" + (f" ({refused} not: see below)" if refused else "")
        else:
            what = "kept as history"
        session.config.stash[_SAVED_KEY] = f"{len(saved)} run(s) saved to {redact(sess.db_path.value)}, {what}: " \
                                           + ", ".join(saved)


_SAVED_KEY = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    sess = config.stash.get(SESSION_KEY, None)
    if sess is not None and sess.verdict_lines:
        terminalreporter.section("p2p baseline verdicts")
        for line in sess.verdict_lines:
            terminalreporter.write_line(line)
    saved = config.stash.get(_SAVED_KEY, None)
    if saved:
        terminalreporter.write_line(f"pytest-p2p: {saved}", red="NOT saved" in saved)
    for note in (sess.save_notes if sess is not None else []):
        terminalreporter.write_line(f"pytest-p2p: {note}", yellow=True)


def store_exists(target: str | Path) -> bool:
    """Whether the store is already there (asked of the server for a URL; imported only when needed)."""
    from ..verdict.store import exists

    return exists(target)
