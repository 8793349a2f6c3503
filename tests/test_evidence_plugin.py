"""Plugin behaviour through pytester: options, precedence, header, built-in evidence checks."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

CHECKS = "pytest_p2p.checks.test_evidence"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_markers_are_registered(pytester):
    out = run(pytester, "--markers").stdout.str()
    assert "@pytest.mark.p2p: GPU-interconnect check" in out
    assert "@pytest.mark.gpu: needs a real GPU" in out


def test_help_imports_nothing_heavy():
    """``pytest --help`` with the plugin imports nothing heavy that pytest without it does not.

    Measured against the same interpreter with ``-p no:p2p``: a GPU machine's other plugins (jaxtyping,
    pytest-cov, ...) may import numpy themselves, and that is not ours to count.
    """

    def heavy(*extra: str) -> set[str]:
        code = ("import sys, pytest, contextlib, io\n"
                "with contextlib.redirect_stdout(io.StringIO()):\n"
                f"    pytest.main(['-p', 'no:allure_pytest', *{extra!r}, '--help'])\n"
                "print('HEAVY', sorted(m for m in ('torch', 'vllm', 'pynvml', 'openai', 'httpx', 'matplotlib', "
                "'allure', 'numpy', 'yaml') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("HEAVY "))
        return set(ast.literal_eval(line[len("HEAVY "):]))

    assert heavy() - heavy("-p", "no:p2p") == set()


def test_seed_rig_passes_against_seed_snapshot(pytester, snapshot_5060ti, rig_5060ti):
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_5060ti}", f"--p2p-rig={rig_5060ti}")
    r.assert_outcomes(passed=7, skipped=2)  # + test_rig_selection
    out = r.stdout.str()
    assert "p2p rig: 5060ti-budget" in out and "p2p pairs: gpu1-gpu2 (PHB)" in out
    assert "replay of" in out


def test_gen4_expectation_fails_with_diagnosis(pytester, snapshot_5060ti, rig_5060ti):
    rig = pytester.path / "gen4.yaml"
    rig.write_text(rig_5060ti.read_text().replace("pcie: {gen: 3, width: 4}", "pcie: {gen: 4, width: 4}"))
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_5060ti}", f"--p2p-rig={rig}")
    r.assert_outcomes(passed=5, failed=2, skipped=2)
    r.stdout.fnmatch_lines(["*test_pcie_link[[]gpu2[]]*",
                            "GPU 2 (0000:0A:00.0, NVIDIA GeForce RTX 5060 Ti) runs PCIe Gen3 x4 under load; the rig "
                            "expects at least Gen4 x4 — a link that trains down points at the cable or a missing "
                            "retimer*"])
    assert "Traceback" not in r.stdout.str()


def test_nv12_and_gen6_fail_on_h200_snapshot(pytester, snapshot_h200):
    rig = pytester.path / "wrong.yaml"
    rig.write_text("rig: wrong\nexpect:\n  topology: NV12\n  pcie: {gen: 6}\n")
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_h200}", f"--p2p-rig={rig}")
    r.assert_outcomes(passed=1, failed=3, skipped=5)
    out = r.stdout.str()
    assert "connect through NV18" in out and "expects NV12" in out and "Gen6" in out


def test_bad_rig_is_a_usage_error_naming_field(pytester, snapshot_5060ti):
    rig = pytester.path / "bad.yaml"
    rig.write_text("rig: bad\nexpect:\n  pcie: {gen: four}\n")
    r = run(pytester, "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_5060ti}", f"--p2p-rig={rig}")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*pytest-p2p: {rig} (from --p2p-rig): expect.pcie.gen: expected an integer 1..6, "
                            f"got 'four'*"])


def test_env_var_is_used_and_named_and_cli_wins(pytester, monkeypatch, snapshot_5060ti, rig_5060ti):
    monkeypatch.setenv("PYTEST_P2P_RIG", str(pytester.path / "missing.yaml"))
    r = run(pytester, "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_5060ti}")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*missing.yaml (from PYTEST_P2P_RIG): no such rig file*"])
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, f"--p2p-snapshot={snapshot_5060ti}", f"--p2p-rig={rig_5060ti}")
    r.assert_outcomes(passed=7, skipped=2)  # + test_rig_selection


def test_ini_value_is_used(pytester, snapshot_5060ti, rig_5060ti):
    pytester.makeini(f"[pytest]\np2p_rig = {rig_5060ti}\np2p_snapshot = {snapshot_5060ti}\n")
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS)
    r.assert_outcomes(passed=7, skipped=2)  # + test_rig_selection


def test_bad_snapshot_is_a_usage_error(pytester):
    snap = pytester.path / "s.json"
    snap.write_text('{"schema": "pytest-p2p/snapshot", "version": 99}')
    r = run(pytester, "--pyargs", CHECKS, f"--p2p-snapshot={snap}")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "newer than this pytest-p2p" in r.stderr.str()


def test_no_gpu_falls_back_to_labelled_demo(pytester):
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS)
    out = r.stdout.str()
    assert "p2p evidence: DEMO — replay of" in out and "SIMULATED" in out
    assert "no live GPU here" in out
    assert r.ret == pytest.ExitCode.OK


def test_p2p_live_demands_a_gpu(pytester):
    r = run(pytester, "--p2p-live", "--pyargs", CHECKS)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    # the suite is hermetic (tests/conftest.py: PYTEST_P2P_NVML=off), so no driver answers even on a GPU machine
    assert "--p2p-live: NVML is switched off (PYTEST_P2P_NVML=off)" in r.stderr.str()


def test_user_tests_get_pairs_and_gpus(pytester, snapshot_5060ti, rig_5060ti):
    pytester.makepyfile("""
        def test_mine(p2p_pair, p2p_gpu, p2p_session):
            assert p2p_pair == (1, 2) and p2p_gpu in (1, 2)
            assert p2p_session.rig.name == "5060ti-budget"
    """)
    r = run(pytester, f"--p2p-snapshot={snapshot_5060ti}", f"--p2p-rig={rig_5060ti}", "-v")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["*test_mine[[]gpu1-gpu2-gpu1[]]*", "*test_mine[[]gpu1-gpu2-gpu2[]]*"])


def test_plain_runs_never_touch_nvml(pytester):
    pytester.makepyfile("def test_x():\n    import sys\n    assert 'pynvml' not in sys.modules\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    assert "p2p rig" not in r.stdout.str()


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_p2p", *args], capture_output=True, text=True, timeout=120,
                          **kw)


def test_doctor_json_into_a_closed_pipe_is_quiet(snapshot_5060ti):
    """The README's ``doctor --json | head``: the reader leaving early is no error and no traceback."""
    cmd = f"'{sys.executable}' -m pytest_p2p doctor --snapshot '{snapshot_5060ti}' --json | head -n 2"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("{") and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.returncode == 0


