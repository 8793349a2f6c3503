"""The built-in probe checks, run through pytester against a replayed probe directory.

``tests/data/probes`` holds real NCCL logs with hand-modelled numbers (see its README);
the transport proof is re-parsed from those logs by the real parser in every run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pytest_p2p.plugin.probes import judge_busbw, judge_latency, judge_uplift, replay_index
from pytest_p2p.probes.allreduce import AllReduceResult, Row
from pytest_p2p.probes.config import Thresholds
from pytest_p2p.stats.decide import Outcome

pytest.importorskip("pytest_p2p.probes.transport")
pytest.importorskip("pytest_p2p.plugin.session")

ROOT = Path(__file__).resolve().parent.parent
REPLAY = Path(__file__).resolve().parent / "data" / "probes"
SNAPSHOT = ROOT / "fixtures" / "snapshots" / "h200x2-nvlink.snapshot.json"
# The shipped H200 rig, narrowed to the two arms this replay recorded and given the probe section under test.
BASE_RIG = yaml.safe_load((ROOT / "fixtures" / "rigs" / "h200x2-nvlink.yaml").read_text())
PROBE = """
probe:
  thresholds:
    busbw_min_gbs: {"128MiB": %(busbw)s}
    latency_max_us: {"8KiB": 20}
    per_arm:
      p2p_off: {busbw_min_gbs: {"128MiB": 20}}
