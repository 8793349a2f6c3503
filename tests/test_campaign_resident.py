"""Resident arms (issue 24): every arm's server up for a start, windows alternating ABBA between them.

Through the real path: ``serve.server.launch`` starts the SIMULATED stand-in exactly as it would vLLM,
two at once on one pair, and the campaign measures windows on both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_campaign_faults import _server

from pytest_p2p.campaign.backends import ModelBackend, resident_config, window_prompts
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.campaign.schedule import order, rep_of
from pytest_p2p.errors import CampaignError, ConfigError
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server

BASE: dict[str, Any] = {"kind": "model", "concurrency": [1, 2], "starts": 3, "windows": 2, "window_s": None,
                        "smoke": False, "warmup": 1, "prompts_per_concurrency": 2, "cooldown_s": 0,
                        "idle_baseline_s": 0, "telemetry_hz": 10, "min_uplift": "0%"}


def _runner(tmp_path: Path, env: dict[str, str] | None = None, **cfg: Any) -> CampaignRunner[Any]:
    config = parse_campaign({**BASE, **cfg}, "resident-rig.yaml")
    backend = ModelBackend(server=_server(tmp_path, env or {}), campaign=config, pair=(0, 1), rig_env={})
    return CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS, backend=backend,
                          results_root=tmp_path / "results", rig_name="resident", simulated=True,
                          lease=GpuLease(tmp_path / "locks"))


def _launches(run_dir: Path, arm: str) -> int:
    return sum(p.read_text().count(f"launching arm {arm} ") for p in run_dir.glob(f"scenarios/{arm}-*/server_*.log"))


def _reps(run_dir: Path, arm: str, point: str) -> dict[int, dict[str, Any]]:
    d = run_dir / "scenarios" / f"{arm}-{point}"
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in d.glob("run_*.json") if "try" not in p.name}


def test_each_arm_starts_once_per_start_and_windows_alternate_abba(tmp_path: Path) -> None:
    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    assert res.reps == 6  # 3 starts x 2 window pairs
    # one server per start, not one per rep (a start the screen re-ran on this loaded box is one more)
    reruns = sum(1 for n in res.notes if n.startswith("start ") and " re-run" in n)
    for arm in ("p2p_on", "p2p_off"):
        assert _launches(res.run_dir, arm) == 3 + reruns
    on, off = _reps(res.run_dir, "p2p_on", "c2"), _reps(res.run_dir, "p2p_off", "c2")
    assert sorted(on) == sorted(off) == [1, 2, 3, 4, 5, 6]
    for k in range(1, 7):
        assert (on[k]["meta"]["start"], on[k]["meta"]["window"]) == ((k - 1) // 2 + 1, (k - 1) % 2 + 1)
        first = "p2p_on" if on[k]["meta"]["started_at"] < off[k]["meta"]["started_at"] else "p2p_off"
        assert first == order(["p2p_on", "p2p_off"], on[k]["meta"]["start"], on[k]["meta"]["window"])[0]
    decision = res.decisions["c2"]
    # the outcome depends on this box's load; what the decision is made of does not
    assert decision["n"] == 3 and "3 starts x 2 window pairs" in str(decision["reason"])
    comp = decision["components"]
    assert comp["starts"] == 3 and comp["window_pairs"] == 6 and comp["window_sd"] is not None
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["schedule"].startswith("resident: 3 start(s)") and meta["status"] == "complete"
    # what every request asked of the server, so that a night of other requests is never judged against it
    assert meta["server"]["load"] == {"input_len": 8, "output_len": 4, "endpoint": "completions",
                                      "request_rate": "inf", "burstiness": 1.0, "extra_body": {}}
    assert any(n.startswith("plan: resident arms") for n in res.notes)
    up = res.uplift["c2"]
    assert up["starts"] == 3 and str(up["kind"]).startswith("nested")


def test_the_campaign_s_lengths_are_the_load_shape_it_records(tmp_path: Path) -> None:
    config = parse_campaign({**BASE, "input_len": 256}, "resident-rig.yaml")
    backend = ModelBackend(server=_server(tmp_path, {}), campaign=config, pair=(0, 1), rig_env={})
    shape = backend.load_shape()
    assert (shape["input_len"], shape["output_len"]) == (256, 4)  # the campaign's, else the server.load's


def test_sleep_mode_wakes_only_the_arm_it_measures(tmp_path: Path) -> None:
    """A sleeping stand-in answers 503: a window measured on a server left asleep could not complete a request."""
    res = _runner(tmp_path, residency="sleep", starts=2, concurrency=[1]).run()
    assert res.status == "complete", res.errors
    log = (res.run_dir / "scenarios" / "p2p_on-c1" / "server_start1.log").read_text()
    assert "--enable-sleep-mode" in log and "SIMULATED sleep" in log and "SIMULATED wake up" in log
    for arm in ("p2p_on", "p2p_off"):
        assert all(d["completed"] > 0 and d["meta"]["residency"] == "sleep"
                   for d in _reps(res.run_dir, arm, "c1").values())


def test_a_server_dying_mid_start_sets_the_whole_start_aside_and_runs_it_again(tmp_path: Path) -> None:
    """p2p_on's first server dies at its 5th completion (ready 1, warm-up 1, window 1: 2, then window 2)."""
    env = {"PYTEST_P2P_STANDIN_FAULT": "die-after=4",
           "FAULT_ONCE_MARKER": str(tmp_path / "fault-once")}
    res = _runner(tmp_path, env, starts=2, concurrency=[1]).run()
    assert res.status == "complete", res.errors
    failed = [a for a in res.set_aside if a.kind == "failed"]
    assert failed and all(a.rep in (rep_of(1, 1, 2), rep_of(1, 2, 2)) for a in failed)
    assert any("start 1 attempt 1 set aside" in n for n in res.notes)
    assert list((res.run_dir / "scenarios" / "p2p_on-c1").glob("server_start1.try1.failed.log"))
    for arm in ("p2p_on", "p2p_off"):
        reps = _reps(res.run_dir, arm, "c1")
        assert sorted(reps) == [1, 2, 3, 4] and all(d["meta"]["attempt"] in (1, 2) for d in reps.values())
        assert {d["meta"]["attempt"] for k, d in reps.items() if k <= 2} == {2}  # start 1: the fresh servers


