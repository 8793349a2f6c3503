"""Pytest integration of the campaign stage: options, parametrisation, the ``p2p_campaign`` fixture, xdist.

* Tests that request ``p2p_scenario`` are parametrised by the campaign's arms x points
  (ids ``p2p_on-c8``), ``p2p_point`` by its points (``c8``, ``s8KiB``) and
  ``p2p_campaign_arm`` by its arms; ``p2p_pair`` (ids ``gpu0-gpu1``) comes from the
  evidence stage. This hook runs last so the pair comes first in ids: ``test_uplift[gpu0-gpu1-c8]``.
* ``p2p_campaign`` (session scope, per pair) runs the whole campaign once per pair and
  returns a :class:`~pytest_p2p.campaign.runner.CampaignResult`; the result (or the error)
  is cached per pair, so a test order that revisits a pair never re-runs it.
* **xdist**: every test of a pair gets ``xdist_group(<pair>)``; with ``-n N --dist loadgroup``
  each worker takes whole pairs. Whatever the scheduling, the GPU lease (file locks in a
  host-wide directory) keeps two servers or probes off one GPU. The controller hands its
  run stamp to workers through ``workerinput`` (as pytest-randomly hands its seed), so all
  run ids of one session share it; workers return their run directories through
  ``workeroutput`` and the controller fires ``pytest_p2p_campaign_finished`` again for them.
* **Publishing** (:mod:`.hookspecs`): when a campaign's run directory is final, the
  ``pytest_p2p_campaign_finished`` hook gets a :class:`~.outcome.CampaignOutcome`; the
  report and verdict stages implement it. The campaign imports neither.
* **No pair** (one GPU, MIG, no P2P-capable pair): the campaign checks skip with the rig's
  reason instead of pytest's "got empty parameter set".
* **SIGTERM / SIGHUP** unwind like Ctrl-C for the whole p2p session (:mod:`pytest_p2p.signals`),
  and the session ends with ``128 + signal`` (143 for SIGTERM), the code of a cancelled job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections.abc import Generator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import pytest

from .. import signals
from ..campaign.plan import Plan, Scenario
from ..errors import P2PError
from ..jsontypes import as_list
from ..options import ARMS, CAMPAIGN, CAMPAIGN_MODES, REPS, Option, resolve
from .xdist_roles import is_worker, node_output, node_worker_id, worker_input, worker_output

if TYPE_CHECKING:
    from ..campaign.outcome import CampaignOutcome
    from ..campaign.progress import Progress
    from ..campaign.result import CampaignResult
    from ..stats import SpreadSeen, StartPrior
    from .session import P2PSession

T = TypeVar("T")


class _Node(Protocol):
    """What the xdist hooks use of a ``WorkerController`` (``workeroutput`` is read with ``getattr``: a
    worker that died has none)."""

    workerinput: dict[str, object]

    @property
    def config(self) -> pytest.Config: ...


MODES = CAMPAIGN_MODES
STAMP_KEY = pytest.StashKey[str]()
PLAN_KEY = pytest.StashKey["Plan"]()
RESULTS_KEY = pytest.StashKey["dict[tuple[int, int], CampaignResult | P2PError]"]()
SIGNALS_KEY = pytest.StashKey["list[tuple[int, object]]"]()
CRASHES_KEY = pytest.StashKey["list[str]"]()
T0_KEY = pytest.StashKey[str]()
ABANDONED_KEY = pytest.StashKey["list[str]"]()
WORKER_STAMP = "p2p_run_stamp"
WORKER_OUTCOMES = "p2p_campaign_outcomes"


def _resolved(config: pytest.Config, opt: Option[T]) -> tuple[T, str]:
    r = resolve(config, opt)
    return r.value, r.where()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Publish ``pytest_p2p_campaign_finished`` (contract 6): report and verdict implement it."""
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SIGNALS_KEY] = signals.install()  # SIGTERM/SIGHUP unwind like Ctrl-C on every path
    stamp = worker_input(config).get(WORKER_STAMP)
    if stamp is not None:
        config.stash[STAMP_KEY] = str(stamp)
    else:
        config.stash[STAMP_KEY] = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    config.stash[RESULTS_KEY] = {}
    config.stash[CRASHES_KEY] = []
    config.stash[T0_KEY] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # Every usage error (option values, and what the rig cannot run: a model campaign without a
    # model, --p2p-reps past its bound, arms the rig lacks) is refused now, before collection: one
    # "ERROR: pytest-p2p: ..." paragraph, never a collection error full of pluggy frames (issue 30).
    # An xdist worker follows its controller, which refused already; --help reads nothing.
    if is_worker(config) or config.getoption("help", default=False):
        return
    try:
        plan(config)
    except P2PError as exc:
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: _Node) -> None:
    """xdist controller -> worker: one run stamp for the whole session."""
    node.workerinput[WORKER_STAMP] = node.config.stash[STAMP_KEY]


