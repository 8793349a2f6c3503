"""The seed's own layout (p2p-bench) read as it is, and the seed's proof sections (issue 14 items 5-7).

The fixture under fixtures/seed_results/ holds the numbers of the seed report (its table,
its uplift line, its quoted NCCL lines and its 18.08 µs -> 0.42 µs latency pair); see its
README for which files are copies of quoted numbers and which rows were constructed.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.errors import ResultsError
from pytest_p2p.report.proof import proof_for_run, proof_text
from pytest_p2p.report.report_cli import main
from pytest_p2p.seedlayout import SeedStat, is_seed_layout, read_seed_run, sample_std

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "seed_results" / "2026-06-16_5060ti-16gb_2cards_gen3-x4_p2p-sweep-c1-2-4-8"
OURS = ROOT / "fixtures" / "results" / "20261122-122102_h200x2-vllm_gpu0-gpu1"

SEED_ROWS = {  # the seed report's "Results at a glance" (output ± std, total, TTFT, W)
    ("1", "p2p_on"): ("60.3 ±4.8", "120.6", "742", "201"), ("1", "p2p_off"): ("55.3 ±4.0", "110.6", "945", "192"),
    ("2", "p2p_on"): ("107.6 ±4.0", "215.2", "890", "187"), ("2", "p2p_off"): ("95.5 ±2.7", "191.1", "1062", "177"),
    ("4", "p2p_on"): ("170.6 ±4.6", "341.3", "985", "179"), ("4", "p2p_off"): ("157.6 ±5.2", "315.1", "1179", "165"),
    ("8", "p2p_on"): ("190.9 ±3.2", "381.8", "16463", "174"), ("8", "p2p_off"): ("167.6 ±2.1", "335.2", "18640", "160"),
}


@pytest.fixture
def seed_copy(tmp_path: Path) -> Path:
    dst = tmp_path / SEED.name
    shutil.copytree(SEED, dst)
    return dst


def test_reader_sees_every_scenario_and_the_population_std() -> None:
    run = read_seed_run(SEED)
    assert is_seed_layout(SEED) and not is_seed_layout(OURS)
    expected = sorted(f"{a}-c{c}" for a in ("p2p_on", "p2p_off") for c in (1, 2, 4, 8))
    assert sorted(s.name for s in run.scenarios) == expected
    on1 = next(s for s in run.scenarios if s.name == "p2p_on-c1")
    assert on1.metrics["output_throughput"].values == (63.9867, 63.3248, 53.5476)
    assert on1.n_runs == 3 and sorted(on1.runs) == [1, 2, 3] and on1.power_watts[1] == pytest.approx(200.894, abs=1e-3)
    assert run.std_convention == "population (ddof=0)"
    assert sample_std(on1.metrics["output_throughput"]) == pytest.approx(5.845, abs=1e-3)
    assert any("p2p_on-c2: no run_<k>.json" in m for m in run.missing)


def test_sample_std_convention_is_recognised(seed_copy: Path) -> None:
    agg = seed_copy / "scenarios" / "p2p_on-c1" / "aggregate.json"
    data = json.loads(agg.read_text())
    for st in data["metrics"].values():
        if len(st.get("values", [])) >= 2:
            v = st["values"]
            m = sum(v) / len(v)
            st["std"] = (sum((x - m) ** 2 for x in v) / (len(v) - 1)) ** 0.5
    agg.write_text(json.dumps(data))
    assert read_seed_run(seed_copy).std_convention == "sample (ddof=1)"
    assert sample_std(SeedStat(1.0, None, (1.0,))) is None


def test_report_cli_renders_the_seed_table_uplift_and_proof(seed_copy: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.relative_to(seed_copy) for p in seed_copy.rglob("*"))
    assert main([str(seed_copy)]) == 0
    out = capsys.readouterr().out
    rows = {(ln.split("|")[0].strip(), ln.split("|")[1].strip()): [c.strip() for c in ln.split("|")[2:]]
            for ln in out.splitlines() if ln[:1].isdigit() and ln.count("|") >= 9}
    for key, (tok, total, ttft, watts) in SEED_ROWS.items():
        assert rows[key][0] == tok and rows[key][1] == total and rows[key][2] == ttft and rows[key][6] == watts, key
    assert "P2P output-throughput uplift: c1 +9.0 % · c2 +12.6 % · c4 +8.3 % · c8 +13.9 %" in out
    assert "population (ddof=0)" in out
    assert "via P2P/CUMEM" in out and "via SHM/direct/direct" in out
    assert "18.08 µs | 0.42 µs" in out
    assert "Gen3 x4" in out and "driver: 595.71.05" in out and "NCCL: 2.28.9" in out
    assert "model: /data/models/qwen3.6-27b-text-nvfp4-mtp" in out and "tensor-parallel-size=2" in out
    # nothing of the seed's own files changed; ours went to pytest-p2p-report/
    after = sorted(p.relative_to(seed_copy) for p in seed_copy.rglob("*") if "pytest-p2p-report" not in p.parts)
    assert after == before
    md = (seed_copy / "pytest-p2p-report" / "summary.md").read_text()
    assert "## Missing" in md and "population (ddof=0)" in md and "0.42 µs" in md


def test_summary_csv_alone_still_gives_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "seed"
    (d / "scenarios").mkdir(parents=True)
    shutil.copy(SEED / "summary.csv", d / "summary.csv")
    assert main([str(d), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "60.3 ±4.8" in out and "c8 +13.9 %" in out
    assert "no scenarios/<arm>-c<N>/ directory" in out and "env/p2p_evidence.json absent" in out


def test_corrupt_seed_file_is_named(seed_copy: Path) -> None:
    bad = seed_copy / "scenarios" / "p2p_on-c4" / "aggregate.json"
    bad.write_text("{not json")
    with pytest.raises(ResultsError, match="p2p_on-c4/aggregate.json: corrupt JSON"):
        read_seed_run(seed_copy)


def test_neither_layout_says_all_three(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="nor a p2p-bench results directory"):
        main([str(tmp_path)])


def test_proof_sections_of_our_own_run() -> None:
    summary = json.loads((OURS / "summary.json").read_text())
    text = "\n".join(proof_text(proof_for_run(OURS, summary)))
    assert "transport p2p_on: expected P2P/CUMEM, observed P2P/CUMEM" in text
    assert "server_run1.log:108:" in text and "via P2P/CUMEM" in text and "via SHM/direct/direct" in text
    assert "Gen5 x16" in text and "NCCL: 2.28.9" in text and "driver: 580.159.04" in text
    assert "no probe results under" in text


def _spy_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # the module the renderer will import, from sys.modules: an in-process pytester run earlier in this worker
    # drops the modules it imported, and ``from pytest_p2p.report import plots`` could then hand back the
    # package's stale attribute, a module the renderer no longer calls
    plots = importlib.import_module("pytest_p2p.report.plots")

    figs: dict[str, Any] = {}
    real = plots._save

    def spy(fig: Any, path: Path) -> Path:
        figs[path.name] = [(ax.get_ylim(), ax.get_xlim(), [t.get_text() for t in ax.texts], ax.get_title())
                           for ax in fig.axes]
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    return figs


def test_plot_faults_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "r" / OURS.name
    shutil.copytree(OURS, run)
    figs = _spy_figures(monkeypatch)
    from pytest_p2p.report.render import render_report

    render_report(run)
    assert {"latency_ttft.png", "pcie_link.png", "telemetry_p2p_on.png", "tokens_per_joule.png"} <= set(figs)
    assert all(ylim[0] == 0 for ylim, *_ in figs["tokens_per_joule.png"])  # power and tok/J from zero
    tele = figs["telemetry_p2p_on.png"]
    assert [t for *_, t in tele if t] == ["GPU0", "GPU1"]  # one column per GPU: lines cannot hide each other
    assert tele[0][1][1] > 20  # every rep and point, not one 1.2 s rep
    assert all(ylim[0] == 0 for ylim, *_ in figs["pcie_link.png"])


def test_p2p_matrix_from_the_seed_and_from_the_copy_probe(seed_copy: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    figs = _spy_figures(monkeypatch)
    assert main([str(seed_copy), "-q"]) == 0
    texts = [t for *_, ts, _ in figs["p2p_matrix.png"] for t in ts]
    assert "18.08" in texts and "0.42" in texts and "n/a" in texts
    root = tmp_path / "ours"
    shutil.copytree(OURS, root / OURS.name)
    shutil.copytree(ROOT / "pytest_p2p" / "demo" / "probes", root / "probes")
    figs.clear()
    from pytest_p2p.report.render import render_report

    render_report(root / OURS.name)
    titles = [t for *_, t in figs["p2p_matrix.png"]]
    assert "latency, P2P enabled (µs)" in titles and "unidirectional BW, P2P disabled (GB/s)" in titles


def test_seed_metrics_for_the_baseline_store() -> None:
    from pytest_p2p.seedlayout import seed_metrics

    rows = {(m.arm, m.point, m.metric): m for m in seed_metrics(read_seed_run(SEED))}
    on1 = rows[("p2p_on", "c1", "output_throughput")]
    assert on1.n == 3 and on1.std_population == 4.7727 and on1.std == pytest.approx(5.845, abs=1e-3)
    off8 = rows[("p2p_off", "c8", "output_throughput")]
    assert off8.n == 3 and off8.std is None and off8.values == ()  # no per-run values: no sample std invented
    assert rows[("p2p_on", "c8", "avg_watts")].mean == 173.9


def _one_arm(src: Path, dst: Path, arm: str) -> None:
    """A copy of the seed run holding one arm only, as a p2p-bench run with P2P on (or off) alone writes it."""
    import csv

    shutil.copytree(src, dst)
    for d in (dst / "scenarios").iterdir():
        if not d.name.startswith(f"{arm}-"):
            shutil.rmtree(d)
    for log in (dst / "logs").iterdir():
        if not log.name.startswith(f"{arm}-"):
            log.unlink()
    with (dst / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    with (dst / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(r for r in rows if r["arm"] == arm)


def test_a_folder_of_one_arm_runs_is_read_as_one_unpaired_comparison(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26: a P2P-on run and a separate P2P-off run in one folder gave no comparison at all.

    Joined, they give the same uplift and Welch interval as one run holding both arms (the
    seed's arms are not paired either), the transport of each arm from its own run's logs.
    """
    from pytest_p2p.report.seed_report import seed_summary
    from pytest_p2p.seedlayout import join_seed_runs

    folder = tmp_path / "runs"
    _one_arm(SEED, folder / "2026-06-16_on", "p2p_on")
    _one_arm(SEED, folder / "2026-06-16_off", "p2p_off")
    assert main([str(folder), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "joined: 2026-06-16_off (p2p_off)" in out and "joined: 2026-06-16_on (p2p_on)" in out
    assert "c8    | p2p_on / p2p_off |  +13.9 % |  +9.2 % .. +18.8 %" in out
    assert "observed P2P/CUMEM" in out and "observed SHM" in out
    joined = json.loads((folder / "pytest-p2p-report" / "summary.json").read_text())
    whole = seed_summary(read_seed_run(SEED))
    assert [(u["point"], u["estimate"], u["interval"]) for u in joined["uplift"]] == \
        [(u["point"], u["estimate"], u["interval"]) for u in whole["uplift"]]
    assert len(joined["uplift"]) == 4 and all(u["interval"] for u in joined["uplift"])
    runs = [read_seed_run(d) for d in sorted(folder.iterdir()) if d.name != "pytest-p2p-report"]
    assert join_seed_runs(folder, runs) is not None


def test_runs_that_share_an_arm_are_not_pooled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two full runs (both arms each) are separate measurements: read one by one, never joined."""
    from pytest_p2p.seedlayout import join_seed_runs

    folder = tmp_path / "runs"
    shutil.copytree(SEED, folder / "a")
    shutil.copytree(SEED, folder / "b")
    assert join_seed_runs(folder, [read_seed_run(folder / "a"), read_seed_run(folder / "b")]) is None
    assert main([str(folder), "--no-plots", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "joined:" not in out and out.count("P2P output-throughput uplift") == 2


def test_a_point_noisier_than_the_screens_were_proven_at_is_a_note(tmp_path: Path) -> None:
    """A resident campaign's decision keeps its window pair spread (``components``); above 4 % the terminal's proof
    says so (the 4-servers-on-an-H100 run's c16 windows varied by 8.1 %), at or below it says nothing."""
    run = tmp_path / OURS.name
    shutil.copytree(OURS, run)
    meta = json.loads((run / "run.json").read_text())
    meta["decisions"] = {"c16": {"components": {"start_sd": 0.0, "window_sd": 0.081}},
                         "c64": {"components": {"start_sd": 0.0, "window_sd": 0.021}}}
    (run / "run.json").write_text(json.dumps(meta))
    summary = json.loads((run / "summary.json").read_text())
    notes = proof_for_run(run, summary).notes
    assert [n for n in notes if "window pairs varied" in n] == [
        n for n in notes if n.startswith("c16: window pairs varied by 8.1 % (above 4 %)")], notes
    assert any(n.startswith("c16: window pairs varied by 8.1 %") for n in notes), notes
