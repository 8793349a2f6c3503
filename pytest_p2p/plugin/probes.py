"""Pytest integration of the probes: replay option, (pair, arm) parametrisation, run-once fixtures.

Tests that ask for ``p2p_probe_case`` are parametrised by every (pair, arm) the rig's
``probe.arms`` selects (ids ``gpu0-gpu1-p2p_on``); ``p2p_allreduce`` then gives that
case's :class:`~pytest_p2p.probes.allreduce.AllReduceResult`, run once per session
however many checks read it, and written to
``<results>/probes/<pair>/<arm>/{allreduce.json, nccl.log, transport_proof.json}``;
``p2p_copy`` gives the pair's copy probe (``<results>/probes/<pair>/p2pcopy.json``).

Where the probes come from, in order: ``--p2p-probe-replay DIR`` (or env
``PYTEST_P2P_PROBE_REPLAY`` / ini ``p2p_probe_replay``) replays recorded results and
their NCCL logs — the transport proof is re-parsed from the recorded log, so the
checks exercise the real parser on real output; else, when the session runs on the
embedded demo snapshot and the package ships ``demo/probes/``, that recording; else a
live session runs the probes; else the checks skip, saying they need a real GPU.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import pytest

from ..errors import P2PError
from ..options import PROBE_REPLAY, resolve
from ..probes.allreduce import AllReduceResult
from ..probes.arms import Arm
from ..probes.config import ProbeConfig
from ..probes.judge import Judgement, judge_busbw, judge_copy, judge_latency, judge_uplift, overall
from ..probes.p2pcopy import P2PCopyResult
from ..probes.replay import NoRecording, load_allreduce, load_copy, probes_dir, replay_index
from ..util import format_size
from .xdist_roles import is_controller, is_worker

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from .session import P2PSession

__all__ = ["Judgement", "ProbeCase", "ProbeState", "cuda_indices", "judge_busbw", "judge_copy", "judge_latency",
           "judge_uplift", "load_allreduce", "load_copy", "overall", "probe_state", "probes_dir", "replay_index"]
_T = TypeVar("_T")

DEMO_PROBES = "probes"


@dataclass(frozen=True)
class ProbeCase:
    """One parametrisation: a GPU pair under one arm."""

    pair: tuple[int, int]
    arm: Arm

    @property
    def pair_key(self) -> str:
        return f"gpu{self.pair[0]}-gpu{self.pair[1]}"

    @property
    def id(self) -> str:
        return f"{self.pair_key}-{self.arm.name}"


@dataclass
class ProbeState:
    """Per-session probe state: where results come from, and each probe's outcome (run once)."""

    session: P2PSession
    replay: Path | None
    replay_origin: str = ""
    # each probe's outcome, run once: its result, or the error or skip it raised (raised again on each use)
    allreduce_cache: dict[tuple[object, ...], AllReduceResult | BaseException] = field(default_factory=dict)
    copy_cache: dict[tuple[object, ...], P2PCopyResult | BaseException] = field(default_factory=dict)

    @property
    def cfg(self) -> ProbeConfig:
        return self.session.rig.probe

    @property
    def arms(self) -> dict[str, Arm]:
        return self.session.rig.arms

    @property
    def label(self) -> str:
        if self.replay is not None:
            return f"replay of {self.replay} ({self.replay_origin})"
        return "live probes" if self.session.live else f"no probes: {self.session.label}"

    def no_cases_reason(self) -> str:
        """Why there is nothing to probe: one GPU, MIG, no pair that can do P2P (the session says which)."""
        try:
            reason = self.session.resolved.no_pairs_reason
        except P2PError as exc:
            return f"no GPU pair to probe: {exc}"
        return f"probes skipped: {reason or 'no GPU pair to probe'}"

    def evidence(self) -> Evidence | None:
        try:
            return self.session.evidence
        except P2PError:
            return None

    def cases(self) -> list[ProbeCase]:
        names = self.cfg.select_arms(self.arms, self.session.rig.source)
        return [ProbeCase((a, b), self.arms[n]) for a, b in self.session.pairs for n in names]

    def out_dir(self, pair: tuple[int, int], arm: str | None = None) -> Path:
        base = Path(self.session.results_root) / "probes" / f"gpu{pair[0]}-gpu{pair[1]}"
        return base / arm if arm else base

    # -- results, run or replayed once ---------------------------------------------------------
    def allreduce(self, pair: tuple[int, int], arm: Arm) -> AllReduceResult:
        return self._once(self.allreduce_cache, ("allreduce", pair, arm.name), lambda: self._allreduce(pair, arm))

    def copy(self, pair: tuple[int, int]) -> P2PCopyResult:
        return self._once(self.copy_cache, ("p2pcopy", pair), lambda: self._copy(pair))

    @staticmethod
    def _once(cache: dict[tuple[object, ...], _T | BaseException], key: tuple[object, ...],
              make: Callable[[], _T]) -> _T:
        if key not in cache:
            try:
                cache[key] = make()
            except (P2PError, pytest.skip.Exception) as exc:
                cache[key] = exc
        value = cache[key]
        if isinstance(value, BaseException):
            if isinstance(value, pytest.skip.Exception):
                pytest.skip(str(value.msg))
            pytest.fail(str(value), pytrace=False)
        return value

    def _keep_replayed(self, pair: tuple[int, int], name: str) -> None:
        """Copy a replayed recording into this session's results, beside a REPLAYED_FROM note.

        The report's probe table reads ``<results>/probes/<pair>/``: without the copy a replayed session
        (the demo) showed "no probe results" although its probe checks ran on the recording. The note
        keeps the table honest about where the numbers come from. Best effort: a results root that
        cannot be written costs the table, never the check.
        """
        import contextlib
        import shutil

        assert self.replay is not None
        src = probes_dir(self.replay) / f"gpu{pair[0]}-gpu{pair[1]}" / name
        dst = self.out_dir(pair) / name
        if not src.is_file() or src.resolve() == dst.resolve():
            return
        with contextlib.suppress(OSError):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            origin = src.parent if "/" not in name else src.parent.parent
            (self.out_dir(pair) / "REPLAYED_FROM").write_text(f"{origin}\n")

    def _need_live(self, what: str, pair: tuple[int, int]) -> None:
        if not self.session.live:
            pytest.skip(f"{what} needs a real GPU: the session's evidence is {self.session.label}; replay "
                        f"recorded probe results with --p2p-probe-replay DIR")
        ev = self.evidence()
        mig = [i for i in pair if ev is not None and _mig(ev, i)]
        if mig:
            pytest.skip(f"{what}: MIG is enabled on {', '.join(f'gpu{i}' for i in mig)}: CUDA gives MIG instances "
                        f"no peer access, so NCCL cannot use P2P between them; probe whole GPUs")
        if importlib.util.find_spec("torch") is None:
            pytest.skip(f"{what} needs torch (with CUDA) in this Python environment")

    def _allreduce(self, pair: tuple[int, int], arm: Arm) -> AllReduceResult:
        key = f"gpu{pair[0]}-gpu{pair[1]}/{arm.name}"
        if self.replay is not None:
            try:
                result = load_allreduce(self.replay, pair, arm.name, self.label, self.evidence())
            except NoRecording as exc:
                pytest.skip(str(exc))
            self._keep_replayed(pair, f"{arm.name}/allreduce.json")
            return result
        self._need_live(f"the all-reduce probe ({key})", pair)
        from ..probes.allreduce import run_allreduce, write_result

        out = self.out_dir(pair, arm.name)
        with _lease(pair, f"all-reduce probe {key}", self.cfg.timeout_s):
            result = run_allreduce(pair, arm, self.cfg, self.session.rig.env, out)
            if self.cfg.nccl_tests:
                from ..probes.nccltests_runner import run_nccl_tests

                try:  # a second opinion: its failure must not discard our measurement
                    result.nccl_tests = run_nccl_tests(pair, arm, self.session.rig.env, out, self.cfg.timeout_s)
                except P2PError as exc:
                    result.nccl_tests = {"error": str(exc)}
                write_result(result, out)
        return result

    def _copy(self, pair: tuple[int, int]) -> P2PCopyResult:
        if self.replay is not None:
            try:
                copy_result = load_copy(self.replay, pair, self.label)
            except NoRecording as exc:
                pytest.skip(str(exc))
            self._keep_replayed(pair, "p2pcopy.json")
            return copy_result
        self._need_live(f"the P2P copy probe (gpu{pair[0]}-gpu{pair[1]})", pair)
        from ..probes.p2pcopy import run_p2p_copy

        with _lease(pair, f"P2P copy probe gpu{pair[0]}-gpu{pair[1]}", self.cfg.timeout_s):
            return run_p2p_copy(pair, self.cfg, self.out_dir(pair), self.session.rig.env)


