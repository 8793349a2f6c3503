"""What every store backend provides, the one schema, and the errors a user reads.

:class:`~pytest_p2p.verdict.store.Store` speaks one SQL to a :class:`Backend`: an embedded
SQLite file (``store_sqlite``, the default) or a PostgreSQL database that a fleet of CI
runners shares (``store_postgres``). One module per backend, as pytest-xdist keeps one per
scheduling policy; the facade never imports a driver. The schema is written once here with
type placeholders, so both backends hold the same tables, and a history exported from one
imports into the other.

Credentials: a PostgreSQL URL may carry a password. :func:`redact` is the one function
that turns a store target into text for a person (errors, log lines, the terminal, a
results directory); nothing else formats the raw URL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from ..errors import StoreError
from ..jsontypes import JSONObject

URL_SCHEMES = ("postgresql://", "postgres://")
#: URL query parameters whose value is a secret (libpq's ``password`` and ``sslpassword``).
SECRET_PARAMS = ("password", "sslpassword")
SCHEMA_VERSION = 3

#: The schema, version by version. ``{text}`` is a text column compared byte-wise (SQLite's
#: default; ``COLLATE "C"`` on PostgreSQL, so that ORDER BY, and with it which runs are "the
#: most recent", is the same on both), ``{real}`` a 64-bit float, ``{int}`` an integer.
SCHEMA: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE runs (
        run_id {text} PRIMARY KEY, rig {text} NOT NULL, pair_key {text}, pair_ident {text} NOT NULL,
        kind {text}, started_at {text}, saved_at {text} NOT NULL, simulated {int} NOT NULL,
        status {text}, source_dir {text}, fingerprint {text} NOT NULL)""",
        """CREATE TABLE results (
        run_id {text} NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        arm {text} NOT NULL, point {text} NOT NULL, metric {text} NOT NULL,
        n {int} NOT NULL, mean {real}, std {real}, median {real}, vals {text} NOT NULL,
        PRIMARY KEY (run_id, arm, point, metric))""",
        """CREATE TABLE baselines (
        name {text} NOT NULL, run_id {text} NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        accepted_at {text} NOT NULL, PRIMARY KEY (name, run_id))""",
        "CREATE INDEX runs_by_key ON runs (rig, pair_ident, kind, started_at)",
    ),
    # v2: who accepted a run and why (``accept --note``), shown by ``baseline list``
    2: ("ALTER TABLE baselines ADD COLUMN note {text}",),
    # v3: where each value ran (issue 24) -- the server start of each value and its rep index (JSON lists
    # aligned with ``vals``; NULL for a restart-per-rep design and every run saved before v3), and the run's
    # design (``store_design.design_key``), so that a later night can learn the start-to-start spread
    # from runs whose start means are comparable to its own
    3: ("ALTER TABLE runs ADD COLUMN design {text}",
        "ALTER TABLE results ADD COLUMN starts {text}",
        "ALTER TABLE results ADD COLUMN reps {text}"),
}
OUR_TABLES = ("runs", "results", "baselines")
#: Every column, in the order the store writes and reads them (named, never ``*``: a migrated store has
#: its added columns at the end, as a new one does, but naming them keeps a reader independent of that).
RUN_COLUMNS = ("run_id, rig, pair_key, pair_ident, kind, started_at, saved_at, simulated, status, source_dir, "
               "fingerprint, design")
N_RUN_COLUMNS = len(RUN_COLUMNS.split(", "))
RESULT_COLUMNS = "run_id, arm, point, metric, n, mean, std, median, vals, starts, reps"


def schema_steps(version: int, *, text: str, real: str, integer: str) -> list[str]:
    return [s.format(text=text, real=real, int=integer) for s in SCHEMA[version]]


class StoreMissing(StoreError):
    """No store there yet (no SQLite file; a PostgreSQL database without our tables) and none was to be created."""


