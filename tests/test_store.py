"""The store's behaviour, on BOTH backends: an SQLite file and a real PostgreSQL database.

``store_target`` (tests/store_pg.py) is an SQLite path or the URL of a fresh database on a
private PostgreSQL server that the session starts; the PostgreSQL half is skipped, with the
reason, where no server can be started.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from store_pg import pg_fixture, store_target_fixture  # noqa: F401 - fixtures
from synthetic_runs import write_run

from pytest_p2p.errors import StoreError
from pytest_p2p.verdict.store import (
    SCHEMA_VERSION,
    MetricRow,
    Store,
    StoreMissing,
    StoreSaveError,
    _v1,
    exists,
    save_campaign_runs,
)
from pytest_p2p.verdict.store_base import is_url


def test_save_is_idempotent_and_keyed_by_bus_ids(tmp_path, store_target):
    run = write_run(tmp_path, "r1")
    with Store(store_target) as st:
        assert st.save_run_dir(run) == "r1"
        assert st.save_run_dir(run) == "r1"
        assert len(st.runs()) == 1
        rec = st.run("r1")
        assert rec.pair_ident == "0000:09:00.0+0000:0A:00.0"
        rows = st.metrics("r1", "p2p_on", "c8")
        assert {r.metric for r in rows} >= {"output_throughput", "mean_ttft_ms"}
        assert all(len(r.values) == 3 and isinstance(r.n, int) for r in rows)
        st.accept("r1", "pre-driver-upgrade")
        assert st.baseline_names() == [("pre-driver-upgrade", 1)]
        assert st.baseline_runs("pre-driver-upgrade", "demo-rig", rec.pair_ident, "model", 5)[0].run_id == "r1"
        assert st.baseline_runs("pre-driver-upgrade", "demo-rig", rec.pair_ident, "model", 5, exclude="r1") == []
        assert st.baseline_runs("accepted", "demo-rig", rec.pair_ident, "model", 5) == []
        with pytest.raises(StoreError, match="no run 'nope'"):
            st.accept("nope", "accepted")
        assert st.reject("r1", "pre-driver-upgrade") is True
        assert st.reject("r1", "pre-driver-upgrade") is False
        assert st.run("r1").baselines == ()


def test_kind_none_matches_none_only(tmp_path, store_target):
    """``kind IS ?`` on both backends: a NULL kind matches a NULL kind, not 'model'."""
    run = write_run(tmp_path, "r1")
    with Store(store_target) as st:
        fp = {"simulated": False}
        pair = {"key": "k", "gpus": [{"bus_id": "0000:09:00.0"}, {"bus_id": "0000:0A:00.0"}]}
        st.save({"run_id": "x", "rig": "demo-rig", "pair": pair, "kind": None, "started_at": "2026"}, fp,
                [MetricRow("a", "p", "m", 1, 1.0, 0.0, 1.0, [1.0])], accept="accepted")
        st.save_run_dir(run, accept="accepted")
        ident = st.run("x").pair_ident
        assert [r.run_id for r in st.baseline_runs("accepted", "demo-rig", ident, None, 5)] == ["x"]


def test_save_and_accept_are_one_transaction(tmp_path, store_target):
    with Store(store_target) as st:
        assert st.save_run_dir(write_run(tmp_path, "r1"), accept="nightly", note="first") == "r1"
        assert st.baseline_entries()[0][:2] == ("nightly", "r1")
        assert st.baseline_entries()[0][3] == "first"
        rows = [MetricRow("a", "p", "m", 1, 1.0, 0.0, 1.0, [1.0])] * 2  # same key twice: the 2nd insert fails
        run = {"run_id": "half", "rig": "demo-rig", "pair": {"key": "k", "gpus": []}, "kind": "model"}
        with pytest.raises(StoreError, match="saving run half failed"):
            st.save(run, {}, rows, accept="nightly")
        with pytest.raises(StoreError, match="no run 'half'"):
            st.run("half")  # no half-written campaign: neither the run row nor its acceptance
        assert st.baseline_names() == [("nightly", 1)]


def test_run_prefix_is_literal(tmp_path, store_target):
    """``_`` in a run id (every id has them) is a character, not a LIKE wildcard."""
    with Store(store_target) as st:
        for run_id in ("20260101-000000_rig_gpu0-gpu1", "20260101-000000xrig_gpu0-gpu1"):
            st.save_run_dir(write_run(tmp_path, run_id))
        assert st.run("20260101-000000_").run_id == "20260101-000000_rig_gpu0-gpu1"
        with pytest.raises(StoreError, match="2 runs start with it"):
            st.run("20260101-000000")
        with pytest.raises(StoreError, match="no run '%'"):
            st.run("%")


def test_history_order_is_bytewise_on_both(tmp_path, store_target):
    """The most recent runs are picked by (started_at, run_id) in byte order, whatever the server's locale."""
    with Store(store_target) as st:
        for run_id in ("b_x", "B-x", "a.x", "_x"):
            st.save_run_dir(write_run(tmp_path, run_id), accept="accepted")
        ident = st.run("b_x").pair_ident
        got = [r.run_id for r in st.baseline_runs("accepted", "demo-rig", ident, "model", 10)]
        assert got == sorted(["b_x", "B-x", "a.x", "_x"], reverse=True)


