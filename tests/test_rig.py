"""Rig-file validation: every error names file, field path and bad value; nothing else escapes."""

from __future__ import annotations

import contextlib

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_p2p.errors import ConfigError
from pytest_p2p.evidence.snapshot import load_snapshot
from pytest_p2p.plugin.rig import auto_rig, load_rig, parse_rig, resolve


def err(data, source="rig.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_rig(data, source=source)
    return str(info.value)


def test_issue_example_message():
    assert err({"expect": {"pcie": {"gen": "four"}}}) == \
        "rig.yaml: expect.pcie.gen: expected an integer 1..6, got 'four'"


def test_unknown_top_level_key_suggests_the_known_one():
    msg = err({"expct": {}})
    assert msg.startswith("rig.yaml: expct: unknown key (did you mean 'expect'?)")


@pytest.mark.parametrize(("data", "path", "fragment"), [
    ({"expect": {"pcie": {"gen": 7}}}, "expect.pcie.gen", "1..6, got 7"),
    ({"expect": {"pcie": {"width": 3}}}, "expect.pcie.width", "PCIe width"),
    ({"expect": {"pcie": {"width": "x8", "speed": 1}}}, "expect.pcie.speed", "unknown key"),
    ({"expect": {"topology": "NVL"}}, "expect.topology", "topology class"),
    ({"expect": {"peer_access": "yes"}}, "expect.peer_access", "true or false"),
    ({"expect": {"nvlink": {"links": -1}}}, "expect.nvlink.links", "0..72"),
    ({"gpus": [1, "banana"]}, "gpus[1]", "bus id"),
    ({"gpus": [1, 1]}, "gpus", "listed twice"),
    ({"pairs": [[1]]}, "pairs[0]", "two GPU selectors"),
    ({"pairs": [[1, 1]]}, "pairs[0]", "two different GPUs"),
    ({"pair": {"1+2": {}}}, "pair.1+2", "'1-2'"),
    ({"pair": {"1-2": {"pcie": {}}}}, "pair.1-2.pcie", "unknown key"),
    ({"env": {"A": [1]}}, "env.A", "string or number"),
    ({"rig": 5}, "rig", "non-empty string"),
])
def test_errors_name_the_field(data, path, fragment):
    msg = err(data)
    assert msg.startswith(f"rig.yaml: {path}: "), msg
    assert fragment in msg


def test_selectors_accept_index_bus_id_and_uuid():
    rig = parse_rig({"gpus": [1, "0a:00.0", "GPU-048ee39a-0f24-7b44-11d1-fff3c502dcd2", "00000000:04:00.0"]})
    assert rig.gpus == [1, "0000:0A:00.0", "GPU-048ee39a-0f24-7b44-11d1-fff3c502dcd2", "0000:04:00.0"]


def test_shipped_rigs_validate_and_resolve(rig_5060ti, snapshot_5060ti, rig_h200, snapshot_h200):
    rr = resolve(load_rig(rig_5060ti), load_snapshot(snapshot_5060ti))
    assert rr.gpus == [1, 2] and rr.pairs == [(1, 2)]
    assert rr.gpu_expect[1].pcie.gen == 3 and rr.pair_expect[(1, 2)].topology == "PHB"
    rr = resolve(load_rig(rig_h200), load_snapshot(snapshot_h200))
    assert rr.pairs == [(0, 1)] and rr.gpu_expect[0].nvlink.links == 18


def test_a_rig_gpu_missing_from_the_bus_is_recorded_and_the_rest_still_checked(snapshot_5060ti):
    rig = parse_rig({"gpus": ["0000:0B:00.0", "0000:09:00.0"], "pairs": [["0000:0B:00.0", 1]],
                     "gpu": {"0000:0B:00.0": {"pcie": {"gen": 4}}}}, source="r.yaml")
    rr = resolve(rig, load_snapshot(snapshot_5060ti))
    assert rr.gpus == [1] and rr.pairs == []
    assert len(rr.missing) == 1  # named once, though three places name it
    msg = rr.missing[0]
    assert msg.startswith("gpus[0]: no GPU with bus id 0000:0B:00.0")
    assert "0=0000:04:00.0, 1=0000:09:00.0, 2=0000:0A:00.0" in msg


def test_auto_pairs_keep_only_pairs_with_peer_access(snapshot_5060ti):
    rr = resolve(parse_rig({"pairs": "auto"}), load_snapshot(snapshot_5060ti))
    assert rr.pairs == [(1, 2)]  # the RTX 5070 peers with neither 5060 Ti (seed C7)


def test_auto_rig_expects_links_at_max_and_peer_access(snapshot_h200):
    rr = resolve(auto_rig(), load_snapshot(snapshot_h200))
    exp = rr.gpu_expect[0]
    assert (exp.pcie.gen, exp.pcie.width, exp.nvlink.links, exp.nvlink.version) == (5, 16, 18, 4)
    assert rr.pair_expect[(0, 1)].peer_access is True and rr.pair_expect[(0, 1)].topology == "NV18"


def test_cascade_pair_over_gpu_over_rig(snapshot_5060ti):
    rig = parse_rig({"gpus": [1, 2], "pairs": [[1, 2]], "expect": {"pcie": {"gen": 3, "width": 4}},
                     "gpu": {"0000:0A:00.0": {"pcie": {"gen": 4}}}, "pair": {"1-2": {"topology": "PIX"}}})
    rr = resolve(rig, load_snapshot(snapshot_5060ti))
    assert rr.gpu_expect[1].pcie.gen == 3 and rr.gpu_expect[2].pcie.gen == 4
    assert rr.gpu_expect[2].pcie.width == 4
    assert rr.pair_expect[(1, 2)].topology == "PIX"


def test_malformed_yaml_names_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("rig: x\nexpect: {pcie: [\n")
    with pytest.raises(ConfigError) as info:
        load_rig(f, origin="--p2p-rig")
    assert f"{f} (from --p2p-rig): not valid YAML: line" in str(info.value)


def test_missing_file_names_origin(tmp_path):
    with pytest.raises(ConfigError, match=r"\(from PYTEST_P2P_RIG\): no such rig file"):
        load_rig(tmp_path / "nope.yaml", origin="PYTEST_P2P_RIG")


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 100), st.floats(allow_nan=True),
                         st.text(max_size=12))
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(st.text(max_size=10), st.integers(0, 5)), children,
                                               max_size=4)),
    max_leaves=20)
