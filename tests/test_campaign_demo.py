"""The campaign end to end: runner bookkeeping with a fake backend (fast), the demo rig through
pytester (stand-in server, simulated telemetry), and two pairs on two xdist workers."""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import SlotBackend

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.progress import Progress
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.campaign.telemetry import REASON_HW_THERMAL, SimulatedReader
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS

DEMO_SNAPSHOT = Path(__file__).parents[1] / "pytest_p2p" / "demo" / "h200x2-nvlink.snapshot.json"


# --------------------------------------------------------------------------- fake backend


class FakeBackend(SlotBackend):
    """A "server" whose throughput is 10 % higher for p2p_on, drifting with the rep (death, proof and
    describe as :class:`SlotBackend`'s)."""

    def __init__(self, interrupt_at: tuple[str, int] | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []
        self.interrupt_at = interrupt_at

    def smoke(self, arm: Any, log: Path) -> None:
        self.calls.append(("smoke", arm.name))

    @contextlib.contextmanager
    def slot(self, arm: Any, rep: int, log: Path):
        if self.interrupt_at == (arm.name, rep):
            raise KeyboardInterrupt
        self.calls.append(("slot", arm.name, rep))
        log.write_text(f"fake server log {arm.name} rep {rep}\n")
        yield arm

    def warm(self, handle: Any, point: str) -> None:
        self.calls.append(("warm", handle.name, point))

    def prepare(self, handle: Any, point: str, rep: int) -> None:
        return None

    def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]:
        c = int(point[1:])
        v = 100.0 * c * (1 + 0.05 * rep) * (1.10 if handle.name == "p2p_on" else 1.0)
        return {"output_throughput": v, "total_output_tokens": 50 * c, "completed": 2 * c, "failed": 0}



class ThermalReader(SimulatedReader):
    """Reports a thermal throttle on GPU 1 while ``hot`` is set."""

    hot = False

    def read(self):  # type: ignore[override]
        rows = super().read()
        if self.hot:
            for r in rows:
                if r["index"] == 1:
                    r["throttle_reasons"] = REASON_HW_THERMAL
        return rows


def _runner(tmp_path: Path, backend: FakeBackend, **cfg: Any) -> CampaignRunner:
    from pytest_p2p.evidence.snapshot import load_snapshot

    base = {"concurrency": [1, 4], "reps": 3, "cooldown_s": 0, "idle_baseline_s": 0, "telemetry_hz": 10,
            "residency": "restart"}
    base.update(cfg)
    return CampaignRunner(pair=(0, 1), config=parse_campaign(base, "test-rig.yaml"), kind="model", arms=PRESETS,
                          backend=backend, results_root=tmp_path / "results", rig_name="fake",
                          evidence=load_snapshot(DEMO_SNAPSHOT), simulated=True,
                          lease=GpuLease(tmp_path / "locks"), progress=Progress("gpu0-gpu1", 12),
                          on_finished=_render)


def _render(outcome: Any) -> None:
    """What the report stage's pytest_p2p_campaign_finished does (the runner itself renders nothing)."""
    from pytest_p2p.report.render import render_report

    render_report(outcome.run_dir, plots=False)


