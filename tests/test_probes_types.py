"""Probe results typed without ``Any``: recordings still read back whole, wrong shapes are still ProbeErrors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.errors import ProbeError
from pytest_p2p.probes._jsonneed import need_dict, need_list, to_float, to_int
from pytest_p2p.probes.allreduce import AllReduceResult, result_from_raw
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.p2pcopy import P2PCopyResult

DEMO = Path(__file__).resolve().parents[1] / "pytest_p2p" / "demo" / "probes" / "gpu0-gpu1"


@pytest.mark.parametrize("arm", ["p2p_on", "p2p_off", "ipc"])
def test_demo_allreduce_recordings_round_trip_unchanged(arm: str) -> None:
    data = json.loads((DEMO / arm / "allreduce.json").read_text())
    again = AllReduceResult.from_dict(data, None, "demo").to_dict()
    assert json.dumps(again) == json.dumps({**data, "log": None, "transport": None})


def test_demo_copy_recording_round_trips_unchanged() -> None:
    data = json.loads((DEMO / "p2pcopy.json").read_text())
    assert json.dumps(P2PCopyResult.from_dict(data, "demo").to_dict()) == json.dumps({**data, "log": None})


@pytest.mark.parametrize("broken", [
    {"checks": ["not an object"]}, {"meta": [1, 2]}, {"nccl_tests": "text"}, {"rows": {"bytes": 4}},
    {"pair": "01"}, {"rows": [{"bytes": [4], "time_us": 1, "algbw_gbs": 1, "busbw_gbs": 1}]},
])
def test_a_wrong_shape_in_an_allreduce_recording_is_a_probe_error(broken: dict[str, object]) -> None:
    data = json.loads((DEMO / "p2p_on" / "allreduce.json").read_text()) | broken
    with pytest.raises(ProbeError, match="demo: unreadable all-reduce probe result"):
        AllReduceResult.from_dict(data, None, "demo")


@pytest.mark.parametrize("broken", [
    {"modes": []}, {"modes": {"peer": {}}}, {"can_access_peer": [True]}, {"bytes": None}, {"meta": "x"},
])
def test_a_wrong_shape_in_a_copy_recording_is_a_probe_error(broken: dict[str, object]) -> None:
    data = json.loads((DEMO / "p2pcopy.json").read_text()) | broken
    with pytest.raises(ProbeError, match="demo: unreadable P2P copy probe result"):
        P2PCopyResult.from_dict(data, "demo")


def test_worker_output_with_a_non_object_check_is_malformed() -> None:
    raw = {"world_size": 2, "rows": [{"bytes": 4, "time_us": 10.0}], "checks": [3]}
    with pytest.raises(ProbeError, match="raw: malformed worker result"):
        result_from_raw((0, 1), PRESETS["p2p_on"], raw, None, "raw")


def test_an_odd_timing_method_falls_back_to_the_eager_label() -> None:
    raw = {"world_size": 2, "rows": [{"bytes": 4, "time_us": 10.0}], "checks": [{"wrong": 0}],
           "timing_method": ["x"]}
    res = result_from_raw((0, 1), PRESETS["p2p_on"], raw, None, "raw")
    assert res.correct and str(res.meta["timing"]).startswith("eager torch loop")


@pytest.mark.parametrize(("value", "as_int", "as_float"),
                         [(3, 3, 3.0), (3.9, 3, 3.9), ("12", 12, 12.0), (True, 1, 1.0)])
def test_conversions_are_int_and_float_for_json_scalars(value: object, as_int: int, as_float: float) -> None:
    assert to_int(value) == as_int and to_float(value) == as_float


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
def test_conversions_refuse_what_int_and_float_refuse(value: object) -> None:
    for convert in (to_int, to_float):
        with pytest.raises(TypeError):
            convert(value)
    with pytest.raises(ValueError):
        to_int("1.5")
    with pytest.raises(TypeError, match="modes is not a JSON object"):
        need_dict([], "modes")
    with pytest.raises(TypeError, match="rows is not a JSON array"):
        need_list({}, "rows")