def _lease(pair: tuple[int, int], what: str, timeout_s: float) -> AbstractContextManager[object]:
    """The host-wide GPU lease: no probe overlaps a server or another probe on either GPU of the pair."""
    from ..lease import GpuLease, default_lock_dir

    return GpuLease(default_lock_dir()).hold(pair, what, timeout_s)


def _mig(ev: Evidence, index: int) -> bool:
    try:
        return bool(ev.gpu(index).mig_mode)
    except KeyError:
        return False


# -- pytest hooks ------------------------------------------------------------------------------------
_STATE = pytest.StashKey[ProbeState]()


def _get_session(config: pytest.Config) -> P2PSession:
    from .evidence import session_or_usage_error

    return session_or_usage_error(config)


def _on_demo_snapshot(session: P2PSession) -> bool:
    """The session replays the embedded demo snapshot (demo mode, or that file named explicitly)."""
    if session.demo:
        return True
    snap = session.snapshot.value
    if snap is None:
        return False
    from .session import DEMO_SNAPSHOT, demo_path

    try:
        return Path(str(snap)).resolve() == demo_path(DEMO_SNAPSHOT).resolve()
    except OSError:
        return False


def probe_state(config: pytest.Config) -> ProbeState:
    """The session's probe state, created on first use (a bad replay directory is a usage error)."""
    state = config.stash.get(_STATE, None)
    if state is None:
        session = _get_session(config)
        opt = resolve(config, PROBE_REPLAY)
        replay, origin = None, ""
        if opt.value is not None:
            replay = Path(str(opt.value))
            if not replay.is_absolute():
                replay = Path(config.invocation_params.dir) / replay
            if not replay.is_dir():
                raise pytest.UsageError(f"pytest-p2p: {opt.where()}: no such directory")
            origin = opt.origin
        elif _on_demo_snapshot(session):
            from .session import demo_path

            demo = demo_path(DEMO_PROBES)
            if demo.is_dir():
                replay, origin = demo, "the embedded demo recording"
        state = ProbeState(session, replay, origin)
        config.stash[_STATE] = state
    return state


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "p2p_probe_case" in metafunc.fixturenames:
        state = probe_state(metafunc.config)
        try:
            cases = state.cases()
        except P2PError as exc:
            raise pytest.UsageError(f"pytest-p2p: {exc}") from None
        if not cases:  # one GPU, MIG, no P2P-capable pair: every probe check skips, saying why
            skip = pytest.param(None, marks=pytest.mark.skip(reason=state.no_cases_reason()), id="no-pair")
            metafunc.parametrize("p2p_probe_case", [skip], scope="session")
        else:
            metafunc.parametrize("p2p_probe_case", cases, ids=[c.id for c in cases], scope="session")
    if "p2p_decode_size" in metafunc.fixturenames:
        sizes = probe_state(metafunc.config).cfg.decode_sizes
        metafunc.parametrize("p2p_decode_size", sizes, ids=[format_size(s) for s in sizes])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``xdist --dist loadgroup``, keep every probe check of a pair on one worker.

    The probe cache is per process: without grouping, two workers would each run the
    same pair's probes (the lease serialises them, but each pays for them). The group is
    named like the campaign stage's (``gpu0-gpu1``): ``test_uplift[gpu0-gpu1]`` gets that
    one first, and the per-arm checks of the pair must land in the same group.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        case, pair = params.get("p2p_probe_case"), None
        if isinstance(case, ProbeCase):
            pair = case.pair
        elif {"p2p_copy", "p2p_probe_state"} & set(getattr(item, "fixturenames", ())):
            pair = _pair_param(params.get("p2p_pair"))  # NOTSET when the session has no pair (one GPU, MIG)
        if pair is not None:
            item.add_marker(pytest.mark.xdist_group(name=f"gpu{pair[0]}-gpu{pair[1]}"))