def test_gen_config_unwritable_out_is_a_usage_error(snapshot_5060ti, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _cli("gen-config", "--snapshot", str(snapshot_5060ti), "--out", str(blocker / "rig.yaml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--out {blocker / 'rig.yaml'}: cannot write" in r.stderr


def test_doctor_with_rig_exit_codes(snapshot_5060ti, rig_5060ti, tmp_path):
    assert _cli("doctor", "--snapshot", str(snapshot_5060ti), "--rig", str(rig_5060ti)).returncode == 0
    gen4 = tmp_path / "gen4.yaml"
    gen4.write_text(rig_5060ti.read_text().replace("pcie: {gen: 3, width: 4}", "pcie: {gen: 4, width: 4}"))
    r = _cli("doctor", "--snapshot", str(snapshot_5060ti), "--rig", str(gen4))
    assert r.returncode == 1 and "FAIL  pcie_link" in r.stdout


def test_relative_ini_paths_are_relative_to_the_rootdir(pytester, monkeypatch, snapshot_5060ti, rig_5060ti):
    """``p2p_rig = rigs/r.yaml`` in the ini must work from any subdirectory, as ``p2p_db`` does."""
    (pytester.path / "rigs").mkdir()
    (pytester.path / "rigs" / "r.yaml").write_text(rig_5060ti.read_text())
    (pytester.path / "rigs" / "s.json").write_text(snapshot_5060ti.read_text())
    pytester.makeini("[pytest]\np2p_rig = rigs/r.yaml\np2p_snapshot = rigs/s.json\n")
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS)
    r.assert_outcomes(passed=7, skipped=2)  # + test_rig_selection


def test_error_counters_on_a_gpu_lost_mid_session_fail_with_a_message(pytester, monkeypatch):
    from test_live_nvml import NVMLError, fake_pynvml

    fake = fake_pynvml()
    reads = {"n": 0}
    pci = fake.nvmlDeviceGetPciInfo

    def pci_then_lost(h):
        reads["n"] += 1
        if reads["n"] > 2:  # the first gather reads both GPUs; the end-of-session one finds them gone
            raise NVMLError("GPU is lost")
        return pci(h)

    fake.nvmlDeviceGetPciInfo = pci_then_lost
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)  # the fake, not the suite's "no driver"
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, "-k", "error_counters")
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["*the error counters could not be read again at the end of the session: NVML failed "
                            "reading GPU 0 (nvmlDeviceGetPciInfo: GPU is lost)*"])
    assert "Traceback" not in r.stdout.str()


