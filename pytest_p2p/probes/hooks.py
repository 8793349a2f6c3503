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
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..errors import P2PError, ProbeError
from ..options import PROBE_REPLAY, resolve
from ..util import format_size
from .allreduce import AllReduceResult, proof_from_log
from .arms import Arm
from .config import ProbeConfig, Thresholds
from .p2pcopy import P2PCopyResult

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

    session: Any  # pytest_p2p.session.P2PSession
    replay: Path | None
    replay_origin: str = ""
    cache: dict[tuple[Any, ...], Any] = field(default_factory=dict)

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

    def cases(self) -> list[ProbeCase]:
        names = self.cfg.select_arms(self.arms, getattr(self.session.rig, "source", "rig"))
        return [ProbeCase(tuple(p), self.arms[n]) for p in self.session.pairs for n in names]

    def out_dir(self, pair: tuple[int, int], arm: str | None = None) -> Path:
        base = Path(self.session.results_root) / "probes" / f"gpu{pair[0]}-gpu{pair[1]}"
        return base / arm if arm else base

    # -- results, run or replayed once ---------------------------------------------------------
    def allreduce(self, pair: tuple[int, int], arm: Arm) -> AllReduceResult:
        return self._once(("allreduce", pair, arm.name), lambda: self._allreduce(pair, arm))

    def copy(self, pair: tuple[int, int]) -> P2PCopyResult:
        return self._once(("p2pcopy", pair), lambda: self._copy(pair))

    def _once(self, key: tuple[Any, ...], make: Any) -> Any:
        if key not in self.cache:
            try:
                self.cache[key] = ("ok", make())
            except (P2PError, pytest.skip.Exception) as exc:
                self.cache[key] = ("err", exc)
        kind, value = self.cache[key]
        if kind == "err":
            if isinstance(value, pytest.skip.Exception):
                pytest.skip(str(value.msg))
            pytest.fail(str(value), pytrace=False)
        return value

    def _need_live(self, what: str) -> None:
        if not self.session.live:
            pytest.skip(f"{what} needs a real GPU: the session's evidence is {self.session.label}; replay "
                        f"recorded probe results with --p2p-probe-replay DIR")
        if importlib.util.find_spec("torch") is None:
            pytest.skip(f"{what} needs torch (with CUDA) in this Python environment")

    def _allreduce(self, pair: tuple[int, int], arm: Arm) -> AllReduceResult:
        key = f"gpu{pair[0]}-gpu{pair[1]}/{arm.name}"
        if self.replay is not None:
            return load_allreduce(self.replay, pair, arm.name, self.label)
        self._need_live(f"the all-reduce probe ({key})")
        from .allreduce import run_allreduce, write_result

        out = self.out_dir(pair, arm.name)
        with _lease(pair, f"all-reduce probe {key}", self.cfg.timeout_s):
            result = run_allreduce(pair, arm, self.cfg, self.session.rig.env, out)
            if self.cfg.nccl_tests:
                from .nccltests_runner import run_nccl_tests

                try:  # a second opinion: its failure must not discard our measurement
                    result.nccl_tests = run_nccl_tests(pair, arm, self.session.rig.env, out, self.cfg.timeout_s)
                except P2PError as exc:
                    result.nccl_tests = {"error": str(exc)}
                write_result(result, out)
        return result

    def _copy(self, pair: tuple[int, int]) -> P2PCopyResult:
        if self.replay is not None:
            return load_copy(self.replay, pair, self.label)
        self._need_live(f"the P2P copy probe (gpu{pair[0]}-gpu{pair[1]})")
        from .p2pcopy import run_p2p_copy

        with _lease(pair, f"P2P copy probe gpu{pair[0]}-gpu{pair[1]}", self.cfg.timeout_s):
            return run_p2p_copy(pair, self.cfg, self.out_dir(pair), self.session.rig.env)


def _lease(pair: tuple[int, int], what: str, timeout_s: float) -> Any:
    """The host-wide GPU lease: no probe overlaps a server or another probe on either GPU of the pair."""
    from ..lease import GpuLease, default_lock_dir

    return GpuLease(default_lock_dir()).hold(pair, what, timeout_s)


def probes_dir(replay: Path) -> Path:
    """Accept a results root (holding ``probes/``) or the ``probes/`` directory itself."""
    return replay / "probes" if (replay / "probes").is_dir() else replay


def load_allreduce(replay: Path, pair: tuple[int, int], arm: str, label: str) -> AllReduceResult:
    """A recorded all-reduce result, its proof re-parsed from the recorded NCCL log."""
    where = probes_dir(replay) / f"gpu{pair[0]}-gpu{pair[1]}" / arm
    path = where / "allreduce.json"
    if not path.is_file():
        pytest.skip(f"{label}: no all-reduce recording for gpu{pair[0]}-gpu{pair[1]} arm {arm} ({path})")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{path}: unreadable JSON ({exc})") from None
    log = where / (data.get("log") or "nccl.log")
    result = AllReduceResult.from_dict(data, log if log.is_file() else None, str(path))
    if (result.pair, result.arm) != (tuple(pair), arm):
        raise ProbeError(f"{path}: records pair {result.pair_key} arm {result.arm}, "
                         f"but sits under gpu{pair[0]}-gpu{pair[1]}/{arm}")
    result.meta["replayed_from"] = str(where)
    if result.log_path is not None:
        result.proof = proof_from_log(result.log_path)
    return result


def load_copy(replay: Path, pair: tuple[int, int], label: str) -> P2PCopyResult:
    path = probes_dir(replay) / f"gpu{pair[0]}-gpu{pair[1]}" / "p2pcopy.json"
    if not path.is_file():
        pytest.skip(f"{label}: no P2P copy recording for gpu{pair[0]}-gpu{pair[1]} ({path})")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{path}: unreadable JSON ({exc})") from None
    result = P2PCopyResult.from_dict(data, str(path))
    result.meta["replayed_from"] = str(path.parent)
    return result


