"""The campaign's writer of the results directory (the data contract with verdict and report).

One campaign (one GPU pair) is one run directory (layout in docs/results.md)::

    <root>/<run-id>/run.json, env/<name>,
                   scenarios/<arm>-<point>/scenario.json, run_<k>.json, aggregate.json,
                                           transport_proof.json, telemetry_run<k>.csv, server_run<k>.log

Why the campaign owns the writing side: data flows one way (campaign -> verdict -> report),
so the campaign cannot import the report stage; the report stage reads the directory back
(``report.results.ResultsDir``) and may build on this class. Every file goes through
``util.atomic_write_*``: a campaign cut off at rep 3 leaves reps 1-2 whole. A write that
fails (disk full, read-only, permission) is one paragraph naming the file; from then on
``run.json`` says ``failed`` with the error, and a small reserve file created with the
directory is released so that this last status write still fits on a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from ..errors import ResultsError, WriteError
from ..util import atomic_write_bytes, atomic_write_json, atomic_write_text, write_error

RUN_META = "run.json"
SCENARIOS = "scenarios"
ENV = "env"
KINDS = ("model", "probe")
RESERVE = ".p2p-space-reserve"  # the same name the report's reader ignores
_RESERVE_BYTES = 64 * 1024
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")
ARM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
POINT_RE = re.compile(r"^(?:c[0-9]+|s[0-9A-Za-z.]+)$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
Json = dict[str, object]


class RunWriter(Protocol):
    """What the campaign writes into one run directory (every write atomic)."""

    @property
    def path(self) -> Path: ...

    def write_run_meta(self, meta: Json) -> Path: ...

    def write_env(self, name: str, content: str | Json | list[object]) -> Path: ...

    def scenario_dir(self, arm: str, point: str) -> Path: ...

    def write_scenario(self, arm: str, point: str, data: Json) -> Path: ...

    def write_rep(self, arm: str, point: str, rep: int, data: Json) -> Path: ...

    def write_aggregate(self, arm: str, point: str, data: Json) -> Path: ...

    def write_proof(self, arm: str, point: str, data: Json) -> Path: ...

    def telemetry_path(self, arm: str, point: str, rep: int) -> Path: ...

    def server_log_path(self, arm: str, point: str, rep: int) -> Path: ...


def safe_component(text: str) -> str:
    """Squash ``text`` to the characters a run id allows (letters, digits, ``._-``)."""
    cleaned = _SAFE_RE.sub("-", str(text)).strip("-.")
    return cleaned or "unnamed"


def make_run_id(rig: str, pair_key: str, now: datetime | None = None) -> str:
    """``<UTC yyyymmdd-HHMMSS>_<rig>_<pair>``: sorts by time, says what was measured."""
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}_{safe_component(rig)}_{safe_component(pair_key)}"


def scenario_name(arm: str, point: str) -> str:
    """``<arm>-<point>``; names that would make the directory ambiguous are refused."""
    if not isinstance(arm, str) or not ARM_RE.match(arm):
        raise ResultsError(f"arm name {arm!r} cannot name a scenario directory: use letters, digits, '_' and '.' "
                           "(no '-', which separates arm and point in '<arm>-<point>')")
    if not isinstance(point, str) or not POINT_RE.match(point):
        raise ResultsError(f"point {point!r} is not a campaign point: expected 'c<N>' (model concurrency) or "
                           "'s<size>' (probe message size, e.g. 's8KiB')")
    return f"{arm}-{point}"


def check_rep(rep: int) -> int:
    if isinstance(rep, bool) or not isinstance(rep, int) or rep < 1:
        raise ResultsError(f"rep number must be an integer >= 1 (reps count from 1), got {rep!r}")
    return rep


class RunDir:
    """One run directory, written by the campaign. Create it with :meth:`create`."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._errors: list[str] = []  # writes that failed: run.json can never hide them

    @classmethod
    def create(cls, root: Path, rig: str, pair_key: str, kind: str, run_id: str | None = None) -> RunDir:
        """``<root>/<run-id>/`` with a first ``run.json`` (``running``); never reuses a directory with data."""
        if kind not in KINDS:
            raise ResultsError(f"results kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if run_id is not None:
            if safe_component(run_id) != run_id:
                raise ResultsError(f"run id {run_id!r} has characters that are unsafe in a directory name; "
                                   "use letters, digits, '.', '_' and '-'")
            path = Path(root) / run_id
            if path.exists() and any(path.iterdir()):
                raise ResultsError(f"{path}: a results directory with this run id already exists")
        else:
            base = make_run_id(rig, pair_key)
            path, n = Path(root) / base, 1
            while path.exists():
                n += 1
                path = Path(root) / f"{base}-{n}"
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(path, exc, "create the results directory") from None
        rd = cls(path)
        with contextlib.suppress(OSError):  # no reserve on a nearly full disk: the final status may then lag
            atomic_write_bytes(path / RESERVE, b"\0" * _RESERVE_BYTES)
        rd.write_run_meta({"run_id": path.name, "rig": rig, "kind": kind, "pair": {"key": pair_key},
                           "status": "running", "missing": [],
                           "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "finished_at": None})
        return rd

    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"RunDir({str(self._path)!r})"

    def _write(self, target: Path, write: Callable[[], Path]) -> Path:
        try:
            return write()
        except OSError as exc:
            err = exc if isinstance(exc, WriteError) else write_error(target, exc)
            self._errors.append(str(err))
            if exc.errno in _FULL and target.name != RUN_META:
                self._mark_failed()
            raise err from None

    def _meta(self) -> Json:
        target = self._path / RUN_META
        try:
            got = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {}
        except (OSError, ValueError):
            got = {}
        return got if isinstance(got, dict) else {}

    def _failure_fields(self, current: Json) -> Json:
        old = current.get("errors")
        errors = [e for e in old if isinstance(e, str)] if isinstance(old, list) else []
        errors += [e for e in self._errors if e not in errors]
        fields: Json = {"status": "failed", "errors": errors}
        if not current.get("finished_at"):
            fields["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return fields

    def _mark_failed(self) -> None:
        """Best effort after a failed write: free the reserve and let run.json say ``failed``."""
        with contextlib.suppress(OSError):
            (self._path / RESERVE).unlink()
        with contextlib.suppress(OSError):
            current = self._meta()
            current.update(self._failure_fields(current))
            atomic_write_json(self._path / RUN_META, current)

    def write_run_meta(self, meta: Json) -> Path:
        """Merge ``meta`` into ``run.json`` (top-level keys replace); a lost write keeps the status ``failed``."""
        target = self._path / RUN_META
        current = self._meta()
        current.update(meta)
        if self._errors:
            current.update(self._failure_fields(current))
        if current.get("status") != "running":
            with contextlib.suppress(OSError):
                (self._path / RESERVE).unlink()
        return self._write(target, lambda: atomic_write_json(target, current))

    def write_env(self, name: str, content: str | Json | list[object]) -> Path:
        """``env/<name>``: a dict or list as JSON, a string as text."""
        if not _ENV_NAME_RE.match(name or ""):
            raise ResultsError(f"env file name {name!r} must be a plain file name like 'doctor.json'")
        target = self._path / ENV / name
        if isinstance(content, str):
            text = content
            return self._write(target, lambda: atomic_write_text(target, text))
        return self._write(target, lambda: atomic_write_json(target, content))

    def scenario_dir(self, arm: str, point: str) -> Path:
        d = self._path / SCENARIOS / scenario_name(arm, point)

        def make() -> Path:
            d.mkdir(parents=True, exist_ok=True)
            return d

        return self._write(d, make)

    def _json(self, target: Path, data: object) -> Path:
        return self._write(target, lambda: atomic_write_json(target, data))

    def write_scenario(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / "scenario.json", {"arm": arm, "point": point, **data})

    def write_rep(self, arm: str, point: str, rep: int, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / f"run_{check_rep(rep)}.json", data)

    def write_aggregate(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / "aggregate.json", {"arm": arm, "point": point, **data})

    def write_proof(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / "transport_proof.json", data)

    def telemetry_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"telemetry_run{check_rep(rep)}.csv"

    def server_log_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"server_run{check_rep(rep)}.log"


def create_run_dir(root: Path, rig: str, pair_key: str, kind: str, run_id: str | None) -> RunWriter:
    """``<root>/<run-id>/`` with a first ``run.json`` (status ``running``)."""
    return RunDir.create(root, rig, pair_key, kind, run_id)