def test_runner_writes_the_results_tree_in_schedule_order(tmp_path: Path) -> None:
    backend = FakeBackend()
    runner = _runner(tmp_path, backend, schedule="abba")
    res = runner.run()
    assert res.status == "complete" and res.missing == [] and res.errors == []
    slots = [c[1:] for c in backend.calls if c[0] == "slot"]
    assert slots == [("p2p_on", 1), ("p2p_off", 1), ("p2p_off", 2), ("p2p_on", 2), ("p2p_on", 3), ("p2p_off", 3)]
    assert [c[1] for c in backend.calls if c[0] == "smoke"] == ["p2p_on", "p2p_off"]
    meta = json.loads((res.run_dir / "run.json").read_text())
    for key in ("run_id", "rig", "rig_digest", "kind", "pair", "arms", "points", "reps", "schedule", "simulated",
                "status", "missing", "started_at", "finished_at", "server", "versions"):
        assert key in meta, key
    assert meta["schedule"] == "p2p_on p2p_off | p2p_off p2p_on | p2p_on p2p_off"
    assert meta["pair"]["gpus"][0]["bus_id"] == "0000:00:06.0" and meta["simulated"] is True
    assert meta["arms"]["p2p_off"]["env"]["NCCL_P2P_DISABLE"] == "1"
    scen = res.run_dir / "scenarios" / "p2p_on-c4"
    names = sorted(p.name for p in scen.iterdir())
    for k in (1, 2, 3):
        assert f"run_{k}.json" in names and f"telemetry_run{k}.csv" in names and f"server_run{k}.log" in names
    agg = json.loads((scen / "aggregate.json").read_text())
    assert set(agg) >= {"arm", "point", "metrics", "energy", "flags"}
    thr = agg["metrics"]["output_throughput"]
    assert thr["n"] == 3 and thr["values"] == pytest.approx([440.0 * 1.05, 440.0 * 1.10, 440.0 * 1.15])
    assert set(thr) >= {"mean", "std", "median", "ci95", "n", "values"}
    assert "SIMULATED" in agg["energy"]["method"]
    assert res.uplift["c4"]["estimate"] == pytest.approx(0.10) and res.uplift["c4"]["n"] == 3
    assert res.uplift_verdict("c1").passed
    csv_head = (scen / "telemetry_run1.csv").read_text().splitlines()
    assert csv_head[0].endswith("simulated") and all(line.endswith("SIMULATED") for line in csv_head[1:])
    assert (res.run_dir / "summary.md").is_file()
    assert res.run_dir.joinpath("env", "versions.json").is_file()
    lines = runner.progress.lines if runner.progress else []
    assert "scenario 1/12 p2p_on-c1 rep 1/3" in lines[2] and "ETA ?" in lines[2]
    assert any("scenario 12/12 p2p_off-c4 rep 3/3" in ln and "ETA 0:00" in ln for ln in lines)
    assert lines[-1].endswith(f"campaign complete -> {res.run_dir}")


def test_interrupted_campaign_keeps_measured_reps(tmp_path: Path) -> None:
    backend = FakeBackend(interrupt_at=("p2p_off", 2))
    runner = _runner(tmp_path, backend, schedule="interleaved")  # the order the assertions below spell out
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    run_dir = next((tmp_path / "results").iterdir())
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted"
    assert "p2p_off-c1 rep 2" in meta["missing"] and "p2p_on-c4 rep 3" in meta["missing"]
    assert "p2p_on-c1 rep 2" not in meta["missing"]
    agg = json.loads((run_dir / "scenarios" / "p2p_on-c1" / "aggregate.json").read_text())
    assert agg["metrics"]["output_throughput"]["n"] == 2
    assert runner.progress is not None and any("rep 2/3" in line for line in runner.progress.lines)


def test_throttled_rep_is_flagged_and_excluded_from_pairing(tmp_path: Path) -> None:
    backend = FakeBackend()
    reader = ThermalReader(gpus=[0, 1], link={0: (5, 16), 1: (5, 16)})
    original = backend.measure

    def measure(handle: Any, point: str, rep: int) -> dict[str, Any]:
        # hot from here to the end-of-window sample; warm() of the next point cools it again
        reader.hot = handle.name == "p2p_off" and rep == 2
        return original(handle, point, rep)

    def warm(handle: Any, point: str) -> None:
        reader.hot = False

    backend.warm = warm  # type: ignore[method-assign]
    backend.measure = measure  # type: ignore[method-assign]
    runner = _runner(tmp_path, backend, smoke=False)
    runner.reader_factory = lambda gpus: reader
    res = runner.run()
    assert res.flags("p2p_off", "c1")["throttled_reps"] == [2]
    assert res.flags("p2p_off", "c1")["excluded_reps"] == [2]
    assert res.aggregate("p2p_off", "c1")["metrics"]["output_throughput"]["n"] == 2
    assert res.uplift["c1"]["n"] == 2  # rep 2 dropped from both arms, pairing kept
    rep2 = json.loads((res.run_dir / "scenarios" / "p2p_off-c1" / "run_2.json").read_text())
    assert rep2["flags"]["throttled"] and rep2["flags"]["reasons"] == ["hw_thermal"]


def test_too_few_arms_is_a_clear_error(tmp_path: Path) -> None:
    from pytest_p2p.campaign.runner import CampaignError

    with pytest.raises(CampaignError, match="at least two"):
        _runner(tmp_path, FakeBackend(), arms=["p2p_on"]).run()
    with pytest.raises(CampaignError, match="does not define"):
        _runner(tmp_path, FakeBackend(), arms=["p2p_on", "nvlink_magic"]).run()


# --------------------------------------------------------------------------- pytester: demo rig

