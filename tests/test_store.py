from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from verdict_rundir import write_run

from pytest_p2p.errors import StoreError
from pytest_p2p.verdict.store import SCHEMA_VERSION, Store, _v1


def test_save_is_idempotent_and_keyed_by_bus_ids(tmp_path):
    run = write_run(tmp_path, "r1")
    with Store(tmp_path / "h.db") as st:
        assert st.save_run_dir(run) == "r1"
        assert st.save_run_dir(run) == "r1"
        assert len(st.runs()) == 1
        rec = st.run("r1")
        assert rec.pair_ident == "0000:09:00.0+0000:0A:00.0"
        rows = st.metrics("r1", "p2p_on", "c8")
        assert {r.metric for r in rows} >= {"output_throughput", "mean_ttft_ms"}
        assert all(len(r.values) == 3 for r in rows)
        st.accept("r1", "pre-driver-upgrade")
        assert st.baseline_names() == [("pre-driver-upgrade", 1)]
        assert st.baseline_runs("pre-driver-upgrade", "demo-rig", rec.pair_ident, "model", 5)[0].run_id == "r1"
        assert st.baseline_runs("accepted", "demo-rig", rec.pair_ident, "model", 5) == []
        with pytest.raises(StoreError, match="no run 'nope'"):
            st.accept("nope", "accepted")


def test_run_prefix_is_literal(tmp_path):
    """``_`` in a run id (every id has them) is a character, not a LIKE wildcard."""
    with Store(tmp_path / "h.db") as st:
        for run_id in ("20260101-000000_rig_gpu0-gpu1", "20260101-000000xrig_gpu0-gpu1"):
            st.save_run_dir(write_run(tmp_path, run_id))
        assert st.run("20260101-000000_").run_id == "20260101-000000_rig_gpu0-gpu1"
        with pytest.raises(StoreError, match="2 runs start with it"):
            st.run("20260101-000000")
        with pytest.raises(StoreError, match="no run '%'"):
            st.run("%")


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
    with pytest.raises(StoreError, match="unreadable|not an SQLite"):
        Store(db)


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


def test_missing_db_without_create(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()


WRITER = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from verdict_rundir import write_run
from pytest_p2p.verdict.store import Store
root = Path({root!r}) / sys.argv[1]
dirs = [write_run(root, f"w{{sys.argv[1]}}-{{i}}", seed=i, reps=2) for i in range(8)]
for d in dirs:
    with Store({db!r}) as st:
        st.accept(st.save_run_dir(d), "accepted")
"""


def test_four_processes_writing_at_once_lose_nothing(tmp_path):
    code = WRITER.format(tests=str(Path(__file__).parent), root=str(tmp_path), db=str(tmp_path / "h.db"))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)], stderr=subprocess.PIPE) for k in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    with Store(tmp_path / "h.db") as st:
        assert len(st.runs()) == 32
        assert st.baseline_names() == [("accepted", 32)]
        assert st.db.execute("SELECT count(*) FROM results").fetchone()[0] == 32 * 8
