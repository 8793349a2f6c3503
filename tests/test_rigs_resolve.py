"""Rig resolution on unusual machines, hostile rig files and snapshots, and the CLI without NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import pytest_p2p
from pytest_p2p import validate as v
from pytest_p2p.errors import ConfigError, SnapshotError
from pytest_p2p.evidence.snapshot import bundled_demo, load_snapshot
from pytest_p2p.plugin.rig import auto_rig, load_rig, parse_rig, resolve, rig_to_yaml_dict

SNAPS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"


def snap(name: str):
    return load_snapshot(SNAPS / f"{name}.snapshot.json")


def live(name: str):
    ev = snap(name)
    ev.source = "live"  # as if NVML read it here: CUDA_VISIBLE_DEVICES applies
    return ev


# --------------------------------------------------------------------------- selection


def test_seed_box_gen_config_picks_the_peer_pair_by_bus_id():
    data = rig_to_yaml_dict(snap("5060ti-2x-gen3x4"), "seed")
    assert data["gpus"] == ["0000:09:00.0", "0000:0A:00.0"]
    assert data["pairs"] == [["0000:09:00.0", "0000:0A:00.0"]]
    assert "gpu0-gpu1: no peer access (CUDA can-access-peer no/no)" in data["description"]
    rig = parse_rig(yaml.safe_load(yaml.safe_dump(data)), source="seed.yaml")
    rr = resolve(rig, snap("5060ti-2x-gen3x4"))
    assert rr.gpus == [1, 2] and rr.pairs == [(1, 2)] and rr.pair_expect[(1, 2)].peer_access is True


def test_auto_rig_on_the_seed_box_checks_the_peer_pair_and_says_why_not_the_others():
    rr = resolve(auto_rig(), snap("5060ti-2x-gen3x4"))
    assert rr.gpus == [0, 1, 2] and rr.pairs == [(1, 2)]
    assert set(rr.excluded) == {(0, 1), (0, 2)} and "no peer access" in rr.excluded[(0, 1)]


@pytest.mark.parametrize(("name", "fragment"), [
    ("h100x1-pcie", "no GPU pair to check: the rig selects 1 GPU(s) on this machine (gpu0)"),
    ("a100x2-mig", "MIG is enabled on GPU 0 (0000:17:00.0, NVIDIA A100 80GB PCIe) and GPU 1"),
    ("rtx5090x2-stock", "NVML P2P read GNS (GPU not supported)"),
])
def test_no_pair_machines_say_why(name, fragment):
    rr = resolve(auto_rig(), snap(name))
    assert rr.pairs == [] and fragment in (rr.no_pairs_reason or "")


def test_explicit_pairs_are_kept_even_where_auto_would_leave_them_out():
    rr = resolve(parse_rig({"pairs": [[0, 1]]}), snap("a100x2-mig"))
    assert rr.pairs == [(0, 1)] and not rr.excluded


def test_dual_socket_auto_keeps_node_pairs_and_names_sys_ones():
    rr = resolve(auto_rig(), snap("l40s-x4-dual-socket"))
    assert rr.pairs == [(0, 1), (2, 3)]
    assert "NVML P2P read CNS (chipset not supported)" in rr.excluded[(0, 2)]


@pytest.mark.parametrize(("visible", "gpus", "fragment"), [
    ("2,0", [0, 2], "the order is ignored"),
    ("1", [1], "limits auto-detection to gpu1"),
    ("GPU-h200x4-n-0003", [3], "gpu3"),  # a UUID prefix, as CUDA accepts it
    ("0,7,1", [0], "'7' names no single GPU here, so CUDA ignores it and every entry after it"),
    ("MIG-abc", [], "is a MIG instance"),
    ("", [], "limits auto-detection to none"),
])
def test_cuda_visible_devices_narrows_auto_detection(visible, gpus, fragment):
    rr = resolve(auto_rig(), live("h200x4-nvswitch"), visible=visible)
    assert rr.gpus == gpus and fragment in rr.notes[0]
    assert all(a in gpus and b in gpus for a, b in rr.pairs)


def test_cuda_visible_devices_from_the_environment_only_for_live_evidence(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert resolve(auto_rig(), live("h200x4-nvswitch")).gpus == [3]
    assert resolve(auto_rig(), snap("h200x4-nvswitch")).gpus == [0, 1, 2, 3]  # a replay is another machine
    rr = resolve(parse_rig({"gpus": [0, 1]}), live("h200x4-nvswitch"))
    assert rr.gpus == [0, 1] and "does not narrow the rig's own 'gpus'" in rr.notes[0]


def test_a_generated_rig_is_never_judged_against_the_demo_silently():
    rig = parse_rig(rig_to_yaml_dict(snap("5060ti-2x-gen3x4"), "seed"), source="seed.yaml")
    demo = load_snapshot(bundled_demo())
    with pytest.raises(ConfigError, match="the evidence is the bundled DEMO snapshot, not this rig's machine"):
        resolve(rig, demo)


def test_a_gpu_gone_from_the_bus_is_named_and_the_rest_resolve():
    rig = parse_rig(rig_to_yaml_dict(snap("h200x4-nvswitch"), "four"), source="four.yaml")
    rr = resolve(rig, snap("h200x4-nvswitch-gpu-lost"))
    assert rr.gpus == [0, 1, 2] and len(rr.pairs) == 3
    assert len(rr.missing) == 1 and "no GPU with bus id 0000:3A:00.0" in rr.missing[0]


# --------------------------------------------------------------------------- hostile rig files

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def test_billion_laughs_fails_fast_and_small(tmp_path):
    f = tmp_path / "laughs.yaml"
    f.write_text(BILLION_LAUGHS)
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_rig(f)
    assert time.monotonic() - start < 5
    assert "expands to more than 100000 values" in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize(("text", "fragment"), [
    ("expect: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("expect: " + "{a: " * 40 + "1" + "}" * 40 + "\n", "nested too deeply"),
    ("a: &a [*a]\n", "recursive"),
    ("campaign: {reps: " + "9" * 5000 + "}\n", "an integer of 5000 digits"),
    ("x" * (v.MAX_TEXT_CHARS + 10), "too large"),
    ("gpus: [\x1f]\n", "not valid YAML"),
])
def test_hostile_yaml_is_one_config_error(tmp_path, text, fragment):
    f = tmp_path / "r.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=fragment) as info:
        load_rig(f)
    assert len(str(info.value)) < 600


def test_parsed_data_with_shared_references_is_bounded_too():
    level: list = ["x"] * 9
    for _ in range(8):
        level = [level] * 9
    with pytest.raises(ConfigError, match="expands to more than"):
        parse_rig({"description": "d", "env": {"A": level}})


def test_undefined_arm_and_missing_model_are_named_at_load():
    with pytest.raises(ConfigError, match=r"campaign.arms: names nosuch, which this rig file does not define"):
        parse_rig({"campaign": {"arms": ["p2p_on", "nosuch"]}}, source="r.yaml")
    with pytest.raises(ConfigError, match=r"r.yaml: server.model: missing: the model the server loads"):
        parse_rig({"server": {"startup_timeout_s": 60}}, source="r.yaml")


@pytest.mark.parametrize(("value", "ok"), [(4, True), (0, False), (101, False), (1e8, False), ("1e8", False),
                                           (True, False), pytest.param(10 ** 5000, False, id="5000-digits"),
                                           (None, False)])
def test_int_in(value, ok):
    if ok:
        assert v.int_in(value, "r.yaml", "campaign.reps", 1, 100) == value
    else:
        with pytest.raises(ConfigError, match=r"r.yaml: campaign.reps: expected an integer 1..100, got") as info:
            v.int_in(value, "r.yaml", "campaign.reps", 1, 100)
        assert len(str(info.value)) < 200


@pytest.mark.parametrize("value", [1e308, float("inf"), float("nan"), -1, pytest.param(10 ** 400, id="400-digits"),
                                   "5"])
def test_float_in_refuses_what_would_overflow_or_hang(value):
    with pytest.raises(ConfigError, match="expected a timeout 0.1..86400"):
        v.float_in(value, "r.yaml", "server.startup_timeout_s", 0.1, 86400, what="a timeout")


# --------------------------------------------------------------------------- hostile snapshots


def _envelope(**evidence_overrides):
    data = json.loads((SNAPS / "h200x2-nvlink.snapshot.json").read_text())
    data["evidence"].update(evidence_overrides)
    return data


@pytest.mark.parametrize(("text", "fragment"), [
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    (json.dumps(_envelope()).replace('"memory_total_mib": 143771', '"memory_total_mib": ' + "9" * 5000),
     "an integer of 5000 digits"),
    (json.dumps(_envelope()).replace('"power_w": 192.696', '"power_w": NaN'), "NaN is not a number"),
    (json.dumps(_envelope(gpus=[], pairs=[])), "the snapshot holds no GPU"),
])
def test_hostile_snapshot_is_one_snapshot_error(tmp_path, text, fragment):
    f = tmp_path / "s.json"
    f.write_text(text)
    with pytest.raises(SnapshotError, match=fragment) as info:
        load_snapshot(f)
    assert len(str(info.value)) < 600


# --------------------------------------------------------------------------- CLI without NVML


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI of the copy of the package under test: first on the child's path, so a machine that also has
    the package installed elsewhere on PYTHONPATH (the GPU machines' /tmp/site) runs this copy."""
    here = str(Path(pytest_p2p.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTEST_P2P_NVML": "off", "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "pytest_p2p", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("command", [["doctor"], ["gen-config"], ["snapshot", "--out", "s.json"]])
def test_without_nvml_the_cli_says_so_and_names_the_bundled_snapshot(command, tmp_path):
    r = _cli(*command, cwd=tmp_path)
    assert r.returncode == 3
    assert "NVML is switched off (PYTEST_P2P_NVML=off)" in r.stderr
    assert "--snapshot demo" in r.stderr and str(bundled_demo()) in r.stderr
    assert "Traceback" not in r.stderr


def test_snapshot_demo_replays_the_bundled_recording(tmp_path):
    r = _cli("doctor", "--snapshot", "demo")
    assert r.returncode == 0 and "NVIDIA H200" in r.stdout and str(bundled_demo()) in r.stdout
    out = tmp_path / "rig.yaml"
    assert _cli("gen-config", "--snapshot", "demo", "--out", str(out)).returncode == 0
    assert load_rig(out).gpus == ["0000:00:06.0", "0000:00:07.0"]


def test_a_generated_rig_without_nvml_is_a_usage_error_not_a_demo_judgement(tmp_path):
    rig = tmp_path / "rig.yaml"
    assert _cli("gen-config", "--snapshot", str(SNAPS / "5060ti-2x-gen3x4.snapshot.json"), "--out", str(rig)) \
        .returncode == 0
    env = {**os.environ, "PYTEST_P2P_NVML": "off"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p.checks.test_evidence",
                        "-p", "no:cacheprovider", f"--p2p-rig={rig}"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    assert "the evidence is the bundled DEMO snapshot, not this rig's machine" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_eight_gpus_all_pairs_or_the_rigs_subset():
    ev = snap("h100x8-dgx-nvswitch")
    assert len(resolve(auto_rig(), ev).pairs) == 28
    rig = parse_rig({"gpus": ["0000:18:00.0", "0000:2A:00.0", "0000:9A:00.0"],
                     "pairs": [["0000:18:00.0", "0000:9A:00.0"]], "expect": {"topology": "NV18"}})
    rr = resolve(rig, ev)
    assert rr.gpus == [0, 1, 4] and rr.pairs == [(0, 4)] and rr.pair_expect[(0, 4)].topology == "NV18"
    assert resolve(parse_rig({"pairs": "all"}), snap("5060ti-2x-gen3x4")).pairs == [(0, 1), (0, 2), (1, 2)]
