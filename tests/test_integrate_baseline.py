"""``python -m pytest_p2p baseline save DIR`` on a p2p-bench results directory (the seed report's layout):
stored as one run with the sample std, the pair identified by bus id, idempotent, acceptable as a baseline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_p2p.verdict.baseline_cli import main
from pytest_p2p.verdict.store import Store

ROOT = Path(__file__).resolve().parents[1]
SEED = next((ROOT / "fixtures" / "seed_results").glob("2026-06-16_*"))
RUN_ID = f"seed-{SEED.name}"


def test_baseline_save_reads_a_seed_layout_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    assert main(["--db", str(db), "save", str(SEED), "--accept", "seed"]) == 0
    assert f"saved {RUN_ID}, accepted into 'seed'" in capsys.readouterr().out
    assert main(["--db", str(db), "save", str(SEED)]) == 0  # the same directory again: stored once
    with Store(db, create=False) as store:
        (rec,) = store.runs()
        assert (rec.run_id, rec.rig, rec.pair_key, rec.kind, rec.started_at) == (
            RUN_ID, "p2p-bench", "gpu1-gpu2", "model", "2026-06-16")
        assert rec.pair_ident == "0000:09:00.0+0000:0A:00.0" and rec.baselines == ("seed",)
        assert not rec.simulated and rec.source_dir == str(SEED.resolve())
        fp = rec.fingerprint
        assert fp["transport"]["p2p_on"] == {"transport": "P2P", "nccl_version": "2.28.9"}
        assert fp["arms"]["p2p_off"]["env"]["NCCL_P2P_DISABLE"] == "1"
        assert fp["versions"]["driver"] == "595.71.05"
        rows = {(m.arm, m.point, m.metric): m for m in store.metrics(RUN_ID)}
    on1 = rows[("p2p_on", "c1", "output_throughput")]
    assert on1.n == 3 and on1.std == pytest.approx(5.845, abs=1e-3)  # sample std, not the file's 4.7727
    assert on1.values == [63.9867, 63.3248, 53.5476] and on1.median == 63.3248
    off8 = rows[("p2p_off", "c8", "output_throughput")]
    assert off8.std is None and off8.values == [] and off8.median is None  # nothing invented
    assert rows[("p2p_on", "c8", "avg_watts")].mean == 173.9
    assert {a for a, _, _ in rows} == {"p2p_on", "p2p_off"} and {p for _, p, _ in rows} == {"c1", "c2", "c4", "c8"}


def test_seed_save_through_the_package_entry_point(tmp_path: Path) -> None:
    seed = tmp_path / SEED.name
    shutil.copytree(SEED, seed)
    env = {**os.environ, "PYTEST_P2P_NVML": "off"}
    cmd = [sys.executable, "-m", "pytest_p2p", "baseline", "--db", str(tmp_path / "h.db")]
    out = subprocess.run([*cmd, "save", str(seed)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and f"saved {RUN_ID}" in out.stdout, out.stderr
    show = subprocess.run([*cmd, "show", RUN_ID], capture_output=True, text=True, env=env, timeout=120)
    assert show.returncode == 0 and "p2p_on-c1  output_throughput  mean 60.2863" in show.stdout, show.stderr
    (seed / "scenarios" / "p2p_on-c1" / "aggregate.json").write_text("{broken")
    bad = subprocess.run([*cmd.copy()[:-1], str(tmp_path / "h2.db"), "save", str(seed)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "aggregate.json" in bad.stderr and "Traceback" not in bad.stderr
