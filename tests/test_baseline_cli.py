from __future__ import annotations

import json
import re

import pytest
from store_pg import PASSWORD, pg_fixture, store_target_fixture  # noqa: F401 - fixtures
from synthetic_runs import baseline_runs, write_run

from pytest_p2p.verdict.baseline_cli import main


def test_save_list_accept_show_diff_export(tmp_path, capsys, store_target):
    """The whole CLI on both backends (an SQLite path, a PostgreSQL URL with a password)."""
    db = store_target
    a, b = baseline_runs(tmp_path, count=2)
    assert main(["--db", db, "save", str(a), "--accept", "accepted"]) == 0
    assert main(["--db", db, "save", str(b)]) == 0
    capsys.readouterr()
    assert main(["--db", db, "list"]) == 0
    out = capsys.readouterr().out
    assert "accepted (1 runs)" in out and a.name in out and b.name in out
    assert main(["--db", db, "accept", b.name, "--name", "pre-driver-upgrade"]) == 0
    assert main(["--db", db, "list", "--name", "pre-driver-upgrade"]) == 0
    assert a.name not in capsys.readouterr().out.split("\n", 1)[1]
    assert main(["--db", db, "show", a.name]) == 0
    assert '"fingerprint"' in capsys.readouterr().out
    slow = write_run(tmp_path, "slow", gen=(4, 3), scale={"output_throughput": 0.7}, seed=9)
    main(["--db", db, "save", str(slow)])
    capsys.readouterr()
    assert main(["--db", db, "diff", a.name, "slow"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^output_throughput +\| c8 +\| p2p_on .*\| REGRESSION$", out, re.M)
    assert "Gen4 x4 -> Gen3 x4" in out
    assert main(["--db", db, "export", "--out", str(tmp_path / "x.json")]) == 0
    data = json.loads((tmp_path / "x.json").read_text())
    assert len(data["runs"]) == 3 and data["baselines"]["accepted"] == [a.name]
    assert main(["--db", db, "reject", a.name]) == 0
    assert main(["--db", db, "reject", a.name]) == 1
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err + (tmp_path / "x.json").read_text()


def test_password_never_printed(tmp_path, capsys, store_target):
    main(["--db", store_target, "save", str(write_run(tmp_path, "r"))])
    for argv in (["list"], ["show", "nope"], ["accept", "nope"], ["export"], ["import", str(tmp_path / "none")]):
        assert main(["--db", store_target, *argv]) in (0, 2)
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    if "://" in store_target:
        assert "p2p:***@" in err


@pytest.mark.parametrize("bad", ["{", "[]", '{"schema_version": 99, "runs": []}',
                                 '{"schema_version": 2, "runs": [{"run_id": 5}]}'])
def test_import_refuses_bad_files_and_adds_nothing(tmp_path, capsys, bad):
    db = str(tmp_path / "h.db")
    main(["--db", db, "save", str(write_run(tmp_path, "r"))])
    (tmp_path / "bad.json").write_text(bad)
    assert main(["--db", db, "import", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "nothing was imported" in err and "Traceback" not in err
    main(["--db", db, "list"])
    assert capsys.readouterr().out.count("demo-rig") == 1


def test_errors_are_one_line_and_nonzero(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "none.db"), "list"]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.db"
    bad.write_text("garbage")
    assert main(["--db", str(bad), "save", str(tmp_path)]) == 2
    assert "not an SQLite file" in capsys.readouterr().err
    assert bad.read_text() == "garbage"
    db = str(tmp_path / "h.db")
    main(["--db", db, "save", str(write_run(tmp_path, "r"))])
    assert main(["--db", db, "accept", "r", "--name", "no/slash"]) == 2