pytest_plugins = ["pytester"]

SMALL_RIG = """
rig: ci-small
description: SIMULATED CI rig (stand-in server)
pairs: {pairs}
server:
  command: [python, -m, pytest_p2p.serve.standin]
  model: ci-model
  args: {{tensor-parallel-size: 2}}
  env: {{PYTEST_P2P_STANDIN_TTFT_MS: "5", PYTEST_P2P_STANDIN_TPOT_MS: "2", PYTEST_P2P_STANDIN_JITTER: "0"}}
  startup_timeout_s: 60
  request_timeout_s: 30
  load: {{input_len: 16, output_len: 8, warmup: 0}}
campaign:
  kind: model
  concurrency: [1, 2]
  reps: 2
  smoke: false
  warmup: 0
  prompts_per_concurrency: 2
  cooldown_s: 0
  idle_baseline_s: 0
  telemetry_hz: 5
  # this test is about scheduling across workers, not about the stand-in's timing on a busy CI box:
  # a threshold far below the modelled +11 % still fails if the arms were swapped or unpaired
  min_uplift: -50%
"""

PLUGINS = ("-p", "pytest_p2p.plugin.campaign", "-p", "pytest_p2p.plugin.report", "-p", "no:cacheprovider")


def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_CAMPAIGN", "PYTEST_P2P_REPS",
                "PYTEST_P2P_ARMS", "PYTEST_P2P_RESULTS", "PYTEST_P2P_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))