def pytest_unconfigure(config: pytest.Config) -> None:
    signals.restore(config.stash.get(SIGNALS_KEY, []))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session ended by SIGTERM/SIGHUP exits ``128 + signal``, as a cancelled job does (SIGINT keeps pytest's 2).

    On the xdist controller, after a worker died: this session's runs still ``running`` lost their writer
    with it (every worker has ended by now), so they are marked ``abandoned`` naming the crash."""
    code = signals.exit_status()
    if code is not None:
        session.exitstatus = code
    crashes = session.config.stash.get(CRASHES_KEY, [])
    if crashes and not is_worker(session.config):
        session.config.stash[ABANDONED_KEY] = _mark_abandoned(session.config, crashes)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    """xdist controller: a worker died while running ``crashitem`` (SIGKILL, OOM killer)."""
    config = getattr(sched, "config", None)
    if isinstance(config, pytest.Config) and CRASHES_KEY in config.stash:
        config.stash[CRASHES_KEY].append(f"worker crashed while running {crashitem}")


def _mark_abandoned(config: pytest.Config, crashes: list[str]) -> list[str]:
    from ..options import RESULTS, path_of
    from ..results.read import is_run_dir, run_meta
    from ..results.write import RunDir

    root = path_of(config, resolve(config, RESULTS))
    t0 = config.stash.get(T0_KEY, "")
    why = "abandoned: its process ended before the run did (" + "; ".join(crashes[:3]) + "); partial results kept"
    out = []
    for run_dir in sorted(root.iterdir()) if root.is_dir() else []:
        if not is_run_dir(run_dir):
            continue
        try:
            meta = run_meta(run_dir)
            started = str(meta.get("started_at") or "")
            if started >= t0 and RunDir(run_dir).mark_abandoned(why):
                out.append(run_dir.name)
        except (P2PError, OSError):
            continue  # a run that cannot be read or written is another run's business; never fail the session
    return out


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """What a worker's death did to the p2p runs: named once, after pytest's own failure for the crash."""
    crashes, abandoned = config.stash.get(CRASHES_KEY, []), config.stash.get(ABANDONED_KEY, [])
    if not crashes:
        return
    terminalreporter.section("p2p workers", sep="-", red=True)
    for line in crashes:
        terminalreporter.write_line(f"xdist {line}; xdist replaced the worker and ran its remaining tests")
    for name in abandoned:
        terminalreporter.write_line(f"run {name}: abandoned mid-campaign (run.json status 'abandoned', partial "
                                    "results kept); a new worker that ran tests of its pair ran the campaign again "
                                    "under a new run id")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A SIGTERM/SIGHUP whose interrupt Python lost (raised inside a destructor) still ends the session."""
    signals.checkpoint()


@pytest.hookimpl(wrapper=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> Generator[None, None, None]:
    """Leave out traceback entries without a line number before pytest renders the interrupt.

    A signal handled at an instruction that has no line (Python 3.11+) leaves a frame whose
    ``tb_lineno`` is None; the terminal reporter's long repr then raises TypeError and the
    session ends as an internal error (rc 1) instead of interrupted (rc 128 + signal). Seen once
    in CI on a SIGHUP mid-campaign.
    """
    excinfo.traceback = excinfo.traceback.filter(signals.has_line)
    return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: _Node, error: object) -> None:
    """xdist worker -> controller: the campaigns it finished, published again on the controller."""
    from ..campaign.outcome import CampaignOutcome

    got = as_list(node_output(node).get(WORKER_OUTCOMES))
    worker = node_worker_id(node)
    for data in got:
        if isinstance(data, dict):
            _publish(node.config, CampaignOutcome.from_dict(data, worker=worker))


def _publish(config: pytest.Config, outcome: CampaignOutcome) -> None:
    """Fire ``pytest_p2p_campaign_finished``; in an xdist worker also hand the outcome to the controller."""
    workeroutput = worker_output(config)
    if workeroutput is not None and outcome.worker is None:
        sent = workeroutput.setdefault(WORKER_OUTCOMES, [])
        if isinstance(sent, list):
            sent.append(outcome.to_dict())
    config.hook.pytest_p2p_campaign_finished(config=config, outcome=outcome)


def plan(config: pytest.Config) -> Plan:
    """Resolve kind, arms and points from the rig file and ``--p2p-campaign/--p2p-reps/--p2p-arms``."""
    got = config.stash.get(PLAN_KEY, None)
    if got is not None:
        return got
    from .rig import campaign_use
    from .session import get_session

    mode, mode_origin = _resolved(config, CAMPAIGN)
    reps, reps_origin = _resolved(config, REPS)
    arms, arms_origin = _resolved(config, ARMS)
    session = get_session(config)
    use = campaign_use(session.rig, mode=mode, reps=reps, reps_origin=reps_origin, arms=arms,
                       arms_origin=arms_origin)
    cfg, kind, server = use.config, use.kind, session.rig.server
    skip: str | None = None
    if kind == "off":
        skip = f"campaign turned off ({mode_origin})"
        points = cfg.points("model" if use.has_server else "probe")
    else:
        points = cfg.points(kind)
        live = _live(session)
        if kind == "probe" and not live:
            skip = f"probe campaign needs a real GPU: this session uses {session.label}"
        elif kind == "model" and not live and not getattr(server, "simulated", False):
            skip = f"model campaign with a real server needs a real GPU: this session uses {session.label}"
        no_pair = _no_pairs_reason(session)
        if no_pair is not None:
            skip = f"campaign skipped: {no_pair}"
    p = Plan(kind=kind if kind != "off" else "off", config=cfg, arms=list(cfg.arms),
             points=points, skip_reason=skip, origin=mode_origin)
    config.stash[PLAN_KEY] = p
    return p


def _live(session: P2PSession) -> bool:
    try:
        return bool(session.live)
    except P2PError:
        return False


def _no_pairs_reason(session: P2PSession) -> str | None:
    """Why this session has no GPU pair to run a campaign on (one GPU, MIG, no P2P pair), else ``None``."""
    try:
        resolved = session.resolved
    except P2PError:
        return None  # the evidence stage reports the error itself
    if resolved.pairs:
        return None
    return resolved.no_pairs_reason or "no GPU pair to compare arms on"


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    wanted = [n for n in ("p2p_point", "p2p_campaign_arm", "p2p_scenario") if n in names]
    if not wanted and "p2p_campaign" not in names:
        return
    try:
        p = plan(metafunc.config)
    except P2PError as exc:
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None
    if "p2p_pair" in names and not any("p2p_pair" in c.params for c in getattr(metafunc, "_calls", [])):
        # normally the evidence stage parametrises p2p_pair; this covers a plugin set without it
        from .session import get_session

        pairs = get_session(metafunc.config).pairs
        metafunc.parametrize("p2p_pair", pairs, ids=[f"gpu{a}-gpu{b}" for a, b in pairs], scope="session")
    if "p2p_campaign_arm" in names:
        metafunc.parametrize("p2p_campaign_arm", p.arms, ids=p.arms)
    if "p2p_point" in names:
        metafunc.parametrize("p2p_point", p.points, ids=p.points)
    if "p2p_scenario" in names:
        scen = [Scenario(a, pt) for pt in p.points for a in p.arms]
        metafunc.parametrize("p2p_scenario", scen, ids=[str(s) for s in scen])


_CAMPAIGN_FIXTURES = {"p2p_campaign", "p2p_point", "p2p_campaign_arm", "p2p_scenario"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per pair (before xdist's own hook reads the marks); the reason when there is no pair.

    With no pair (one GPU, MIG, no P2P-capable pair) pytest parametrises ``p2p_pair`` with an
    empty set: the parameter is ``NOTSET`` and the skip says only "got empty parameter set". The
    campaign's tests get the rig's reason instead, first among their skip marks.
    """
    xdist = config.pluginmanager.hasplugin("xdist")
    reason: str | None = None
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = getattr(callspec, "params", None) or {}
        if "p2p_pair" not in params:
            continue
        pair = params["p2p_pair"]
        if isinstance(pair, tuple) and len(pair) == 2:
            if xdist:
                item.add_marker(pytest.mark.xdist_group(name=f"gpu{pair[0]}-gpu{pair[1]}"))
        elif _CAMPAIGN_FIXTURES & set(getattr(item, "fixturenames", ())):
            if reason is None:
                from .session import get_session

                try:
                    reason = _no_pairs_reason(get_session(config)) or "no GPU pair to compare arms on"
                except P2PError as exc:
                    reason = f"no GPU pair: {exc}"
                reason = f"campaign skipped: {reason}"
            item.add_marker(pytest.mark.skip(reason=reason), append=False)


_PAIR_IN_ID = re.compile(r"\[(gpu\d+-gpu\d+)\b")


def pair_scope(nodeid: str) -> str | None:
    """The GPU pair a test id belongs to (``test_uplift[gpu0-gpu1-c8]`` -> ``gpu0-gpu1``), if any."""
    m = _PAIR_IN_ID.search(nodeid)
    return m.group(1) if m else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``--dist loadgroup``, one work unit per GPU pair, read from the test id itself.

    xdist's own loadgroup reads ``xdist_group`` marks through a node-id suffix that
    pytest 9.2 no longer lets it set (seen with xdist 3.8: tests of one group spread over
    workers), so pair grouping must not depend on it. Tests without a pair in their id keep
    xdist's behaviour.
    """
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class PairScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return pair_scope(nodeid) or super()._split_scope(nodeid)

    return PairScheduling(config, log)


def _run_id(config: pytest.Config, rig_name: str, pair_key: str, root: Path) -> str | None:
    from ..results.layout import safe_component

    run_id = f"{config.stash[STAMP_KEY]}_{safe_component(rig_name)}_{safe_component(pair_key)}"
    return None if (root / run_id).exists() else run_id


def run_campaign(config: pytest.Config, pair: tuple[int, int]) -> CampaignResult:
    """Run (once per pair and session) and return the :class:`CampaignResult`; errors are cached too.

    When the run directory is final (also after a failure or an interruption) the runner
    publishes it through ``pytest_p2p_campaign_finished``.
    """
    cache = config.stash[RESULTS_KEY]
    if pair in cache:
        got = cache[pair]
        if isinstance(got, P2PError):
            raise got
        return got
    p = plan(config)
    if p.skip_reason:
        pytest.skip(p.skip_reason)
    from ..campaign.wiring import from_session
    from ..results.layout import Pair
    from .session import get_session

    session = get_session(config)
    pair_key = Pair(int(pair[0]), int(pair[1])).key
    # the count the line runs down is the runner's to set (it knows its design: slots, or starts x windows)
    progress = progress_for(config, f"{p.kind} campaign {pair_key}{' (SIMULATED)' if session.simulated else ''}",
                            0)
    try:
        priors, history = start_priors(config, session, (int(pair[0]), int(pair[1])), p)
        runner = from_session(session, (int(pair[0]), int(pair[1])), p.config, p.kind, progress=progress,
                              run_id=_run_id(config, session.rig.name, pair_key, session.results_root),
                              on_finished=lambda outcome: _publish(config, outcome),
                              start_priors=priors, prior_history=history)
        result = runner.run()
    except P2PError as exc:
        cache[pair] = exc
        raise
    cache[pair] = result
    return result


def start_priors(config: pytest.Config, session: P2PSession, pair: tuple[int, int],
                 p: Plan) -> tuple[dict[str, StartPrior], dict[str, SpreadSeen]]:
    """The runner's ``start_priors`` (per point, the start spread learned from earlier nights in the baseline store,
    issue 24) and ``prior_history`` (per point, what the store held of those nights and the spreads they measured,
    for the plan line); both ``{}`` where no store is read.

    Why here: the campaign never imports the verdict stage (stage order), so the glue reads the
    store and hands the campaign plain data. Only for resident arms (a restart-per-rep campaign
    has no starts to lend a spread to) and only where a store is configured (the verdict's own
    rule: a baseline option or an explicit database). A store not there yet is the first night:
    no prior, silently. A store that cannot be read is one warning naming it, and the campaign
    runs without priors — nothing it measures depends on the store.
    """
    cfg = p.config
    if p.kind != "model" or cfg.resident_mode(p.kind) is None or cfg.arm_b is None:
        return {}, {}
    from .verdict import SESSION_KEY as BASELINE_KEY

    baseline = config.stash.get(BASELINE_KEY, None)
    if baseline is None or not baseline.saving:
        return {}, {}
    from ..stats import StatsError
    from ..stats.nested import spread_seen, start_prior
    from ..verdict.fingerprint import gpu_models, pair_ident
    from ..verdict.store import Store
    from ..verdict.store_base import StoreMissing, redact
    from ..verdict.store_blocks import BlockQuery, elsewhere, start_blocks
    from ..verdict.store_design import design_key

    target = baseline.db_path.value
    try:
        design = design_key(p.kind, cfg.to_dict(), cfg.metric(p.kind), cfg.direction(p.kind))
        if design is None:
            return {}, {}
        higher = cfg.direction(p.kind) == "higher"
        gpus: list[dict[str, object]] = []
        for g in pair:
            ge = None
            with contextlib.suppress(KeyError, AttributeError, P2PError):
                ge = session.evidence.gpu(g)
            gpus.append({"index": g, "bus_id": getattr(ge, "bus_id", None), "uuid": getattr(ge, "uuid", None),
                         "name": getattr(ge, "name", None)})
        ident = pair_ident({"run_id": None, "pair": {"gpus": gpus}})
        # the GPU models, read as a stored night's are: nights on other GPUs in the same slots are not lent
        models = gpu_models({"pair": {"gpus": gpus}})
        driver = None
        with contextlib.suppress(P2PError, AttributeError):
            driver = session.evidence.driver_version or None
        out: dict[str, StartPrior] = {}
        history: dict[str, SpreadSeen] = {}
        with Store(target, create=False) as store:
            for point in p.points:
                q = BlockQuery(rig=session.rig.name, pair_ident=ident, kind=p.kind, point=point, arm_a=cfg.arm_a,
                               arm_b=cfg.arm_b, metric=cfg.metric(p.kind), design=design,
                               simulated=bool(session.simulated), driver=driver,
                               rig_digest=str(session.rig.digest or "") or None,
                               rig_file_digest=str(session.rig.file_digest or "") or None,
                               gpu_models=tuple(models) if models else None)
                nights = start_blocks(store, q)
                prior = start_prior(nights, higher_is_better=higher) if nights else None
                if prior is not None:
                    out[point] = prior
                seen = spread_seen(nights, higher_is_better=higher)
                if seen.window_sd is None:  # no night of this design yet: another design's, for the plan
                    seen = dataclasses.replace(seen, elsewhere=elsewhere(store, q, higher_is_better=higher))
                history[point] = seen
        return out, history
    except StoreMissing:
        return {}, {}
    except (P2PError, StatsError) as exc:  # a store it cannot read, or nights no spread can be computed from
        warnings.warn(pytest.PytestWarning(
            f"pytest-p2p: no start-spread prior from the baseline store {redact(target)} "
            f"({' '.join(str(exc).split())}); the campaign runs on its own starts"), stacklevel=1)
        return {}, {}


def progress_for(config: pytest.Config, label: str, total: int) -> Progress:
    """The live progress line through pytest's terminal reporter; silent in xdist workers and under ``-q -q``
    (the heartbeat's rule: one for both)."""
    from .. import heartbeat
    from ..campaign.progress import Progress

    quiet = heartbeat.quiet(int(config.getoption("verbose", 0) or 0), is_worker(config))
    reporter = None if quiet else config.pluginmanager.getplugin("terminalreporter")
    capture = None if quiet else config.pluginmanager.getplugin("capturemanager")
    return Progress(label=label, total=total, reporter=reporter, capture=capture)


@pytest.fixture(scope="session")
def p2p_campaign(request: pytest.FixtureRequest, p2p_pair: tuple[int, int]) -> CampaignResult:
    """The pair's campaign (arms x points x reps), run once per session; see ``CampaignResult``."""
    try:
        return run_campaign(request.config, (int(p2p_pair[0]), int(p2p_pair[1])))
    except P2PError as exc:
        pytest.fail(f"p2p campaign on gpu{p2p_pair[0]}-gpu{p2p_pair[1]} did not run: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def p2p_campaign_plan(pytestconfig: pytest.Config) -> Plan:
    """The resolved campaign plan (kind, arms, points, skip reason) of this session."""
    return plan(pytestconfig)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if config.getoption("verbose", 0) < 1:
        return None
    try:
        p = plan(config)
    except Exception:  # the header never breaks a run; collection reports the real error
        return None
    c = p.config
    state = p.skip_reason or "will run"
    return [f"p2p campaign: {p.kind}, arms {' over '.join(p.arms[:2])}, points {' '.join(p.points)}, "
            f"{c.reps} reps {c.schedule} ({state})"]