def test_p2p_reps_sets_the_starts_of_a_resident_campaign() -> None:
    cfg = parse_campaign({"starts": 3, "max_starts": 5}, "r.yaml").with_overrides(reps=4)
    assert (cfg.starts, cfg.max_starts, cfg.reps) == (4, 5, 4)
    with pytest.raises(ConfigError, match="max_starts"):
        parse_campaign({"starts": 4, "max_starts": 3}, "r.yaml")
    assert parse_campaign({"residency": "restart"}, "r.yaml").resident_mode("model") is None
    assert parse_campaign(None, "r.yaml").resident_mode("model") == "resident"
    assert parse_campaign(None, "r.yaml").resident_mode("probe") is None


def test_resident_servers_split_the_memory_and_sleep_mode_keeps_it() -> None:
    server = parse_server({"command": [sys.executable, "-m", "x"], "model": "m",
                           "args": {"gpu_memory_utilization": 0.8}}, "r.yaml")
    cfg, env = resident_config(server, 2, "resident")
    assert cfg.args["gpu_memory_utilization"] == 0.4 and env == {}
    cfg, env = resident_config(parse_server({"command": ["vllm", "serve"], "model": "m"}, "r.yaml"), 2, "resident")
    assert cfg.args["gpu-memory-utilization"] == 0.45  # vLLM's default 0.9, halved
    cfg, env = resident_config(server, 2, "sleep")
    assert cfg.args["gpu_memory_utilization"] == 0.8 and "enable-sleep-mode" in cfg.flags
    assert env == {"VLLM_SERVER_DEV_MODE": "1"}
    bad = parse_server({"command": ["vllm"], "model": "m", "args": {"gpu-memory-utilization": "lots"}}, "r.yaml")
    with pytest.raises(CampaignError, match="gpu-memory-utilization"):
        resident_config(bad, 2, "resident")


def test_a_window_is_sized_from_the_warm_up_rate_with_two_rounds_at_least() -> None:
    assert window_prompts({"request_throughput": 10.0}, 16, 12.0) == 120
    assert window_prompts({"request_throughput": 1.0}, 16, 12.0) == 32
    assert window_prompts({}, 8, 12.0) == 16