def test_demo_rig_campaign_end_to_end(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    """The embedded demo rig (no --p2p-rig): a complete two-arm campaign, reduced to 2 reps for CI."""
    from pytest_p2p.evidence.live import nvml_available

    if nvml_available()[0]:
        pytest.skip("a GPU is present: the demo rig is only the default without one")
    _clean_env(monkeypatch, tmp_path)
    results = tmp_path / "res"
    # the timeout bounds a hang, it is no speed goal: 150 s ran out on a busy 2-core box (two CPU hogs, -n 2)
    r = pytester.runpytest_subprocess(*PLUGINS, "--pyargs", "pytest_p2p.checks.test_campaign", "-v",
                                      "--p2p-reps", "2", "--p2p-results", str(results), timeout=600)
    out = r.stdout.str()
    assert "test_uplift[gpu0-gpu1-c8]" in out and "test_transport[gpu0-gpu1-p2p_off]" in out
    assert "test_no_throttling[gpu0-gpu1-p2p_on-c4]" in out
    outcomes = r.parseoutcomes()
    assert outcomes.get("errors", 0) == 0 and outcomes.get("passed", 0) >= 17, out[-3000:]
    for name in ("test_campaign_complete", "test_transport", "test_attestation", "test_no_failed_requests"):
        assert f"::{name}[" in out and not any(f"::{name}[" in ln and "FAILED" in ln for ln in out.splitlines())
    assert "SIMULATED" in out
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    # the demo runs resident arms: --p2p-reps 2 is 2 starts of each arm's server, 2 window pairs per point in each
    assert meta["status"] == "complete" and meta["simulated"] and meta["reps"] == 4
    assert meta["schedule"].startswith("resident: 2 start(s)")
    assert meta["points"] == ["c1", "c2", "c4", "c8"] and meta["rig"] == "demo-h200x2-nvlink"
    env = run_dir / "env"
    assert json.loads((env / "doctor.json").read_text())["evidence"]["pairs"][0]["topology"] == "NV18"
    assert "NV18" in (env / "doctor.txt").read_text() and "kernel.numa_balancing = " in (env / "sysctl.txt").read_text()
    for arm in ("p2p_on", "p2p_off"):
        for point in meta["points"]:
            d = run_dir / "scenarios" / f"{arm}-{point}"
            assert json.loads((d / "aggregate.json").read_text())["metrics"]["output_throughput"]["n"] == 4
            assert (d / "transport_proof.json").is_file()
            assert "SIMULATED" in (d / "telemetry_run1.csv").read_text()
        assert (run_dir / "scenarios" / f"{arm}-c1" / "server_start2.log").is_file()  # one server per start
    assert "SIMULATED" in (run_dir / "summary.md").read_text()


def _four_gpu_snapshot(path: Path) -> Path:
    env = json.loads(DEMO_SNAPSHOT.read_text())
    ev = env["evidence"]
    gpus = ev["gpus"]
    for i in (2, 3):
        g = copy.deepcopy(gpus[i - 2])
        g["index"] = i
        g["uuid"] = g["uuid"][:-4] + f"{i:04d}"
        g["bus_id"] = f"0000:00:{8 + i:02X}.0"
        gpus.append(g)
    pair = ev["pairs"][0]
    ev["pairs"] = [pair, {**copy.deepcopy(pair), "a": 2, "b": 3}]
    ev["simulated"] = True
    ev["notes"] = ["SIMULATED 4-GPU variant of the H200 snapshot (GPUs 2-3 are copies), for the xdist test"]
    path.write_text(json.dumps(env))
    return path


def test_two_pairs_on_two_xdist_workers(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    _clean_env(monkeypatch, tmp_path)
    rig = pytester.path / "rig.yaml"
    rig.write_text(SMALL_RIG.format(pairs="[[0, 1], [2, 3]]"))
    snap = _four_gpu_snapshot(pytester.path / "snap4.json")
    results = tmp_path / "res"
    r = pytester.runpytest_subprocess(*PLUGINS, "--pyargs", "pytest_p2p.checks.test_campaign", "-v",
                                      "-n", "2", "--dist", "loadgroup", "--p2p-rig", str(rig),
                                      "--p2p-snapshot", str(snap), "--p2p-results", str(results), timeout=120)
    out = r.stdout.str()
    outcomes = r.parseoutcomes()
    assert outcomes.get("errors", 0) == 0 and outcomes.get("passed", 0) >= 2 * 12, out[-3000:]
    # each pair's tests ran on exactly one worker
    workers: dict[str, set[str]] = {}
    for line in out.splitlines():
        if "PASSED" in line or "FAILED" in line:
            for pair in ("gpu0-gpu1", "gpu2-gpu3"):
                if f"[{pair}-" in line or f"[{pair}]" in line:
                    workers.setdefault(pair, set()).add(line.split("]")[0].split("[")[-1] if "[gw" in line
                                                        else line)
    assert set(workers) == {"gpu0-gpu1", "gpu2-gpu3"}
    assert all(len(w) == 1 for w in workers.values()), workers
    run_dirs = sorted(p for p in results.iterdir() if p.is_dir())
    assert [d.name.rsplit("_", 1)[1] for d in run_dirs] == ["gpu0-gpu1", "gpu2-gpu3"]
    stamps = {d.name.split("_", 1)[0] for d in run_dirs}
    assert len(stamps) == 1, "the controller's run stamp reaches both workers"
    for d in run_dirs:
        meta = json.loads((d / "run.json").read_text())
        assert meta["status"] == "complete" and meta["points"] == ["c1", "c2"]
    # only the controller printed the glance tables (workers' run dirs came back through workeroutput)
    assert out.count("p2p results at a glance:") == 2


def test_campaign_options_off_probe_and_bad_values(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    _clean_env(monkeypatch, tmp_path)
    snap = pytester.path / "snap.json"
    snap.write_text(DEMO_SNAPSHOT.read_text())
    common = (*PLUGINS, "--pyargs", "pytest_p2p.checks.test_campaign", "--p2p-snapshot", str(snap), "-rs")
    off = pytester.runpytest_subprocess(*common, "--p2p-campaign=off", timeout=60)
    assert "campaign turned off (--p2p-campaign=off)" in off.stdout.str()
    assert off.parseoutcomes().get("passed", 0) == 0 and off.parseoutcomes()["skipped"] >= 10
    probe = pytester.runpytest_subprocess(*common, "--p2p-campaign=probe", "--collect-only", "-q", timeout=60)
    assert "test_uplift[gpu0-gpu1-s8KiB]" in probe.stdout.str()
    bad = pytester.runpytest_subprocess(*common, "--p2p-reps=0", timeout=60)
    assert "pytest-p2p: --p2p-reps: bad value '0': expected an integer >= 1" in bad.stderr.str()
    arms = pytester.runpytest_subprocess(*common, "--p2p-arms=p2p_on,nope", timeout=60)
    assert "--p2p-arms=p2p_on,nope: names nope" in arms.stdout.str() + arms.stderr.str()


# --------------------------------------------------------------------------- probe campaign (fake NCCL worker)

FAKE_PROBE_WORKER = r'''
import json, os, sys
spec = json.load(open(sys.argv[1]))
rank = int(os.environ["RANK"])
off = os.environ.get("NCCL_P2P_DISABLE") == "1"
if rank == 0:
    sys.stdout.write(open(os.environ["FAKE_LOG_OFF" if off else "FAKE_LOG_ON"]).read())
    rows = [{"bytes": b, "time_us": (11.5 if off else 10.2) + b / (26e3 if off else 280e3)} for b in spec["sizes"]]
    checks = [{"bytes": b, "graph": True, "wrong": 0, "first_wrong": None} for b in spec["check_sizes"]]
    json.dump({"rows": rows, "checks": checks, "world_size": 2, "graph": True, "iters": 1, "warmup": 1,
               "graph_launches": 1, "torch_version": "fake", "nccl_version": "2.28.9",
               "device_names": ["fake", "fake"]}, open(spec["out"], "w"))
'''


def test_probe_campaign_with_a_fake_nccl_worker(tmp_path: Path) -> None:
    from pytest_p2p.campaign.runner import ProbeBackend
    from pytest_p2p.evidence.snapshot import load_snapshot
    from pytest_p2p.probes.config import ProbeConfig
    from pytest_p2p.probes.transport import proof_from_dict

    logs = Path(__file__).parents[1] / "fixtures" / "logs"
    worker = tmp_path / "fake_worker.py"
    worker.write_text(FAKE_PROBE_WORKER)
    cfg = parse_campaign({"kind": "probe", "sizes": ["8KiB", "128KiB"], "reps": 2, "cooldown_s": 0,
                          "idle_baseline_s": 0, "telemetry_hz": 10, "min_uplift": {"default": "5%", "128KiB": "50%"}},
                         "probe-rig.yaml")
    rig_env = {"FAKE_LOG_ON": str(logs / "h200x2_nccl-2.28.9_p2p_on.log"),
               "FAKE_LOG_OFF": str(logs / "h200x2_nccl-2.28.9_p2p_off.log")}
    backend = ProbeBackend(probe=ProbeConfig(timeout_s=30.0), campaign=cfg, pair=(0, 1), rig_env=rig_env,
                           out_root=tmp_path, worker=[sys.executable, str(worker)])
    res = CampaignRunner(pair=(0, 1), config=cfg, kind="probe", arms=PRESETS, backend=backend,
                         results_root=tmp_path / "results", rig_name="probe", evidence=load_snapshot(DEMO_SNAPSHOT),
                         lease=GpuLease(tmp_path / "locks")).run()
    assert res.status == "complete" and res.points == ["s8KiB", "s128KiB"]
    agg = res.aggregate("p2p_off", "s8KiB")
    assert agg is not None and agg["metrics"]["time_us"]["values"] == pytest.approx([11.5 + 8192 / 26e3] * 2)
    # time_us is lower-is-better: the uplift is off/on - 1
    assert res.uplift["s8KiB"]["estimate"] == pytest.approx((11.5 + 8192 / 26e3) / (10.2 + 8192 / 280e3) - 1)
    assert res.uplift_verdict("s8KiB").passed and res.uplift_verdict("s128KiB").passed
    assert proof_from_dict(res.proofs["p2p_on"]).satisfies("P2P/CUMEM")[0]
    assert proof_from_dict(res.proofs["p2p_off"]).satisfies("SHM")[0]
    assert (res.run_dir / "probe_runs" / "p2p_off_run2" / "allreduce.json").is_file()
    assert (res.run_dir / "scenarios" / "p2p_on-s128KiB" / "server_run1.log").read_text().count("via P2P/CUMEM")
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["kind"] == "probe" and meta["uplift"]["direction"] == "lower" and meta["server"] is None


def test_pair_scope_groups_by_the_pair_in_the_test_id():
    from pytest_p2p.plugin.campaign import pair_scope

    assert pair_scope("checks/test_campaign.py::test_uplift[gpu0-gpu1-c8]") == "gpu0-gpu1"
    assert pair_scope("checks/test_probes.py::test_transport[gpu2-gpu3-p2p_on]") == "gpu2-gpu3"
    assert pair_scope("checks/test_evidence.py::test_pcie_link[gpu1]") is None
    assert pair_scope("tests/test_x.py::test_y[gpu10-gpu11]") == "gpu10-gpu11"


def test_sysctl_text_reads_proc_sys_and_says_what_is_missing(tmp_path):
    from pytest_p2p.campaign.runner import sysctl_text

    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "numa_balancing").write_text("0\n")
    text = sysctl_text(tmp_path)
    assert "kernel.numa_balancing = 0\n" in text and "vm.zone_reclaim_mode = unavailable" in text
