"""The results directory: the on-disk contract between campaign, verdict and report.

One campaign (one GPU pair) is one run directory. The campaign writes into it rep by
rep through :class:`ResultsDir`; the verdict and report stages read it back later,
possibly in another process or on another machine (``python -m pytest_p2p report DIR``
needs no GPU). Every file goes through ``util.atomic_write_*`` so that a campaign cut
off at rep 3 leaves reps 1-2 whole and readable, never a half-written JSON file.

Layout (see docs/results.md for every key)::

    <root>/<run-id>/run.json
                   env/<name>
                   scenarios/<arm>-<point>/scenario.json, run_<k>.json, aggregate.json,
                                           transport_proof.json, telemetry_run<k>.csv,
                                           server_run<k>.log
                   summary.{md,csv,json}, plots/*.png
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from pytest_p2p.campaign.rundir import ARM_RE, POINT_RE, check_rep, make_run_id, safe_component, scenario_name
from pytest_p2p.errors import ResultsError
from pytest_p2p.jsontypes import JSONObject, JSONValue, as_dict, as_list
from pytest_p2p.util import atomic_write_bytes, atomic_write_json, atomic_write_text

RUN_META = "run.json"
SCENARIOS = "scenarios"
ENV = "env"
PLOTS = "plots"
KINDS = ("model", "probe")

_REP_RE = re.compile(r"^run_([0-9]+)\.json$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# A few KiB kept on disk from the start so that, when the disk fills, run.json can still be
# told the truth: deleting this file frees the blocks the final status write needs.
RESERVE = ".p2p-space-reserve"
_RESERVE_BYTES = 64 * 1024


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def read_json(path: Path) -> JSONValue:
    """Load one JSON file of a results dir; a corrupt or unreadable one is named in the error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: file not found") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"{path}: corrupt JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            "delete or restore this file and re-run 'python -m pytest_p2p report'"
        ) from None


def _read_object(path: Path) -> JSONObject:
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return as_dict(data)  # json.loads gives string keys: the same dict