SWITCHING = r"""
import os, sys
count = os.environ["LAUNCH_COUNT"]
if os.environ.get("NCCL_P2P_DISABLE") == "0":  # p2p_on's servers only: a start's two servers may launch at once
    n = len(open(count).read()) if os.path.exists(count) else 0
    open(count, "a").write("x")
    if n == 1:  # p2p_on's second server (start 2's) comes up on SHM, as a changed environment would
        os.environ["NCCL_P2P_DISABLE"] = "1"
os.execv(sys.executable, [sys.executable, "-m", "pytest_p2p.serve.standin", *sys.argv[1:]])
"""


def test_a_later_start_on_another_transport_fails_the_campaign_naming_both(tmp_path: Path) -> None:
    wrapper = tmp_path / "switching.py"
    wrapper.write_text(SWITCHING)
    server = parse_server({"command": [sys.executable, str(wrapper)], "model": "m", "args": {"tensor-parallel-size": 2},
                           "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": "1",
                                   "LAUNCH_COUNT": str(tmp_path / "launches")},
                           "startup_timeout_s": 60, "load": {"input_len": 8, "output_len": 4, "warmup": 0}},
                          "resident-rig.yaml")
    # the launch order is the point here; with a start made ahead it depends on timing (that path:
    # tests/test_start_ahead.py::test_a_server_started_ahead_on_another_transport_fails_the_campaign)
    config = parse_campaign({**BASE, "starts": 2, "concurrency": [1], "start_ahead": False}, "resident-rig.yaml")
    res = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                         backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                         results_root=tmp_path / "results", rig_name="resident", simulated=True,
                         lease=GpuLease(tmp_path / "locks")).run()
    assert res.status == "failed"
    assert any("arm p2p_on: the server of start 2 used transport SHM" in e and "first start's used P2P" in e
               for e in res.errors), res.errors


TIGHT = r"""
import sys, os
args = sys.argv[1:]
share = float(args[args.index("--gpu-memory-utilization") + 1]) if "--gpu-memory-utilization" in args else 0.9
if share < 0.5 and os.environ.get("NCCL_P2P_DISABLE") == "1":  # the second server finds the pair full
    print("ValueError: Free memory on device (30.1/79.2 GiB) on startup is less than desired GPU memory "
          "utilization (0.45, 35.6 GiB).", flush=True)
    sys.exit(1)
os.execv(sys.executable, [sys.executable, "-m", "pytest_p2p.serve.standin", *args])
"""


@pytest.mark.parametrize("residency", ["auto", "resident"])
def test_auto_residency_falls_back_to_sleep_when_two_servers_do_not_fit(tmp_path: Path, residency: str) -> None:
    wrapper = tmp_path / "tight.py"
    wrapper.write_text(TIGHT)
    server = parse_server({"command": [sys.executable, str(wrapper)], "model": "m", "args": {"tensor-parallel-size": 2},
                           "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": "1"},
                           "startup_timeout_s": 60, "load": {"input_len": 8, "output_len": 4, "warmup": 0}},
                          "resident-rig.yaml")
    config = parse_campaign({**BASE, "starts": 2, "concurrency": [1], "residency": residency}, "resident-rig.yaml")
    res = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                         backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                         results_root=tmp_path / "results", rig_name="resident", simulated=True,
                         lease=GpuLease(tmp_path / "locks")).run()
    if residency == "resident":  # the rig asked for both at once: that fails, saying why
        assert res.status == "failed" and any("out of GPU memory" in e for e in res.errors), res.errors
        return
    assert res.status == "complete", res.errors
    assert any(n.startswith("residency auto: both arms' servers did not fit") for n in res.notes)
    assert all(d["meta"]["residency"] == "sleep" for d in _reps(res.run_dir, "p2p_off", "c1").values())


