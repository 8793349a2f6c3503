from __future__ import annotations

import json

import pytest
from synthetic_runs import write_run

from pytest_p2p.verdict.fingerprint import ResultsError, build_fingerprint, comparability, flatten, incomparable


def test_fingerprint_reads_the_results_dir(tmp_path):
    run = write_run(tmp_path, "r1", gen=(4, 3), transport={"p2p_on": "P2P/IPC"}, throttled={"p2p_on-c8": [2]})
    fp = build_fingerprint(run)
    assert fp["pair"]["ident"] == "0000:09:00.0+0000:0A:00.0"
    assert fp["links"]["0000:0A:00.0"]["loaded"] == "Gen3 x4"
    assert fp["links"]["0000:09:00.0"]["max_gen"] == 4
    assert fp["versions"]["driver"] == "595.71.05" and fp["versions"]["nccl"] == "2.28.9"
    assert fp["transport"]["p2p_on"]["transport"] == "P2P/IPC"
    assert fp["arms"]["p2p_off"]["env"] == {"NCCL_P2P_DISABLE": "1"}
    assert fp["pair_facts"]["topology"] == "PHB"
    assert fp["throttled"] == {"p2p_on-c8": [2]}
    assert fp["kernel_cmdline"].startswith("BOOT_IMAGE")
    assert fp["server"]["model"] == "Qwen/Qwen3-0.6B"
    json.dumps(fp)  # persisted as JSON


def test_comparability_is_per_arm_and_ignores_env(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    arms = {"p2p_on": {"env": {"NCCL_P2P_LEVEL": "LOC"}, "expect_transport": "P2P/CUMEM", "custom_all_reduce": True},
            "p2p_off": {"env": {}, "expect_transport": "SHM", "custom_all_reduce": False}}
    b = build_fingerprint(write_run(tmp_path, "b", arms=arms))
    assert comparability(a, "p2p_on") == comparability(b, "p2p_on")  # env change is a cause, not a redefinition
    c = build_fingerprint(write_run(tmp_path, "c", model="other/model"))
    assert comparability(a, "p2p_on")["model"] != comparability(c, "p2p_on")["model"]


def test_gpu_models_compare_as_a_multiset_and_unknown_models_are_no_difference(tmp_path):
    a = comparability(build_fingerprint(write_run(tmp_path, "a", gpu_names=("NVIDIA H100", "NVIDIA H200"))), "p2p_on")
    b = comparability(build_fingerprint(write_run(tmp_path, "b", gpu_names=("NVIDIA H200", "NVIDIA H100"))), "p2p_on")
    c = comparability(build_fingerprint(write_run(tmp_path, "c", gpu_names=("NVIDIA H200", "NVIDIA H200"))), "p2p_on")
    assert a["gpu models"] == ["NVIDIA H100", "NVIDIA H200"]
    assert incomparable(a, b) == [] and incomparable(c, a) == ["gpu models"]
    unknown = dict(a, **{"gpu models": None})  # a run saved before the names were recorded
    assert incomparable(unknown, c) == [] and incomparable(c, unknown) == []
    assert incomparable(dict(a, model=None), a) == ["model"]  # only the GPU models may be unknown


def test_another_request_shape_is_not_comparable_and_an_unrecorded_one_is_unknown(tmp_path):
    shape = {"input_len": 128, "output_len": 128, "endpoint": "completions", "request_rate": "inf",
             "burstiness": 1.0, "extra_body": {}}
    a = comparability(build_fingerprint(write_run(tmp_path, "a", load=shape)), "p2p_on")
    b = comparability(build_fingerprint(write_run(tmp_path, "b", load={**shape, "input_len": 1024})), "p2p_on")
    old = comparability(build_fingerprint(write_run(tmp_path, "old")), "p2p_on")
    assert a["load"] == shape and old["load"] is None
    assert incomparable(b, a) == ["load"] and incomparable(a, old) == [] and incomparable(old, b) == []


def test_missing_and_bad_files_are_named(tmp_path):
    with pytest.raises(ResultsError, match="run.json: file not found"):
        build_fingerprint(tmp_path)
    run = write_run(tmp_path, "r")
    (run / "run.json").write_text("{nope")
    with pytest.raises(ResultsError, match="run.json: corrupt JSON at line 1"):
        build_fingerprint(run)


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {}}, "d": [1]}) == {"a.b": 1, "a.c": {}, "d": [1]}


def test_bad_snapshot_is_a_snapshot_error(tmp_path):
    from pytest_p2p.errors import SnapshotError

    run = write_run(tmp_path, "r")
    (run / "env" / "snapshot.json").write_text('{"schema": "pytest-p2p/snapshot", "version": 99, "evidence": {}}')
    with pytest.raises(SnapshotError, match="newer than this pytest-p2p"):
        build_fingerprint(run)
