"""The one reader of the results directory (names: :mod:`.layout`; the one writer: :mod:`.write`).

The verdict, the report, the baseline store and the p2p-bench reader all read run directories,
possibly written on another machine or cut off by a full disk. Four readers once treated a bad
file four ways (a traceback, ``None``, a skipped scenario, a message); here a file that cannot be
used is always a :class:`~pytest_p2p.errors.ResultsError` naming the file and what is wrong with
it, and an absent optional file is ``None``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import ResultsError
from ..jsontypes import JSONObject, JSONValue, as_dict
from .layout import (
    AGGREGATE,
    REP_RE,
    RUN_META,
    SCENARIOS,
    TELEMETRY_RE,
    RunHead,
    scenario_name,
    split_scenario,
)

MAX_JSON_BYTES = 32 * 1024 * 1024  # far above any file we write: a bigger one is not ours


def read_json(path: Path) -> JSONValue:
    """One JSON file of a results directory; missing, unreadable, oversized or corrupt is a ResultsError."""
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise ResultsError(f"{path}: larger than {MAX_JSON_BYTES // 2**20} MiB: not a results file")
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ResultsError(f"{path}: file not found") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: corrupt JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
                           "restore the file, or delete it and re-run what wrote it") from None
    except RecursionError:
        raise ResultsError(f"{path}: corrupt JSON (nested too deeply)") from None


def read_object(path: Path) -> JSONObject:
    """A JSON file that must hold an object (every file of a run directory does)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return as_dict(data)


def optional_object(path: Path) -> JSONObject | None:
    """:func:`read_object`, or ``None`` when the file is absent (a bad file still raises)."""
    return read_object(path) if path.is_file() else None


def is_run_dir(path: Path) -> bool:
    """A directory the campaign wrote (it holds ``run.json``)."""
    return (path / RUN_META).is_file()


def run_meta(run_dir: Path) -> JSONObject:
    """``run.json`` as written (the status, decisions and notes of a run that is still going included)."""
    return read_object(run_dir / RUN_META)


def run_record(run_dir: Path) -> JSONObject:
    """``run.json`` with what a stored run needs checked: ``run_id``, ``rig`` and the pair's two GPUs."""
    run = run_meta(run_dir)
    where = run_dir / RUN_META
    for key in ("run_id", "rig", "pair"):
        if key not in run:
            raise ResultsError(f"{where}: field {key!r} is missing")
    gpus = run["pair"].get("gpus") if isinstance(run["pair"], dict) else None
    if not isinstance(gpus, list) or len(gpus) != 2 or not all(isinstance(g, dict) for g in gpus):
        raise ResultsError(f"{where}: pair.gpus must list the pair's two GPUs")
    return run


def run_head(run_dir: Path) -> RunHead:
    """What names the run (``run_id``, ``rig``, ``kind``, ``status``, ``pair.key``), typed: a field present
    with another type is a ResultsError naming it, so a label or a trend never shows ``None`` or a dict."""
    meta = run_meta(run_dir)

    def wrong(key: str, value: object, want: str) -> ResultsError:
        return ResultsError(f"{run_dir / RUN_META}: field {key!r}: expected {want}, got {type(value).__name__}")

    def text(key: str, value: object) -> str:
        if isinstance(value, str):
            return value
        raise wrong(key, value, "a string")

    pair = meta.get("pair", {})
    if not isinstance(pair, dict):
        raise wrong("pair", pair, "an object")
    head: RunHead = {"pair": {"key": text("pair.key", as_dict(pair).get("key", ""))}}
    if "run_id" in meta:
        head["run_id"] = text("run_id", meta["run_id"])
    if "rig" in meta:
        head["rig"] = text("rig", meta["rig"])
    if "kind" in meta:
        head["kind"] = text("kind", meta["kind"])
    if "status" in meta:
        head["status"] = text("status", meta["status"])
    return head


def scenario_dirs(run_dir: Path) -> list[tuple[str, str, Path]]:
    """``(arm, point, directory)`` of every scenario on disk, in name order."""
    base = run_dir / SCENARIOS
    found = [(split_scenario(d.name), d) for d in sorted(base.iterdir()) if d.is_dir()] if base.is_dir() else []
    return [(name[0], name[1], d) for name, d in found if name is not None]


def aggregates(run_dir: Path) -> list[tuple[str, str, Path, JSONObject]]:
    """``(arm, point, aggregate.json path, its content)`` of every scenario that has one, in name order."""
    out = []
    for arm, point, d in scenario_dirs(run_dir):
        agg = optional_object(d / AGGREGATE)
        if agg is not None:
            out.append((arm, point, d / AGGREGATE, agg))
    return out


def _numbered(directory: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    found = {int(m.group(1)): f for f in directory.iterdir() if (m := pattern.match(f.name))}
    return dict(sorted(found.items()))


def rep_files(directory: Path) -> dict[int, Path]:
    """``{k: run_<k>.json}`` of one scenario directory; attempts set aside are not reps."""
    return _numbered(directory, REP_RE) if directory.is_dir() else {}


class RunReader:
    """One run directory, read back. Open it with :meth:`open` (it must hold a readable ``run.json``)."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)

    @classmethod
    def open(cls, path: str | Path) -> RunReader:
        p = Path(path)
        if not p.is_dir():
            raise ResultsError(f"{p}: no such results directory")
        if not is_run_dir(p):
            raise ResultsError(f"{p}: not a pytest-p2p results directory (no {RUN_META}); "
                               "pass the run directory '<results>/<run-id>/'")
        run_meta(p)
        return cls(p)

    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"RunReader({str(self._path)!r})"

    def last_write(self) -> float | None:
        """The newest modification time among what the campaign writes, ``run.json`` and the scenarios' files
        (seconds since the epoch; ``None``: none readable): when a run that still says ``running`` last did
        anything (``process.writer_state``). The report's own files (summary, plots) are not the run's."""
        times = []
        for f in [self._path / RUN_META, *(self._path / SCENARIOS).rglob("*")]:
            try:
                times.append(f.stat().st_mtime)
            except OSError:
                continue
        return max(times, default=None)

    def read_run_meta(self) -> JSONObject:
        return run_meta(self._path)

    def scenarios(self) -> list[tuple[str, str]]:
        """``(arm, point)`` of every scenario directory on disk, in name order."""
        return [(arm, point) for arm, point, _ in scenario_dirs(self._path)]

    def _dir(self, arm: str, point: str) -> Path:
        return self._path / SCENARIOS / scenario_name(arm, point)

    def reps(self, arm: str, point: str) -> dict[int, JSONObject]:
        """``{k: run_<k>.json}`` for the reps on disk, by rep number; corrupt files raise."""
        return {k: read_object(f) for k, f in rep_files(self._dir(arm, point)).items()}

    def read_scenario_file(self, arm: str, point: str, name: str) -> JSONObject | None:
        """One JSON file of a scenario (``scenario.json``, ``aggregate.json``, ...) or ``None`` if absent."""
        return optional_object(self._dir(arm, point) / name)

    def telemetry_files(self, arm: str, point: str) -> dict[int, Path]:
        d = self._dir(arm, point)
        return _numbered(d, TELEMETRY_RE) if d.is_dir() else {}
