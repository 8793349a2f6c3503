"""Absurd numbers in the rig file's ``server`` and ``campaign`` sections are ConfigErrors naming file, field, value.

The ranges themselves are documented in docs/rig-file.md; these tests hold the parsers to "a clear error, never
a hang, an OverflowError or a MemoryError an hour into a campaign".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.errors import ConfigError, P2PError
from pytest_p2p.plugin.rig import load_rig
from pytest_p2p.probes.config import parse_probe
from pytest_p2p.serve.config import parse_server

ABSURD: list[Any] = [1e8, 1e29, 1e308, 10**5000, -1, math.nan, math.inf, "1e8", True]
IDS = ["1e8", "1e29", "1e308", "5000-digits", "-1", "nan", "inf", "str-1e8", "true"]

CAMPAIGN_KEYS = ["reps", "max_reps", "rep_retries", "max_time_s", "scenario_timeout_s", "request_timeout_s",
                 "cooldown_s", "idle_baseline_s", "vram_free_timeout_s", "vram_free_mib", "warmup",
                 "prompts_per_concurrency", "input_len", "output_len", "telemetry_hz", "seed"]
SERVER_KEYS = ["startup_timeout_s", "request_timeout_s", "teardown_timeout_s", "idle_memory_tolerance_mib"]
LOAD_KEYS = ["input_len", "output_len", "num_prompts", "warmup", "seed", "client_processes", "request_rate"]


@pytest.mark.parametrize("key", CAMPAIGN_KEYS)
@pytest.mark.parametrize("value", ABSURD, ids=IDS)
def test_campaign_absurd_numbers_name_field_and_value(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_campaign({key: value}, "rig.yaml")
    text = str(err.value)
    assert text.startswith(f"rig.yaml: campaign.{key}: "), text
    assert "got " in text and len(text) < 300, text


@pytest.mark.parametrize("key", SERVER_KEYS)
@pytest.mark.parametrize("value", ABSURD, ids=IDS)
def test_server_absurd_numbers_name_field_and_value(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_server({"model": "m", key: value}, "rig.yaml")
    assert str(err.value).startswith(f"rig.yaml: server.{key}: "), str(err.value)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("key", LOAD_KEYS)
@pytest.mark.parametrize("value", [v for v in ABSURD if v is not math.inf], ids=[i for i in IDS if i != "inf"])
def test_load_absurd_numbers_name_field_and_value(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_server({"model": "m", "load": {key: value}}, "rig.yaml")
    assert str(err.value).startswith(f"rig.yaml: server.load.{key}: "), str(err.value)
    assert len(str(err.value)) < 300


PROBE_KEYS = ["iters", "warmup", "graph_launches", "copy_reps", "timeout_s"]


@pytest.mark.parametrize("key", PROBE_KEYS)
@pytest.mark.parametrize("value", ABSURD, ids=IDS)
def test_probe_absurd_numbers_name_field_and_value(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_probe({key: value}, "rig.yaml", "probe")
    assert str(err.value).startswith(f"rig.yaml: probe.{key}: "), str(err.value)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize(("section", "where"), [
    ({"sizes": ["64GiB"]}, "probe.sizes[0]"), ({"copy_bytes": "1TiB"}, "probe.copy_bytes"),
    ({"decode": {"hidden": 10**6, "batches": [10**6]}}, "probe.decode.batches[0]"),
    ({"decode": {"hidden": 1e8, "batches": [1]}}, "probe.decode.hidden"),
    ({"thresholds": {"busbw_min_gbs": {"8KiB": 1e308}}}, "probe.thresholds.busbw_min_gbs.8KiB"),
    ({"thresholds": {"latency_max_us": {"8KiB": math.nan}}}, "probe.thresholds.latency_max_us.8KiB"),
])
def test_probe_sizes_and_thresholds_are_bounded(section: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError, match=r"^rig\.yaml: " + where.replace(".", r"\.").replace("[", r"\[")):
        parse_probe(section, "rig.yaml", "probe")


def test_inf_request_rate_is_the_closed_loop() -> None:
    assert parse_server({"model": "m", "load": {"request_rate": "inf"}}, "r").load.request_rate == math.inf
    assert parse_server({"model": "m", "load": {"request_rate": math.inf}}, "r").load.request_rate == math.inf


def test_a_float_count_says_write_a_plain_integer() -> None:
    with pytest.raises(ConfigError, match=r"campaign\.reps: expected an integer 1\.\.1000, got 100000000\.0 "
                                          r"\(write a plain integer\)"):
        parse_campaign({"reps": 1e8}, "rig.yaml")


def test_campaign_concurrency_items_are_bounded() -> None:
    with pytest.raises(ConfigError, match=r"campaign\.concurrency\[1\]: expected an integer 1\.\.4096"):
        parse_campaign({"concurrency": [1, 1e29]}, "rig.yaml")


def test_in_range_values_are_kept() -> None:
    c = parse_campaign({"reps": 4, "max_reps": 12, "rep_retries": 0, "max_time_s": 3600, "scenario_timeout_s": 60},
                       "rig.yaml")
    assert (c.reps, c.max_reps, c.rep_retries, c.max_time_s, c.scenario_timeout_s) == (4, 12, 0, 3600.0, 60.0)
    s = parse_server({"model": "m", "request_timeout_s": 30, "load": {"num_prompts": 500, "request_rate": 4}}, "r")
    assert (s.request_timeout_s, s.load.num_prompts, s.load.request_rate) == (30.0, 500, 4.0)


@pytest.mark.parametrize(("snippet", "where"), [
    ("campaign:\n  reps: 100000000\n", "campaign.reps"),
    ("campaign:\n  max_time_s: 1e308\n", "campaign.max_time_s"),
    ("campaign:\n  scenario_timeout_s: .nan\n", "campaign.scenario_timeout_s"),
    ("server:\n  model: m\n  load:\n    num_prompts: 1e29\n", "server.load.num_prompts"),
    ("server:\n  model: m\n  request_timeout_s: -5\n", "server.request_timeout_s"),
])
def test_rig_file_names_file_field_and_value(tmp_path: Path, snippet: str, where: str) -> None:
    rig = tmp_path / "rig.yaml"
    rig.write_text("rig: t\n" + snippet)
    with pytest.raises(P2PError) as err:
        load_rig(rig)
    assert str(rig) in str(err.value) and where in str(err.value) and "got " in str(err.value), str(err.value)


def test_rig_file_5000_digit_integer_is_refused_before_parsing(tmp_path: Path) -> None:
    rig = tmp_path / "rig.yaml"
    rig.write_text("rig: t\ncampaign:\n  reps: " + "9" * 5000 + "\n")
    with pytest.raises(P2PError, match=r"an integer of 5000 digits \(at most 30\)"):
        load_rig(rig)
