"""Moving a history between stores: ``baseline export`` and ``baseline import``.

Why: a rig's SQLite history (``.p2p/history.db`` of a workstation or a persistent runner)
has to move to the fleet's PostgreSQL database when the rig joins the fleet, and back
(a copy to investigate offline, or a rig that leaves). The export is plain JSON with every
column of every row — run, metric rows, and each acceptance with its time and note — so
an import reproduces the same history and therefore the same verdicts, whichever backend
it came from or goes to.

An import is one transaction: a file with one bad row adds nothing. It is idempotent: runs
already in the target are kept as they are (run ids are unique per campaign), their
acceptances added. A file from a newer schema, or not an export, is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import Protocol, TypedDict

from ..errors import StoreError
from ..jsontypes import JSONObject
from .store_base import RESULT_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION, Backend, MetricRow, RunRecord

FORMAT = "pytest-p2p-baseline-export"

#: one row of each table, in column order, as an import writes it
RunRow = tuple[str, str, str | None, str, str | None, str | None, str, int, str | None, str | None, str, str | None]
ResultRow = tuple[str, str, str, str, int, float | None, float | None, float | None, str, str | None, str | None]
AcceptanceRow = tuple[str, str, str, str | None]


class Transferable(Protocol):
    """What an export reads of a ``store.Store`` and an import writes through, and nothing else.

    Why a Protocol: ``Store.export`` and ``Store.import_data`` call this module, so naming the
    facade here made the store and its transfer an import cycle (issue 25).
    """

    def runs(self, *, name: str | None = None, rig: str | None = None) -> list[RunRecord]: ...

    def baseline_entries(self) -> list[tuple[str, str, str, str | None]]: ...

    def metrics(self, run_id: str, arm: str | None = None, point: str | None = None) -> list[MetricRow]: ...

    def write(self, action: str = "writing") -> AbstractContextManager[Backend]: ...


class Acceptance(TypedDict):
    name: str
    run_id: str
    accepted_at: str
    note: str | None


class StoreExport(TypedDict):
    """What ``baseline export`` writes (an import reads it back as plain JSON and checks every field)."""

    format: str
    schema_version: int
    exported_at: str
    rig: str | None
    runs: list[JSONObject]  # every RunRecord field, "baselines" as a list, "metrics" as MetricRow fields
    baselines: dict[str, list[str]]  # name -> run ids, in history order
    acceptances: list[Acceptance]


def export_store(store: Transferable, *, rig: str | None = None) -> StoreExport:
    runs = store.runs(rig=rig)
    ids = {r.run_id for r in runs}
    entries = [e for e in store.baseline_entries() if e[1] in ids]
    names: dict[str, list[str]] = {}
    for rec in runs:  # in history order, as before
        for name in rec.baselines:
            names.setdefault(name, []).append(rec.run_id)
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "exported_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rig": rig,
        "runs": [{**rec.__dict__, "baselines": list(rec.baselines),
                  "metrics": [m.__dict__ for m in store.metrics(rec.run_id)]} for rec in runs],
        "baselines": dict(sorted(names.items())),
        "acceptances": [{"name": n, "run_id": r, "accepted_at": at, "note": note} for n, r, at, note in entries],
    }


class _Reader:
    """Typed access to the parsed JSON, with errors that name the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, what: str) -> StoreError:
        return StoreError(f"{self.source}: {path}: {what} — not a pytest-p2p baseline export, or edited; "
                          "nothing was imported")

    def obj(self, x: object, path: str) -> JSONObject:
        if not isinstance(x, dict):
            raise self.fail(path, f"expected an object, got {type(x).__name__}")
        return x

    def lst(self, x: object, path: str) -> list[object]:
        if not isinstance(x, list):
            raise self.fail(path, f"expected a list, got {type(x).__name__}")
        return x

    def text(self, d: Mapping[str, object], key: str, path: str, *, optional: bool = False) -> str | None:
        x = d.get(key)
        if x is None and optional:
            return None
        if not isinstance(x, str) or len(x) > 100_000:
            raise self.fail(f"{path}.{key}", f"expected a string, got {type(x).__name__}")
        return x

    def req(self, d: Mapping[str, object], key: str, path: str) -> str:
        got = self.text(d, key, path)
        assert got is not None
        return got

    def num(self, x: object, path: str) -> float | None:
        if x is None:
            return None
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise self.fail(path, f"expected a number or null, got {type(x).__name__}")
        try:
            f = float(x)
        except OverflowError:
            raise self.fail(path, "number out of range") from None
        return f if math.isfinite(f) else None

    def aligned(self, x: object, values: list[float | None], path: str) -> str | None:
        """A v3 ``starts``/``reps`` list (JSON text for the column): integers aligned with ``values``, or null.

        An export of an older pytest-p2p has neither: NULL, as a migrated store reads them. A value
        that was dropped as not finite takes its start along, so the two stay aligned."""
        if x is None:
            return None
        items = self.lst(x, path)
        if len(items) != len(values):
            raise self.fail(path, f"{len(items)} entries for {len(values)} values")
        return json.dumps([self.count(v, f"{path}[{k}]") for k, v in enumerate(items) if values[k] is not None])

    def count(self, x: object, path: str) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 2**62:
            raise self.fail(path, f"expected a count, got {x!r:.40}")
        return x


