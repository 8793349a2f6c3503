"""Starts made at once (``campaign.starts_at_once``): k servers per arm resident together, each its own start.

Why: the nested verdict's df is ``starts - 1``, and a start costs a vLLM start (93-156 s, 7B-shape TP=2 on
H100). Three starts one after another left df = 2 (t = 7.0 at the issue's 98 %) after 17 minutes. Launching
``k`` servers per arm together buys ``k`` starts for about the time of one.

Through the real path: ``serve.server.launch_all`` starts the SIMULATED stand-in as it would vLLM.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import BASE, _reps, _runner
from test_parallel_start import _overlap, _starts

from pytest_p2p.campaign.backends import ModelBackend
from pytest_p2p.campaign.blocks import launches, plan_line
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.progress import Progress
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.campaign.schedule import order
from pytest_p2p.errors import ConfigError
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.stats import SpreadSeen

KV = {"kv-cache-memory-bytes": 1 << 30}


def _with_kv(runner: CampaignRunner[Any]) -> CampaignRunner[Any]:
    """The rig sets the KV cache size, so every launch starts its servers in parallel from the first."""
    assert isinstance(runner.backend, ModelBackend)
    s = runner.backend.server
    runner.backend.server = parse_server({"command": list(s.command), "model": s.model, "args": {**s.args, **KV},
                                          "env": dict(s.env), "startup_timeout_s": 60,
                                          "load": {"input_len": 8, "output_len": 4, "warmup": 0}}, "rig.yaml")
    return runner


def _launch_lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("# pytest-p2p: launching arm")]


def test_each_launch_starts_k_servers_per_arm_together_and_every_one_is_a_start(tmp_path: Path) -> None:
    res = _with_kv(_runner(tmp_path, starts=6, starts_at_once=2, windows=2, concurrency=[1])).run()
    assert res.status == "complete", res.errors
    launches_ = [s for s in _starts(res.run_dir) if s["attempt"] == 1 and len(s["starts"]) == 2]
    assert [s["starts"] for s in launches_] == [[1, 2], [3, 4], [5, 6]]
    for rec in launches_:  # four servers, all spawned before any was ready, memory split four ways
        assert sorted(rec["servers"]) == sorted(f"{a}@start{s}" for a in ("p2p_on", "p2p_off") for s in rec["starts"])
        assert rec["start_mode"] == "parallel" and _overlap(rec)
    # a start the screen re-ran (this loaded box can make one odd) is a launch of its own: 2 servers, half each
    alone = {int(n.split()[1]) for n in res.notes if n.startswith("start ") and " screened and re-run" in n}
    for arm in ("p2p_on", "p2p_off"):
        for s in range(1, 7):  # a server log per start, each launched with a quarter of the rig's share
            log = res.run_dir / "scenarios" / f"{arm}-c1" / f"server_start{s}.log"
            (line,) = _launch_lines(log)
            assert f"--gpu-memory-utilization {0.45 if s in alone else 0.225}" in line, line
    on, off = _reps(res.run_dir, "p2p_on", "c1"), _reps(res.run_dir, "p2p_off", "c1")
    assert sorted(on) == sorted(off) == list(range(1, 13))
    for k, d in on.items():
        assert (d["meta"]["start"], d["meta"]["window"]) == ((k - 1) // 2 + 1, (k - 1) % 2 + 1)
        assert d["meta"]["at_once"] == (1 if d["meta"]["start"] in alone else 2)
        first = "p2p_on" if d["meta"]["started_at"] < off[k]["meta"]["started_at"] else "p2p_off"
        assert first == order(["p2p_on", "p2p_off"], d["meta"]["start"], d["meta"]["window"])[0]
    # the starts of one launch take turns window by window: start 2's window 1 runs before start 1's window 2
    # (unless the screen measured one of them again, after the launch's windows: seen on the loaded box)
    again = {(int(n.split()[2]), int(n.split()[4])) for n in res.notes if " screened and re-measured" in n}
    assert on[3]["meta"]["started_at"] < on[2]["meta"]["started_at"] or alone & {1, 2} or again & {(2, 1), (1, 2)}
    decision = res.decisions["c1"]
    guard = decision["launch_guard"]
    # a launch whose every start was re-run alone has no start left in the verdict (seen with starts 1 and 2 both
    # re-run on a loaded box: 4 launches, not 3 + 2)
    kept = sum(1 for launch in ({1, 2}, {3, 4}, {5, 6}) if launch - alone)
    assert guard["starts"] == decision["components"]["starts"] == 6 and guard["launches"] == kept + len(alone)
    # judged on the 4 start means (df = 3, not 1) unless the launch guard saw a launch effect
    assert guard["status"] in ("passed", "fired") and 0 <= guard["p"] <= 1
    assert decision["n"] == (6 if guard["status"] == "passed" else guard["launches"])
    assert "launch guard: " in str(decision["reason"])
    # the summary's 95 % interval stands on the same unit as the decision
    assert ("the launch guard fired" in str(res.uplift["c1"]["kind"])) == (guard["status"] == "fired")
    assert res.proofs["p2p_on"] is not None and res.proofs["p2p_off"] is not None


def test_every_server_of_a_launch_warms_up_before_its_first_window(tmp_path: Path) -> None:
    """A warm-up per server and point, not per arm: a copy measured cold would look like a slower start."""
    runner = _with_kv(_runner(tmp_path, starts=6, starts_at_once=2, windows=1, concurrency=[1, 2], warmup=1))
    backend = runner.backend
    assert isinstance(backend, ModelBackend)
    warmed: list[tuple[Any, str, str]] = []  # (the server's slot, kept alive here so ids stay unique; log; point)
    real_warm = backend.warm

    def warm(handle: Any, point: str) -> None:
        warmed.append((handle, str(handle.server.log_path), point))
        real_warm(handle, point)

    backend.warm = warm  # type: ignore[method-assign]
    res = runner.run()
    assert res.status == "complete", res.errors
    # once per server and point, no more: counted per server, since a start the screen ran again or a launch
    # set aside and made again (both happen on a loaded machine: a 32-core GPU machine under 12 xdist workers,
    # 2026-11-28) has servers of its own, whose logs take the same names
    per_server = Counter((id(h), p) for h, _, p in warmed)
    assert set(per_server.values()) == {1}, res.notes
    logs = {log for _, log, _ in warmed}
    assert len(logs) == 12 and {Path(log).name for log in logs} == {f"server_start{s}.log" for s in range(1, 7)}
    assert {(log, p) for _, log, p in warmed} == {(log, p) for log in logs for p in ("c1", "c2")}
    servers = {id(h) for h, _, _ in warmed}
    assert len(servers) == 12 or any(" re-run" in n for n in res.notes), res.notes  # 6 starts x 2 arms, + made again


def test_an_undecided_campaign_adds_a_launch_of_the_starts_left(tmp_path: Path) -> None:
    assert launches(1, 6, 4) == [1, 2, 3, 4] and launches(5, 6, 4) == [5, 6] and launches(3, 3, 2) == [3]
    # the stand-in's arms are alike: a 30 % threshold cannot be passed, and 5 starts rarely fail it
    res = _with_kv(_runner(tmp_path, starts=5, starts_at_once=2, max_starts=6, windows=1, concurrency=[1],
                           min_uplift="30%")).run()
    assert res.status == "complete", res.errors
    made = [s["starts"] for s in _starts(res.run_dir) if s["attempt"] == 1 and len(s["starts"]) > 1 or
            s["starts"] == [5]]
    assert made[:3] == [[1, 2], [3, 4], [5]]  # the planned 5 starts: two launches of 2, then the one left
    added = [n for n in res.notes if n.startswith("uplift inconclusive at 5 start(s)")]
    if added:  # decided (failed) at 5 starts is possible on a loaded box; then nothing is added
        assert added == ["uplift inconclusive at 5 start(s): adding start 6"]  # max_starts leaves one
        assert [6] in [s["starts"] for s in _starts(res.run_dir)]  # (a screened start's re-run may follow it)


def test_a_server_dying_sets_the_whole_launch_aside_and_makes_it_again(tmp_path: Path) -> None:
    """p2p_on's first server dies at its 4th completion: both starts of the launch went down with it."""
    env = {"PYTEST_P2P_STANDIN_FAULT": "die-after=4", "FAULT_ONCE_MARKER": str(tmp_path / "fault-once")}
    runner = _with_kv(_runner(tmp_path, env, starts=6, starts_at_once=2, windows=2, concurrency=[1]))
    runner.progress = Progress("gpu0-gpu1", total=24)
    res = runner.run()
    assert res.status == "complete", res.errors
    assert any(n.startswith("starts 1-2 attempt 1 set aside and re-run") for n in res.notes), res.notes
    # the line counts what the failed attempt had measured once more, and nothing it had not: it ends with the last
    # window measured (kept or set aside)
    measured = len(list(res.run_dir.glob("scenarios/*/run_*.json")))
    assert runner.progress.total == runner.progress.done == measured, (runner.progress.total, measured, res.notes)
    assert measured > 24  # the failed attempt had measured windows before its server died
    assert {a.rep for a in res.set_aside if a.kind == "failed"} <= {1, 2, 3, 4}
    alone = {int(n.split()[1]) for n in res.notes if n.startswith("start ") and " screened and re-run" in n}
    for arm in ("p2p_on", "p2p_off"):
        reps = _reps(res.run_dir, arm, "c1")
        assert sorted(reps) == list(range(1, 13))
        # starts 1-2: the fresh launch (a start the screen re-ran alone on this loaded box counts its own attempts;
        # with both re-run alone, as seen in CI under the README's main job, none of the launch's windows is left)
        assert {d["meta"]["attempt"] for k, d in reps.items() if k <= 4 and d["meta"]["start"] not in alone} == (
            {2} if {1, 2} - alone else set())


