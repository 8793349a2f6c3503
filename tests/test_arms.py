"""Arms: presets as the seed ran them, the rig file's arms section, and its errors."""

from __future__ import annotations

import pytest

from pytest_p2p.errors import ConfigError
from pytest_p2p.probes.arms import PRESETS, Arm, parse_arms


def test_absent_section_gives_the_seed_arms():
    arms = parse_arms(None, "rig.yaml", "arms")
    assert list(arms) == ["p2p_on", "p2p_off"]


def test_seed_arms_differ_only_in_p2p_disable():
    on, off = PRESETS["p2p_on"], PRESETS["p2p_off"]
    diff = {k for k in set(on.env) | set(off.env) if on.env.get(k) != off.env.get(k)}
    assert diff == {"NCCL_P2P_DISABLE"}
    assert on.env["NCCL_CUMEM_ENABLE"] == off.env["NCCL_CUMEM_ENABLE"] == "1"
    assert on.custom_all_reduce is off.custom_all_reduce is False
    assert (on.expect_transport, off.expect_transport) == ("P2P/CUMEM", "SHM")


def test_other_presets():
    assert PRESETS["ipc"].env["NCCL_CUMEM_ENABLE"] == "0"
    assert PRESETS["ipc"].expect_transport == "P2P/IPC"
    sock = PRESETS["socket"]
    assert (sock.env["NCCL_P2P_DISABLE"], sock.env["NCCL_SHM_DISABLE"], sock.env["NCCL_NET"]) == ("1", "1", "Socket")
    assert sock.expect_transport == "NET/Socket"


def test_list_of_presets_adds_them():
    arms = parse_arms(["ipc", "socket"], "rig.yaml", "arms")
    assert list(arms) == ["p2p_on", "p2p_off", "ipc", "socket"]


def test_user_arm_overrides_a_preset_and_merges_env():
    arms = parse_arms({"p2p_on": {"preset": "p2p_on", "env": {"NCCL_P2P_LEVEL": "LOC"}}}, "rig.yaml", "arms")
    on = arms["p2p_on"]
    assert on.env == {"NCCL_CUMEM_ENABLE": "1", "NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "LOC"}
    assert on.expect_transport == "P2P/CUMEM"
    assert PRESETS["p2p_on"].env.get("NCCL_P2P_LEVEL") is None  # presets are not mutated


def test_arm_named_like_a_preset_starts_from_it():
    arms = parse_arms({"p2p_off": {"env": {"NCCL_PROTO": "Simple"}, "expect_transport": "SHM"}}, "r", "arms")
    assert arms["p2p_off"].env["NCCL_P2P_DISABLE"] == "1"
    assert arms["p2p_off"].env["NCCL_PROTO"] == "Simple"


def test_new_arm_from_a_preset_name_string_and_from_scratch():
    arms = parse_arms({"legacy": "ipc", "custom": {"env": {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": 4},
                                                   "expect_transport": "P2P", "symm_mem": True,
                                                   "custom_all_reduce": True, "description": "mine"}},
                      "rig.yaml", "arms")
    assert arms["legacy"].name == "legacy" and arms["legacy"].expect_transport == "P2P/IPC"
    c = arms["custom"]
    assert c.env == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}
    assert (c.symm_mem, c.custom_all_reduce, c.description) == (True, True, "mine")


def test_vllm_switches():
    assert PRESETS["p2p_on"].vllm_flags() == ["--disable-custom-all-reduce"]
    assert Arm("x", {}, "P2P", custom_all_reduce=True).vllm_flags() == []
    assert Arm("x", {}, "P2P").vllm_env() == {}
    assert Arm("x", {}, "P2P", symm_mem=False).vllm_env() == {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


def test_to_dict_round_trips_fields():
    d = PRESETS["socket"].to_dict()
    assert Arm(**d) == PRESETS["socket"]


@pytest.mark.parametrize(("value", "path", "fragment"), [
    (["nvlink"], "arms[0]", "expected one of"),
    ({"x": {"env": {}}}, "arms.x", "expect_transport"),
    ({"x": {"preset": "p2p_on", "expect_transport": "P2P/CUMEN"}}, "arms.x.expect_transport", "P2P/CUMEM"),
    ({"x": {"preset": "p2p_on", "envv": {}}}, "arms.x.envv", "did you mean 'env'"),
    ({"x": "nope"}, "arms.x", "no preset named 'nope'"),
    ({"bad name": None}, "arms.bad name", "letters, digits"),
    ({"x": {"preset": "ipc", "env": {"NCCL_X": [1]}}}, "arms.x.env.NCCL_X", "string or number"),
    ({"x": {"preset": "ipc", "custom_all_reduce": "no"}}, "arms.x.custom_all_reduce", "true or false"),
    ("p2p_on", "arms", "expected a mapping"),
])
def test_errors_name_the_field(value, path, fragment):
    with pytest.raises(ConfigError) as info:
        parse_arms(value, "rig.yaml", "arms")
    assert info.value.path == path
    assert fragment in str(info.value) and "rig.yaml" in str(info.value)
