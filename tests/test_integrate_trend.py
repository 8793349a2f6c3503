"""An unreachable fleet database means "no trend" for the report, never an exception, and its password is
never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_p2p.report.trend import history

URL = "postgresql://user:secret@127.0.0.1:1/x"


def test_unreachable_fleet_database_is_no_trend(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                                                recwarn: pytest.WarningsRecorder) -> None:
    assert history(URL, "rig", "gpu0-gpu1", "c1", "output_throughput") == []
    seen = capsys.readouterr()
    text = seen.out + seen.err + caplog.text + " ".join(str(w.message) for w in recwarn)
    assert "secret" not in text


def test_missing_sqlite_history_is_no_trend(tmp_path: Path) -> None:
    assert history(tmp_path / "none.db", "rig", "gpu0-gpu1", "c1", "output_throughput") == []
    assert not (tmp_path / "none.db").exists()  # read-only: no store created


def test_the_unreachable_url_really_fails_to_open() -> None:
    """Guards the first test: the store itself refuses this URL with a StoreError that hides the password."""
    from pytest_p2p.errors import P2PError
    from pytest_p2p.verdict.store import exists

    with pytest.raises(P2PError) as err:
        exists(URL)
    assert "secret" not in str(err.value)