class ResultsDir:
    """One run directory. Create it with :meth:`create`, reopen it with :meth:`open`."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._write_errors: list[str] = []  # writes that failed; run.json's status can never hide them

    def _write(self, target: Path, what: str, write: Callable[[], Path]) -> Path:
        """Run one write; an OS error becomes one :class:`ResultsError` paragraph naming the file.

        Disk full, quota, read-only or permission errors must not leave a raw traceback nor a
        ``run.json`` that says ``running`` for ever: the failure is remembered (every later
        ``run.json`` write carries status ``failed`` and the error) and, if space is the
        problem, the reserve file is released and ``run.json`` is rewritten at once.
        """
        try:
            return write()
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc) or type(exc).__name__)
            done = sorted(p.name for p in (self._path / SCENARIOS).glob("*/run_*.json")) if (
                self._path / SCENARIOS).is_dir() else []
            intact = (f"{len(done)} rep file(s) already written are intact ({', '.join(done[:6])}"
                      f"{', ...' if len(done) > 6 else ''})") if done else "no rep file had been written yet"
            hint = {errno.ENOSPC: "free space on that filesystem or pass --p2p-results on another one",
                    errno.EDQUOT: "the disk quota is exhausted: free space or raise the quota",
                    errno.EROFS: "the filesystem is read-only: pass --p2p-results on a writable one"}.get(
                exc.errno or 0, "check the directory's permissions and free space")
            message = (f"{target}: cannot write the {what} ({reason}). {intact}; re-run the missing reps "
                       f"after fixing this ({hint}). 'python -m pytest_p2p report {self._path}' summarises "
                       "what is on disk.")
            self._write_errors.append(f"{target}: cannot write the {what} ({reason})")
            if exc.errno in _FULL_ERRNOS and target.name != RUN_META:
                self._record_failure()
            raise ResultsError(message) from None

    def _record_failure(self) -> None:
        """Best effort: free the reserve and mark run.json failed with the write errors."""
        with contextlib.suppress(OSError):
            (self._path / RESERVE).unlink()
        with contextlib.suppress(OSError, ResultsError):
            meta_path = self._path / RUN_META
            current = _read_object(meta_path) if meta_path.is_file() else {}
            current.update(self._failure_fields(current))
            atomic_write_json(meta_path, current)

    def _failure_fields(self, current: Mapping[str, object]) -> JSONObject:
        errors = [e for e in as_list(current.get("errors") or []) if isinstance(e, str)]
        errors += [e for e in self._write_errors if e not in errors]
        fields: JSONObject = {"status": "failed", "errors": errors}
        if not current.get("finished_at"):
            fields["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return fields

    @property
    def write_errors(self) -> tuple[str, ...]:
        """Writes that failed in this process (disk full, read-only...), oldest first."""
        return tuple(self._write_errors)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def create(
        cls, root: str | Path, rig: str, pair_key: str, kind: str, run_id: str | None = None
    ) -> ResultsDir:
        """Make ``<root>/<run-id>/`` with a first ``run.json`` (status ``running``).

        An automatic run id that collides (two campaigns in the same second) gets a
        ``-2``, ``-3`` suffix; an explicit ``run_id`` that already exists is refused so
        that nothing measured earlier is overwritten.
        """
        if kind not in KINDS:
            raise ResultsError(f"results kind must be one of {', '.join(KINDS)}, got {kind!r}")
        root = Path(root)
        if run_id is not None:
            if safe_component(run_id) != run_id:
                raise ResultsError(
                    f"run id {run_id!r} has characters that are unsafe in a directory name; "
                    "use letters, digits, '.', '_' and '-'"
                )
            path = root / run_id
            if path.exists() and any(path.iterdir()):
                raise ResultsError(f"{path}: a results directory with this run id already exists")
        else:
            base = make_run_id(rig, pair_key)
            path, n = root / base, 1
            while path.exists():
                n += 1
                path = root / f"{base}-{n}"
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsError(f"{path}: cannot create the results directory ({exc.strerror or exc})") from None
        rd = cls(path)
        with contextlib.suppress(OSError):  # no reserve on a nearly full disk: the status may then lag
            atomic_write_bytes(path / RESERVE, b"\0" * _RESERVE_BYTES)
        rd.write_run_meta(
            {
                "run_id": path.name,
                "rig": rig,
                "kind": kind,
                "pair": {"key": pair_key},
                "status": "running",
                "missing": [],
                "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "finished_at": None,
            }
        )
        return rd

    @classmethod
    def open(cls, path: str | Path) -> ResultsDir:
        """Reopen an existing run directory; refuses anything without a readable ``run.json``."""
        p = Path(path)
        if not p.is_dir():
            raise ResultsError(f"{p}: no such results directory")
        meta = p / RUN_META
        if not meta.is_file():
            raise ResultsError(
                f"{p}: not a pytest-p2p results directory (no {RUN_META}); "
                "pass the run directory '<results>/<run-id>/'"
            )
        _read_object(meta)
        return cls(p)

    @property
    def path(self) -> Path:
        return self._path

    def __repr__(self) -> str:
        return f"ResultsDir({str(self._path)!r})"

    # -- run meta and environment -------------------------------------------------------
    def write_run_meta(self, meta: Mapping[str, object]) -> Path:
        """Merge ``meta`` into ``run.json`` (top-level keys replace), so status updates are one call."""
        target = self._path / RUN_META
        current = _read_object(target) if target.is_file() else {}
        current.update(meta)
        if self._write_errors:  # a lost write makes the run failed whatever the caller says
            current.update(self._failure_fields(current))
        if current.get("status") != "running":
            with contextlib.suppress(OSError):
                (self._path / RESERVE).unlink()
        return self._write(target, "run metadata (run.json)", lambda: atomic_write_json(target, current))

    def read_run_meta(self) -> JSONObject:
        return _read_object(self._path / RUN_META)

    def write_env(self, name: str, content: str | Mapping[str, object] | Sequence[object]) -> Path:
        """``env/<name>``: a dict or list is written as JSON, a string as text, as given."""
        if not _ENV_NAME_RE.match(name or ""):
            raise ResultsError(f"env file name {name!r} must be a plain file name like 'doctor.json'")
        target = self._path / ENV / name
        if isinstance(content, str):
            text = content
            return self._write(target, "environment capture", lambda: atomic_write_text(target, text))
        return self._write(target, "environment capture", lambda: atomic_write_json(target, content))

    # -- scenarios ----------------------------------------------------------------------
    def scenario_dir(self, arm: str, point: str) -> Path:
        """``scenarios/<arm>-<point>/``, created on first use."""
        d = self._path / SCENARIOS / scenario_name(arm, point)

        def make() -> Path:
            d.mkdir(parents=True, exist_ok=True)
            return d

        return self._write(d, "scenario directory", make)

    def _write_json(self, target: Path, what: str, data: JSONValue) -> Path:
        return self._write(target, what, lambda: atomic_write_json(target, data))

    def write_scenario(self, arm: str, point: str, data: Mapping[str, object]) -> Path:
        body = {"arm": arm, "point": point, **data}
        return self._write_json(self.scenario_dir(arm, point) / "scenario.json", "scenario description", body)

    def write_rep(self, arm: str, point: str, rep: int, data: Mapping[str, object]) -> Path:
        target = self.scenario_dir(arm, point) / f"run_{check_rep(rep)}.json"
        return self._write_json(target, f"result of rep {rep}", data)

    def write_aggregate(self, arm: str, point: str, data: Mapping[str, object]) -> Path:
        body = {"arm": arm, "point": point, **data}
        return self._write_json(self.scenario_dir(arm, point) / "aggregate.json", "scenario aggregate", body)

    def write_proof(self, arm: str, point: str, data: Mapping[str, object]) -> Path:
        return self._write_json(self.scenario_dir(arm, point) / "transport_proof.json", "transport proof", data)

    def telemetry_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"telemetry_run{check_rep(rep)}.csv"

    def server_log_path(self, arm: str, point: str, rep: int) -> Path:
        return self.scenario_dir(arm, point) / f"server_run{check_rep(rep)}.log"

    # -- reading back -------------------------------------------------------------------
    def scenarios(self) -> Iterator[tuple[str, str]]:
        """``(arm, point)`` of every scenario directory on disk, in name order."""
        base = self._path / SCENARIOS
        if not base.is_dir():
            return
        for d in sorted(base.iterdir()):
            if not d.is_dir() or "-" not in d.name:
                continue
            arm, point = d.name.rsplit("-", 1)
            if ARM_RE.match(arm) and POINT_RE.match(point):
                yield arm, point

    def reps(self, arm: str, point: str) -> dict[int, JSONObject]:
        """``{k: run_<k>.json}`` for the reps on disk, by rep number; corrupt files raise."""
        d = self._path / SCENARIOS / scenario_name(arm, point)
        if not d.is_dir():
            return {}
        found: dict[int, JSONObject] = {}
        for f in d.iterdir():
            m = _REP_RE.match(f.name)
            if m:
                found[int(m.group(1))] = _read_object(f)
        return dict(sorted(found.items()))

    def read_scenario_file(self, arm: str, point: str, name: str) -> JSONObject | None:
        """One JSON file of a scenario (``scenario.json``, ``aggregate.json``, ...) or ``None`` if absent."""
        f = self._path / SCENARIOS / scenario_name(arm, point) / name
        return _read_object(f) if f.is_file() else None

    def telemetry_files(self, arm: str, point: str) -> dict[int, Path]:
        d = self._path / SCENARIOS / scenario_name(arm, point)
        out: dict[int, Path] = {}
        if d.is_dir():
            for f in d.glob("telemetry_run*.csv"):
                m = re.match(r"^telemetry_run([0-9]+)\.csv$", f.name)
                if m:
                    out[int(m.group(1))] = f
        return dict(sorted(out.items()))
