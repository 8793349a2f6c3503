"""Issue 11, the store's faults on the SQLite backend, through the real code paths.

A damaged page behind a valid header, a read-only or immutable file, a store locked by
another process, a full disk: each is one paragraph naming the file and what to do (never
a raw sqlite3 traceback), and the file is left byte-identical.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from synthetic_runs import write_run

from pytest_p2p.errors import StoreError
from pytest_p2p.verdict import store_sqlite
from pytest_p2p.verdict.baseline_cli import main as baseline_main
from pytest_p2p.verdict.store import Store, StoreSaveError, save_campaign_runs


def _history(tmp_path: Path, runs: int = 12) -> Path:
    db = tmp_path / "h.db"
    with Store(db) as st:
        for i in range(runs):
            st.save_run_dir(write_run(tmp_path / "runs", f"run-{i:02d}", seed=i), accept="accepted")
    assert not Path(f"{db}-wal").exists()  # checkpointed on close: the file is the whole store
    return db


def _damage_page_holding(db: Path, needle: bytes) -> bytes:
    """Overwrite the page that holds ``needle`` (the header page stays valid); returns the new bytes."""
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    at = data.find(needle)
    assert at > page_size, "the needle must lie behind the header page"
    start = at - at % page_size
    data[start:start + page_size] = b"\xa5" * page_size
    db.write_bytes(bytes(data))
    return bytes(data)


def _one_paragraph(text: str) -> None:
    assert "Traceback" not in text and "sqlite3." not in text
    assert text.strip().count("\n") == 0, text


def test_corrupt_page_behind_a_valid_header(tmp_path, capsys):
    """The store opens (header and schema fine), then ``list`` and a save meet the damaged page."""
    db = _history(tmp_path)
    damaged = _damage_page_holding(db, b"run-06")
    assert main_rc(["--db", str(db), "list"]) == 2
    err = capsys.readouterr().err
    _one_paragraph(err)
    assert str(db) in err and "damaged" in err and ".recover" in err
    with pytest.raises(StoreError, match="damaged"), Store(db) as st:
        st.save_run_dir(write_run(tmp_path / "runs", "new"))
    with pytest.raises(StoreSaveError, match="NOT saved") as got:
        save_campaign_runs(db, [tmp_path / "runs" / "new"], accept="accepted")
    assert got.value.unsaved == (str(tmp_path / "runs" / "new"),)
    assert db.read_bytes() == damaged
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def main_rc(argv: list[str]) -> int:
    return baseline_main(argv)


def test_read_only_open_is_one_error_and_untouched(tmp_path, monkeypatch):
    """Opened read-only and unable to create its -shm file: one paragraph, nothing written."""
    db = _history(tmp_path, runs=2)
    before = db.read_bytes()

    def connect(self: store_sqlite.SqliteBackend) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.timeout_s, isolation_level=None)

    monkeypatch.setattr(store_sqlite.SqliteBackend, "connect", connect)
    with pytest.raises(StoreError, match="cannot be (opened|written)") as got, Store(db) as st:
        st.save_run_dir(write_run(tmp_path / "runs", "new"))
    msg = str(got.value)
    _one_paragraph(msg)
    assert str(db) in msg and "lsattr" in msg
    assert db.read_bytes() == before


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A real store file that may not be written: immutable (chattr +i) as root, mode 0444 otherwise."""
    db = _history(tmp_path, runs=2)
    if os.geteuid() == 0:
        got = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True) \
            if shutil.which("chattr") else None
        if got is None or got.returncode != 0:
            pytest.skip(f"cannot make a file immutable here: {got.stderr.strip() if got else 'no chattr'}")
        try:
            yield db
        finally:
            subprocess.run(["chattr", "-i", str(db)], check=True)
    else:
        os.chmod(db, 0o444)
        yield db
        os.chmod(db, 0o644)


def test_immutable_file_is_one_error_and_untouched(tmp_path, unwritable, capsys):
    """Issue 11: an immutable file raised a raw OperationalError 'attempt to write a readonly database'."""
    db = unwritable
    before = db.read_bytes()
    with Store(db) as st:
        assert len(st.runs()) == 2  # reading still works
        with pytest.raises(StoreError, match="cannot be written") as got:
            st.save_run_dir(write_run(tmp_path / "runs", "new"))
    msg = str(got.value)
    _one_paragraph(msg)
    assert str(db) in msg and "lsattr" in msg and "saving run new" in msg
    assert main_rc(["--db", str(db), "accept", "run-00", "--name", "other"]) == 2
    err = capsys.readouterr().err
    _one_paragraph(err)
    assert "cannot be written" in err
    assert db.read_bytes() == before


