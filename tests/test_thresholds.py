from __future__ import annotations

import pytest

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.stats import paired_uplift
from pytest_p2p.errors import ConfigError
from pytest_p2p.verdict.thresholds import TooFewRepsError, judge, parse_min_uplift, point_key


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


def test_point_rule_judges_the_estimate() -> None:
    rule = parse_min_uplift({"default": "5%", 8: "8%"}, "point", "model", "r", "p")
    up = paired_uplift([106.0, 107.0, 105.0], [100.0, 100.0, 100.0])
    v = judge(up, "c1", rule, metric="output_throughput", faster_arm="p2p_on", slower_arm="p2p_off")
    assert v.passed and v.threshold == pytest.approx(0.05)
    v8 = judge(up, "c8", rule, metric="output_throughput", faster_arm="p2p_on", slower_arm="p2p_off")
    assert not v8.passed and "below the threshold +8.0 %" in v8.message


def test_ci_lower_rule_is_stricter() -> None:
    up = paired_uplift([115.0, 101.0, 112.0], [100.0, 100.0, 100.0])
    point = judge(up, "c1", parse_min_uplift("5%", "point", "model", "r", "p"), metric="m",
                  faster_arm="a", slower_arm="b")
    lower = judge(up, "c1", parse_min_uplift("5%", "ci_lower", "model", "r", "p"), metric="m",
                  faster_arm="a", slower_arm="b")
    assert point.passed and not lower.passed and "CI lower bound" in lower.message


def test_too_few_reps_is_an_error_not_a_pass() -> None:
    up = paired_uplift([150.0], [100.0])
    with pytest.raises(TooFewRepsError, match="needs at least 2 paired rep"):
        judge(up, "c1", parse_min_uplift("5%", "ci_lower", "model", "r", "p"), metric="m", faster_arm="a",
              slower_arm="b")
    with pytest.raises(TooFewRepsError):
        judge(paired_uplift([None], [1.0]), "c1", parse_min_uplift("5%", "point", "model", "r", "p"),
              metric="m", faster_arm="a", slower_arm="b")


def test_campaign_config_parses_and_rejects() -> None:
    cfg = parse_campaign({"concurrency": [1, 4, 16], "reps": 3, "min_uplift": {"default": "5%", 16: "8%"},
                          "schedule": "abba", "sizes": ["8KiB", "128KiB"]}, "rig.yaml")
    assert cfg.points("model") == ["c1", "c4", "c16"] and cfg.points("probe") == ["s8KiB", "s128KiB"]
    assert cfg.uplift_rule_for("model").threshold("c16") == pytest.approx(0.08)
    assert cfg.metric("probe") == "time_us" and cfg.direction("probe") == "lower"
    assert cfg.direction("model") == "higher"
    assert parse_campaign(None, "rig.yaml").reps == 3
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