def _pair_param(value: object) -> tuple[int, int] | None:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    return None


@pytest.fixture(scope="session")
def p2p_probe_state(pytestconfig: pytest.Config) -> ProbeState:
    """Where probe results come from (live, replay) and the results of each probe, run once."""
    return probe_state(pytestconfig)


def _record_source(request: pytest.FixtureRequest, state: ProbeState) -> None:
    """Where the numbers came from (real run or replay) as a test property.

    Appended to ``user_properties`` directly, not through ``record_property``: that fixture
    warns under junit's default xunit2 family (properties inside ``<testcase>``), and the
    report stage moves ``p2p*`` properties to the suite, where xunit2 allows them.
    """
    props = request.node.user_properties
    if ("p2p_probe_source", state.label) not in props:
        props.append(("p2p_probe_source", state.label))


@pytest.fixture
def p2p_allreduce(p2p_probe_state: ProbeState, p2p_probe_case: ProbeCase,
                  request: pytest.FixtureRequest) -> AllReduceResult:
    """The all-reduce probe result for this (pair, arm): run once per session, or replayed."""
    _record_source(request, p2p_probe_state)
    return p2p_probe_state.allreduce(p2p_probe_case.pair, p2p_probe_case.arm)


@pytest.fixture
def p2p_copy(p2p_probe_state: ProbeState, p2p_pair: tuple[int, int],
             request: pytest.FixtureRequest) -> P2PCopyResult:
    """The P2P copy probe result for this pair."""
    _record_source(request, p2p_probe_state)
    return p2p_probe_state.copy((p2p_pair[0], p2p_pair[1]))