class StoreSaveError(StoreError):
    """Campaign runs could not be saved; what was saved, what was not, and where to.

    Raised by :meth:`Store.save_runs`. Under pytest-xdist a worker's terminal is not shown,
    so the verdict hooks ship :attr:`report` to the controller, which prints it and fails
    the session: a failed save is never silent. The results directories are untouched and
    can be saved later with ``python -m pytest_p2p baseline save RUN_DIR``.
    """

    def __init__(self, where: str, saved: Sequence[str], unsaved: Sequence[str], cause: str) -> None:
        self.where = where
        self.saved = tuple(saved)
        self.unsaved = tuple(unsaved)
        self.cause = cause
        later = " ".join(f"'python -m pytest_p2p baseline save {d}'" for d in self.unsaved[:3])
        more = f" (and {len(self.unsaved) - 3} more)" if len(self.unsaved) > 3 else ""
        super().__init__(
            f"{len(self.unsaved)} campaign run(s) NOT saved to the baseline store {where}"
            + (f" ({len(self.saved)} saved before the failure)" if self.saved else "")
            + f": {cause} — the results directories are intact; once the store is fixed, save them with "
            + later + more)

    @property
    def report(self) -> str:
        """The one paragraph to show (also a plain ``str`` that crosses the xdist channel)."""
        return str(self)


#: A URL of whatever ``scheme://`` (redacted like a PostgreSQL URL; refused unless it is one).
ANY_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: A PostgreSQL URL that ``pathlib.Path`` has mangled (``postgresql:/u:pw@h/db``).
MANGLED_URL = re.compile(r"(?:^|/)(postgres(?:ql)?):/+(?=[^/])", re.IGNORECASE)
MANGLED_USERINFO = re.compile(r"((?:^|/)postgres(?:ql)?:/+)([^@/:]*):([^@/]*)@", re.IGNORECASE)


def is_url(target: str | Path) -> bool:
    """A PostgreSQL URL (``postgresql://`` or ``postgres://``) rather than an SQLite path."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


def target_of(raw: str, base: Path) -> str | Path:
    """A ``--p2p-db`` / ``baseline.db`` value as :class:`Store` takes it.

    A PostgreSQL URL is returned untouched (``Path`` would fold its ``//`` and the URL,
    password included, would become directory names); a path is expanded (``~``) and made
    absolute against ``base`` (the rootdir for an ini or rig value, else where pytest ran).
    """
    text = raw.strip()
    if is_url(text):
        return text
    if ANY_URL.match(text):
        raise StoreError(f"baseline database {redact(text)}: not a store pytest-p2p knows — give an SQLite "
                         "file path or a postgresql:// URL (docs/fleet.md)")
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def check_not_a_url(path: Path) -> None:
    """Refuse a PostgreSQL URL that reached the SQLite backend folded into a path (never create it)."""
    m = MANGLED_URL.search(str(path))
    if m:
        url = f"{m.group(1)}://" + str(path)[m.end():]
        raise StoreError(f"baseline database {redact(url)}: a PostgreSQL URL was turned into a file path "
                         "before it reached the store (pass the --p2p-db text through store_base.target_of); "
                         "nothing was created")


def _password(url: str) -> str | None:
    """The password of the URL's user-info, found where libpq finds it (before the first '/')."""
    rest = url.split("://", 1)[1]
    m = re.match(r"([^@/]*)@", rest)
    if m and ":" in m.group(1):
        return m.group(1).split(":", 1)[1]
    return None