def test_locked_store_gives_up_after_the_timeout(tmp_path):
    db = _history(tmp_path, runs=1)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with Store(db, timeout_s=0.3) as st:
            assert len(st.runs()) == 1  # WAL: readers are not blocked
            t0 = time.monotonic()
            with pytest.raises(StoreError, match="held its write lock") as got:
                st.save_run_dir(write_run(tmp_path / "runs", "new"), accept="accepted")
            assert time.monotonic() - t0 < 10
        msg = str(got.value)
        _one_paragraph(msg)
        assert "fuser" in msg and str(db) in msg
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store(db) as st:
        assert [r.run_id for r in st.runs()] == ["run-00"]


def test_disk_full_is_one_error_and_nothing_half_written(tmp_path):
    """SQLITE_FULL through SQLite's own limit (max_page_count): the save rolls back whole."""
    db = _history(tmp_path, runs=1)
    before = db.read_bytes()
    with Store(db) as st:
        pages = st.db.execute("PRAGMA page_count").fetchone()[0]
        st.db.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreError, match=r"the disk \(or the database.s quota\) is full") as got:
            st.save_run_dir(write_run(tmp_path / "runs", "big", points=tuple(f"c{i}" for i in range(60))))
        assert [r.run_id for r in st.runs()] == ["run-00"]
    msg = str(got.value)
    _one_paragraph(msg)
    assert "df -h" in msg and str(db) in msg
    assert db.read_bytes() == before


def test_disk_full_while_creating_the_directory(tmp_path, monkeypatch):
    def full(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(StoreError, match=r"the disk \(or the database.s quota\) is full") as got:
        Store(tmp_path / "new" / "h.db")
    _one_paragraph(str(got.value))


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("SQLITE_CORRUPT", "database disk image is malformed", "corrupt"),
    ("SQLITE_NOTADB", "file is not a database", "corrupt"),
    ("SQLITE_READONLY", "attempt to write a readonly database", "readonly"),
    ("SQLITE_BUSY", "database is locked", "locked"),
    ("SQLITE_FULL", "database or disk is full", "full"),
    ("SQLITE_IOERR_WRITE", "disk I/O error", "io"),
    ("SQLITE_CANTOPEN", "unable to open database file", "cantopen"),
    ("", "attempt to write a readonly database", "readonly"),  # Python 3.10: no sqlite_errorname
])
def test_every_sqlite_fault_is_classified(name, text, kind):
    exc = sqlite3.OperationalError(text)
    if name:
        exc.sqlite_errorname = name  # type: ignore[attr-defined]
    assert store_sqlite.classify(exc) == kind


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root with CAP_SYS_ADMIN only; skipped elsewhere): a disk that really fills up."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)],
                         capture_output=True, text=True) if shutil.which("mount") else None
    if got is None or got.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {got.stderr.strip() if got else 'no mount'}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("left_kib", [0, 128])  # full before the store is opened / while the run is written
def test_really_full_disk_is_one_error_and_the_file_untouched(tmp_path, tiny_fs, left_kib):
    db = tiny_fs / "h.db"
    with Store(db) as st:
        st.save_run_dir(write_run(tmp_path / "runs", "first"), accept="accepted")
    filler = tiny_fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:  # take all the space that is left
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - left_kib * 1024))
        os.close(fd)
    before = db.read_bytes()
    big = write_run(tmp_path / "runs", "big", points=tuple(f"c{i}" for i in range(150)))
    with pytest.raises(StoreError, match=r"the disk \(or the database.s quota\) is full") as got:
        save_campaign_runs(db, [big], accept="accepted")
    msg = str(got.value)
    _one_paragraph(msg)
    assert str(db) in msg and "baseline save" in msg
    assert ("saving run big failed" if left_kib else "reading its schema failed") in msg, msg
    assert db.read_bytes() == before
    filler.unlink()
    with Store(db) as st:
        assert [r.run_id for r in st.runs()] == ["first"]
        st.save_run_dir(big)  # space again: the store works
