"""benchmarks/verdict_precision.py: the stop the campaign makes with ``campaign.precision``, on hand-made looks, and
the benchmark's own refusal of a bad option."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import verdict_precision as vp  # noqa: E402


def _look(decided: list[bool], est_half: list[float]) -> dict[str, np.ndarray]:
    d = np.array(decided)
    return {"pass": d, "fail": np.zeros_like(d), "half": np.full(len(d), 0.05), "est": np.zeros(len(d)),
            "est_half": np.array(est_half)}


def test_the_campaign_stops_at_its_first_decided_look_or_the_first_precise_enough_one() -> None:
    # three nights: decided and precise at 8; decided at 8 but precise only at 10; never decided
    looks = {8: _look([True, True, False], [0.01, 0.03, 0.03]), 9: _look([True, True, False], [0.01, 0.025, 0.02]),
             10: _look([True, True, False], [0.01, 0.019, 0.01])}
    assert vp.stop(looks, None).tolist() == [8, 8, 10]
    assert vp.stop(looks, 0.02).tolist() == [8, 10, 10]
    assert vp.pick(looks, np.array([8, 10, 9]), "est_half").tolist() == [0.01, 0.019, 0.02]


def test_a_bad_precision_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        vp.main(["--precision", "2"])
    assert "--precision must be a fraction in (0, 0.5), got 2.0" in capsys.readouterr().err
