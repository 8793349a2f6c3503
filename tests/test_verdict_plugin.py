from __future__ import annotations

import os

import pytest
from synthetic_runs import baseline_runs, write_run

from pytest_p2p.verdict.store import Store

FAKE = '''
import os, pathlib, types, pytest
from pytest_p2p.campaign.outcome import CampaignOutcome
# the campaign glue's publishing (hookspec, and xdist's hand-over to the controller), not its campaigns
from pytest_p2p.plugin.campaign import _publish, pytest_addhooks, pytest_testnodedown

@pytest.fixture(scope="session")
def p2p_campaign(pytestconfig):
    run_dir = pathlib.Path(os.environ["FAKE_RUN_DIR"])
    _publish(pytestconfig, CampaignOutcome(run_dir, "gpu1-gpu2", "complete", simulated=False))
    return types.SimpleNamespace(run_dir=run_dir, pair_key="gpu1-gpu2")

@pytest.fixture(params=["p2p_on-c8", "p2p_off-c8"])
def p2p_scenario(request):
    return request.param

@pytest.fixture(params=["c8"])
def p2p_point(request):
    return request.param
'''


@pytest.fixture
def run_p(pytester, monkeypatch):
    pytester.makepyfile(fakecampaign=FAKE)
    pytester.syspathinsert()
    monkeypatch.delenv("PYTEST_P2P_DB", raising=False)

    def run(run_dir, *args):
        monkeypatch.setenv("FAKE_RUN_DIR", str(run_dir))
        # the real campaign stage is blocked: its parametrisation is replaced by the fake's
        return pytester.runpytest("-p", "no:pytest_p2p.plugin.campaign", "-p", "no:pytest_p2p.plugin.report",
                                  "-p", "fakecampaign", "--pyargs",
                                  "pytest_p2p.checks.test_baseline", "-p", "no:cacheprovider", "-rs", *args)
    return run


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "h.db"
    with Store(path) as st:
        for d in baseline_runs(tmp_path / "base"):
            st.accept(st.save_run_dir(d), "accepted")
    return path


def test_without_compare_everything_skips(run_p, tmp_path):
    res = run_p(write_run(tmp_path, "now"))
    res.assert_outcomes(skipped=4)
    res.stdout.fnmatch_lines(["*baseline comparison not requested*"])


def test_unchanged_rerun_passes_and_is_kept_as_history(run_p, tmp_path, db):
    res = run_p(write_run(tmp_path, "now", seed=77, started_at="2026-06-25T10:00:00Z"), "--p2p-compare",
                f"--p2p-db={db}")
    res.assert_outcomes(passed=4)
    res.stdout.fnmatch_lines(["*p2p baseline verdicts*",
                              "p2p_on-c8: unchanged vs baseline 'accepted' (10 run(s); primary output_throughput): "
                              "3 unchanged, 1 unjudged [power: 3 rep(s); goal 95%: a pass is weak evidence]",
                              "*1 run(s) saved to*kept as history: now*"])
    with Store(db) as st:
        assert st.run("now").baselines == ()


def test_cable_downtrain_fails_with_attribution(run_p, tmp_path, db):
    cur = write_run(tmp_path, "now", seed=77, started_at="2026-06-25T10:00:00Z", gen=(4, 3),
                    scale={"output_throughput": 0.88})
    res = run_p(cur, "--p2p-compare=accepted", f"--p2p-db={db}")
    res.assert_outcomes(failed=3, passed=1)  # both arms slower: the uplift history is unchanged
    res.stdout.fnmatch_lines([
        "*PerformanceRegression: output_throughput c8 p2p_on * -> * tok/s (-1*"
        "GPU 2 (0000:0A:00.0) link under load Gen4 x4 -> Gen3 x4 since baseline 2026-06-19*driver 595.71.05 unchanged*",
        "*PerformanceRegression: link state dropped since baseline 2026-06-19*loaded gen 4 -> 3*",
    ])
    res = run_p(cur, "--p2p-compare", f"--p2p-db={db}", "--p2p-fail-on=never")
    res.assert_outcomes(passed=4)


def test_slower_server_fails_without_fingerprint_change(run_p, tmp_path, db):
    res = run_p(write_run(tmp_path, "now", seed=77, scale={"output_throughput": 0.85}), "--p2p-compare",
                f"--p2p-db={db}")
    res.assert_outcomes(failed=2, passed=2)
    res.stdout.fnmatch_lines(["*no fingerprint change since the baseline*"])


def test_save_baseline_accepts_and_env_db(run_p, tmp_path, monkeypatch):
    path = tmp_path / "env.db"
    monkeypatch.setenv("PYTEST_P2P_DB", str(path))
    res = run_p(write_run(tmp_path, "first"), "--p2p-save-baseline=pre-driver-upgrade")
    res.stdout.fnmatch_lines(["*saved to*accepted as baseline 'pre-driver-upgrade': first*"])
    with Store(path) as st:
        assert st.run("first").baselines == ("pre-driver-upgrade",)
    res = run_p(write_run(tmp_path, "second", seed=3), "--p2p-compare=pre-driver-upgrade", "-rs")
    # one baseline run: the scenarios are inconclusive ("baseline too short"), never a green pass
    res.assert_outcomes(passed=1, skipped=3)
    res.stdout.fnmatch_lines(["*INCONCLUSIVE: *baseline too short: 1 run(s)*"])
    strict = run_p(write_run(tmp_path, "third", seed=4), "--p2p-compare=pre-driver-upgrade", "--p2p-strict")
    strict.assert_outcomes(passed=1, failed=3)
    strict.stdout.fnmatch_lines(["*INCONCLUSIVE (strict mode)*baseline too short*"])


