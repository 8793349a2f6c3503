"""The PostgreSQL backend's own cases, against a real private server (tests/store_pg.py).

Secrets: the server's password is in every URL here; no error, ``where`` or CLI output may
contain it. TLS options are handed to libpq as written. A newer, foreign or damaged schema
is refused with nothing written; a held lock, a read-only database and an unreachable
server are one paragraph each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from store_pg import PASSWORD, PgServer, pg_fixture  # noqa: F401 - fixture
from synthetic_runs import write_run

from pytest_p2p.errors import StoreError
from pytest_p2p.verdict import store_postgres
from pytest_p2p.verdict.store import SCHEMA_VERSION, Store, StoreSaveError, save_campaign_runs
from pytest_p2p.verdict.store_base import redact, scrub, target_of


def _psql(url: str, *sql: str) -> list[tuple[object, ...]]:
    import psycopg

    rows: list[tuple[object, ...]] = []
    with psycopg.connect(url, autocommit=True) as con:
        for s in sql:
            cur = con.execute(s)
            if cur.description:
                rows = list(cur.fetchall())
    return rows


def _state(url: str) -> list[tuple[object, ...]]:
    """Everything a store could change: tables, columns and the meta rows."""
    return _psql(url, "SELECT table_name, column_name, data_type FROM information_schema.columns "
                      "WHERE table_schema = 'public' ORDER BY 1, 2") + \
        (_psql(url, "SELECT key, value FROM p2p_meta ORDER BY key")
         if _psql(url, "SELECT to_regclass('p2p_meta')")[0][0] else [])


def _clean(text: str) -> None:
    assert PASSWORD not in text
    assert "Traceback" not in text and "psycopg." not in text
    assert text.strip().count("\n") == 0, text


# -- redaction (no server) -------------------------------------------------------------------

@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://ci:hunter2@db.example:5432/p2p?sslmode=verify-full",
     "postgresql://ci:***@db.example:5432/p2p?sslmode=verify-full"),
    ("postgres://ci:p%40ss%2Fw@h/p2p", "postgres://ci:***@h/p2p"),
    ("postgresql://h1:5432,h2:5433/p2p?user=ci&password=x&sslpassword=y&sslrootcert=/etc/ca.pem",
     "postgresql://h1:5432,h2:5433/p2p?user=ci&password=***&sslpassword=***&sslrootcert=/etc/ca.pem"),
    ("postgresql://ci@h/p2p", "postgresql://ci@h/p2p"),
    ("postgresql:///p2p?host=/run/postgresql", "postgresql:///p2p?host=/run/postgresql"),
    ("POSTGRESQL://u:pw@h/d", "POSTGRESQL://u:***@h/d"),
    (".p2p/history.db", ".p2p/history.db"),
    (Path("/ci/postgresql:/ci:hunter2@db/p2p"), "/ci/postgresql:/ci:***@db/p2p"),  # a URL folded by Path
])
def test_redact(url, shown):
    assert redact(url) == shown


def test_target_of_keeps_urls_and_anchors_paths(tmp_path):
    url = "postgresql://ci:hunter2@db:5432/p2p?sslmode=require"
    assert target_of(f"  {url} ", tmp_path) == url
    assert target_of("h.db", tmp_path) == tmp_path / "h.db"
    assert target_of("/abs/h.db", tmp_path) == Path("/abs/h.db")
    with pytest.raises(StoreError, match="not a store pytest-p2p knows") as got:
        target_of("mysql://ci:hunter2@db/p2p", tmp_path)
    assert "hunter2" not in str(got.value) and "mysql://ci:***@db" in str(got.value)
    with pytest.raises(StoreError, match="not a store pytest-p2p knows"):
        Store("postgresql+psycopg://ci:hunter2@db/p2p")


def test_a_url_folded_into_a_path_is_refused_not_created(tmp_path):
    """``Path(url)`` folds ``//``: such a 'path' must never become directories named after the password."""
    folded = tmp_path / Path("postgresql://ci:hunter2@db/p2p")
    with pytest.raises(StoreError, match="turned into a file path") as got:
        Store(folded)
    assert "hunter2" not in str(got.value)
    assert list(tmp_path.iterdir()) == []


