"""What a rig owner sees (issue 26) and the report's two issue-25 bugs: each test fails on the old main."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_trend_reads_the_store_the_verdict_resolved(pytester: pytest.Pytester) -> None:
    """A fleet on PostgreSQL gets its trend from that URL, not from a file path made of it (issue 25)."""
    url = "postgresql://u:pw@db.example/p2p"
    pytester.makepyfile(f"""
        def test_target(pytestconfig):
            from pytest_p2p.plugin.report import store_target
            assert store_target(pytestconfig) == {url!r}
    """)
    result = pytester.runpytest_subprocess("--p2p-db", url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_trend_follows_the_rigs_baseline_db(pytester: pytest.Pytester) -> None:
    """The rig's ``baseline.db`` is the store (the old code fell back to .p2p/history.db)."""
    pytester.makepyfile("""
        def test_target(pytestconfig):
            from pytest_p2p.plugin.report import store_target
            from pytest_p2p.verdict.config import BaselineConfig
            from pytest_p2p.plugin.verdict import BASELINE_CONFIG_KEY
            pytestconfig.stash[BASELINE_CONFIG_KEY] = BaselineConfig(db="fleet/rig.db")
            assert str(store_target(pytestconfig)).endswith("fleet/rig.db")
    """)
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.active", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


FIXTURE_RUN = Path(__file__).resolve().parent.parent / "fixtures" / "results" / "20261122-122102_h200x2-vllm_gpu0-gpu1"


def test_the_summary_finds_the_probes_of_a_suffixed_run_id(tmp_path: Path) -> None:
    """The pair comes from run.json: a run id ending ``-2`` once made the report look in probes/gpu0-gpu1-2.

    (The summary is rendered once at the session's end, after the probes; it must find them.)
    """
    import json
    import shutil

    from pytest_p2p.plugin.report import _load_summary

    run_dir = tmp_path / "20261122-122102_h200x2-vllm_gpu0-gpu1-2"
    shutil.copytree(FIXTURE_RUN, run_dir)
    (run_dir / "summary.json").unlink()  # as mid-session, before the one render
    probes = tmp_path / "probes" / "gpu0-gpu1"
    probes.mkdir(parents=True)
    (probes / "allreduce.json").write_text("{}")
    text = json.dumps(_load_summary(run_dir)["proof"])
    assert "gpu0-gpu1-2" not in text
    assert f"{probes} " in text or "no probe results under" not in text  # looked in the pair's own folder


def test_m_p2p_alone_runs_the_builtin_checks(pytester: pytest.Pytester) -> None:
    """``pytest -m p2p`` in a directory without p2p tests of the user's collects the package's checks."""
    pytester.makepyfile(test_mine="def test_unrelated():\n    pass\n")
    result = pytester.runpytest_subprocess("-m", "p2p", "--p2p-campaign", "off", "-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(["*none of your tests is marked p2p*built-in checks run*",
                                 "checks/test_evidence.py::test_peer_access*"])
    assert "test_unrelated" not in result.stdout.str()
    assert result.ret == 0