rig_like = st.dictionaries(st.sampled_from(["rig", "gpus", "pairs", "expect", "gpu", "pair", "env", "expct",
                                            "arms", "probe", "server", "campaign", "baseline"]),
                           yaml_values, max_size=5)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.one_of(yaml_values, rig_like))
def test_arbitrary_structures_never_crash_the_validator(data):
    try:
        parse_rig(data)
    except ConfigError as exc:
        assert str(exc).startswith("rig.yaml: ")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes_the_loader(tmp_path_factory, text):
    f = tmp_path_factory.mktemp("rig") / "r.yaml"
    f.write_text(text, encoding="utf-8")
    with contextlib.suppress(ConfigError):
        load_rig(f)


def test_yaml_dump_of_gen_config_round_trips(snapshot_5060ti):
    from pytest_p2p.plugin.rig import rig_to_yaml_dict

    data = rig_to_yaml_dict(load_snapshot(snapshot_5060ti), "x")
    rig = parse_rig(yaml.safe_load(yaml.safe_dump(data)))
    assert rig.gpu_expect["0000:09:00.0"].pcie.gen == 3


def test_rig_without_name_is_named_after_its_file_not_its_origin(tmp_path):
    f = tmp_path / "myrig"
    f.write_text("expect: {}\n")
    assert load_rig(f, origin="--p2p-rig").name == "myrig"
    assert parse_rig({}, source="lab.yaml").name == "lab"


def test_a_pair_listed_twice_is_an_error(snapshot_5060ti):
    rig = parse_rig({"gpus": [1, 2], "pairs": [[1, 2], "2-1"]}, source="r.yaml")
    with pytest.raises(ConfigError, match=r"r.yaml: pairs\[1\]: GPUs 1 and 2 are listed as a pair twice"):
        resolve(rig, load_snapshot(snapshot_5060ti))


def test_pairs_the_snapshot_does_not_hold(snapshot_5060ti):
    ev = load_snapshot(snapshot_5060ti)
    ev.pairs = [p for p in ev.pairs if (p.a, p.b) != (0, 2)]
    assert resolve(parse_rig({"pairs": "all"}), ev).pairs == [(0, 1), (1, 2)]
    with pytest.raises(ConfigError, match=r"pairs\[0\]: the evidence .* holds nothing about the pair of GPUs 0 and 2"):
        resolve(parse_rig({"pairs": [[0, 2]]}), ev)


@pytest.mark.parametrize(("value", "want"), [("5%", 0.05), (" 5 % ", 0.05), (5, 0.05), ("5", 0.05), (0.05, 0.05),
                                             ("0.05", 0.05), ("0.5%", 0.005)])
def test_percent_reads_quoted_numbers_like_bare_ones(value, want):
    from pytest_p2p.validate import percent

    assert percent(value, "r.yaml", "x") == pytest.approx(want)


@pytest.mark.parametrize("value", ["nan", "inf%", float("nan"), "5%%", True, None])
def test_percent_rejects_what_is_no_percentage(value):
    from pytest_p2p.validate import percent

    with pytest.raises(ConfigError, match=r"r.yaml: x: expected a percentage"):
        percent(value, "r.yaml", "x")


def test_a_mig_instance_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match=r"r.yaml: gpus\[0\]: 'MIG-1234' is a MIG instance: CUDA gives MIG"):
        parse_rig({"gpus": ["MIG-1234"]}, source="r.yaml")
