from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.stats.summary import paired_uplift
from pytest_p2p.stats.uplift_rule import UpliftVerdict, judge, parse_min_uplift, point_key


def test_parse_min_uplift_per_point_model_and_probe() -> None:
    rule = parse_min_uplift({"default": "5%", 8: "8%"}, "point", "model", "rig.yaml", "campaign.min_uplift")
    assert rule.threshold("c8") == pytest.approx(0.08)
    assert rule.threshold("c1") == pytest.approx(0.05)
    probe = parse_min_uplift({"default": 0.1, "8KiB": "20%"}, "ci_lower", "probe", "r", "p")
    assert probe.threshold("s8KiB") == pytest.approx(0.2)
    assert parse_min_uplift("3%", "point", "model", "r", "p").threshold("c4") == pytest.approx(0.03)
    assert point_key("c16", "model") == "c16" and point_key("8192", "probe") == "s8KiB"


def test_parse_min_uplift_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"campaign.min_uplift.x: expected a concurrency"):
        parse_min_uplift({"x": "5%"}, "point", "model", "rig.yaml", "campaign.min_uplift")
    with pytest.raises(ConfigError, match="uplift rule"):
        parse_min_uplift(None, "median", "model", "rig.yaml", "campaign.uplift_rule")


def _j(up: dict[str, object], point: str = "c1", value: object = "5%", rule: str = "bounds") -> UpliftVerdict:
    return judge(up, point, parse_min_uplift(value, rule, "model", "r", "p"), metric="output_throughput",
                 faster_arm="p2p_on", slower_arm="p2p_off")


def test_bounds_rule_three_outcomes() -> None:
    clear = _j(paired_uplift([110.0, 110.5, 109.8, 110.2], [100.0, 100.3, 99.9, 100.1]))
    assert clear.passed and clear.outcome == "pass" and clear.pairs_needed is None
    below = _j(paired_uplift([101.0, 101.3, 100.8, 101.1], [100.0, 100.3, 99.9, 100.1]))
    assert not below.passed and below.outcome == "fail" and "upper bound is below" in below.message
    # +6 % estimated on 3 pairs against +5 %: a point rule passed this; bounds cannot decide it
    close = _j(paired_uplift([106.0, 107.0, 105.0], [100.0, 100.0, 100.0]))
    assert close.outcome == "inconclusive" and not close.passed
    assert close.pairs_needed is not None and close.pairs_needed > 3 and "pairs would decide" in close.message


def test_old_rule_names_are_judged_on_bounds() -> None:
    up = paired_uplift([115.0, 101.0, 112.0], [100.0, 100.0, 100.0])
    for rule in ("point", "ci_lower", "bounds"):
        assert _j(up, rule=rule).outcome == "inconclusive"


def test_per_point_threshold_and_plan_alpha() -> None:
    rule = parse_min_uplift({"default": "5%", 8: "8%"}, "bounds", "model", "r", "p")
    assert rule.threshold("c8") == pytest.approx(0.08) and rule.alpha_for(3) == pytest.approx(0.01)
    planned = replace(rule, plan=(3, 6))
    assert planned.alpha_for(3) == pytest.approx(0.005) and planned.alpha_for(4) == pytest.approx(0.01 / 6)
    assert planned.alpha_for(1) == pytest.approx(0.005) and planned.alpha_for(9) == pytest.approx(0.01 / 6)


def test_too_few_pairs_is_inconclusive_never_a_pass() -> None:
    one = _j(paired_uplift([150.0], [100.0]))
    assert one.outcome == "inconclusive" and not one.passed and "2 pairs" in one.message
    none = _j(paired_uplift([None], [1.0]))
    assert none.outcome == "inconclusive" and not none.passed and none.estimate is None


def test_campaign_config_parses_and_rejects() -> None:
    cfg = parse_campaign({"concurrency": [1, 4, 16], "reps": 3, "min_uplift": {"default": "5%", 16: "8%"},
                          "schedule": "abba", "sizes": ["8KiB", "128KiB"]}, "rig.yaml")
    assert cfg.points("model") == ["c1", "c4", "c16"] and cfg.points("probe") == ["s8KiB", "s128KiB"]
    assert cfg.uplift_rule_for("model").threshold("c16") == pytest.approx(0.08)
    assert cfg.metric("probe") == "time_us" and cfg.direction("probe") == "lower"
    assert cfg.direction("model") == "higher"
    default = parse_campaign(None, "rig.yaml")
    assert default.reps == 4 and default.schedule == "abba"  # even reps in ABBA: linear drift cancels
    with pytest.raises(ConfigError, match=r"campaign.reps: uplift_rule ci_lower needs reps >= 2"):
        parse_campaign({"reps": 1, "uplift_rule": "ci_lower"}, "rig.yaml")
    with pytest.raises(ConfigError, match=r"campaign.repz: unknown key \(did you mean 'reps'\?\)"):
        parse_campaign({"repz": 1}, "rig.yaml")
    with pytest.raises(ConfigError, match=r"campaign.telemetry_hz: expected a number 1"):
        parse_campaign({"telemetry_hz": 50}, "rig.yaml")
    with pytest.raises(ConfigError, match="no known direction"):
        parse_campaign({"uplift_metric": "mystery"}, "rig.yaml")
    with pytest.raises(ConfigError, match="arm names repeat"):
        parse_campaign({"arms": ["a", "a"]}, "rig.yaml")