def test_a_project_with_p2p_tests_keeps_only_its_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="import pytest\n\n@pytest.mark.p2p\ndef test_mine():\n    pass\n")
    result = pytester.runpytest_subprocess("-m", "p2p", "--p2p-campaign", "off", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "built-in checks" not in result.stdout.str()


def test_the_help_group_names_pyargs(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*GPU interconnect checks*--pyargs pytest_p2p*"])


def test_db_in_proc_is_refused_before_any_gpu_work(pytester: pytest.Pytester) -> None:
    """The old main ran the whole campaign, then blamed the disk (dmesg) and printed a green last line."""
    pytester.makepyfile("def test_never():\n    raise AssertionError('ran')\n")
    result = pytester.runpytest_subprocess("-m", "p2p", "--p2p-db", "/proc/nope/history.db", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--p2p-db=/proc/nope/history.db: /proc does not allow creating nope*proc file "
                                 "system*before any GPU work*"])
    assert "dmesg" not in result.stderr.str() + result.stdout.str()


def test_results_under_a_file_is_named(tmp_path: Path) -> None:
    from pytest_p2p.options import unwritable

    (tmp_path / "f").write_text("")
    assert unwritable(tmp_path / "f" / "results") == f"{tmp_path / 'f'} is a file, not a directory"
    assert unwritable(tmp_path / "new" / "results") is None
    assert not (tmp_path / "new").exists()  # checked without leaving anything behind


@pytest.mark.parametrize(("err", "uid", "expected"), [
    (13, 1000, "permission denied: {d} belongs to uid"),
    (30, 1000, "{d} is on a read-only file system"),
    (13, 0, "{d} refuses new entries even to root"),
])
def test_unwritable_names_the_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, uid: int,
                                    expected: str) -> None:
    import tempfile

    from pytest_p2p import options

    def refuse(**_kw: object) -> str:
        raise OSError(err, "refused")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(options.os, "getuid", lambda: uid)
    problem = options.unwritable(tmp_path / "results")
    assert problem is not None and problem.startswith(expected.format(d=tmp_path))


def test_an_error_after_the_tests_makes_the_last_line_red(pytester: pytest.Pytester) -> None:
    """The verdict's failed save sets exit status 1 at session end; the last line then said a green ``1 passed``."""
    pytester.makeconftest("""
        import pytest

        def pytest_sessionfinish(session):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # what a failed baseline save does
    """)
    pytester.makepyfile("def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.active", "-p", "no:cacheprovider", "--color=yes")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    last = [line for line in result.stdout.lines if line.strip()][-1]
    assert "1 passed" in last and "1 error" in last and "\x1b[31m" in last  # red
    result.stdout.fnmatch_lines(["*ERROR*pytest-p2p*after the tests: exit status 1*"])


SEED = Path(__file__).resolve().parent.parent / "fixtures" / "seed_results" / \
    "2026-06-16_5060ti-16gb_2cards_gen3-x4_p2p-sweep-c1-2-4-8"


def test_seed_runs_get_a_welch_interval_and_the_proofs_transport_name(tmp_path: Path) -> None:
    """Two separate p2p-bench runs are unpaired: Welch's interval (it had none); P2P reads P2P/CUMEM as its log."""
    from pytest_p2p.report.seed_report import render_seed_report

    summary = render_seed_report(SEED, out=tmp_path, plots=False).summary
    c8 = {u["point"]: u for u in summary["uplift"]}["c8"]
    assert c8["estimate"] == pytest.approx(190.9 / 167.6 - 1, abs=2e-3)  # the seed's figures, as before
    lo, hi = c8["interval"] or (None, None)
    assert lo is not None and hi is not None and 0 < lo < c8["estimate"] < hi and c8["level"] == 0.95
    assert summary["transport"]["p2p_on"]["observed"] == ["P2P/CUMEM"]
    assert "95 % CI" in (tmp_path / "summary.md").read_text()


def test_welch_ratio_interval_matches_a_hand_computation() -> None:
    """Equal spreads and counts: df = 2(n-1); the interval is symmetric in log around the ratio of means."""
    import math

    from pytest_p2p.stats.tdist import t_quantile
    from pytest_p2p.stats.welch import welch_ratio_interval

    lo, hi = welch_ratio_interval((110.0, 5.5, 4), (100.0, 5.0, 4)) or (0.0, 0.0)
    half = t_quantile(0.975, 6) * math.sqrt(2 * 0.05 ** 2 / 4)
    assert lo == pytest.approx(math.exp(math.log(1.1) - half) - 1, rel=1e-9)
    assert hi == pytest.approx(math.exp(math.log(1.1) + half) - 1, rel=1e-9)
    assert welch_ratio_interval((110.0, 5.5, 1), (100.0, 5.0, 4)) is None  # one run: no spread known