@pytest.mark.parametrize(("campaign", "message"), [
    ({"starts": 3, "starts_at_once": 4}, r"campaign\.starts_at_once: starts_at_once \(4\) makes the 3 starts in 1 "),
    ({"starts": 8, "starts_at_once": 4}, r"in 2 launch\(es\), at least 3 are needed.*at most 2 for 8 starts"),
    ({"residency": "sleep", "starts_at_once": 2}, r"campaign\.starts_at_once: .*needs residency resident or auto"),
    ({"residency": "restart", "starts_at_once": 2}, r"campaign\.starts_at_once: .*got residency restart"),
    ({"starts_at_once": 0}, r"campaign\.starts_at_once"),
    ({"starts_at_once": 17}, r"campaign\.starts_at_once"),
])
def test_a_bad_starts_at_once_is_a_config_error_naming_the_key(campaign: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_campaign(campaign, "rig.yaml")


def test_p2p_reps_below_starts_at_once_makes_fewer_at_once_and_keeps_three_launches() -> None:
    cfg = parse_campaign({"starts": 9, "starts_at_once": 3}, "r.yaml")
    assert [(c.starts, c.starts_at_once) for c in (cfg.with_overrides(reps=n) for n in (2, 6, 9, 12))] == [
        (2, 1), (6, 2), (9, 3), (12, 3)]


def test_the_plan_counts_a_launch_once_and_says_how_many_servers_share_the_pair(tmp_path: Path) -> None:
    config = parse_campaign({**BASE, "starts": 6, "starts_at_once": 2, "windows": 2, "window_s": 8}, "rig.yaml")
    server = parse_server({"command": ["vllm", "serve"], "model": "m", "args": KV}, "rig.yaml")
    runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                            results_root=tmp_path, rig_name="r", lease=GpuLease(tmp_path / "locks"))
    line = plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]
    assert "GPU memory split among 4 servers: 2 starts at once" in line, line
    # three launches of 4 servers, ~120 s + 2 x 7 s each, and 6 starts x 2 points x 2 arms x (2 windows of 8 s x
    # 1.3 + a 2 s warm-up)
    assert "expected 16 min" in line and "(12 server starts of ~120 s" in line, line
    assert "3 launches of ~134 s" in line, line
    one_by_one = parse_campaign({**BASE, "starts": 6, "windows": 2, "window_s": 8}, "rig.yaml")
    runner.config = one_by_one
    assert "expected 21 min" in plan_line(runner, ["c16", "c64"]), plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]