def _rows(data: object, source: str) -> tuple[list[RunRow], list[ResultRow], list[AcceptanceRow]]:
    """(runs rows, results rows, baselines rows) of an export, all checked before anything is written."""
    rd = _Reader(source)
    top = rd.obj(data, "(top)")
    version = top.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise rd.fail("schema_version", "missing")
    if version > SCHEMA_VERSION:
        raise StoreError(f"{source}: exported from schema version {version}, newer than this pytest-p2p "
                         f"understands ({SCHEMA_VERSION}); upgrade pytest-p2p — nothing was imported")
    exported = top.get("exported_at")
    exported_at = exported if isinstance(exported, str) else None
    runs: list[RunRow] = []
    results: list[ResultRow] = []
    accepted: list[AcceptanceRow] = []
    for i, item in enumerate(rd.lst(top.get("runs"), "runs")):
        p = f"runs[{i}]"
        r = rd.obj(item, p)
        fp = rd.obj(r.get("fingerprint"), f"{p}.fingerprint")
        run_id = rd.req(r, "run_id", p)
        run: RunRow = (run_id, rd.req(r, "rig", p), rd.text(r, "pair_key", p, optional=True),
                       rd.req(r, "pair_ident", p), rd.text(r, "kind", p, optional=True),
                       rd.text(r, "started_at", p, optional=True), rd.req(r, "saved_at", p),
                       int(bool(r.get("simulated"))), rd.text(r, "status", p, optional=True),
                       rd.text(r, "source_dir", p, optional=True), json.dumps(fp, sort_keys=True, default=str),
                       rd.text(r, "design", p, optional=True))  # absent from a pre-v3 export: NULL
        runs.append(run)
        for j, metric in enumerate(rd.lst(r.get("metrics", []), f"{p}.metrics")):
            q = f"{p}.metrics[{j}]"
            m = rd.obj(metric, q)
            values = [rd.num(v, f"{q}.values[{k}]") for k, v in enumerate(rd.lst(m.get("values", []), f"{q}.values"))]
            results.append((run_id, rd.req(m, "arm", q), rd.req(m, "point", q), rd.req(m, "metric", q),
                            rd.count(m.get("n"), f"{q}.n"), rd.num(m.get("mean"), f"{q}.mean"),
                            rd.num(m.get("std"), f"{q}.std"), rd.num(m.get("median"), f"{q}.median"),
                            json.dumps([v for v in values if v is not None]),
                            rd.aligned(m.get("starts"), values, f"{q}.starts"),
                            rd.aligned(m.get("reps"), values, f"{q}.reps")))
        if "acceptances" not in top:  # an export of an older pytest-p2p: names only
            for name in rd.lst(r.get("baselines", []), f"{p}.baselines"):
                if not isinstance(name, str):
                    raise rd.fail(f"{p}.baselines", "expected names")
                accepted.append((name, run_id, exported_at or run[6], None))  # run[6]: its saved_at
    known = {row[0] for row in runs}
    for i, item in enumerate(rd.lst(top.get("acceptances", []), "acceptances")):
        p = f"acceptances[{i}]"
        a = rd.obj(item, p)
        run_id = rd.req(a, "run_id", p)
        if run_id not in known:
            raise rd.fail(f"{p}.run_id", f"run {run_id!r} is not in the file")
        accepted.append((rd.req(a, "name", p), run_id, rd.req(a, "accepted_at", p),
                         rd.text(a, "note", p, optional=True)))
    if len(known) != len(runs):
        raise rd.fail("runs", "a run id appears twice")
    return runs, results, accepted


def import_store(store: Transferable, data: object, *, source: str) -> tuple[int, int, int]:
    """Add an export to ``store`` in one transaction; (runs added, runs already there, acceptances added)."""
    from .config import check_name

    runs, results, accepted = _rows(data, source)
    for name, *_ in accepted:
        check_name(name, source, "acceptances")
    added, present, acc = 0, 0, 0
    with store.write(f"importing {source}") as db:
        new: set[str] = set()
        for row in runs:
            if db.query("SELECT 1 FROM runs WHERE run_id = ?", (row[0],)):
                present += 1
                continue
            db.execute(f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row)
            new.add(row[0])
            added += 1
        db.executemany(f"INSERT INTO results ({RESULT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       [r for r in results if r[0] in new])
        for acceptance in accepted:
            acc += db.execute("INSERT INTO baselines (name, run_id, accepted_at, note) VALUES (?,?,?,?) "
                              "ON CONFLICT (name, run_id) DO NOTHING", acceptance)
    return added, present, acc