def test_the_progress_line_counts_every_window_of_every_start(tmp_path: Path) -> None:
    """The glue sized the line as arm x point x reps (16 for the 2x H100 campaign of 2026-11-26, which measured
    60 windows): the line read "scenario 16/16 ... ETA 0:00" through its last two starts, 11 minutes. The runner
    owns the design and sets the count; the line reaches its end with the last window, not before (its ETA is
    that count's: elapsed per window done times the windows left)."""
    from pytest_p2p.campaign.progress import Progress

    runner = _runner(tmp_path)
    runner.progress = Progress("gpu0-gpu1", total=2 * 2 * 4)  # what the glue passes: arms x points x reps
    res = runner.run()
    assert res.status == "complete", res.errors
    # every window measured, kept or set aside: the plan's starts x window pairs x arms x points, a start's windows
    # again for each start the screen re-ran, a pair's two windows for each pair it re-measured, and what a failed
    # launch attempt had measured before it failed (this loaded box makes all of them happen; a launch that failed
    # at its first window once left the line at 26/34)
    windows = len(list(res.run_dir.glob("scenarios/*/run_*.json")))
    assert windows >= 3 * 2 * 2 * 2
    assert runner.progress.total == windows == runner.progress.done, res.notes
    window_lines = [line for line in runner.progress.lines if " window " in line]
    assert window_lines[-1].startswith(f"[p2p] gpu0-gpu1: scenario {windows}/{windows} ")
    early = window_lines[:-1]  # every window line before the last one: work was left, and the line said so
    assert early and not [line for line in early if f"scenario {windows}/" in line]


def test_the_progress_line_is_told_every_launch_and_the_launches_of_the_plan_still_ahead(tmp_path: Path) -> None:
    """The ETA charges launches their own time (``Progress.pace``): the runner marks each launch and says how many
    of the plan come after it; a start the screen re-ran is a launch the plan did not count."""
    from pytest_p2p.campaign.progress import Progress

    runner = _runner(tmp_path)
    runner.progress = Progress("gpu0-gpu1", total=1)
    ahead: list[int] = []
    real = Progress.launch_begins

    def spy(self: Progress) -> None:
        assert self.pace is not None
        ahead.append(self.pace.launches_ahead)
        real(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Progress, "launch_begins", spy)
        res = runner.run()
    assert res.status == "complete", res.errors
    reruns = sum(1 for n in res.notes if n.startswith("start ") and " re-run" in n)
    assert ahead[:3] == [2, 1, 0] and ahead[3:] == [0] * reruns
    assert runner.progress.launches_done == 3 + reruns and runner.progress.launch_spent > 0
    assert runner.progress.pace is not None and runner.progress.pace.window_s > 0


def test_the_stand_ins_plan_expects_the_stand_ins_time_not_a_real_servers(tmp_path: Path) -> None:
    """The README's demo printed "expected 12 min" before a campaign of one minute: windows of so many prompts were
    planned at 10 s each, a real server's figure, though the stand-in answers them in about a second."""
    import dataclasses
    import re

    from pytest_p2p.campaign import blocks

    runner = _runner(tmp_path)  # the stand-in behind a wrapper: say so, as a rig naming the stand-in does
    runner.backend.server = dataclasses.replace(runner.backend.server, simulated=True)

    def minutes() -> int:
        m = re.search(r"expected (\d+) min", blocks.plan_line(runner, ["c1", "c2"]))  # type: ignore[arg-type]
        assert m is not None
        return int(m.group(1))

    stand_in = minutes()
    assert stand_in <= 1, stand_in  # 3 starts x 2 pairs x 2 points of ~1 s
    runner.backend.server = dataclasses.replace(runner.backend.server, simulated=False)
    assert minutes() >= 10 * max(1, stand_in)  # the same design against vLLM: starts of ~2 min, windows of ~10 s


def test_every_start_records_where_its_servers_start_went(tmp_path: Path) -> None:
    """run.json's ``server_starts`` split each server's start as its log tells it (``serve.start_phases``): the
    launcher marks the launch, so the stand-in's 2 s before its engine comes up count as starting processes."""
    res = _runner(tmp_path, {"PYTEST_P2P_STANDIN_STARTUP_DELAY_S": "2"}).run()
    assert res.status == "complete", res.errors
    meta = json.loads((res.run_dir / "run.json").read_text())
    phases = [srv["phases"] for rec in meta["server_starts"] for srv in rec["servers"].values()]
    # a start held before its GPU work (started ahead) counts its held time apart: its processes took less
    assert len(phases) >= 6 and all(p["from_launch"] and p["processes_s"] >= (0 if p["held_s"] is not None else 1)
                                    and p["gpu_s"] >= 0 for p in phases)
    assert sum(1 for n in res.notes if "; slowest p2p_o" in n and " s starting vLLM's processes" in n) >= 3