def test_corrupt_db_fails_clearly_and_is_not_overwritten(run_p, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite" * 50)
    res = run_p(write_run(tmp_path, "now"), "--p2p-compare", f"--p2p-db={bad}")
    res.assert_outcomes(failed=4)
    res.stdout.fnmatch_lines(["*campaign runs NOT saved*"])
    res.stdout.fnmatch_lines(["*is not an SQLite file*left untouched*"])
    assert "During handling" not in res.stdout.str()
    assert bad.read_bytes() == b"not sqlite" * 50
    assert res.ret != 0


def test_bad_options_are_usage_errors(run_p, tmp_path):
    res = run_p(write_run(tmp_path, "now"), "--p2p-fail-on=sometimes")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--p2p-fail-on*expected one of regression, never*"])


def test_flagged_run_is_kept_as_history_not_accepted(run_p, tmp_path):
    path = tmp_path / "s.db"
    hot = write_run(tmp_path, "hot", throttled={"p2p_on-c8": [2]})
    res = run_p(hot, "--p2p-save-baseline", f"--p2p-db={path}")
    res.stdout.fnmatch_lines(["*1 run(s) saved to*kept as history: hot*",
                              "*run hot kept as history but NOT accepted as baseline 'accepted': "
                              "p2p_on-c8: throttled reps ?2?*baseline accept hot --name accepted*"])
    with Store(path) as st:
        assert st.run("hot").baselines == ()


def test_xdist_controller_saves_and_reports(tmp_path, monkeypatch, pytester):
    """Under xdist the workers hand their run dirs over; the controller saves and reports a failed save."""
    # the fake campaign is a -p plugin that the workers import through PYTHONPATH: a conftest in the start
    # directory is not found by the workers of every pytest version when the tests come from --pyargs
    pytester.makepyfile(fakecampaign=FAKE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("PYTEST_P2P_DB", raising=False)

    def run(run_dir, *args):
        monkeypatch.setenv("FAKE_RUN_DIR", str(run_dir))
        return pytester.runpytest_subprocess("-p", "fakecampaign",
                                             "-p", "no:pytest_p2p.plugin.campaign", "-p", "no:pytest_p2p.plugin.report",
                                             "--pyargs", "pytest_p2p.checks.test_baseline", "-p", "no:cacheprovider",
                                             "-n", "2", *args, timeout=300)

    path = tmp_path / "x.db"
    res = run(write_run(tmp_path, "xrun"), "--p2p-save-baseline", f"--p2p-db={path}")
    res.stdout.fnmatch_lines(["*1 run(s) saved to*accepted as baseline 'accepted': xrun*"])
    with Store(path) as st:
        assert st.run("xrun").baselines == ("accepted",)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite" * 50)
    res = run(write_run(tmp_path, "yrun"), "--p2p-save-baseline", f"--p2p-db={bad}")
    res.stdout.fnmatch_lines(["*campaign runs NOT saved to the baseline store*"])
    assert res.ret != 0


PUBLISH_ONLY = '''
import os, pathlib, pytest
from pytest_p2p.campaign.outcome import CampaignOutcome
from pytest_p2p.plugin.campaign import _publish, pytest_addhooks

def pytest_sessionstart(session):
    for spec in os.environ["FAKE_OUTCOMES"].split(";"):
        path, status = spec.split("=")
        _publish(session.config, CampaignOutcome(pathlib.Path(path), "gpu1-gpu2", status, simulated=False))
'''


def test_the_verdict_saves_what_the_campaign_hook_publishes(tmp_path, monkeypatch, pytester):
    """The verdict subscribes to ``pytest_p2p_campaign_finished`` (issue 25): no test reads a campaign fixture
    here, yet the published runs are saved; an interrupted one is not, a failed one only as history."""
    pytester.makepyfile(publishonly=PUBLISH_ONLY, test_nothing="def test_x():\n    pass\n")
    pytester.syspathinsert()
    monkeypatch.delenv("PYTEST_P2P_DB", raising=False)
    runs = {status: write_run(tmp_path, f"r-{status}", seed=i) for i, status in enumerate(
        ("complete", "failed", "interrupted"))}
    monkeypatch.setenv("FAKE_OUTCOMES", ";".join(f"{p}={s}" for s, p in runs.items()))
    path = tmp_path / "h.db"
    res = pytester.runpytest("-p", "no:pytest_p2p.plugin.campaign", "-p", "no:pytest_p2p.plugin.report",
                             "-p", "publishonly", "-p", "no:cacheprovider", "--p2p-save-baseline", f"--p2p-db={path}",
                             "test_nothing.py")
    res.stdout.fnmatch_lines(["*2 run(s) saved to*accepted as baseline 'accepted' (1 not: see below)*",
                              "*run r-failed kept as history but NOT accepted*the campaign failed*"])
    with Store(path) as st:
        assert st.run("r-complete").baselines == ("accepted",) and st.run("r-failed").baselines == ()
        assert [r.run_id for r in st.runs()] == ["r-complete", "r-failed"]
