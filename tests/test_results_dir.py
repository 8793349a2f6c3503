"""The results directory: layout, run ids, the one writer's atomic writes, the one reader, clear errors."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_p2p.errors import P2PError, ResultsError, WriteError
from pytest_p2p.results import write as write_mod
from pytest_p2p.results.layout import Pair, make_run_id
from pytest_p2p.results.read import RunReader, run_head
from pytest_p2p.results.write import RunDir


def test_run_id_format_and_safe_characters() -> None:
    now = datetime(2026, 6, 16, 7, 5, 9, tzinfo=timezone.utc)
    assert make_run_id("h200 x2/nvlink", "gpu0-gpu1", now) == "20260616-070509_h200-x2-nvlink_gpu0-gpu1"
    assert make_run_id("../../etc", "gpu0-gpu1", now) == "20260616-070509_etc_gpu0-gpu1"


def test_create_layout_and_run_meta(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "demo-h200", "gpu0-gpu1", "model")
    assert rd.path.parent == tmp_path
    assert re.fullmatch(r"\d{8}-\d{6}_demo-h200_gpu0-gpu1", rd.path.name)
    meta = RunReader.open(rd.path).read_run_meta()
    assert meta["run_id"] == rd.path.name and meta["status"] == "running" and meta["kind"] == "model"
    assert meta["pair"] == {"key": "gpu0-gpu1"} and meta["missing"] == []

    rd.write_run_meta({"status": "complete", "reps": 3})
    meta = RunReader.open(rd.path).read_run_meta()
    assert meta["status"] == "complete" and meta["reps"] == 3 and meta["rig"] == "demo-h200"  # merged

    assert rd.write_env("doctor.json", {"gpus": 2}) == rd.path / "env" / "doctor.json"
    assert json.loads((rd.path / "env" / "doctor.json").read_text()) == {"gpus": 2}
    rd.write_env("kernel_cmdline.txt", "iommu=pt\n")
    assert (rd.path / "env" / "kernel_cmdline.txt").read_text() == "iommu=pt\n"


def test_same_second_runs_do_not_collide(tmp_path: Path) -> None:
    a = RunDir.create(tmp_path, "r", "gpu0-gpu1", "probe")
    b = RunDir.create(tmp_path, "r", "gpu0-gpu1", "probe")
    assert a.path != b.path and b.path.is_dir()


def test_explicit_run_id_never_overwrites(tmp_path: Path) -> None:
    RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="fixed")
    with pytest.raises(ResultsError, match="already exists"):
        RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="fixed")
    with pytest.raises(ResultsError, match="unsafe"):
        RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="../x")
    with pytest.raises(ResultsError, match="kind"):
        RunDir.create(tmp_path, "r", "gpu0-gpu1", "training")


def test_scenario_files_and_reading_back(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="x")
    rd.write_scenario("p2p_on", "c8", {"env": {"NCCL_P2P_DISABLE": "0"}})
    rd.write_rep("p2p_on", "c8", 2, {"output_throughput": 2.0})
    rd.write_rep("p2p_on", "c8", 1, {"output_throughput": 1.0})
    rd.write_rep("p2p_off", "c8", 1, {"output_throughput": 0.5})
    rd.write_rep("p2p_on", "c10", 1, {"output_throughput": 9.0})
    rd.write_aggregate("p2p_on", "c8", {"metrics": {}})
    rd.write_proof("p2p_on", "c8", {"transport": "P2P/CUMEM"})
    sc = rd.path / "scenarios" / "p2p_on-c8"
    assert json.loads((sc / "scenario.json").read_text())["arm"] == "p2p_on"
    assert json.loads((sc / "aggregate.json").read_text())["point"] == "c8"
    assert rd.telemetry_path("p2p_on", "c8", 3) == sc / "telemetry_run3.csv"
    assert rd.server_log_path("p2p_on", "c8", 3) == sc / "server_run3.log"
    back = RunReader.open(rd.path)
    assert list(back.reps("p2p_on", "c8")) == [1, 2]
    assert back.reps("p2p_on", "c8")[2] == {"output_throughput": 2.0}
    assert back.reps("p2p_off", "c1") == {}
    assert sorted(back.scenarios()) == [("p2p_off", "c8"), ("p2p_on", "c10"), ("p2p_on", "c8")]
    assert back.read_scenario_file("p2p_on", "c8", "transport_proof.json") == {"transport": "P2P/CUMEM"}
    assert back.read_scenario_file("p2p_off", "c8", "aggregate.json") is None
    # no temp files left behind by the atomic writes
    assert not [p for p in rd.path.rglob("*.tmp")]


def test_probe_points_and_foreign_dirs_are_ignored(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "probe", run_id="x")
    rd.write_rep("p2p", "s8KiB", 1, {"time_us": 3.0})
    (rd.path / "scenarios" / "notes").mkdir()
    (rd.path / "scenarios" / "README.txt").write_text("x")
    assert RunReader.open(rd.path).scenarios() == [("p2p", "s8KiB")]


@pytest.mark.parametrize(("arm", "point", "rep"), [("p2p-on", "c8", 1), ("p2p_on", "8", 1), ("p2p_on", "c8", 0),
                                                    ("", "c8", 1), ("p2p_on", "c8", True)])
def test_bad_names_are_refused(tmp_path: Path, arm: str, point: str, rep: int) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="x")
    with pytest.raises(ResultsError):
        rd.write_rep(arm, point, rep, {})


def test_open_refuses_non_results_dirs(tmp_path: Path) -> None:
    with pytest.raises(P2PError, match="no such results directory"):
        RunReader.open(tmp_path / "nope")
    with pytest.raises(P2PError, match=r"not a pytest-p2p results directory \(no run.json\)"):
        RunReader.open(tmp_path)
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ResultsError, match="expected a JSON object"):
        RunReader.open(tmp_path)


def test_corrupt_json_names_the_file(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="x")
    rd.write_rep("p2p_on", "c1", 1, {"output_throughput": 1.0})
    bad = rd.path / "scenarios" / "p2p_on-c1" / "run_2.json"
    bad.write_text('{"output_throughput": 1.0,')  # what a non-atomic writer leaves when killed
    with pytest.raises(ResultsError) as exc:
        RunReader.open(rd.path).reps("p2p_on", "c1")
    assert str(bad) in str(exc.value) and "corrupt JSON at line 1" in str(exc.value)
    (rd.path / "run.json").write_text("{")
    with pytest.raises(ResultsError, match=r"run\.json: corrupt JSON"):
        RunReader.open(rd.path)


def test_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that dies half-way leaves the previous rep file intact."""
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="x")
    rd.write_rep("p2p_on", "c1", 1, {"output_throughput": 1.0})

    def boom(*_a: object, **_k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(WriteError, match=r"cannot write .*p2p_on-c1/run_1\.json: disk full"):
        rd.write_rep("p2p_on", "c1", 1, {"output_throughput": 2.0})
    monkeypatch.undo()
    assert RunReader.open(rd.path).reps("p2p_on", "c1") == {1: {"output_throughput": 1.0}}
    assert not [p for p in rd.path.rglob("*.tmp")]


def test_module_uses_the_shared_atomic_writers() -> None:
    from pytest_p2p import util

    assert write_mod.atomic_write_json is util.atomic_write_json
    assert write_mod.atomic_write_text is util.atomic_write_text


def test_a_set_aside_rep_is_never_read_as_one(tmp_path: Path) -> None:
    """The writer moves an attempt aside under a name the reader's rep pattern does not match."""
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="x")
    rd.write_rep("p2p_on", "c1", 1, {"output_throughput": 1.0})
    rd.server_log_path("p2p_on", "c1", 1).write_text("log")
    files = rd.set_aside("p2p_on", 1, "try1.screened", ["c1"], {"c1": {"output_throughput": 1.0}},
                         {"set_aside": "screened", "cause": "outlier"})
    assert files == ("p2p_on-c1/run_1.try1.screened.json", "p2p_on-c1/server_run1.try1.screened.log")
    assert RunReader.open(rd.path).reps("p2p_on", "c1") == {}


def test_a_pair_key_is_read_from_the_key_not_the_run_id() -> None:
    assert Pair.parse("gpu2-gpu3") == Pair(2, 3) and Pair(2, 3).key == "gpu2-gpu3"
    with pytest.raises(ResultsError, match="not 'gpu<a>-gpu<b>'"):
        Pair.parse("gpu2-gpu3-2")


def test_run_head_is_typed_and_names_a_wrong_field(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "probe", run_id="x")
    assert run_head(rd.path) == {"pair": {"key": "gpu0-gpu1"}, "run_id": "x", "rig": "r", "kind": "probe",
                                 "status": "running"}
    rd.write_run_meta({"rig": None})
    with pytest.raises(ResultsError, match=r"run\.json: field 'rig': expected a string, got NoneType"):
        run_head(rd.path)
    rd.write_run_meta({"rig": "r", "pair": "gpu0-gpu1"})
    with pytest.raises(ResultsError, match=r"run\.json: field 'pair': expected an object, got str"):
        run_head(rd.path)
