"""The fleet backend: run history in a PostgreSQL database that many CI runners share.

Why: self-hosted GPU runners are often ephemeral (a fresh container per job) and several
serve one rig type; a SQLite file under the rootdir is lost between nightly runs or split
between runners, and with it the baseline that a regression is judged against.

Same schema and semantics as the SQLite backend (store_base.SCHEMA). Guarantees, the
PostgreSQL way:

* every write is one transaction, taken while holding an advisory lock
  (``pg_advisory_lock``), so writers from every runner are serialised exactly as
  SQLite's ``BEGIN IMMEDIATE`` serialises them: no lost write, no half-written campaign;
* the schema version lives in a ``p2p_meta`` table (SQLite's ``PRAGMA user_version`` and
  ``application_id``); a newer version or tables of ours that pytest-p2p did not create are
  refused before anything is written, and migrations run under the same lock;
* text columns are ``COLLATE "C"``, so "the N most recent runs" orders as SQLite does.

The URL is given to libpq as it is, so TLS and every other libpq option (``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``, ``connect_timeout``, ``options``, a ``passfile``)
pass through. Nothing shows the URL except through :func:`store_base.redact`, and driver
messages are scrubbed of the password before they reach an error. psycopg (3) is imported
only when a PostgreSQL URL is used: ``pip install 'pytest-p2p[postgres]'``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, TypedDict

from ..errors import StoreError
from .store_base import OUR_TABLES, SCHEMA_VERSION, StoreMissing, redact, schema_steps, scrub, store_error

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

APPLICATION = "pytest-p2p"
LOCK_KEY = 0x50325031  # "P2P1", the advisory lock that serialises writers (per database)
CONNECT_TIMEOUT_S = 10


def classify(sqlstate: str | None) -> str:
    """The kind of fault (store_base.ADVICE key) of a PostgreSQL SQLSTATE (None: no server answer)."""
    if not sqlstate or sqlstate.startswith(("08", "28")) or sqlstate in ("3D000", "57P01", "57P03"):
        return "connect"
    if sqlstate.startswith("53"):
        return "full"
    if sqlstate in ("55P03", "57014", "40P01"):
        return "locked"
    if sqlstate in ("25006", "42501"):
        return "readonly"
    if sqlstate.startswith("XX") or sqlstate in ("42P01", "42703"):
        return "corrupt"
    return "other"


def _steps(version: int) -> list[str]:
    return schema_steps(version, text='TEXT COLLATE "C"', real="DOUBLE PRECISION", integer="BIGINT")


class _ConnectDefaults(TypedDict, total=False):
    """What we add to the URL's own connection parameters when it does not set them."""

    connect_timeout: int
    application_name: str