def test_gen_config_empty_name_is_a_usage_error_not_an_internal_one(snapshot_5060ti):
    r = _cli("gen-config", "--snapshot", str(snapshot_5060ti), "--name", "")
    assert r.returncode == 2 and "--name: expected a non-empty rig name" in r.stderr and "internal" not in r.stderr


def test_not_p2p_marker_expression_is_not_a_p2p_run(pytester):
    pytester.makepyfile("def test_x():\n    import sys\n    assert 'pynvml' not in sys.modules\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not p2p")
    r.assert_outcomes(passed=1)
    assert "p2p rig" not in r.stdout.str()


def test_resolve_converts_command_line_text_like_env_and_ini(pytester, monkeypatch):
    """One conversion for every origin, and errors and where() show what the user wrote."""
    from pytest_p2p.errors import ConfigError
    from pytest_p2p.options import Option, resolve

    class Cfg:
        def __init__(self, cli):
            self.cli = cli

        def getoption(self, dest, default=None):
            return self.cli

        def getini(self, name):
            return ""

    reps = Option("d", "--p2p-reps", "h", 1, ini="x", env="X_REPS", convert=int)
    r = resolve(Cfg("3"), reps)
    assert r.value == 3 and r.where() == "--p2p-reps=3"
    monkeypatch.setenv("X_REPS", "4")
    assert resolve(Cfg(None), reps).value == 4
    with pytest.raises(ConfigError, match=r"--p2p-reps: bad value 'x'"):
        resolve(Cfg("x"), Option("d", "--p2p-reps", "h", 1, convert=int))


def test_error_counters_read_nvml_once_at_the_end_for_all_gpus(pytester, monkeypatch):
    from test_live_nvml import fake_pynvml

    fake = fake_pynvml()
    reads = {"n": 0}
    pci = fake.nvmlDeviceGetPciInfo

    def counted(h):
        reads["n"] += 1
        return pci(h)

    fake.nvmlDeviceGetPciInfo = counted
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)  # the fake, not the suite's "no driver"
    r = run(pytester, "-m", "p2p", "--pyargs", CHECKS, "-k", "error_counters")
    r.assert_outcomes(passed=2)
    assert reads["n"] == 4  # 2 GPUs at the start, 2 at the end: one end-of-session reading, not one per GPU


def test_an_unwritable_out_is_named_before_any_evidence_is_gathered(tmp_path, capsys):
    """``snapshot`` and ``gen-config`` check ``--out`` first: on a GPU machine the evidence they gather puts the
    links under load, and a missing folder named afterwards lost that measurement. Here (NVML hidden by the
    suite) gathering would end in "no driver", exit 3; the --out mistake comes first, exit 2."""
    from pytest_p2p import cli

    missing = tmp_path / "no-such-folder" / "machine.json"
    assert cli.main(["snapshot", "--out", str(missing)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--out {missing}: cannot write: {missing.parent} does not exist" in err and "NVML" not in err
    assert cli.main(["gen-config", "--out", str(tmp_path)]) == cli.EXIT_USAGE
    assert f"--out {tmp_path}: is a folder; name a file in it" in capsys.readouterr().err
    assert cli.main(["snapshot", "--out", str(tmp_path / "ok.json")]) == cli.EXIT_NO_GPU  # a good --out: gathering