def test_the_plan_says_what_the_store_held_of_earlier_nights_where_nothing_is_borrowed(tmp_path: Path) -> None:
    """A night that decides on its own starts says why before it starts: how many earlier nights of its design the
    store held for this pair, against what a borrowed spread needs (3 nights, 4 df)."""
    config = parse_campaign({**BASE, "starts": 2, "windows": 5, "window_s": 8}, "rig.yaml")
    server = parse_server({"command": ["vllm", "serve"], "model": "m", "args": KV}, "rig.yaml")
    runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                            results_root=tmp_path, rig_name="r", lease=GpuLease(tmp_path / "locks"))
    assert "earlier nights" not in plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]  # no store read
    runner.prior_history = {"c16": SpreadSeen(1, 2), "c64": SpreadSeen(1, 2)}
    assert plan_line(runner, ["c16", "c64"]).endswith(  # type: ignore[arg-type]
        "; earlier nights of this design on this pair (same rig file, driver and GPU models): 1 earlier night "
        "(2 df) at every point; no start spread is borrowed before 3 nights and 4 df")
    runner.prior_history = {"c16": SpreadSeen(0, 0), "c64": SpreadSeen(2, 3)}
    assert "GPU models): c16 none, c64 2 earlier nights (3 df); no start" in plan_line(  # type: ignore[arg-type]
        runner, ["c16", "c64"])


