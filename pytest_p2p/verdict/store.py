"""The baseline store: run history and named baselines in one embedded SQLite file.

Why SQLite: CI jobs and xdist workers write concurrently, and a results file per run
plus a JSON index would need our own locking. SQLite in WAL mode with a busy timeout and
``BEGIN IMMEDIATE`` write transactions serialises writers safely across processes; each
run is written in one transaction, so a crash leaves the old state or the whole new run.

Rows are keyed by rig, pair identity (bus ids, see ``fingerprint.pair_ident``), arm,
point and metric — never by pytest node ids, which change with file layout and
parametrisation. Every saved run stays in ``runs`` (history); a named baseline
(``accepted``, ``pre-driver-upgrade``) is a set of accepted run ids.

The schema is versioned (``PRAGMA user_version``) and migrated forward in a write
transaction. A file that is not SQLite, not ours, or from a newer plugin raises
:class:`~pytest_p2p.errors.StoreError` and is never modified.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .fingerprint import build_fingerprint, load_run, pair_ident, read_json

APPLICATION_ID = 0x50325031  # "P2P1": marks the file as a pytest-p2p store
SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 30_000


def _v1(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, rig TEXT NOT NULL, pair_key TEXT, pair_ident TEXT NOT NULL,
        kind TEXT, started_at TEXT, saved_at TEXT NOT NULL, simulated INTEGER NOT NULL,
        status TEXT, source_dir TEXT, fingerprint TEXT NOT NULL)""")
    db.execute("""CREATE TABLE results (
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        arm TEXT NOT NULL, point TEXT NOT NULL, metric TEXT NOT NULL,
        n INTEGER NOT NULL, mean REAL, std REAL, median REAL, vals TEXT NOT NULL,
        PRIMARY KEY (run_id, arm, point, metric))""")
    db.execute("""CREATE TABLE baselines (
        name TEXT NOT NULL, run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        accepted_at TEXT NOT NULL, PRIMARY KEY (name, run_id))""")
    db.execute("CREATE INDEX runs_by_key ON runs (rig, pair_ident, kind, started_at)")


def _v2(db: sqlite3.Connection) -> None:
    """v2: who accepted a run and why (``accept --note``), shown by ``baseline list``."""
    db.execute("ALTER TABLE baselines ADD COLUMN note TEXT")


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1, 2: _v2}


