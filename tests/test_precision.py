"""``campaign.precision``: starts (or pairs) added while a decided uplift's interval is wider than the rig asks.

A decision says whether the uplift clears its threshold; a rig owner who compares uplifts across nights also needs
to know it to a stated precision (issue 24: +-2 % of the on/off ratio). Adding looks on the interval's width keeps
the error budget (each look is judged at its share of alpha, whatever made the campaign look again:
benchmarks/verdict_precision.py shows the rates); the time it costs is bounded by max_starts and max_time_s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.campaign import adaptive
from pytest_p2p.campaign.blocks import plan_line
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.report.proof import proof_for_run
from pytest_p2p.stats import Decision, Outcome

#: tokens slow enough (8 ms) and P2P off twice as slow, so that no load on this box hides the uplift from the
#: planned starts (5: the first arm fitted, 3 df): what adds starts after them is the precision asked
SLOWER = {"PYTEST_P2P_STANDIN_TPOT_MS": "8", "PYTEST_P2P_STANDIN_P2P_OFF_PENALTY": "2.0"}


def _decision(lower: float, upper: float) -> Decision:
    return Decision("uplift", Outcome.PASS, (lower + upper) / 2, lower, upper, 0.99, 0.0, 8, None, "")


def test_the_key_reads_a_percentage_of_the_ratio_and_names_a_bad_one() -> None:
    assert parse_campaign({"precision": "2%"}, "rig.yaml").precision == 0.02
    assert parse_campaign({"precision": None}, "rig.yaml").precision is None
    assert parse_campaign({}, "rig.yaml").precision is None
    for bad, says in (("80%", "from 0.1% to 50%"), ("tight", "expected a percentage like '5%'")):
        with pytest.raises(ConfigError) as exc:
            parse_campaign({"precision": bad}, "rig.yaml")
        assert str(exc.value).startswith("rig.yaml: campaign.precision: ") and says in str(exc.value)


def test_the_width_is_half_the_interval_on_the_ratio_s_log_scale() -> None:
    # +58.0 % .. +67.9 %: the ratio 1.58 .. 1.679, half of log(1.679 / 1.58) = 3.04 % of the ratio
    assert adaptive.halfwidth(_decision(0.580, 0.679)) == pytest.approx(math.log(1.679 / 1.58) / 2)
    assert adaptive.halfwidth(_decision(-math.inf, 0.1)) == math.inf
    halves = {"c16": 0.012, "c64": 0.0304}
    assert list(adaptive.too_wide(halves, 0.02)) == ["c64"] and adaptive.too_wide(halves, None) == {}
    assert adaptive.precision_json(0.012, 0.02, 0.005) == {"precision": {"target": 0.02, "level": 0.99,
                                                                         "halfwidth": 0.012, "met": True}}
    assert adaptive.precision_json(math.inf, 0.02, 0.005)["precision"]["halfwidth"] is None  # type: ignore[index]
    assert adaptive.precision_json(0.012, None, 0.005) == {}
    assert adaptive.wide_text({"c64": 0.0304}, 0.02, 0.005) == ("c64 known to +-3.0 % of the ratio (99 % CI), wider "
                                                                "than campaign.precision 2 %")


def _dir(root: Path, name: str) -> Path:
    (root / name).mkdir()
    return root / name


def _meta(res: Any) -> dict[str, Any]:
    return json.loads((res.run_dir / "run.json").read_text())


def test_a_resident_campaign_adds_starts_until_its_intervals_are_narrow_enough(tmp_path: Path) -> None:
    """The stand-in campaign decides its uplift by its 5 planned starts; asked for +-0.1 %, which no start count
    here reaches, it adds starts up to max_starts, says why, and records the precision as not met. Asked for
    +-50 %, the precision never adds a start."""
    loose = _runner(_dir(tmp_path, "loose"), SLOWER, starts=5, max_starts=7, precision="50%").run()
    assert loose.status == "complete", loose.errors
    assert not any("wider than campaign.precision" in n for n in loose.notes), loose.notes
    for point in ("c1", "c2"):
        d = _meta(loose)["decisions"][point]
        # the estimate's interval at the point's whole alpha (99 %), narrower than the verdict's first look's
        assert d["precision"]["target"] == 0.5 and d["precision"]["level"] == pytest.approx(0.99), d
        assert d["precision"]["met"] is True and d["level"] > 0.99, d
        assert d["precision"]["halfwidth"] < (math.log1p(d["upper"]) - math.log1p(d["lower"])) / 2

    tight = _runner(_dir(tmp_path, "tight"), SLOWER, starts=5, max_starts=7, precision="0.1%").run()
    assert tight.status == "complete", tight.errors
    assert tight.reps == 7 * 2  # every start max_starts allows
    added = [n for n in tight.notes if "adding start" in n]
    assert len(added) == 2 and all("wider than campaign.precision 0.1 %" in n for n in added), tight.notes
    decisions = _meta(tight)["decisions"]
    for point in ("c1", "c2"):
        assert decisions[point]["precision"]["met"] is False and decisions[point]["stopped"] == "max_starts=7 reached"
    assert any(n.startswith("precision not reached at 7 start(s) (max_starts=7 reached): ") for n in tight.notes)
    # said where the verdict is read: the terminal's notes under the results (report.proof)
    said = [n for n in proof_for_run(tight.run_dir, {}).notes if n.startswith("precision")]
    assert len(said) == 1 and said[0].startswith("precision (campaign.precision 0.1 % of the ratio at 99 %): c1 +-")
    assert said[0].count("not met") == 2, said


def test_the_precision_note_names_each_point_and_whether_it_was_met() -> None:
    decisions = {"c16": {"precision": {"target": 0.02, "level": 0.99, "halfwidth": 0.012, "met": True}},
                 "c64": {"precision": {"target": 0.02, "level": 0.99, "halfwidth": None, "met": False}}}
    assert adaptive.precision_notes(decisions) == [
        "precision (campaign.precision 2 % of the ratio at 99 %): c16 +-1.2 % met · c64 unbounded, not met"]
    assert adaptive.precision_notes({"c16": {"outcome": "pass"}}) == []


def test_a_restart_campaign_adds_pairs_for_its_precision_too(tmp_path: Path) -> None:
    res = _runner(tmp_path, SLOWER, residency="restart", reps=5, max_reps=6, precision="0.1%",
                  concurrency=[1]).run()
    assert res.status == "complete", res.errors
    assert res.reps == 6 and any("wider than campaign.precision 0.1 %" in n and "adding pair 6" in n
                                 for n in res.notes), res.notes
    assert _meta(res)["decisions"]["c1"]["precision"]["met"] is False


def test_the_plan_line_plans_for_the_rig_s_precision(tmp_path: Path) -> None:
    runner = _runner(tmp_path, starts=3, max_starts=6, precision="1%")
    line = plan_line(runner, ["c1", "c2"])  # type: ignore[arg-type]
    assert "up to 6 starts while undecided or wider than +-1 % (campaign.precision)" in line, line
    assert "; +-1 % would take " in line, line
    # planned at the point's whole alpha (99 % for two points), the level the precision is held to at every look
    assert line.split("; +-1 % would take ")[1].split("expected ")[1].startswith("99 % CI half-width"), line
    plain = plan_line(_runner(_dir(tmp_path, "plain"), starts=3, max_starts=6), ["c1", "c2"])  # type: ignore[arg-type]
    assert "+-2 % would take" in plain and "campaign.precision" not in plain, plain