def test_one_interval_and_level_everywhere(tmp_path: Path) -> None:
    """The campaign's decision is what summary.md, summary.json and the terminal show: not a 95 % re-take. Its
    level is the campaign's (1 % split over the run's 3 points: 99.3 %), and so is the level of the points the
    report judges again (no decision recorded for them), so the table has one."""
    import json
    import shutil

    from pytest_p2p.report.render import render_report
    from pytest_p2p.report.terminal import verdict_line, verdict_rows

    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    point = meta["points"][0]
    meta["decisions"] = {point: {"quantity": f"uplift of {meta['uplift']['faster_arm']} over "
                                             f"{meta['uplift']['slower_arm']}", "outcome": "inconclusive",
                                 "estimate": 0.099, "lower": 0.002, "upper": 0.205, "level": 1 - 0.02 / 3,
                                 "threshold": 0.05,
                                 "n": 4, "pairs_needed": 6, "reason": "the interval straddles the threshold"}}
    (run / "run.json").write_text(json.dumps(meta))
    summary = render_report(run, plots=False).summary
    entry = next(u for u in summary["uplift"] if u["point"] == point)
    assert entry["interval"] == [0.002, 0.205] and entry["outcome"] == "inconclusive"
    assert len(meta["points"]) == 3 and {u["level"] for u in summary["uplift"]} == {1 - 0.02 / 3}
    headers, rows = verdict_rows(summary)
    assert "99.3 % CI" in headers
    assert [point, "+9.9 %", "+0.2 % .. +20.5 %", "INCONCLUSIVE (~6 pairs)"] == [rows[0][i] for i in (0, 2, 3, 5)]
    md = (run / "summary.md").read_text()
    assert "+0.2 % .. +20.5 %" in md and "95% CI" not in md and "95 % CI" not in md
    assert "verdict: INCONCLUSIVE" in verdict_line(summary)


def test_a_yaml_tab_says_use_spaces() -> None:
    from pytest_p2p.errors import ConfigError
    from pytest_p2p.validate import yaml_document

    with pytest.raises(ConfigError) as err:
        yaml_document("rig:\n  name: x\n\tpairs: 1\n", "rig.yaml")
    assert str(err.value).startswith("rig.yaml: not valid YAML: line 3, column 1: ")
    assert "indent with spaces" in str(err.value)


def test_allure_environment_of_a_demo_run_says_simulated(tmp_path: Path) -> None:
    import json
    import types

    from pytest_p2p.plugin.report import RUN_DIRS_KEY, environment

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"simulated": True, "versions": {"nccl": "2.28.9"}}))
    config = types.SimpleNamespace(stash=pytest.Stash())
    config.stash[RUN_DIRS_KEY] = [run]
    env = environment(config)  # type: ignore[arg-type]
    assert env["SIMULATED"].startswith("yes: demo rig") and env["NCCL"] == "2.28.9"


def test_allure_pytest_is_in_the_base_install() -> None:
    import re

    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    base = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert base is not None and '"allure-pytest>=' in base.group(1)