@dataclass(frozen=True)
class MetricRow:
    arm: str
    point: str
    metric: str
    n: int
    mean: float | None
    std: float | None
    median: float | None
    values: list[float]


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    rig: str
    pair_key: str | None
    pair_ident: str
    kind: str | None
    started_at: str | None
    saved_at: str
    simulated: bool
    status: str | None
    source_dir: str | None
    fingerprint: dict[str, Any]
    baselines: tuple[str, ...] = ()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """One open store. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise StoreError(f"baseline database {self.path} does not exist "
                                 "(run a campaign with --p2p-save-baseline first)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif self.path.is_dir():
            raise StoreError(f"baseline database {self.path} is a directory, expected an SQLite file")
        self._check_header()
        try:
            self.db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"baseline database {self.path} cannot be opened: {exc}") from None
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._setup()
        except BaseException:
            self.db.close()
            raise

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
        if head and head != b"SQLite format 3\x00":
            raise StoreError(f"baseline database {self.path} is not an SQLite file (corrupt or a different "
                             "file); it was left untouched — move it away or point --p2p-db elsewhere")

    def _setup(self) -> None:
        try:
            version, app = self._versions()
            if version > SCHEMA_VERSION:
                raise StoreError(f"baseline database {self.path} has schema version {version}, newer than "
                                 f"this pytest-p2p understands ({SCHEMA_VERSION}); upgrade pytest-p2p — "
                                 "the file was left untouched")
            if app not in (0, APPLICATION_ID) or (app == 0 and self._has_foreign_tables()):
                raise StoreError(f"baseline database {self.path} is an SQLite file of another application; "
                                 "it was left untouched — point --p2p-db elsewhere")
            self._retry(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
            self.db.execute("PRAGMA foreign_keys = ON")
            if version < SCHEMA_VERSION:
                with self.write() as db:
                    current = db.execute("PRAGMA user_version").fetchone()[0]  # re-read under the lock
                    if current > SCHEMA_VERSION:
                        raise StoreError(f"baseline database {self.path} was upgraded by a newer pytest-p2p "
                                         f"(schema {current})")
                    for step in range(current + 1, SCHEMA_VERSION + 1):
                        MIGRATIONS[step](db)
                    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.db.execute("SELECT count(*) FROM runs").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"baseline database {self.path} is unreadable ({exc}); it was left untouched — "
                             "move it away or point --p2p-db elsewhere") from None

    def _versions(self) -> tuple[int, int]:
        version = self._retry(lambda: self.db.execute("PRAGMA user_version").fetchone()[0])
        app = self.db.execute("PRAGMA application_id").fetchone()[0]
        return int(version), int(app)

    def _has_foreign_tables(self) -> bool:
        rows = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return bool(rows)

    def _retry(self, fn: Callable[[], Any], tries: int = 50) -> Any:
        for attempt in range(tries):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or attempt == tries - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with ``BEGIN IMMEDIATE`` so writers queue instead of deadlocking."""
        self._retry(lambda: self.db.execute("BEGIN IMMEDIATE"))
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self._retry(lambda: self.db.execute("COMMIT"))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------
    def save_run_dir(self, run_dir: str | Path) -> str:
        """Save one campaign results directory (idempotent: a run id already stored is kept as is)."""
        run_dir = Path(run_dir)
        run = load_run(run_dir)
        fp = build_fingerprint(run_dir)
        rows: list[MetricRow] = []
        root = run_dir / "scenarios"
        for sdir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            agg_path = sdir / "aggregate.json"
            if not agg_path.exists():
                continue
            rows.extend(aggregate_rows(read_json(agg_path, "scenario aggregate"), sdir.name, agg_path))
        return self.save(run, fp, rows, source_dir=str(run_dir.resolve()))

    def save(self, run: dict[str, Any], fingerprint: dict[str, Any], rows: Sequence[MetricRow],
             *, source_dir: str | None = None) -> str:
        run_id = str(run["run_id"])
        with self.write() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                return run_id
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, run["rig"], run["pair"].get("key"), pair_ident(run), run.get("kind"),
                 run.get("started_at"), _now(), int(bool(fingerprint.get("simulated"))), run.get("status"),
                 source_dir, json.dumps(fingerprint, sort_keys=True, default=str)))
            db.executemany(
                "INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?)",
                [(run_id, r.arm, r.point, r.metric, r.n, r.mean, r.std, r.median, json.dumps(r.values))
                 for r in rows])
        return run_id

    def accept(self, run_id: str, name: str, note: str | None = None) -> None:
        with self.write() as db:
            if not db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise StoreError(f"no run {run_id!r} in {self.path} (see 'python -m pytest_p2p baseline list')")
            db.execute("INSERT OR REPLACE INTO baselines (name, run_id, accepted_at, note) VALUES (?,?,?,?)",
                       (name, run_id, _now(), note))

    def reject(self, run_id: str, name: str) -> bool:
        with self.write() as db:
            cur = db.execute("DELETE FROM baselines WHERE name = ? AND run_id = ?", (name, run_id))
            return cur.rowcount > 0

    # -- reading -------------------------------------------------------------------------
    def _record(self, row: sqlite3.Row | tuple[Any, ...]) -> RunRecord:
        names = tuple(r[0] for r in self.db.execute(
            "SELECT name FROM baselines WHERE run_id = ? ORDER BY name", (row[0],)).fetchall())
        return RunRecord(run_id=row[0], rig=row[1], pair_key=row[2], pair_ident=row[3], kind=row[4],
                         started_at=row[5], saved_at=row[6], simulated=bool(row[7]), status=row[8],
                         source_dir=row[9], fingerprint=json.loads(row[10]), baselines=names)

    def run(self, run_id: str) -> RunRecord:
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            # a literal prefix: LIKE would read the '_' of every run id as a wildcard
            matches = self.db.execute("SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id",
                                      (len(run_id), run_id)).fetchall()
            if len(matches) == 1:
                return self._record(matches[0])
            hint = f" ({len(matches)} runs start with it)" if matches else ""
            raise StoreError(f"no run {run_id!r} in {self.path}{hint}")
        return self._record(row)

    def runs(self, *, name: str | None = None, rig: str | None = None) -> list[RunRecord]:
        sql, args = "SELECT r.* FROM runs r", []
        where = []
        if name is not None:
            sql += " JOIN baselines b ON b.run_id = r.run_id"
            where.append("b.name = ?")
            args.append(name)
        if rig is not None:
            where.append("r.rig = ?")
            args.append(rig)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.started_at, r.run_id"
        return [self._record(row) for row in self.db.execute(sql, args).fetchall()]

    def baseline_names(self) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self.db.execute(
            "SELECT name, count(*) FROM baselines GROUP BY name ORDER BY name").fetchall()]

    def baseline_runs(self, name: str, rig: str, ident: str, kind: str | None, depth: int,
                      exclude: str | None = None) -> list[RunRecord]:
        """The ``depth`` most recent runs accepted under ``name`` for this rig, pair and kind."""
        rows = self.db.execute(
            "SELECT r.* FROM runs r JOIN baselines b ON b.run_id = r.run_id "
            "WHERE b.name = ? AND r.rig = ? AND r.pair_ident = ? AND r.kind IS ? AND r.run_id IS NOT ? "
            "ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?",
            (name, rig, ident, kind, exclude, depth)).fetchall()
        return [self._record(row) for row in rows]

    def metrics(self, run_id: str, arm: str | None = None, point: str | None = None) -> list[MetricRow]:
        sql = "SELECT arm, point, metric, n, mean, std, median, vals FROM results WHERE run_id = ?"
        args: list[Any] = [run_id]
        if arm is not None:
            sql += " AND arm = ?"
            args.append(arm)
        if point is not None:
            sql += " AND point = ?"
            args.append(point)
        return [MetricRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]))
                for r in self.db.execute(sql + " ORDER BY arm, point, metric", args).fetchall()]

    def export(self) -> dict[str, Any]:
        """Everything, as JSON-able data (for archiving or another tool)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "runs": [{**rec.__dict__, "baselines": list(rec.baselines),
                      "metrics": [m.__dict__ for m in self.metrics(rec.run_id)]} for rec in self.runs()],
            "baselines": {name: [r.run_id for r in self.runs(name=name)] for name, _ in self.baseline_names()},
        }


def aggregate_rows(agg: Any, scenario: str, where: Path | str) -> list[MetricRow]:
    """Metric rows of one ``aggregate.json`` (``arm``/``point`` from the file, else the directory name)."""
    if not isinstance(agg, dict) or not isinstance(agg.get("metrics"), dict):
        raise StoreError(f"{where}: expected an object with a 'metrics' mapping")
    default_arm, _, default_point = scenario.rpartition("-")
    arm, point = str(agg.get("arm") or default_arm), str(agg.get("point") or default_point)
    rows = []
    for metric, m in agg["metrics"].items():
        if not isinstance(m, dict):
            raise StoreError(f"{where}: metrics.{metric}: expected an object with mean/std/values")
        values = [float(x) for x in (m.get("values") or []) if isinstance(x, (int, float))]
        n = int(m.get("n") or len(values))
        rows.append(MetricRow(arm, point, str(metric), n, _f(m.get("mean")), _f(m.get("std")),
                              _f(m.get("median")), values))
    return rows


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