class PostgresBackend:
    """One connection (autocommit; writes in explicit transactions) to a PostgreSQL store."""

    null_safe_eq = "IS NOT DISTINCT FROM"
    null_safe_ne = "IS DISTINCT FROM"

    def __init__(self, url: str, *, create: bool = True, timeout_s: float = 30.0) -> None:
        self.url = url
        self.where = redact(url)
        self.timeout_s = timeout_s
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise StoreError(f"baseline database {self.where} is a PostgreSQL URL, which needs psycopg: "
                             "pip install 'pytest-p2p[postgres]' (or 'psycopg[binary]')") from None
        self._psycopg = psycopg
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"baseline database {self.where} is not a valid PostgreSQL URL "
                             f"({self._text(exc)})") from None
        extra: _ConnectDefaults = {}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in params:
            extra["application_name"] = APPLICATION
        with self.guard("connecting"):
            self.con: psycopg.Connection[TupleRow] = psycopg.connect(url, autocommit=True, **extra)
        try:
            with self.guard("configuring the session"):
                self.con.execute(f"SET lock_timeout = {int(self.timeout_s * 1000)}")
            self._setup(create)
        except BaseException:
            self.close()
            raise

    def _text(self, exc: BaseException) -> str:
        return " ".join(scrub(str(exc), self.url).split()) or type(exc).__name__

    # -- opening -------------------------------------------------------------------------
    def _meta(self) -> dict[str, str] | None:
        if self.query("SELECT to_regclass('p2p_meta')")[0][0] is None:
            return None
        return {str(k): str(v) for k, v in self.query("SELECT key, value FROM p2p_meta")}

    def _ours_present(self) -> list[str]:
        return [t for t in OUR_TABLES if self.query(f"SELECT to_regclass('{t}')")[0][0] is not None]

    def _version(self, meta: dict[str, str] | None) -> int:
        """The schema version in ``p2p_meta`` (0: none yet); refuses a foreign or newer store."""
        if meta is None or not meta:
            present = self._ours_present()
            if present:
                raise StoreError(f"baseline database {self.where} holds tables {', '.join(present)} that "
                                 "pytest-p2p did not create (no p2p_meta); they were left untouched — use "
                                 "another database, or a schema of its own (URL option "
                                 "'options=-csearch_path%3Dp2p')")
            return 0
        if meta.get("application") != APPLICATION:
            raise StoreError(f"baseline database {self.where} has a p2p_meta table of another application "
                             f"({meta.get('application')!r}); it was left untouched — point --p2p-db elsewhere")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise store_error(self.where, "reading its schema version", "corrupt",
                              f"p2p_meta.schema_version is {meta.get('schema_version')!r}") from None
        if version > SCHEMA_VERSION:
            raise StoreError(f"baseline database {self.where} has schema version {version}, newer than this "
                             f"pytest-p2p understands ({SCHEMA_VERSION}); upgrade pytest-p2p — the database "
                             "was left untouched")
        return version

    def _setup(self, create: bool) -> None:
        """Check the schema; create or migrate it under the writers' lock.

        Outside the lock a runner creating the store at this moment can be seen half-way
        (its tables committed between two of our catalog lookups), so only the fast path
        (the current version, all tables there) is decided there; every other verdict —
        missing, foreign, older — is reached again under the lock, where the creator has
        committed or not begun, and checked before anything is written.
        """
        with self.guard("reading its schema"):
            try:
                version: int | None = self._version(self._meta())
            except StoreError:
                version = None  # foreign, or a creator seen half-way: decide under the lock
        if version != SCHEMA_VERSION:
            with self.guard("creating or migrating its schema"), self.transaction():
                version = self._version(self._meta())  # refuses a foreign or newer store for good
                if version == 0 and not create:
                    raise StoreMissing(f"baseline database {self.where} holds no pytest-p2p store yet "
                                       "(run a campaign with --p2p-save-baseline first)")
                if version < SCHEMA_VERSION:
                    self.execute("CREATE TABLE IF NOT EXISTS p2p_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    for step in range(version + 1, SCHEMA_VERSION + 1):
                        for sql in _steps(step):
                            self.execute(sql)
                    for key, value in (("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))):
                        self.execute("INSERT INTO p2p_meta (key, value) VALUES (?, ?) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
        with self.guard("reading it"):
            self.query("SELECT count(*) FROM runs")

    # -- the Backend protocol ---------------------------------------------------------------
    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        return list(self.con.execute(self._sql(sql), tuple(params)).fetchall())

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return int(self.con.execute(self._sql(sql), tuple(params)).rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if rows:
            with self.con.cursor() as cur:
                cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The writers' lock, then the transaction.

        A session-level lock taken *before* BEGIN, not a transaction-level one inside it:
        PostgreSQL refreshes a session's catalog cache at transaction start, so a store that
        another runner created while we waited for the lock is seen (with the lock taken
        inside the transaction, ``to_regclass`` could still answer from the stale cache).
        The server drops the lock if the connection dies.
        """
        self.con.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            with self.con.transaction():
                yield
        finally:
            with suppress(self._psycopg.Error):
                self.con.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            kind = classify(getattr(exc, "sqlstate", None))
            detail = self._text(exc)
            if kind == "locked":
                detail += f" (lock_timeout {self.timeout_s:g} s)"
            raise store_error(self.where, action, kind, detail) from None

    def close(self) -> None:
        con = getattr(self, "con", None)
        if con is not None:
            with suppress(self._psycopg.Error):
                con.close()