def test_not_requested_skips_are_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        pytestmark = pytest.mark.p2p

        def test_a():
            pytest.skip("baseline comparison not requested (use --p2p-compare[=NAME])")

        def test_b():
            pytest.skip("baseline comparison not requested (use --p2p-compare[=NAME])")

        def test_c():
            pytest.skip("no GPU pair")
    """)
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.active", "-p", "no:cacheprovider", "-rs")
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] pytest-p2p: baseline comparison not requested*",
                                 "SKIPPED [[]1[]] *:*: no GPU pair"])


def test_doctor_pass_rows_show_what_they_saw() -> None:
    import contextlib
    import io

    from pytest_p2p.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["doctor", "--snapshot", "demo", "--rig", str(Path(__file__).resolve().parent.parent / "pytest_p2p" /
                                                           "demo" / "rig.yaml")])
    rows = [line for line in out.getvalue().splitlines() if line.startswith("  pass")]
    assert rows and all(len(line.split()) > 3 for line in rows), rows
    assert any("Gen5 x16 under load" in line for line in rows) and any("NV18" in line for line in rows)


def test_baseline_diff_is_a_side_by_side_table_with_a_histogram(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Like pytest-benchmark's compare: one row per metric with A, B, change, interval, verdict; a PNG of the reps."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synthetic_runs import baseline_runs, write_run

    from pytest_p2p.verdict.baseline_cli import main

    db = str(tmp_path / "h.db")
    (a,) = baseline_runs(tmp_path, count=1)
    slow = write_run(tmp_path, "slow", scale={"output_throughput": 0.7}, seed=9)
    assert main(["--db", db, "save", str(a)]) == 0 and main(["--db", db, "save", str(slow)]) == 0
    capsys.readouterr()
    png = tmp_path / "diff.png"
    assert main(["--db", db, "diff", a.name, "slow", "--histogram", str(png)]) == 1
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("Metric"))
    assert [c.strip() for c in out[header].split("|")] == ["Metric", "Point", "Arm", "A", "B", "Change", "Interval",
                                                           "Verdict"]
    row = next(line for line in out if line.startswith("output_throughput") and "| c8 " in line and "p2p_on" in line)
    cells = [c.strip() for c in row.split("|")]
    assert float(cells[4]) == pytest.approx(float(cells[3]) * 0.7, rel=0.05)
    assert cells[5].startswith("-") and "% CI" in cells[6] and cells[7] == "REGRESSION"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_serving_table_has_vllm_bench_serves_keys(tmp_path: Path) -> None:
    """requests, failed, duration and mean / median / p99 of TTFT, TPOT and ITL: in summary.md and the terminal."""
    import shutil

    from pytest_p2p.plugin.report import summary_lines
    from pytest_p2p.report.render import render_report
    from pytest_p2p.report.terminal import serving_rows

    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    summary = render_report(run, plots=False).summary
    headers, rows = serving_rows(summary)
    assert headers[2:5] == ["Successful requests", "Failed requests", "Benchmark duration (s)"]
    assert [h for h in headers if "TTFT" in h] == ["Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)"]
    assert any(h == "P99 ITL (ms)" for h in headers) and len(rows) == len(summary["scenarios"])
    assert "| Concurrency | Arm | Successful requests | Failed requests |" in (run / "summary.md").read_text()
    lines = summary_lines(run, verbose=True)  # -v: the default summary leaves it to summary.md (test_summary_size)
    assert any(line.startswith("Conc | Arm") and "TTFT ms mean/med/p99" in line for line in lines)
    tables = [line for line in lines if " | " in line]
    assert max(len(line) for line in tables) <= 100, max(tables, key=len)


def test_nccl_tests_table_per_size(tmp_path: Path) -> None:
    """The all-reduce per size with nccl-tests' columns in summary.md, and two arms side by side in the terminal."""
    import shutil

    from pytest_p2p.plugin.report import summary_lines
    from pytest_p2p.report.render import render_report

    run = shutil.copytree(FIXTURE_RUN, tmp_path / "results" / FIXTURE_RUN.name)
    demo = Path(__file__).resolve().parent.parent / "pytest_p2p" / "demo" / "probes" / "gpu0-gpu1"
    shutil.copytree(demo, tmp_path / "results" / "probes" / "gpu0-gpu1")
    render_report(run, plots=False)
    md = (run / "summary.md").read_text()
    assert "| size (B) | count | type | redop | time (us) | algbw (GB/s) | busbw (GB/s) |" in md
    assert "| 268435456 | 67108864 | float | sum |" in md
    lines = summary_lines(run, verbose=True)  # -v: the default summary leaves it to summary.md (test_summary_size)
    header = next(line for line in lines if line.startswith("size (B)"))
    assert "p2p_on us" in header and "p2p_off busbw" in header
    assert any(line.startswith("268435456 | 67108864 | float") for line in lines)