def test_scrub_removes_raw_and_decoded_password():
    url = "postgresql://ci:p%40ss@h/p2p?sslpassword=k3y"
    msg = f"could not connect to {url}: password p@ss and p%40ss rejected, key k3y"
    got = scrub(msg, url)
    assert "p@ss" not in got and "p%40ss" not in got and "k3y" not in got and "ci:***@h" in got


def test_psycopg_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreError, match=r"pip install 'pytest-p2p\[postgres\]'") as got:
        Store("postgresql://ci:hunter2@h/p2p")
    assert "hunter2" not in str(got.value)


@pytest.mark.parametrize(("state", "kind"), [
    (None, "connect"), ("08006", "connect"), ("28P01", "connect"), ("3D000", "connect"),
    ("53100", "full"), ("53200", "full"), ("55P03", "locked"), ("57014", "locked"),
    ("25006", "readonly"), ("42501", "readonly"), ("XX001", "corrupt"), ("42P01", "corrupt"),
    ("23505", "other"),
])
def test_every_sqlstate_is_classified(state, kind):
    assert store_postgres.classify(state) == kind


# -- a real server ------------------------------------------------------------------------------

def test_where_and_errors_never_show_the_password(pg: PgServer, tmp_path):
    url = pg.create_database()
    with Store(url) as st:
        assert PASSWORD not in st.where and "***" in st.where
        with pytest.raises(StoreError) as got:
            st.run("nope")
        _clean(str(got.value))


def test_wrong_password_is_one_paragraph_without_it(pg: PgServer):
    url = pg.url(password="wrong-" + PASSWORD)
    with pytest.raises(StoreError, match="connecting failed") as got:
        Store(url)
    _clean(str(got.value))
    assert "wrong-" not in str(got.value)


def test_unreachable_server(pg: PgServer):
    url = pg.url().replace(f":{pg.port}/", ":1/") + "?connect_timeout=2"
    with pytest.raises(StoreError, match="cannot be reached") as got:
        Store(url)
    _clean(str(got.value))


def test_tls_options_reach_libpq(pg: PgServer):
    """``sslmode=require`` against our server without TLS: libpq itself refuses, so the option got through."""
    with pytest.raises(StoreError, match="(?i)ssl") as got:
        Store(pg.url(query="sslmode=require"))
    _clean(str(got.value))
    with Store(pg.create_database() + "?sslmode=disable&application_name=p2p-test") as st:
        assert st.runs() == []