def test_the_plan_is_sized_with_the_spreads_earlier_nights_measured_on_this_pair(tmp_path: Path) -> None:
    """One night of this design in the store knows this rig better than figures from another GPU model: the
    H200 night of 2026-11-27 (c16: start sd 1.3 %, window pair 2.4 %; c64: 0.0 %, 1.6 %) sizes the next."""
    config = parse_campaign({**BASE, "starts": 3, "windows": 5, "window_s": 8}, "rig.yaml")
    server = parse_server({"command": ["vllm", "serve"], "model": "m", "args": KV}, "rig.yaml")
    runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                            results_root=tmp_path, rig_name="r", lease=GpuLease(tmp_path / "locks"))
    assumed = plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]
    assert "starts by 1.0 % (H100 figures)" in assumed
    runner.prior_history = {"c16": SpreadSeen(1, 2, 5, 0.013, 0.024), "c64": SpreadSeen(1, 2, 5, 0.0, 0.016)}
    line = plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]
    # the point whose start mean varies most sizes the plan: c16 here
    assert "if window pairs vary by 2.4 % and starts by 1.3 % (measured on 1 earlier night here)" in line, line
    assert _half(line) > _half(assumed)  # a wider start spread than assumed: a wider interval expected
    # a point the nights did not measure, or another design's windows: the assumed figures again
    for partial in ({"c16": SpreadSeen(1, 2, 5, 0.013, 0.024)},
                    {"c16": SpreadSeen(1, 2, 4, 0.013, 0.024), "c64": SpreadSeen(1, 2, 4, 0.0, 0.016)}):
        runner.prior_history = partial
        assert "(H100 figures)" in plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]