def test_a_later_start_that_compiled_again_is_named() -> None:
    """An earlier launch of the campaign filled vLLM's compile cache, so a later start should load it; one that
    compiled (a per-start API key in the cache key made every start compile, 2x H100, 2026-11-26) is said."""
    from pytest_p2p.campaign.blocks import _compiled_again

    later = {"p2p_on": {"phases": {"compile_cache": "loaded", "compile_s": 4.2}},
             "p2p_off": {"phases": {"compile_cache": "compiled", "compile_s": 20.4}}}
    assert _compiled_again(later, []) == ""  # the campaign's first launch: compiling is what fills the cache
    note = _compiled_again(later, [{"servers": {"p2p_on": {}, "p2p_off": {}}}])
    assert note.startswith("torch.compile compiled again (p2p_off 20 s)") and "VLLM_CACHE_ROOT" in note
    assert _compiled_again({"p2p_on": {"phases": {"compile_cache": "loaded"}}}, [{"servers": {"p2p_on": {}}}]) == ""


def test_a_start_run_again_counts_its_windows_again(tmp_path: Path) -> None:
    """A screened start's re-run and an added start are work the plan did not count: each adds its windows."""
    from pytest_p2p.campaign import blocks
    from pytest_p2p.campaign.progress import Progress

    runner = _runner(tmp_path)
    runner.progress = Progress("gpu0-gpu1", total=24)
    calls: list[tuple[int, int]] = []

    def fake_start(r: Any, rd: Any, result: Any, group: list[int], points: Any, attempt: int, pending: Any,
                   **ahead: Any) -> None:
        calls.append((group[0], r.progress.total))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blocks, "_run_start", fake_start)
        for group, rerun, total in (([3], False, 24), ([1], True, 32), ([4], False, 40), ([5, 6], False, 56)):
            blocks._start_with_retries(runner, None, None, group, ["c1", "c2"], set(), rerun=rerun)  # type: ignore[arg-type]
            assert calls[-1] == (group[0], total)


def test_no_server_is_sent_prompts_it_has_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every warm-up and window a server serves draws its own prompts (a prefix cache would serve a repeat in part),
    and both arms of a window pair draw the same. Until 2026-11-27 window k at c1 and at c2 used one seed."""
    from pytest_p2p.serve import loadgen

    sent: list[tuple[str, int, int]] = []  # (server url, seed, prompts)
    real = loadgen.generate_load

    def spy(base_url: str, api_key: str, model: str, spec: Any, *args: Any, **kw: Any) -> Any:
        sent.append((base_url, spec.seed, spec.num_prompts))
        return real(base_url, api_key, model, spec, *args, **kw)

    monkeypatch.setattr(loadgen, "generate_load", spy)
    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    by_server: dict[str, list[int]] = {}
    for url, seed, _ in sent:
        by_server.setdefault(url, []).append(seed)
    assert len(by_server) >= 6  # 3 starts x 2 arms (a start the screen re-ran is one more of each)
    for url, seeds in by_server.items():
        assert len(seeds) == len(set(seeds)), (url, seeds)  # 2 warm-ups and 4 windows, each its own prompts
    for point in ("c1", "c2"):
        on, off = _reps(res.run_dir, "p2p_on", point), _reps(res.run_dir, "p2p_off", point)
        for k in on:
            assert on[k]["seed"] == off[k]["seed"], (point, k)
    seeds = {(p, k): _reps(res.run_dir, "p2p_on", p)[k]["seed"] for p in ("c1", "c2") for k in range(1, 7)}
    assert len(set(seeds.values())) == len(seeds)


def test_a_window_served_from_the_prefix_cache_is_measured_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers' own counters catch repeated prompts: with the seeds of before 2026-11-27 (window k drew
    seed + k at every point) each c2 window repeats its c1 window's prompts on the same server, the stand-in
    finds them in its prefix cache, and the window pairs are set aside and measured again; with fresh prompts
    every window reports a hit rate of 0."""
    from pytest_p2p.campaign import backends

    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    for arm in ("p2p_on", "p2p_off"):
        for point in ("c1", "c2"):
            assert {r["prefix_cache"]["hit_rate"] for r in _reps(res.run_dir, arm, point).values()} == {0.0}
    assert not any("prefix cache" in n for n in res.notes)

    monkeypatch.setattr(backends, "prompt_seed", lambda point, rep, again=0: rep)  # the old seeds
    (tmp_path / "old").mkdir()
    res = _runner(tmp_path / "old").run()
    assert res.status == "complete", res.errors
    screened = [n for n in res.notes if "screened and re-measured" in n and "prefix cache" in n]
    assert all(n.startswith("c2 start ") for n in screened), screened
    # every c2 window pair of the 3 starts (a start the start screen ran again on this loaded box repeats too)
    assert {n.split(" screened")[0] for n in screened} == {f"c2 start {s} window {w}" for s in (1, 2, 3)
                                                          for w in (1, 2)}, screened
    set_aside = list((res.run_dir / "scenarios" / "p2p_on-c2").glob("run_*.try*.json"))
    assert len(set_aside) >= 6


