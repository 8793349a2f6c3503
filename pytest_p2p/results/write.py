"""The one writer of the results directory (names: :mod:`.layout`; the one reader: :mod:`.read`).

The campaign writes through it, and so do the tests that need a run directory: a fixture
written any other way could drift from what production writes. Every file goes through
``util.atomic_write_*``: a campaign cut off at rep 3 leaves reps 1-2 whole. A write that
fails (disk full, read-only, permission) is one paragraph naming the file; from then on
``run.json`` says ``failed`` with the error, and a small reserve file created with the
directory is released so that this last status write still fits on a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from ..errors import ResultsError, WriteError
from ..util import atomic_write_bytes, atomic_write_json, atomic_write_text, write_error
from .layout import (
    AGGREGATE,
    ENV,
    KINDS,
    PROOF,
    RESERVE,
    RUN_META,
    SCENARIO_META,
    SCENARIOS,
    check_rep,
    make_run_id,
    rep_file,
    safe_component,
    scenario_name,
)
from .process import writer_record

_RESERVE_BYTES = 64 * 1024
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
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

    def set_aside(self, arm: str, rep: int, tag: str, points: list[str], data: Mapping[str, Json],
                  fields: Json) -> tuple[str, ...]: ...


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
                           "finished_at": None, "writer": writer_record()})
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

    def mark_abandoned(self, why: str) -> bool:
        """``running`` becomes ``abandoned`` with the cause: the run's process died mid-campaign (an xdist worker
        killed), so no reader takes it for a run still going. Its files stay as they are. False when the run is
        not ``running`` (finished, failed or interrupted runs say so themselves)."""
        current = self._meta()
        if current.get("status") != "running":
            return False
        old = current.get("errors")
        errors = [e for e in old if isinstance(e, str)] if isinstance(old, list) else []
        self.write_run_meta({"status": "abandoned", "errors": [*errors, why],
                             "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return True

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

    def _json(self, target: Path, data: object, *, compact: bool = False) -> Path:
        return self._write(target, lambda: atomic_write_json(target, data, compact=compact))

    def write_scenario(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / SCENARIO_META, {"arm": arm, "point": point, **data})

    def write_rep(self, arm: str, point: str, rep: int, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / rep_file(rep), data, compact=True)  # written between windows

    def write_aggregate(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / AGGREGATE, {"arm": arm, "point": point, **data})

    def write_proof(self, arm: str, point: str, data: Json) -> Path:
        return self._json(self.scenario_dir(arm, point) / PROOF, data)

    def telemetry_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"telemetry_run{check_rep(rep)}.csv"

    def server_log_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"server_run{check_rep(rep)}.log"

    def set_aside(self, arm: str, rep: int, tag: str, points: list[str], data: Mapping[str, Json],
                  fields: Json) -> tuple[str, ...]:
        """Keep a rep that is not a measurement under names no reader takes for a rep; the files kept.

        Why keep it: a dead server's partial numbers or a screened outlier are evidence of what
        happened, but ``run_<k>.json``, ``telemetry_run<k>.csv`` and ``server_run<k>.log`` must
        belong to the rep that counts. So the attempt's files become ``run_<k>.<tag>.json`` (what
        was measured, with ``fields`` -- the why and the cause -- beside it, never over it),
        ``telemetry_run<k>.<tag>.csv`` and ``server_run<k>.<tag>.log``.
        """
        files: list[str] = []
        for point in points:
            base = self.scenario_dir(arm, point)
            if point in data:
                self._json(base / rep_file(rep, tag), {**data[point], **fields}, compact=True)
                files.append(f"{arm}-{point}/{rep_file(rep, tag)}")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(base / rep_file(rep))  # a screened rep's file: its copy with the cause is kept above
            for src in (self.telemetry_path(arm, point, rep), self.server_log_path(arm, point, rep)):
                if src.is_file():
                    stem, dot, ext = src.name.partition(".")
                    dst = src.with_name(f"{stem}.{tag}{dot}{ext}")
                    with contextlib.suppress(OSError):
                        os.replace(src, dst)
                        files.append(f"{arm}-{point}/{dst.name}")
        return tuple(files)


def create_run_dir(root: Path, rig: str, pair_key: str, kind: str, run_id: str | None) -> RunWriter:
    """``<root>/<run-id>/`` with a first ``run.json`` (status ``running``)."""
    return RunDir.create(root, rig, pair_key, kind, run_id)