class Benchmark(Protocol):
    """The part of pytest-benchmark's ``benchmark`` fixture the built-in checks use."""

    @property
    def extra_info(self) -> dict[str, object]: ...

    def pedantic(self, target: Callable[[], object], *, rounds: int, iterations: int,
                 warmup_rounds: int) -> object: ...


@pytest.fixture
def p2p_benchmark(request: pytest.FixtureRequest) -> Benchmark:
    """pytest-benchmark's ``benchmark`` fixture, or a clean skip where it cannot time anything."""
    config = request.config
    if not config.pluginmanager.hasplugin("benchmark"):
        pytest.skip("pytest-benchmark is not installed")
    if is_worker(config) or is_controller(config):
        pytest.skip("pytest-benchmark turns itself off under xdist (-n); run benchmarks without -n")
    bench: Benchmark = request.getfixturevalue("benchmark")
    if getattr(bench, "disabled", False):
        pytest.skip("pytest-benchmark is disabled (--benchmark-disable or xdist)")
    return bench


def cuda_indices(evidence: Evidence, pair: tuple[int, int]) -> tuple[int, int]:
    """torch device indices of a pair's GPUs in *this* process, matched by UUID (CUDA's order may not be NVML's)."""
    import torch

    want = {(evidence.gpu(i).uuid or "").lower().removeprefix("gpu-"): i for i in pair}
    found: dict[int, int] = {}
    for dev in range(torch.cuda.device_count()):
        uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "")).lower().removeprefix("gpu-")
        if uuid in want:
            found[want[uuid]] = dev
    if len(found) != 2:
        pytest.skip(f"cannot map gpu{pair[0]}-gpu{pair[1]} to torch devices by UUID in this process "
                    f"(CUDA_VISIBLE_DEVICES hides them?)")
    return found[pair[0]], found[pair[1]]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    from .session import SESSION_KEY

    if config.stash.get(SESSION_KEY, None) is None:  # not a p2p run: touch nothing
        return None
    return [f"p2p probes: {probe_state(config).label}"]