def test_a_rig_that_captures_graphs_the_campaign_never_runs_is_told_how_to_start_faster(tmp_path: Path) -> None:
    """vLLM captures CUDA graphs up to min(2 x max-num-seqs, 512) at every start (51 sizes for the 7B rig); at 8
    servers at once that capture took ~60 s a start (2x H200). A campaign whose top concurrency is 64 is told
    that max-num-seqs: 64 captures fewer; a rig that set it, runs eager, or is the stand-in is told nothing."""
    import dataclasses

    backend = _runner(tmp_path, concurrency=[16, 64]).backend
    assert isinstance(backend, ModelBackend) and not backend.server.simulated
    note = backend.graph_capture_note()
    assert note is not None and "max-num-seqs: 64 would capture up to 128" in note
    (tmp_path / "run").mkdir()
    runner = _runner(tmp_path / "run")  # concurrency 1 and 2: what this box's stand-in serves at ease
    res = runner.run()
    assert res.status == "complete", res.errors
    assert [n for n in res.notes if "max-num-seqs: 2 would capture up to 4" in n]
    server = backend.server
    for quiet in (dataclasses.replace(server, args={**server.args, "max-num-seqs": 64}),
                  dataclasses.replace(server, args={**server.args, "max_num_seqs": 128}),
                  dataclasses.replace(server, flags=("--enforce-eager",)),
                  dataclasses.replace(server, simulated=True)):
        backend.server = quiet
        assert backend.graph_capture_note() is None, quiet


def test_a_screened_start_run_again_keeps_every_window_it_set_aside(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Start 2's first window pair at c1 is screened in the start and in its re-run, and the start itself is
    screened: three windows of one rep set aside for p2p_on, each under a name of its own. Until 2026-11-28 the
    re-run counted attempts from 1 again, so its screened window overwrote the start's first one (and the
    progress line counted a window no file held: 34 against 32 files on a loaded CI box)."""
    from pytest_p2p.campaign import adaptive
    from pytest_p2p.campaign.progress import Progress

    monkeypatch.setattr(adaptive, "screen_starts_campaign", lambda *a, **k: {2: "made to sit off (test)"})
    monkeypatch.setattr(adaptive, "screen_windows_start",
                        lambda rep_data, config, kind, point, start: {1: "made outlying (test)"}
                        if (point, start) == ("c1", 2) else {})
    runner = _runner(tmp_path)
    runner.progress = Progress("gpu0-gpu1", total=24)
    res = runner.run()
    assert res.status == "complete", res.errors
    k = rep_of(2, 1, 2)
    kept_aside = sorted(p.name for p in (res.run_dir / "scenarios" / "p2p_on-c1").glob(f"run_{k}.try*.json"))
    assert kept_aside == [f"run_{k}.try1.screened.json", f"run_{k}.try2.screened.json",
                          f"run_{k}.try3.screened.json"], kept_aside
    assert (res.run_dir / "scenarios" / "p2p_on-c1" / f"run_{k}.json").is_file()  # the re-run's re-measure
    measured = len(list(res.run_dir.glob("scenarios/*/run_*.json")))
    assert runner.progress.total == runner.progress.done == measured == 24 + 8 + 2 + 2, res.notes
