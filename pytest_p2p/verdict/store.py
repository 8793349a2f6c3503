"""The baseline store: run history and named baselines, in SQLite or in PostgreSQL.

Rows are keyed by rig, pair identity (bus ids, see ``fingerprint.pair_ident``), arm,
point and metric — never by pytest node ids, which change with file layout and
parametrisation. Every saved run stays in ``runs`` (history); a named baseline
(``accepted``, ``pre-driver-upgrade``) is a set of accepted run ids.

Where it lives: a path is an embedded SQLite file (``store_sqlite``, the default
``.p2p/history.db``); a ``postgresql://`` URL is a database that a fleet of CI runners
shares (``store_postgres``, docs/fleet.md). Both hold the same schema, serialise writers
across processes, write each campaign in one transaction (its run, its metric rows and
its acceptance), and refuse a damaged, foreign or newer store without touching it. Every
driver error becomes a one-paragraph :class:`~pytest_p2p.errors.StoreError` naming the
store (a URL only through :func:`redact`) and what to do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeGuard

from ..errors import P2PError, StoreError
from ..jsontypes import as_dict, as_floats
from ..results.read import RunReader, aggregates, run_record
from .fingerprint import build_fingerprint, pair_ident
from .store_base import (
    ANY_URL,
    N_RUN_COLUMNS,
    RESULT_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    Backend,
    MetricRow,
    RunRecord,
    StoreMissing,
    StoreSaveError,
    is_url,
    redact,
    target_of,
)
from .store_design import run_design, value_starts
from .store_sqlite import APPLICATION_ID, BUSY_TIMEOUT_MS, MIGRATIONS, SqliteBackend, _v1, _v2, _v3
from .store_transfer import StoreExport, export_store, import_store

__all__ = ["APPLICATION_ID", "BUSY_TIMEOUT_MS", "MIGRATIONS", "SCHEMA_VERSION", "Store",
           "StoreMissing", "StoreSaveError", "_v1", "_v2", "_v3", "aggregate_rows", "exists", "is_url", "redact",
           "save_campaign_runs", "target_of"]


_R = ", ".join(f"r.{c}" for c in RUN_COLUMNS.split(", "))  # the runs columns of a join, aliased ``r``


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """One open store. Use as a context manager or call :meth:`close`.

    ``target`` is an SQLite path or a PostgreSQL URL; ``where`` is how to show it (redacted).
    """

    def __init__(self, path: str | Path, *, create: bool = True, timeout_s: float | None = None) -> None:
        timeout = BUSY_TIMEOUT_MS / 1000 if timeout_s is None else timeout_s
        self.backend: Backend
        self.path: Path | None
        if is_url(path):
            from .store_postgres import PostgresBackend

            self.path = None
            self.backend = PostgresBackend(str(path), create=create, timeout_s=timeout)
        elif isinstance(path, str) and ANY_URL.match(path):
            target_of(path, Path.cwd())  # raises: a URL of a scheme we do not speak
            raise AssertionError(path)
        else:
            self.path = Path(path)
            self.backend = SqliteBackend(self.path, create=create, timeout_s=timeout)
        self.where = self.backend.where

    @property
    def db(self) -> sqlite3.Connection:
        """The SQLite connection (the SQLite backend only: for tests and one-off inspection)."""
        if not isinstance(self.backend, SqliteBackend):
            raise StoreError(f"baseline database {self.where} is not an SQLite file")
        return self.backend.db

    @contextmanager
    def write(self, action: str = "writing") -> Iterator[Backend]:
        """One write transaction: all of it is stored, or (on any error) none of it."""
        with self.backend.guard(action), self.backend.transaction():
            yield self.backend

    @contextmanager
    def _reading(self, action: str) -> Iterator[Backend]:
        with self.backend.guard(action):
            yield self.backend

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------
    def save_run_dir(self, run_dir: str | Path, *, accept: str | None = None, note: str | None = None) -> str:
        """Save one campaign results directory (and accept it under ``accept``) in one transaction.

        Idempotent: a run id already stored is kept as is (and only accepted).
        """
        run_dir = Path(run_dir)
        run = run_record(run_dir)
        fp = build_fingerprint(run_dir)
        rows: list[MetricRow] = []
        reader = RunReader(run_dir)
        for arm, point, agg_path, agg in aggregates(run_dir):
            rows.extend(with_starts(aggregate_rows(agg, agg_path.parent.name, agg_path), reader, arm, point, agg))
        return self.save(run, fp, rows, source_dir=str(run_dir.resolve()), accept=accept, note=note,
                         design=run_design(run))

    def save(self, run: Mapping[str, object], fingerprint: Mapping[str, object], rows: Sequence[MetricRow],
             *, source_dir: str | None = None, accept: str | None = None, note: str | None = None,
             design: str | None = None) -> str:
        run_id = str(run["run_id"])
        with self.write(f"saving run {run_id}") as db:
            if not db.query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
                db.execute(
                    f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, run["rig"], as_dict(run["pair"]).get("key"), pair_ident(run), run.get("kind"),
                     run.get("started_at"), _now(), int(bool(fingerprint.get("simulated"))), run.get("status"),
                     source_dir, json.dumps(fingerprint, sort_keys=True, default=str), design))
                db.executemany(
                    f"INSERT INTO results ({RESULT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(run_id, r.arm, r.point, r.metric, r.n, r.mean, r.std, r.median, json.dumps(r.values),
                      _json_ints(r.starts), _json_ints(r.reps)) for r in rows])
                _adopt_saved_before(db, str(run["rig"]), fingerprint)
            if accept is not None:
                self._accept(db, run_id, accept, note)
        return run_id

    def save_runs(self, run_dirs: Iterable[str | Path], *, accept: str | None = None) -> list[str]:
        """Save several campaign runs; if any fails, :class:`StoreSaveError` says which and why.

        Each run is its own transaction, so one bad results directory does not cost the others.
        """
        saved: list[str] = []
        failed: list[tuple[str, str]] = []
        for run_dir in run_dirs:
            try:
                saved.append(self.save_run_dir(run_dir, accept=accept))
            except P2PError as exc:
                failed.append((str(run_dir), str(exc)))
        if failed:
            causes = list(dict.fromkeys(msg for _, msg in failed))
            raise StoreSaveError(self.where, saved, [d for d, _ in failed],
                                 causes[0] + (f" (and {len(causes) - 1} other error(s))" if len(causes) > 1 else ""))
        return saved

    def _accept(self, db: Backend, run_id: str, name: str, note: str | None, at: str | None = None) -> None:
        if not db.query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
            raise StoreError(f"no run {run_id!r} in {self.where} (see 'python -m pytest_p2p baseline list')")
        db.execute("INSERT INTO baselines (name, run_id, accepted_at, note) VALUES (?,?,?,?) "
                   "ON CONFLICT (name, run_id) DO UPDATE SET accepted_at = excluded.accepted_at, "
                   "note = excluded.note", (name, run_id, at or _now(), note))

    def accept(self, run_id: str, name: str, note: str | None = None) -> None:
        with self.write(f"accepting run {run_id} into {name!r}") as db:
            self._accept(db, run_id, name, note)

    def reject(self, run_id: str, name: str) -> bool:
        with self.write(f"rejecting run {run_id} from {name!r}") as db:
            return db.execute("DELETE FROM baselines WHERE name = ? AND run_id = ?", (name, run_id)) > 0

    # -- reading -------------------------------------------------------------------------
    def _record(self, row: Sequence[object]) -> RunRecord:
        return self._records([row])[0]

    def _records(self, rows: Sequence[Sequence[object]]) -> list[RunRecord]:
        """Rows of ``runs`` with their baseline names, in one query per 500 runs (not one per run:
        a fleet database may be a network round trip away)."""
        names: dict[str, list[str]] = {}
        ids = [str(r[0]) for r in rows]
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for run_id, name in self.backend.query(
                    "SELECT run_id, name FROM baselines WHERE run_id IN (" + ",".join("?" * len(chunk)) + ") "
                    "ORDER BY run_id, name", chunk):
                names.setdefault(str(run_id), []).append(str(name))
        return [RunRecord(run_id=_text(row[0]), rig=_text(row[1]), pair_key=_opt_text(row[2]),
                          pair_ident=_text(row[3]), kind=_opt_text(row[4]), started_at=_opt_text(row[5]),
                          saved_at=_text(row[6]), simulated=bool(row[7]), status=_opt_text(row[8]),
                          source_dir=_opt_text(row[9]), fingerprint=as_dict(json.loads(_text(row[10]))),
                          baselines=tuple(names.get(str(row[0]), ())), design=_opt_text(row[11])) for row in rows]

    def run(self, run_id: str) -> RunRecord:
        with self._reading(f"reading run {run_id}") as db:
            rows = db.query(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
            if rows:
                return self._record(rows[0])
            # a literal prefix: LIKE would read the '_' of every run id as a wildcard
            matches = db.query(f"SELECT {RUN_COLUMNS} FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id",
                               (len(run_id), run_id))
            if len(matches) == 1:
                return self._record(matches[0])
        hint = f" ({len(matches)} runs start with it)" if matches else ""
        raise StoreError(f"no run {run_id!r} in {self.where}{hint}")

    def runs(self, *, name: str | None = None, rig: str | None = None) -> list[RunRecord]:
        sql, args = f"SELECT {_R} FROM runs r", []
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
        with self._reading("listing runs") as db:
            return self._records(db.query(sql, args))

    def baseline_names(self) -> list[tuple[str, int]]:
        with self._reading("listing baselines") as db:
            return [(str(r[0]), self._count(r[1], "baselines")) for r in db.query(
                "SELECT name, count(*) FROM baselines GROUP BY name ORDER BY name")]

    def baseline_entries(self) -> list[tuple[str, str, str, str | None]]:
        """Every acceptance: ``(name, run_id, accepted_at, note)``."""
        with self._reading("listing baselines") as db:
            return [(str(r[0]), str(r[1]), str(r[2]), _opt_text(r[3])) for r in db.query(
                "SELECT name, run_id, accepted_at, note FROM baselines ORDER BY name, run_id")]

    def baseline_runs(self, name: str, rig: str, ident: str, kind: str | None, depth: int,
                      exclude: str | None = None) -> list[RunRecord]:
        """The ``depth`` most recent runs accepted under ``name`` for this rig, pair and kind."""
        b = self.backend
        with self._reading(f"reading baseline {name!r}") as db:
            rows = db.query(
                f"SELECT {_R} FROM runs r JOIN baselines b ON b.run_id = r.run_id "
                f"WHERE b.name = ? AND r.rig = ? AND r.pair_ident = ? AND r.kind {b.null_safe_eq} ? "
                f"AND r.run_id {b.null_safe_ne} ? ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?",
                (name, rig, ident, kind, exclude, depth))
            return self._records(rows)

    def history(self, rig: str, ident: str, kind: str | None, arm: str, point: str, metric: str,
                limit: int) -> list[tuple[RunRecord, MetricRow]]:
        """The ``limit`` newest stored runs (accepted or not) of this rig, pair and kind with ``metric`` at
        ``arm``/``point``, oldest first: the series that change points are found in (verdict/history.py).

        One query for the rows and one per 500 runs for their baselines, on either backend.
        """
        b = self.backend
        with self._reading(f"reading the history of {metric} {point} {arm}") as db:
            rows = db.query(
                f"SELECT {_R}, s.n, s.mean, s.std, s.median, s.vals, s.starts, s.reps FROM runs r "
                "JOIN results s ON s.run_id = r.run_id "
                f"WHERE r.rig = ? AND r.pair_ident = ? AND r.kind {b.null_safe_eq} ? AND s.arm = ? AND s.point = ? "
                "AND s.metric = ? ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?",
                (rig, ident, kind, arm, point, metric, limit))
            recs = self._records([r[:N_RUN_COLUMNS] for r in rows])
        out = [(rec, self._metric_row((arm, point, metric, *r[N_RUN_COLUMNS:])))
               for rec, r in zip(recs, rows, strict=True)]
        return out[::-1]

    def acceptances(self, name: str, run_ids: Sequence[str]) -> dict[str, str | None]:
        """``run_id -> note`` of the runs among ``run_ids`` accepted under ``name``."""
        got: dict[str, str | None] = {}
        ids = list(run_ids)
        with self._reading(f"reading baseline {name!r}") as db:
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                for run_id, note in db.query(
                        "SELECT run_id, note FROM baselines WHERE name = ? AND run_id IN ("
                        + ",".join("?" * len(chunk)) + ")", [name, *chunk]):
                    got[str(run_id)] = _opt_text(note)
        return got

    def metrics(self, run_id: str, arm: str | None = None, point: str | None = None) -> list[MetricRow]:
        sql = f"SELECT {RESULT_COLUMNS[len('run_id, '):]} FROM results WHERE run_id = ?"
        args: list[object] = [run_id]
        if arm is not None:
            sql += " AND arm = ?"
            args.append(arm)
        if point is not None:
            sql += " AND point = ?"
            args.append(point)
        with self._reading(f"reading the metrics of run {run_id}") as db:
            return [self._metric_row(r) for r in db.query(sql + " ORDER BY arm, point, metric", args)]

    def _metric_row(self, r: Sequence[object]) -> MetricRow:
        """``arm, point, metric, n, mean, std, median, vals, starts, reps`` of a results row."""
        return MetricRow(_text(r[0]), _text(r[1]), _text(r[2]), self._count(r[3], "results.n"),
                         self._real(r[4]), self._real(r[5]), self._real(r[6]), as_floats(json.loads(_text(r[7]))),
                         self._ints(r[8], "results.starts"), self._ints(r[9], "results.reps"))

    def _ints(self, value: object, column: str) -> list[int] | None:
        """A JSON list of integers (schema v3's ``starts`` and ``reps``), or NULL."""
        if value is None:
            return None
        try:
            got = json.loads(_text(value))
        except ValueError:
            got = None
        if isinstance(got, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in got):
            return [int(x) for x in got]
        raise StoreError(f"baseline database {self.where}: {column} holds {value!r:.40}, not a list of integers "
                         "(a damaged or foreign store)")

    def _count(self, value: object, column: str) -> int:
        """An integer column (the schema's ``{int}``, never NULL where this reads it)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise StoreError(f"baseline database {self.where}: {column} holds {value!r:.40}, not an integer "
                         "(a damaged or foreign store)")

    def _real(self, value: object) -> float | None:
        """A ``{real}`` column: a number or NULL."""
        if value is None or isinstance(value, float):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        raise StoreError(f"baseline database {self.where}: results holds {value!r:.40}, not a number "
                         "(a damaged or foreign store)")

    def export(self, *, rig: str | None = None) -> StoreExport:
        """Everything (or one rig's history), as JSON-able data: ``baseline export`` / ``import``."""

        return export_store(self, rig=rig)

    def import_data(self, data: object, *, source: str = "export") -> tuple[int, int, int]:
        """Add an :meth:`export` (of either backend) in one transaction: (runs added, already there, acceptances)."""
        return import_store(self, data, source=source)


def _adopt_saved_before(db: Backend, rig: str, fingerprint: Mapping[str, object]) -> None:
    """Runs of ``rig`` saved before content digests, whose rig file had tonight's bytes, take tonight's digest of
    what the file says (their own stays, as ``rig_file_digest``).

    Why: those runs name the rig file by its bytes only (``rig_digest``), so they match tonight while the file is
    byte for byte the same (``fingerprint.same_rig_file``), and a later comment edit would have cut them off the
    chain of nights and the baseline. The same bytes say the same thing, so the rewrite only completes what the
    run would have recorded; nothing it measured changes."""
    says, file = fingerprint.get("rig_digest"), fingerprint.get("rig_file_digest")
    if not says or not file or says == file:
        return
    like = f'%"rig_digest": {json.dumps(file)}%'  # how save() writes it: only candidates leave the database
    for run_id, text in db.query("SELECT run_id, fingerprint FROM runs WHERE rig = ? AND fingerprint LIKE ?",
                                 (rig, like)):
        try:
            fp = json.loads(_text(text))
        except ValueError:
            continue  # a damaged fingerprint is left as it is: the readers say so where they meet it
        if isinstance(fp, dict) and fp.get("rig_digest") == file and fp.get("rig_file_digest") is None:
            db.execute("UPDATE runs SET fingerprint = ? WHERE run_id = ?",
                       (json.dumps({**fp, "rig_digest": says, "rig_file_digest": file}, sort_keys=True, default=str),
                        run_id))


def exists(target: str | Path) -> bool:
    """Whether a store is already there (a PostgreSQL URL is asked; an unreachable server raises StoreError)."""
    if not is_url(target):
        return Path(target).is_file()
    try:
        Store(target, create=False).close()
    except StoreMissing:
        return False
    return True


def save_campaign_runs(target: str | Path, run_dirs: Iterable[str | Path], *, accept: str | None = None,
                       timeout_s: float | None = None) -> list[str]:
    """Open the store, save the runs, close it; any failure (opening included) is one :class:`StoreSaveError`.

    The verdict hooks call this at session end, in each xdist worker for its own runs.
    """
    dirs = [str(d) for d in run_dirs]
    if not dirs:
        return []
    try:
        store = Store(target, create=True, timeout_s=timeout_s)
    except P2PError as exc:
        raise StoreSaveError(redact(target), [], dirs, str(exc)) from None
    with store:
        return store.save_runs(dirs, accept=accept)


def aggregate_rows(agg: object, scenario: str, where: Path | str) -> list[MetricRow]:
    """Metric rows of one ``aggregate.json`` (``arm``/``point`` from the file, else the directory name)."""
    metrics = agg.get("metrics") if isinstance(agg, dict) else None
    if not isinstance(agg, dict) or not isinstance(metrics, dict):
        raise StoreError(f"{where}: expected an object with a 'metrics' mapping")
    default_arm, _, default_point = scenario.rpartition("-")
    arm, point = str(agg.get("arm") or default_arm), str(agg.get("point") or default_point)
    rows = []
    for metric, m in metrics.items():
        if not isinstance(m, dict):
            raise StoreError(f"{where}: metrics.{metric}: expected an object with mean/std/values")
        raw = m.get("values")
        values = [float(x) for x in (raw if isinstance(raw, list) else []) if _number(x)]
        n_raw = m.get("n")
        n = n_raw if isinstance(n_raw, int) and not isinstance(n_raw, bool) and 0 < n_raw < 2**62 else len(values)
        rows.append(MetricRow(arm, point, str(metric), n, _f(m.get("mean")), _f(m.get("std")),
                              _f(m.get("median")), values))
    return rows


def _number(x: object) -> TypeGuard[int | float]:
    """A finite int or float (not a bool, not an integer too large for a float)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _f(x: object) -> float | None:
    """A finite number, else None (SQLite stores NaN as NULL; PostgreSQL would keep it: same on both)."""
    return float(x) if _number(x) else None


def with_starts(rows: list[MetricRow], reader: RunReader, arm: str, point: str, agg: Mapping[str, object],
                ) -> list[MetricRow]:
    """The rows of one scenario with each value's server start and rep (:func:`store_design.value_starts`).

    Rep files that cannot be read leave the rows without starts: what the aggregate states is still
    saved, and a prior is only ever learned from starts that are known."""
    try:
        reps = reader.reps(arm, point)
    except (P2PError, OSError):
        return rows
    out = []
    for r in rows:
        got = value_starts(reps, agg, r.metric, r.values)
        out.append(r if got is None else dataclasses.replace(r, starts=got[0], reps=got[1]))
    return out


def _json_ints(xs: list[int] | None) -> str | None:
    return None if xs is None else json.dumps(xs)


def _text(value: object) -> str:
    """A text column as text (what both drivers return for one; ``str`` keeps that as is)."""
    return value if isinstance(value, str) else str(value)


def _opt_text(value: object) -> str | None:
    """A nullable text column."""
    return None if value is None else _text(value)