"""


def run(pytester: pytest.Pytester, *args: str, busbw: int = 200, replay: Path | None = REPLAY):
    data = {**BASE_RIG, "arms": {"p2p_on": "p2p_on", "p2p_off": "p2p_off"},
            "probe": yaml.safe_load(PROBE % {"busbw": busbw})["probe"]}
    data.pop("campaign", None)
    rig = pytester.makefile(".yaml", rig=yaml.safe_dump(data))
    argv = ["-p", "pytest_p2p.plugin.probes", "--pyargs", "pytest_p2p.checks.test_probes", "-p", "no:cacheprovider",
            "-rs", "--p2p-rig", str(rig), "--p2p-snapshot", str(SNAPSHOT), "-p", "no:randomly", *args]
    if replay is not None:
        argv += ["--p2p-probe-replay", str(replay)]
    return pytester.runpytest(*argv)


def test_replay_passes_and_says_so(pytester):
    result = run(pytester, "-v")
    result.assert_outcomes(passed=10, skipped=5)  # 5 in-process benchmarks need a live GPU
    result.stdout.fnmatch_lines(["*p2p probes: replay of *data/probes*"])
    result.stdout.fnmatch_lines(["*test_transport?gpu0-gpu1-p2p_on? PASSED*",
                                 "*test_transport?gpu0-gpu1-p2p_off? PASSED*",
                                 "*test_uplift?gpu0-gpu1? PASSED*",
                                 "*test_p2p_copy?gpu0-gpu1? PASSED*"], consecutive=False)
    result.stdout.fnmatch_lines(["*needs a real GPU*"])


def test_busbw_threshold_failure_names_size_and_value(pytester):
    result = run(pytester, "-k", "busbw", busbw=300)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*arm p2p_on: busbw against probe.thresholds.busbw_min_gbs*",
                                 "*128MiB: busbw 2*.* GB/s < min 300 GB/s (point comparison*"])


def test_wrong_transport_prints_the_proof_lines(pytester, tmp_path):
    bad = tmp_path / "replay"
    shutil.copytree(REPLAY, bad)
    arm_dir = bad / "probes" / "gpu0-gpu1"
    shutil.copy(arm_dir / "p2p_on" / "nccl.log", arm_dir / "p2p_off" / "nccl.log")  # "off" arm ran with P2P
    result = run(pytester, "-k", "transport", replay=bad)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*arm p2p_off expects SHM*P2P/CUMEM*", "*proof lines*", "*via P2P/CUMEM*"])


def test_without_gpu_or_replay_the_checks_skip_with_the_reason(pytester):
    result = run(pytester, "-k", "not benchmark", replay=None)
    result.assert_outcomes(skipped=10)
    result.stdout.fnmatch_lines(["*needs a real GPU*--p2p-probe-replay DIR*"])


def test_replay_from_env_variable_and_missing_arm_skips(pytester, monkeypatch, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(REPLAY / "probes", partial)  # the probes/ dir itself is accepted too
    shutil.rmtree(partial / "gpu0-gpu1" / "p2p_off")
    monkeypatch.setenv("PYTEST_P2P_PROBE_REPLAY", str(partial))
    result = run(pytester, "-k", "not benchmark", replay=None)
    result.assert_outcomes(passed=5, skipped=5)
    result.stdout.fnmatch_lines(["*no all-reduce recording for gpu0-gpu1 arm p2p_off*"])


def test_missing_replay_directory_is_a_usage_error(pytester, tmp_path):
    result = run(pytester, replay=tmp_path / "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--p2p-probe-replay=*nope: no such directory*"])


def _res(arm: str, times: dict[int, float]) -> AllReduceResult:
    return AllReduceResult((0, 1), arm, [Row.from_time(b, t, 2) for b, t in times.items()], True, [], None)


def test_recordings_without_trials_are_judged_by_the_point_rule_and_say_so():
    on = _res("p2p_on", {8192: 10.0, 1 << 27: 470.0})
    off = _res("p2p_off", {8192: 10.4})
    th = Thresholds({1 << 27: 200.0, 1 << 20: 1.0}, {8192: 9.5})
    busbw = judge_busbw(on, th, 0.01)
    assert [j.line for j in busbw if j.outcome is Outcome.FAIL] == ["1MiB: not measured (add it to probe.sizes)"]
    assert busbw[1].outcome is Outcome.PASS and "point comparison of one recorded value" in busbw[1].line
    (lat,) = judge_latency(on, th, 0.01)
    assert lat.outcome is Outcome.FAIL and lat.line.startswith("8KiB: time 10 us > max 9.5 us (point comparison")
    (up,) = judge_uplift(on, off, (8192,), 0.05, 0.01)
    assert up.outcome is Outcome.FAIL and "uplift +4.0 % < min 5 %" in up.line and "no trials" in up.line
    assert judge_uplift(on, off, (8192,), 0.03, 0.01)[0].outcome is Outcome.PASS
    assert replay_index(REPLAY) == {"gpu0-gpu1": ["p2p_off", "p2p_on"]}


def test_demo_session_replays_the_embedded_probe_recording(pytester, monkeypatch):
    import pytest_p2p.plugin.session as session_mod

    real = session_mod.demo_path
    monkeypatch.setattr(session_mod, "demo_path", lambda name: REPLAY if name == "probes" else real(name))
    monkeypatch.delenv("PYTEST_P2P_PROBE_REPLAY", raising=False)
    argv = ["-p", "pytest_p2p.plugin.probes", "--pyargs", "pytest_p2p.checks.test_probes", "-p", "no:cacheprovider",
            "--p2p-snapshot", str(real(session_mod.DEMO_SNAPSHOT)), "-k", "transport or correct"]
    result = pytester.runpytest(*argv)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*p2p probes: replay of *data/probes (the embedded demo recording)*"])


def test_xdist_group_of_probe_checks_is_the_pair_group_of_the_campaign_stage():
    """test_transport[gpu0-gpu1-p2p_on] and test_uplift[gpu0-gpu1] (grouped by the campaign hook) share a group."""
    from types import SimpleNamespace

    from pytest_p2p.plugin import campaign as campaign_hooks
    from pytest_p2p.plugin import probes as probe_hooks
    from pytest_p2p.probes.arms import PRESETS

    class Item:
        def __init__(self, params: dict, fixturenames: tuple[str, ...]) -> None:
            self.callspec = SimpleNamespace(params=params)
            self.fixturenames = fixturenames
            self.marks: list = []

        def add_marker(self, mark) -> None:
            self.marks.append(mark)

    config = SimpleNamespace(pluginmanager=SimpleNamespace(hasplugin=lambda name: name == "xdist"))
    case = probe_hooks.ProbeCase((0, 1), PRESETS["p2p_on"])
    per_arm = Item({"p2p_probe_case": case}, ("p2p_probe_case", "p2p_allreduce"))
    uplift = Item({"p2p_pair": (0, 1)}, ("p2p_probe_state", "p2p_pair"))
    for hook in (campaign_hooks.pytest_collection_modifyitems, probe_hooks.pytest_collection_modifyitems):
        hook(config, [per_arm, uplift])  # the campaign hook is tryfirst
    assert per_arm.marks[0].name == uplift.marks[0].name == "xdist_group"
    assert per_arm.marks[0].kwargs == uplift.marks[0].kwargs == {"name": "gpu0-gpu1"}