# -- pure judgements (unit-tested; the checks print their messages) ---------------------------------
def busbw_problems(result: AllReduceResult, thresholds: Thresholds) -> list[str]:
    out = []
    for size, floor in sorted(thresholds.busbw_min_gbs.items()):
        row = result.row(size)
        if row is None:
            out.append(f"{format_size(size)}: not measured (add it to probe.sizes)")
        elif row.busbw_gbs < floor:
            out.append(f"{format_size(size)}: busbw {row.busbw_gbs:.1f} GB/s < {floor:g} GB/s")
    return out


def latency_problems(result: AllReduceResult, thresholds: Thresholds) -> list[str]:
    out = []
    for size, ceiling in sorted(thresholds.latency_max_us.items()):
        row = result.row(size)
        if row is None:
            out.append(f"{format_size(size)}: not measured (add it to probe.sizes)")
        elif row.time_us > ceiling:
            out.append(f"{format_size(size)}: {row.time_us:.1f} us > {ceiling:g} us")
    return out


def uplift_table(faster: AllReduceResult, slower: AllReduceResult, sizes: tuple[int, ...],
                 minimum: float) -> tuple[list[str], list[str]]:
    """(lines, problems): per size, uplift = slower time / faster time - 1, which must be >= ``minimum``."""
    lines, problems = [], []
    for size in sizes:
        f, s = faster.row(size), slower.row(size)
        if f is None or s is None:
            problems.append(f"{format_size(size)}: not measured in both arms")
            continue
        up = s.time_us / f.time_us - 1 if f.time_us > 0 else float("inf")
        line = (f"{format_size(size)}: {faster.arm} {f.time_us:.1f} us vs {slower.arm} {s.time_us:.1f} us "
                f"-> uplift {up:+.1%} (min {minimum:.0%})")
        lines.append(line)
        if up < minimum:
            problems.append(line)
    return lines, problems


# -- pytest hooks ------------------------------------------------------------------------------------
_STATE = pytest.StashKey[ProbeState]()


def _get_session(config: pytest.Config) -> Any:
    from ..evidence.hooks import session_or_usage_error

    return session_or_usage_error(config)


def _on_demo_snapshot(session: Any) -> bool:
    """The session replays the embedded demo snapshot (demo mode, or that file named explicitly)."""
    if getattr(session, "demo", False):
        return True
    snap = getattr(getattr(session, "snapshot", None), "value", None)
    if snap is None:
        return False
    from ..session import DEMO_SNAPSHOT, demo_path

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
            from ..session import demo_path

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
        elif "p2p_pair" in params and {"p2p_copy", "p2p_probe_state"} & set(getattr(item, "fixturenames", ())):
            pair = params["p2p_pair"]
        if pair is not None:
            item.add_marker(pytest.mark.xdist_group(name=f"gpu{pair[0]}-gpu{pair[1]}"))


@pytest.fixture(scope="session")
def p2p_probe_state(pytestconfig: pytest.Config) -> ProbeState:
    """Where probe results come from (live, replay) and the results of each probe, run once."""
    return probe_state(pytestconfig)


@pytest.fixture
def p2p_allreduce(p2p_probe_state: ProbeState, p2p_probe_case: ProbeCase, record_property: Any) -> AllReduceResult:
    """The all-reduce probe result for this (pair, arm): run once per session, or replayed."""
    record_property("p2p_probe_source", p2p_probe_state.label)
    return p2p_probe_state.allreduce(p2p_probe_case.pair, p2p_probe_case.arm)


@pytest.fixture
def p2p_copy(p2p_probe_state: ProbeState, p2p_pair: tuple[int, int], record_property: Any) -> P2PCopyResult:
    """The P2P copy probe result for this pair."""
    record_property("p2p_probe_source", p2p_probe_state.label)
    return p2p_probe_state.copy((p2p_pair[0], p2p_pair[1]))


@pytest.fixture
def p2p_benchmark(request: pytest.FixtureRequest) -> Any:
    """pytest-benchmark's ``benchmark`` fixture, or a clean skip where it cannot time anything."""
    config = request.config
    if not config.pluginmanager.hasplugin("benchmark"):
        pytest.skip("pytest-benchmark is not installed")
    if hasattr(config, "workerinput") or config.pluginmanager.hasplugin("dsession"):
        pytest.skip("pytest-benchmark turns itself off under xdist (-n); run benchmarks without -n")
    bench = request.getfixturevalue("benchmark")
    if getattr(bench, "disabled", False):
        pytest.skip("pytest-benchmark is disabled (--benchmark-disable or xdist)")
    return bench


def cuda_indices(evidence: Any, pair: tuple[int, int]) -> tuple[int, int]:
    """torch device indices of a pair's GPUs in *this* process, matched by UUID (CUDA's order may not be NVML's)."""
    import torch

    want = {evidence.gpu(i).uuid.lower().removeprefix("gpu-"): i for i in pair}
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
    from ..session import SESSION_KEY

    if config.stash.get(SESSION_KEY, None) is None:  # not a p2p run: touch nothing
        return None
    return [f"p2p probes: {probe_state(config).label}"]


def replay_index(replay: Path) -> Mapping[str, list[str]]:
    """``{pair: [arms]}`` recorded under a replay directory (for messages and the report)."""
    root = probes_dir(replay)
    out: dict[str, list[str]] = {}
    for pair_dir in sorted(p for p in root.glob("gpu*-gpu*") if p.is_dir()):
        out[pair_dir.name] = sorted(a.parent.name for a in pair_dir.glob("*/allreduce.json"))
    return out