def test_newer_schema_is_refused_and_untouched(pg: PgServer):
    url = pg.create_database()
    Store(url).close()
    _psql(url, f"UPDATE p2p_meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
    before = _state(url)
    with pytest.raises(StoreError, match="newer than this pytest-p2p") as got:
        Store(url)
    _clean(str(got.value))
    assert _state(url) == before


@pytest.mark.parametrize(("setup", "match"), [
    ("CREATE TABLE runs (x int)", "did not create"),
    ("CREATE TABLE p2p_meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO p2p_meta VALUES ('application', 'x')",
     "another application"),
    ("CREATE TABLE p2p_meta (key TEXT PRIMARY KEY, value TEXT); "
     "INSERT INTO p2p_meta VALUES ('application', 'pytest-p2p'), ('schema_version', 'two')", "damaged"),
])
def test_foreign_or_damaged_schema_is_refused_and_untouched(pg: PgServer, setup, match):
    url = pg.create_database()
    _psql(url, *setup.split("; "))
    before = _state(url)
    with pytest.raises(StoreError, match=match) as got:
        Store(url)
    _clean(str(got.value))
    assert _state(url) == before


def test_dropped_table_is_a_damaged_store(pg: PgServer, tmp_path):
    url = pg.create_database()
    Store(url).close()
    _psql(url, "DROP TABLE results")
    with pytest.raises(StoreSaveError, match="NOT saved") as got:
        save_campaign_runs(url, [write_run(tmp_path, "r1")])
    assert "damaged" in got.value.report
    _clean(got.value.report)


def test_unrelated_tables_are_left_alone(pg: PgServer, tmp_path):
    url = pg.create_database()
    _psql(url, "CREATE TABLE dashboards (id int)")
    with Store(url) as st:
        st.save_run_dir(write_run(tmp_path, "r1"))
    assert _psql(url, "SELECT count(*) FROM dashboards") == [(0,)]


def test_v1_database_is_migrated(pg: PgServer, tmp_path):
    url = pg.create_database()
    _psql(url, "CREATE TABLE p2p_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
          "INSERT INTO p2p_meta VALUES ('application', 'pytest-p2p'), ('schema_version', '1')",
          *store_postgres._steps(1))
    with Store(url) as st:
        st.save_run_dir(write_run(tmp_path, "r1"), accept="accepted", note="after the migration")
        assert st.baseline_entries()[0][3] == "after the migration"
    assert ("schema_version", str(SCHEMA_VERSION)) in _state(url)


def test_held_lock_gives_up_after_the_timeout(pg: PgServer, tmp_path):
    import psycopg

    url = pg.create_database()
    Store(url).close()
    with psycopg.connect(url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (store_postgres.LOCK_KEY,))
        with Store(url, timeout_s=0.5) as st:
            assert st.runs() == []  # readers are not blocked
            with pytest.raises(StoreError, match="held its write lock") as got:
                st.save_run_dir(write_run(tmp_path, "r1"))
        holder.rollback()
    _clean(str(got.value))
    with Store(url) as st:
        assert st.runs() == []


def test_read_only_database_is_one_error(pg: PgServer, tmp_path):
    url = pg.create_database()
    Store(url).close()
    dbname = url.rsplit("/", 1)[1]
    _psql(pg.url(), f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')
    with Store(url) as st:
        with pytest.raises(StoreError, match="cannot be written") as got:
            st.save_run_dir(write_run(tmp_path, "r1"))
        assert st.runs() == []
    _clean(str(got.value))


def test_a_schema_of_its_own_through_the_url(pg: PgServer, tmp_path):
    """docs/fleet.md: ``options=-csearch_path%3D...`` keeps the store apart from a foreign ``runs`` table."""
    url = pg.create_database()
    _psql(url, "CREATE TABLE public.runs (x int)", "CREATE SCHEMA fleet")
    with pytest.raises(StoreError, match="did not create"):
        Store(url)
    with Store(url + "?options=-csearch_path%3Dfleet") as st:
        st.save_run_dir(write_run(tmp_path, "r1"))
        assert [r.run_id for r in st.runs()] == ["r1"]
    assert _psql(url, "SELECT count(*) FROM fleet.runs") == [(1,)]
    assert _psql(url, "SELECT count(*) FROM public.runs") == [(0,)]


def test_connection_lost_mid_save_leaves_no_half_written_campaign(pg: PgServer, tmp_path, monkeypatch):
    """The server ends our session between the run row and its metric rows: nothing of the run is stored."""
    url = pg.create_database()
    with Store(url) as st:
        backend = st.backend
        assert isinstance(backend, store_postgres.PostgresBackend)
        pid = backend.con.info.backend_pid
        real = backend.executemany

        def killed_first(sql: str, rows: object) -> None:
            _psql(pg.url(), f"SELECT pg_terminate_backend({pid})")
            real(sql, rows)  # type: ignore[arg-type]

        monkeypatch.setattr(backend, "executemany", killed_first)
        with pytest.raises(StoreError, match="saving run r1 failed") as got:
            st.save_run_dir(write_run(tmp_path, "r1"), accept="accepted")
    _clean(str(got.value))
    with Store(url) as st:
        assert st.runs() == [] and st.baseline_names() == []
