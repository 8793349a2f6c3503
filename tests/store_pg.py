"""Test helper (not a test module): a real, private PostgreSQL server for the store's tests.

Why a real server: the fleet backend's guarantees (one transaction per campaign save, writers
serialised across processes, a newer schema refused untouched) are properties of PostgreSQL
itself, which no mock has. The server is Debian's ``postgresql`` package (``apt-get install
postgresql``; binaries under ``/usr/lib/postgresql/<major>/bin``, or ``PYTEST_P2P_PG_BIN``):
``initdb`` into a fresh temporary directory, listening on a free port of 127.0.0.1 only,
password (scram) authentication so that the tests see a URL with a secret in it. initdb and
postgres refuse to run as root, so as root they run as ``nobody``.

Test modules import BOTH fixtures by their function names (``pg_fixture``,
``store_target_fixture``); tests use them as ``pg`` and ``store_target``.

Where no server can be started the tests that need one are skipped with the reason; set
``PYTEST_P2P_REQUIRE_PG=1`` (CI with the package installed) to make that a failure instead.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SUPERUSER = "p2p"
PASSWORD = "s3cr3t-Pw_for-tests"  # tests assert this string never appears in any output


@dataclass(frozen=True)
class PgServer:
    port: int
    data: Path

    def url(self, dbname: str = "postgres", password: str = PASSWORD, query: str = "") -> str:
        q = f"?{query}" if query else ""
        return f"postgresql://{SUPERUSER}:{password}@127.0.0.1:{self.port}/{dbname}{q}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _bindir() -> Path | None:
    env = os.environ.get("PYTEST_P2P_PG_BIN")
    if env:
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process before exec: a killed pytest (SIGKILL, no teardown) takes its server along."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG: "fast" shutdown


def _unavailable(reason: str) -> None:
    if os.environ.get("PYTEST_P2P_REQUIRE_PG") == "1":
        pytest.fail(f"PostgreSQL tests required (PYTEST_P2P_REQUIRE_PG=1) but: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server for the postgresql backend tests: {reason}")


@contextlib.contextmanager
def pg_server() -> Iterator[PgServer]:
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'pytest-p2p[postgres]')")
    bindir = _bindir()
    if bindir is None:
        _unavailable("no initdb found (apt-get install postgresql, or set PYTEST_P2P_PG_BIN)")
        return
    as_root = os.geteuid() == 0
    user: dict[str, object] = {}
    if as_root:  # initdb and postgres refuse to run as root
        import pwd

        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            _unavailable("running as root, and there is no 'nobody' user to run initdb/postgres as")
        user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    top = Path(tempfile.mkdtemp(prefix="p2p-pg-"))
    os.chmod(top, 0o755)
    data, sock = top / "data", top / "sock"
    sock.mkdir()
    pwfile = top / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if as_root:
        for p in (top, sock, pwfile):
            os.chown(p, nobody.pw_uid, nobody.pw_gid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(top)}
    proc: subprocess.Popen[bytes] | None = None
    try:
        try:
            init = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}", "-E", "UTF8",
                 "--locale=C", "--auth-host=scram-sha-256", "--auth-local=scram-sha-256"],
                capture_output=True, env=env, timeout=120, **user)  # type: ignore[call-overload]
        except (OSError, subprocess.SubprocessError) as exc:  # e.g. nobody may not execute it
            _unavailable(f"initdb could not run{' as nobody' if as_root else ''}: {exc}")
        if init.returncode != 0:
            _unavailable(f"initdb failed: {init.stderr.decode(errors='replace')[-500:]}")
        for attempt in range(3):
            port = _free_port()
            log = open(top / "server.log", "ab")  # noqa: SIM115 - the server writes it while it lives
            proc = subprocess.Popen(
                [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=60"],
                stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent,
                **user)  # type: ignore[call-overload]
            log.close()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    psycopg.connect(PgServer(port, data).url(), connect_timeout=2).close()
                    break
                except psycopg.OperationalError:
                    time.sleep(0.1)
            else:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc = None
                if attempt == 2:
                    _unavailable("postgres did not start: " + (top / "server.log").read_text(errors="replace")[-500:])
                continue
            yield PgServer(port, data)
            return
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # "fast" shutdown
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(top, ignore_errors=True)


_SHARED: list[PgServer | BaseException] = []  # the one server of this process, or why there is none


def shared_server() -> PgServer:
    """One server per test process, however many modules import the fixture.

    (A fixture imported into several modules is a separate session fixture in each, which
    would start one server per module.) Stopped when the process exits; a skip or failure
    to start is remembered and given to every test that asks.
    """
    if not _SHARED:
        stack = contextlib.ExitStack()
        try:
            _SHARED.append(stack.enter_context(pg_server()))
            atexit.register(stack.close)
        except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
            _SHARED.append(exc)
    got = _SHARED[0]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.fixture(scope="session", name="pg")
def pg_fixture() -> PgServer:
    return shared_server()


@pytest.fixture(params=["sqlite", "postgresql"], name="store_target")
def store_target_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store on each backend: an SQLite path or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "h.db")
    server: PgServer = request.getfixturevalue("pg")
    return server.create_database()
