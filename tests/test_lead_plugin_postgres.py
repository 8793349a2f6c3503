"""The plugin end to end with a PostgreSQL URL in --p2p-db (issue 16): saved, compared, password never shown.

The store's own tests run on both backends; this one goes through the pytest options, the verdict hooks
and the session-end save, where a URL used to be folded into a file path by ``Path()``.
"""

from __future__ import annotations

from store_pg import PASSWORD, PgServer, pg_fixture  # noqa: F401 - fixture
from synthetic_runs import write_run
from test_verdict_plugin import run_p  # noqa: F401,F811 - the verdict plugin tests' fake-campaign runner (fixture)

from pytest_p2p.verdict.store import Store


def test_save_and_compare_through_a_postgresql_url(run_p, tmp_path, pg: PgServer) -> None:  # noqa: F811
    url = pg.create_database()
    assert PASSWORD in url
    res = run_p(write_run(tmp_path, "pgfirst"), "--p2p-save-baseline=fleet", f"--p2p-db={url}")
    out = res.stdout.str()
    res.stdout.fnmatch_lines(["*1 run(s) saved to postgresql://*accepted as baseline 'fleet': pgfirst*"])
    assert PASSWORD not in out
    with Store(url) as st:
        assert st.run("pgfirst").baselines == ("fleet",)
    res = run_p(write_run(tmp_path, "pgsecond", seed=3), "--p2p-compare=fleet", f"--p2p-db={url}")
    out = res.stdout.str()
    res.stdout.fnmatch_lines(["*baseline too short: 1 run(s)*"])  # judged against the fleet store's one run
    assert PASSWORD not in out and "INTERNALERROR" not in out
    assert not (tmp_path / "postgresql:").exists()  # never folded into a directory
