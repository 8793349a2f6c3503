"""A history moves between the backends (``baseline export`` / ``import``) and judges the same.

Issue 16's goal: the same verdicts from either backend on the same history. A rig's SQLite
history goes to the fleet's PostgreSQL database and back through the CLI; every row (runs,
metric rows, acceptances with their times and notes) survives, and a regressed run is
judged identically against each copy.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_pg import PASSWORD, PgServer, pg_fixture  # noqa: F401 - fixture
from synthetic_runs import baseline_runs, write_run

from pytest_p2p.errors import P2PError
from pytest_p2p.verdict.baseline_cli import main
from pytest_p2p.verdict.campaign_judge import compare_scenario
from pytest_p2p.verdict.config import BaselineConfig
from pytest_p2p.verdict.store import Store


def _comparable(export: dict) -> dict:
    return {k: v for k, v in export.items() if k != "exported_at"}


def _history(tmp_path, db: str) -> list:
    runs = baseline_runs(tmp_path / "runs", count=6)
    with Store(db) as st:
        for i, run in enumerate(runs):
            st.save_run_dir(run, accept="accepted" if i % 3 else None)
        st.accept(runs[0].name, "pre-driver-upgrade", note="before 595")
        other = write_run(tmp_path / "runs", "other-rig-run", seed=7)
        st.save_run_dir(other)
    return runs


def test_sqlite_to_postgres_and_back_is_lossless(tmp_path, capsys, pg: PgServer):
    src = str(tmp_path / "rig.db")
    _history(tmp_path, src)
    fleet = pg.create_database()
    back = str(tmp_path / "back.db")
    assert main(["--db", src, "export", "--out", str(tmp_path / "rig.json")]) == 0
    assert main(["--db", fleet, "import", str(tmp_path / "rig.json")]) == 0
    assert main(["--db", fleet, "import", str(tmp_path / "rig.json")]) == 0  # idempotent
    out = capsys.readouterr().out
    assert "imported 7 run(s)" in out and "imported 0 run(s)" in out and "(7 already there)" in out
    assert PASSWORD not in out and "p2p:***@" in out
    assert main(["--db", fleet, "export", "--out", str(tmp_path / "fleet.json")]) == 0
    assert main(["--db", back, "import", str(tmp_path / "fleet.json")]) == 0
    assert main(["--db", back, "export", "--out", str(tmp_path / "back.json")]) == 0
    exports = [_comparable(json.loads((tmp_path / f"{n}.json").read_text())) for n in ("rig", "fleet", "back")]
    assert exports[0] == exports[1] == exports[2]
    assert exports[0]["acceptances"][0]["note"] is None
    assert {a["note"] for a in exports[0]["acceptances"]} == {None, "before 595"}
    with Store(src) as a, Store(fleet) as b:
        assert a.runs() == b.runs() and a.baseline_entries() == b.baseline_entries()
        for rec in a.runs():
            assert a.metrics(rec.run_id) == b.metrics(rec.run_id)


def test_export_of_one_rig(tmp_path, capsys):
    db = str(tmp_path / "h.db")
    with Store(db) as st:
        st.save_run_dir(write_run(tmp_path, "r1"), accept="accepted")
    assert main(["--db", db, "export", "--rig", "demo-rig"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 1
    assert main(["--db", db, "export", "--rig", "no-such-rig"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == [] and data["acceptances"] == []


@pytest.mark.parametrize("scale", [0.7, 1.0, 1.08])
def test_same_verdicts_from_either_backend(tmp_path, pg: PgServer, scale):
    """One history in both stores; a candidate judged against each gives the same verdict and numbers."""
    lite, fleet = str(tmp_path / "h.db"), pg.create_database()
    runs = baseline_runs(tmp_path / "runs", count=8)
    for target in (lite, fleet):
        with Store(target) as st:
            for run in runs:
                st.save_run_dir(run, accept="accepted")
    cand = write_run(tmp_path / "runs", "20260630-100000_demo-rig_gpu1-gpu2", started_at="2026-06-30T10:00:00Z",
                     seed=77, scale={"output_throughput": scale})
    cfg = BaselineConfig(depth=5)
    results = []
    for target in (lite, fleet):
        with Store(target) as st:
            for arm in ("p2p_on", "p2p_off"):
                r = compare_scenario(st, cand, arm, "c8", cfg, "accepted")
                results.append((arm, r.verdict, r.baseline_runs, r.message,
                                {m: (j.verdict, j.current) for m, j in r.metrics.items()}))
    assert results[:2] == results[2:]
    assert len(results[0][2]) == 5


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids,
                                                                                      max_size=5), max_leaves=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=json_values, mutate=st.sampled_from(["replace", "run", "metric", "acceptance"]))
def test_import_of_anything_is_an_import_or_a_store_error(tmp_path, data, mutate):
    """Hostile or edited export files: either imported, or a P2PError (CLI: one line) with nothing written."""
    db = tmp_path / "fuzz.db"
    with Store(db) as store:
        base = {"format": "pytest-p2p-baseline-export", "schema_version": 2, "runs": [], "acceptances": []}
        run = {"run_id": "r", "rig": "x", "pair_ident": "a+b", "saved_at": "t", "fingerprint": {}, "metrics": []}
        doc: object = {"replace": data, "run": {**base, "runs": [data]},
                       "metric": {**base, "runs": [{**run, "metrics": [data]}]},
                       "acceptance": {**base, "runs": [run], "acceptances": [data]}}[mutate]
        before = store.export()["runs"]
        try:
            store.import_data(doc, source="fuzz.json")
        except P2PError:
            assert store.export()["runs"] == before