def test_the_plan_states_the_level_the_verdict_will_use_at_the_planned_starts(tmp_path: Path) -> None:
    """With starts to add while undecided, the first look spends 8/10 of the point's alpha: the committed 7B rig's
    verdict is a 99.2 % interval, and the plan said 99 % (fifteenth night, 2x H200: "~2.7 %", 2.6 % came)."""
    server = parse_server({"command": ["vllm", "serve"], "model": "m", "args": KV}, "rig.yaml")
    halves = {}
    for max_starts in (None, 10):
        config = parse_campaign({**BASE, "starts": 8, "windows": 2, "window_s": 6.5, "concurrency": [16, 64],
                                 "max_starts": max_starts}, "rig.yaml")
        runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                                backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                                results_root=tmp_path, rig_name="r", lease=GpuLease(tmp_path / "locks"))
        line = plan_line(runner, ["c16", "c64"])  # type: ignore[arg-type]
        level = "99.2 %" if max_starts else "99 %"
        assert f"; expected {level} CI half-width ~" in line, line
        halves[max_starts] = _half(line)
    assert halves[10] > halves[None]  # the smaller first-look alpha: a wider interval expected


def _half(line: str) -> float:
    return float(line.split("CI half-width ~")[1].split(" %")[0])

TIGHT_AT_ONCE = r"""
import os, sys
share = float(sys.argv[sys.argv.index("--gpu-memory-utilization") + 1])
if share < 0.3:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (SIMULATED)", flush=True)
    sys.exit(1)
os.execv(sys.executable, [sys.executable, "-m", "pytest_p2p.serve.standin", *sys.argv[1:]])
"""


def test_too_many_at_once_fails_saying_fewer_at_once_and_does_not_go_to_sleep_mode(tmp_path: Path) -> None:
    wrapper = tmp_path / "tight.py"
    wrapper.write_text(TIGHT_AT_ONCE)
    server = parse_server({"command": [sys.executable, str(wrapper)], "model": "m",
                           "args": {"tensor-parallel-size": 2, **KV},
                           "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": "1"},
                           "startup_timeout_s": 60, "load": {"input_len": 8, "output_len": 4, "warmup": 0}},
                          "resident-rig.yaml")
    config = parse_campaign({**BASE, "starts": 6, "starts_at_once": 2, "concurrency": [1], "residency": "auto"},
                            "resident-rig.yaml")
    res = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                         backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                         results_root=tmp_path / "results", rig_name="resident", simulated=True,
                         lease=GpuLease(tmp_path / "locks")).run()
    assert res.status == "failed", res.notes
    assert any("out of GPU memory" in e and "campaign.starts_at_once 2: fewer servers at once" in e
               for e in res.errors), res.errors
    assert not any(n.startswith("residency auto") for n in res.notes)
    run = json.loads((res.run_dir / "run.json").read_text())
    assert run["status"] == "failed"


def test_the_servers_of_a_launch_are_stopped_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight vLLM servers stopped one after the other took 40 s between two launches (2x H200): every server's
    teardown must be under way before any has finished. A barrier that all must reach proves it; stopped one
    after the other, the first would wait at it alone until its timeout."""
    import threading

    from test_parallel_start import _standin

    from pytest_p2p.serve import server as server_mod

    n = 3
    barrier = threading.Barrier(n, timeout=60)
    real = server_mod.teardown

    def teardown(srv: Any, *, check_gpus: bool = True) -> None:
        barrier.wait()  # BrokenBarrierError after 60 s if the teardowns ran one at a time
        real(srv, check_gpus=check_gpus)

    monkeypatch.setattr(server_mod, "teardown", teardown)
    logs = [tmp_path / f"s{i}.log" for i in range(n)]
    with server_mod.launch_all(_standin(tmp_path), [PRESETS["p2p_on"]] * n, (0, 1), {}, logs) as servers:
        pids = [s.pid for s in servers]
    assert not barrier.broken
    for log in logs:
        assert re.search(r"teardown of arm p2p_on: exit code -?\d+, leftover pids none", log.read_text())
    from test_campaign_faults import _alive

    assert not [p for p in pids if _alive(p)]