def test_missing_store_without_create(tmp_path, store_target):
    with pytest.raises(StoreMissing, match="does not exist|no pytest-p2p store yet"):
        Store(store_target, create=False)
    assert exists(store_target) is False
    if not is_url(store_target):
        assert not Path(store_target).exists()
    Store(store_target).close()
    assert exists(store_target) is True


def test_save_campaign_runs_reports_what_was_not_saved(tmp_path, store_target):
    good = write_run(tmp_path, "good")
    bad = tmp_path / "not-a-run"
    bad.mkdir()
    with pytest.raises(StoreSaveError) as got:
        save_campaign_runs(store_target, [good, bad], accept="accepted")
    err = got.value
    assert err.saved == ("good",) and err.unsaved == (str(bad),)
    assert f"baseline save {bad}" in err.report and "1 campaign run(s) NOT saved" in err.report
    with Store(store_target) as st:
        assert [r.run_id for r in st.runs(name="accepted")] == ["good"]
    assert save_campaign_runs(store_target, []) == []


# -- schema: migrations, newer and foreign stores ------------------------------------------------

def test_corrupt_file_is_refused_and_untouched(tmp_path):
    db = tmp_path / "h.db"
    db.write_bytes(b"this is not a database at all" * 10)
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not an SQLite file"):
        Store(db)
    assert db.read_bytes() == before


def test_damaged_sqlite_is_refused(tmp_path):
    db = tmp_path / "h.db"
    with Store(db) as st:
        st.save_run_dir(write_run(tmp_path, "r1"))
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # header kept, schema page destroyed
    db.write_bytes(bytes(data))
    for side in (Path(str(db) + "-wal"), Path(str(db) + "-shm")):
        side.unlink(missing_ok=True)
    with pytest.raises(StoreError, match="damaged") as got:
        Store(db)
    assert str(db) in str(got.value) and ".recover" in str(got.value)
    assert db.read_bytes() == bytes(data)


def test_future_schema_is_refused_and_untouched(tmp_path):
    db = tmp_path / "h.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match="newer than this pytest-p2p"):
        Store(db)
    assert db.read_bytes() == before


def test_foreign_sqlite_is_refused(tmp_path):
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="another application"):
        Store(db)


def test_v1_database_is_migrated(tmp_path):
    db = tmp_path / "h.db"
    con = sqlite3.connect(db)
    _v1(con)
    con.execute("PRAGMA application_id = 1345474609")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    with Store(db) as st:
        assert st.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        st.save_run_dir(write_run(tmp_path, "r1"))
        st.accept("r1", "accepted", note="after the migration")


# -- concurrency: real processes ------------------------------------------------------------------

WRITER = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from synthetic_runs import write_run
from pytest_p2p.verdict.store import Store
k = sys.argv[1]
root = Path({root!r}) / k
dirs = [write_run(root, f"w{{k}}-{{i}}", seed=i, reps=2, points=("c1",)) for i in range({saves})]
print("ready", flush=True)
sys.stdin.readline()  # start together
for d in dirs:
    with Store({db!r}) as st:
        st.save_run_dir(d, accept="accepted")
"""
PROCS, SAVES = 4, 100


def test_four_processes_writing_at_once_lose_nothing(tmp_path, store_target):
    """4 processes x 100 campaign saves (each its own connection and transaction) to one store."""
    Store(store_target).close()  # both backends: the schema exists before the race starts
    code = WRITER.format(tests=str(Path(__file__).parent), root=str(tmp_path), db=store_target, saves=SAVES)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(PROCS)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate()[1]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * PROCS, errs
    with Store(store_target) as st:
        runs = st.runs()
        assert len(runs) == PROCS * SAVES
        assert {r.run_id for r in runs} == {f"w{k}-{i}" for k in range(PROCS) for i in range(SAVES)}
        assert st.baseline_names() == [("accepted", PROCS * SAVES)]
        per_run = {len(st.metrics(r.run_id)) for r in runs[::37]}
        assert per_run == {8}  # 2 arms x 1 point x 4 metrics, every run whole


def test_first_open_from_many_processes_creates_the_schema_once(store_target):
    """The migration of a brand-new store races safely (it runs under the writers' lock)."""
    code = f"from pytest_p2p.verdict.store import Store\nStore({store_target!r}).close()\n"
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    with Store(store_target) as st:
        assert st.runs() == []