def test_allure_titles_are_unique_and_a_passed_uplift_has_its_number(pytester: pytest.Pytester) -> None:
    """``pcie link`` per GPU, the decode sizes and the two ``transport`` checks got one title each (issue 26)."""
    import json

    pytest.importorskip("allure_pytest")
    pytester.makepyfile(test_checks="""
        import pytest

        pytestmark = pytest.mark.p2p

        @pytest.mark.parametrize("p2p_gpu", [0, 1])
        def test_pcie_link(p2p_gpu):
            pass

        @pytest.mark.parametrize("pair", [(0, 1)])
        @pytest.mark.parametrize("size", [4096, 65536])
        def test_benchmark_decode_allreduce(pair, size):
            pass
    """)
    out_dir = pytester.path / "allure-results"
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.report", f"--alluredir={out_dir}",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    names = sorted(json.loads(p.read_text())["name"] for p in out_dir.glob("*-result.json"))
    assert len(set(names)) == 4, names
    assert "pcie link — 0" in names and "benchmark decode allreduce — gpu0-gpu1 · 65536" in names


def test_judged_numbers_for_allure(tmp_path: Path) -> None:
    import shutil

    from pytest_p2p.plugin.report import judged_numbers
    from pytest_p2p.report.render import render_report

    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    summary = render_report(run, plots=False).summary
    point = summary["uplift"][0]["point"]
    text = judged_numbers(run, point)
    assert text.startswith(f"Point: {point}, Uplift of: p2p_on / p2p_off, Estimate: ")
    assert "% CI: " in text and "Verdict: " in text


def test_seed_plots_only_what_the_layout_holds(tmp_path: Path) -> None:
    """No empty axes: a missing p99 TTFT, a telemetry snapshot with one sample time are said, not drawn."""
    import shutil

    pytest.importorskip("matplotlib")
    from pytest_p2p.report.seed_report import render_seed_report

    seed = shutil.copytree(SEED, tmp_path / "seed")
    for csv_file in seed.glob("scenarios/*/telemetry*.csv"):
        lines = csv_file.read_text().splitlines()
        stamp = lines[1].split(",", 1)[0]
        csv_file.write_text("\n".join([lines[0]] + [stamp + "," + line.split(",", 1)[1] for line in lines[1:]]) + "\n")
    rendered = render_seed_report(seed, out=tmp_path / "out")
    names = {p.name for p in rendered.paths}
    assert "telemetry_p2p_on.png" not in names and "pcie_link.png" not in names
    notes = " ".join(rendered.notes)
    assert "telemetry timeline for p2p_on: not recorded in this layout" in notes
    assert "PCIe link over time is not recorded in this layout" in notes
    assert "p99 TTFT is not recorded in this layout" in notes
    assert "latency_ttft.png" in names and "uplift.png" in names


def test_a_folder_of_seed_runs_is_read_as_a_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was refused: "neither a run directory ... nor a p2p-bench results directory"."""
    import shutil

    from pytest_p2p.report.report_cli import main

    shutil.copytree(SEED, tmp_path / "runs" / "night1")
    shutil.copytree(SEED, tmp_path / "runs" / "night2")
    assert main([str(tmp_path / "runs"), "--no-plots", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.count("P2P output-throughput uplift: c1 +9.0 %") == 2
    assert all((tmp_path / "out" / night / "summary.md").is_file() for night in ("night1", "night2"))
    assert "95 % CI" in out  # Welch's interval: the arms are separate runs


def test_a_long_quoted_nccl_line_keeps_its_via() -> None:
    """Clipped to 100 columns, the host/pid prefix goes, never the transport at the end."""
    from pytest_p2p.report.proof import Proof, Transport, proof_text

    line = ("p2p_on-c1/server_run1.log:15: a-very-long-hostname-of-a-rig.example:28794:28794 [0] NCCL INFO "
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM")
    proof = Proof(transports=[Transport("p2p_on", "P2P/CUMEM", "P2P/CUMEM", [line])])
    shown = proof_text(proof, compact=True)[1]
    assert shown.endswith("via P2P/CUMEM") and len(shown) <= 100
    assert proof_text(proof)[1] == f"    {line}"  # summary.md and report DIR keep it whole
