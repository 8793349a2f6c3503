"""The embedded backend: run history in one SQLite file (the default store).

Why SQLite: CI jobs and xdist workers write concurrently, and a results file per run plus
a JSON index would need our own locking. SQLite in WAL mode with a busy timeout and
``BEGIN IMMEDIATE`` write transactions serialises writers safely across processes; each
campaign is written in one transaction, so a crash leaves the old state or the whole run.

The schema is versioned (``PRAGMA user_version``, ``PRAGMA application_id`` marks the file
as ours) and migrated forward in a write transaction. A file that is not SQLite, not ours,
from a newer plugin or damaged raises :class:`~pytest_p2p.errors.StoreError` and is never
modified: nothing is written before those checks pass, and the first write of an open
store is preceded by ``PRAGMA quick_check``, so a damaged page is found before a save
could touch the file, not after.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from ..errors import StoreError
from .store_base import SCHEMA, SCHEMA_VERSION, StoreMissing, check_not_a_url, schema_steps, store_error

APPLICATION_ID = 0x50325031  # "P2P1": marks the file as a pytest-p2p store
BUSY_TIMEOUT_MS = 30_000
HEADER = b"SQLite format 3\x00"
LOW_SPACE = 1 << 20  # bytes free below which an I/O error while writing is read as a full disk
T = TypeVar("T")


def _steps(version: int) -> list[str]:
    return schema_steps(version, text="TEXT", real="REAL", integer="INTEGER")


def _v1(db: sqlite3.Connection) -> None:
    for sql in _steps(1):
        db.execute(sql)


def _v2(db: sqlite3.Connection) -> None:
    """v2: who accepted a run and why (``accept --note``), shown by ``baseline list``."""
    for sql in _steps(2):
        db.execute(sql)


def _v3(db: sqlite3.Connection) -> None:
    """v3: the server start and rep index of each value, and the run's design (issue 24: a start-spread prior).

    ``ALTER TABLE ... ADD COLUMN`` in place: every row stays, the new columns read NULL (no starts known)."""
    for sql in _steps(3):
        db.execute(sql)


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1, 2: _v2, 3: _v3}
assert set(MIGRATIONS) == set(SCHEMA)


def classify(exc: BaseException) -> str:
    """The kind of fault (store_base.ADVICE key) of an sqlite3 error or an OSError."""
    if isinstance(exc, OSError):
        import errno

        return {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EROFS: "readonly", errno.EACCES: "readonly",
                errno.EPERM: "readonly"}.get(exc.errno or 0, "io")
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc).lower()
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return "corrupt"
    if name.startswith(("SQLITE_READONLY", "SQLITE_PERM")) or "readonly" in text or "read-only" in text:
        return "readonly"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text or "busy" in text:
        return "locked"
    if name.startswith("SQLITE_FULL") or "full" in text:
        return "full"
    if name.startswith("SQLITE_IOERR") or "disk i/o" in text:
        return "io"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return "cantopen"
    return "other"


class SqliteBackend:
    """One connection to an SQLite store file (see the module docstring)."""

    null_safe_eq = "IS"
    null_safe_ne = "IS NOT"

    def __init__(self, path: str | Path, *, create: bool = True, timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
        self.path = Path(path)
        check_not_a_url(self.path)
        self.where = str(self.path)
        self.timeout_s = timeout_s
        self._checked = False
        if not self.path.exists():
            if not create:
                raise StoreMissing(f"baseline database {self.path} does not exist "
                                 "(run a campaign with --p2p-save-baseline first)")
            with self.guard("creating its directory"):
                self.path.parent.mkdir(parents=True, exist_ok=True)
        elif self.path.is_dir():
            raise StoreError(f"baseline database {self.path} is a directory, expected an SQLite file")
        self._check_header()
        with self.guard("opening"):
            self.db = self.connect()
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            self._setup()
        except BaseException:
            self.db.close()
            raise

    def connect(self) -> sqlite3.Connection:
        """The connection (a seam: a test opens the file read-only here, as an immutable file is opened)."""
        return sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)

    # -- opening -------------------------------------------------------------------------
    def _check_header(self) -> None:
        """Refuse a non-SQLite file before SQLite gets a chance to touch it."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"baseline database {self.path} cannot be read: {exc}") from None
        if head and head != HEADER:
            raise StoreError(f"baseline database {self.path} is not an SQLite file (corrupt or a different "
                             "file); it was left untouched — move it away or point --p2p-db elsewhere")

    def _setup(self) -> None:
        with self.guard("reading its schema"):
            # one read transaction: a process creating the store now is seen before or after, not half-way
            self._retry(lambda: self.db.execute("BEGIN"))
            try:
                version, app = self._versions()
                foreign = app == 0 and self._has_foreign_tables()
            finally:
                if self.db.in_transaction:  # a read transaction: ending it cannot lose anything
                    with suppress(sqlite3.Error):
                        self.db.execute("COMMIT")
            if version > SCHEMA_VERSION:
                raise StoreError(f"baseline database {self.path} has schema version {version}, newer than "
                                 f"this pytest-p2p understands ({SCHEMA_VERSION}); upgrade pytest-p2p — "
                                 "the file was left untouched")
            if app not in (0, APPLICATION_ID) or foreign:
                raise StoreError(f"baseline database {self.path} is an SQLite file of another application; "
                                 "it was left untouched — point --p2p-db elsewhere")
            if version < SCHEMA_VERSION:
                self._check_integrity()
        with self.guard("preparing it (WAL mode, schema migration)"):
            if str(self.db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                self._retry(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
            self.db.execute("PRAGMA foreign_keys = ON")
            if version < SCHEMA_VERSION:
                with self.transaction():
                    current = int(self.db.execute("PRAGMA user_version").fetchone()[0])  # re-read under the lock
                    if current > SCHEMA_VERSION:
                        raise StoreError(f"baseline database {self.path} was upgraded by a newer pytest-p2p "
                                         f"(schema {current})")
                    for step in range(current + 1, SCHEMA_VERSION + 1):
                        MIGRATIONS[step](self.db)
                    self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        with self.guard("reading it"):
            self.db.execute("SELECT count(*) FROM runs").fetchone()

    def _versions(self) -> tuple[int, int]:
        version = self._retry(lambda: self.db.execute("PRAGMA user_version").fetchone()[0])
        app = self.db.execute("PRAGMA application_id").fetchone()[0]
        return int(version), int(app)

    def _has_foreign_tables(self) -> bool:
        rows = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return bool(rows)

    def _check_integrity(self) -> None:
        """``PRAGMA quick_check`` once per open store, before its first write."""
        if self._checked:
            return
        rows = self.db.execute("PRAGMA quick_check(3)").fetchall()
        problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        if problems:
            raise store_error(self.where, "the integrity check before writing", "corrupt", "; ".join(problems),
                              self.hint("corrupt"))
        self._checked = True

    def _retry(self, fn: Callable[[], T]) -> T:
        """Retry what SQLite answers 'busy' without waiting (WAL recovery, lock upgrades), up to the timeout."""
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if classify(exc) != "locked" or time.monotonic() >= deadline:
                    raise
                attempt += 1
                time.sleep(min(0.05 * attempt, 1.0, max(0.0, deadline - time.monotonic())))

    # -- the Backend protocol ---------------------------------------------------------------
    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        return [tuple(r) for r in self.db.execute(sql, tuple(params)).fetchall()]

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return int(self.db.execute(sql, tuple(params)).rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self.db.executemany(sql, [tuple(r) for r in rows])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE``, so that writers queue instead of deadlocking."""
        self._retry(lambda: self.db.execute("BEGIN IMMEDIATE"))
        try:
            self._check_integrity()
            yield
        except BaseException:
            if self.db.in_transaction:
                with suppress(sqlite3.Error):  # SQLite may have rolled back already; the cause is what matters
                    self.db.execute("ROLLBACK")
            raise
        else:
            self._retry(lambda: self.db.execute("COMMIT"))

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            kind = classify(exc)
            detail = str(exc)
            if kind in ("io", "cantopen") and self._space_left() < LOW_SPACE:
                # SQLite reports a full disk while it grows the -wal/-shm files as an I/O error
                kind, detail = "full", f"{detail}; {self._space_left() // 1024} KiB left on its file system"
            if kind == "locked":
                detail += f" for {self.timeout_s:g} s"
            raise store_error(self.where, action, kind, detail, self.hint(kind)) from None

    def _space_left(self) -> int:
        try:
            return shutil.disk_usage(self.path.parent).free
        except OSError:
            return LOW_SPACE  # unknown: do not guess "full"

    def hint(self, kind: str) -> str:
        """What to try on this file, beyond the advice every backend shares."""
        if kind == "corrupt":
            return f"what is left may be salvaged with: sqlite3 {self.path} .recover > salvage.sql"
        if kind in ("readonly", "cantopen"):
            return (f"SQLite writes {self.path.name}-wal and {self.path.name}-shm beside the file: "
                    f"see ls -l {self.path.parent} and lsattr {self.path}")
        if kind == "locked":
            return f"fuser {self.path} names the holder"
        if kind in ("full", "io"):
            return f"df -h {self.path.parent}"
        return ""

    def close(self) -> None:
        with suppress(sqlite3.Error):
            self.db.close()