def redact(target: str | Path) -> str:
    """The store target as text for a person: an SQLite path as is, a URL without its secrets.

    ``postgresql://ci:hunter2@db:5432/p2p?sslmode=verify-full&password=x`` becomes
    ``postgresql://ci:***@db:5432/p2p?sslmode=verify-full&password=***``: the user, host,
    database and TLS options stay (they say where), every secret goes.
    """
    text = str(target)
    if not isinstance(target, str) or not ANY_URL.match(text):
        # a path: as is, unless a URL was folded into it (``postgresql:/ci:pw@db/p2p``)
        return MANGLED_USERINFO.sub(r"\1\2:***@", text)
    scheme, rest = text.split("://", 1)
    m = re.match(r"([^@/]*)@", rest)
    if m and ":" in m.group(1):
        user = m.group(1).split(":", 1)[0]
        rest = f"{user}:***@" + rest[m.end():]
    keys = "|".join(SECRET_PARAMS)
    rest = re.sub(rf"([?&](?:{keys})=)[^&#]*", r"\1***", rest, flags=re.IGNORECASE)
    return f"{scheme}://{rest}"


def scrub(text: str, target: str | Path) -> str:
    """A driver's message with every secret of ``target`` (raw or percent-decoded) and the raw URL removed."""
    if not is_url(target):
        return text
    url = str(target)
    text = text.replace(url, redact(url))
    secrets = [_password(url)] + re.findall(rf"[?&](?:{'|'.join(SECRET_PARAMS)})=([^&#]*)", url, re.IGNORECASE)
    for secret in secrets:
        if secret:
            for form in {secret, unquote(secret)}:
                text = text.replace(form, "***")
    return text


#: What went wrong, as a user can act on it (a backend may add a hint of its own).
ADVICE = {
    "corrupt": "the database is damaged; it was left untouched — move it away and restore a backup, "
               "or point --p2p-db elsewhere",
    "readonly": "it cannot be written: the file or its directory is read-only or immutable, or the "
                "database user may not write; nothing was changed — fix the permissions or point "
                "--p2p-db at a writable store",
    "locked": "another process held its write lock for longer than the timeout (a hung pytest, an open "
              "sqlite3 shell or a long transaction); nothing was changed — retry when it is done",
    "full": "the disk (or the database's quota) is full; nothing was changed — free space and re-run",
    "io": "the operating system reported an I/O error; nothing was changed — check the disk and the "
          "file system (dmesg) before re-running",
    "cantopen": "it cannot be opened: check that its directory exists and that this user may write there",
    "connect": "the database server cannot be reached or refused the login — check host, port, user, "
               "password, database name and TLS options (sslmode, sslrootcert) of the URL",
    "other": "nothing was changed",
}


def store_error(where: str, action: str, kind: str, detail: str, hint: str = "") -> StoreError:
    """One paragraph: which store, doing what, what happened, what to do."""
    advice = ADVICE.get(kind, ADVICE["other"])
    return StoreError(f"baseline database {where}: {action} failed ({detail}): {advice}"
                      + (f" ({hint})" if hint else ""))


#: The rows a store reads back (``Store.runs``, ``Store.metrics``), whichever backend holds them; here, below
#: the facade, because an export (``store_transfer``) reads them too without importing the facade.
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
    #: the server start of each value and its rep index (aligned with ``values``); None where the run had
    #: no starts (restart per rep) or was saved before schema v3
    starts: list[int] | None = None
    reps: list[int] | None = None


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
    fingerprint: JSONObject  # as saved (see fingerprint.Fingerprint), read back as JSON
    baselines: tuple[str, ...] = ()
    design: str | None = None  # store_design.design_key of the run (schema v3); None before v3


class Backend(Protocol):
    """One open connection to a store. ``?`` is the parameter placeholder in every SQL text."""

    where: str  # shown to people: a path, or a URL through redact()
    #: ``a IS b`` that is true for two NULLs ("IS" in SQLite, "IS NOT DISTINCT FROM" in PostgreSQL)
    null_safe_eq: str
    null_safe_ne: str  # its negation ("IS NOT", "IS DISTINCT FROM")

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """The rows of one statement (text, numbers and NULLs as the driver returns them)."""
        ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...

    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction; writers from every process are serialised, a failure rolls back all."""
        ...

    def guard(self, action: str) -> AbstractContextManager[None]:
        """Turn the driver's errors inside into a :class:`StoreError` naming the store and ``action``."""
        ...

    def close(self) -> None: ...
