"""Both arms' resident servers started at once (issue 24, item 1: cheaper starts).

Through the real path: ``serve.server.launch_all`` starts the SIMULATED stand-in exactly as it would vLLM.
A parallel start needs ``--kv-cache-memory-bytes`` (two vLLMs profiling their KV cache on one pair at once
get it wrong), so with ``start_mode: auto`` start 1 runs sequentially and the campaign learns the size from
its logs, unless the rig sets it.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_campaign_faults import _alive
from test_campaign_resident import BASE, _reps, _runner

from pytest_p2p import signals
from pytest_p2p.campaign.backends import ModelBackend
from pytest_p2p.campaign.blocks import _start_estimate, plan_line
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.progress import Progress
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.errors import ConfigError
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve import server as server_mod
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.logs import GIB, kv_cache_gib
from pytest_p2p.serve.running import GpuUse

ROOT = Path(__file__).resolve().parents[1]
KV_FLAG = re.compile(r"--kv-cache-memory-bytes (\d+)")


def _starts(run_dir: Path) -> list[dict[str, Any]]:
    starts = json.loads((run_dir / "run.json").read_text())["server_starts"]
    assert isinstance(starts, list)
    return starts


def _overlap(rec: dict[str, Any]) -> bool:
    """Every server was spawned before any of them was ready: their start intervals overlap."""
    servers = rec["servers"].values()
    return bool(max(s["spawned_s"] for s in servers) < min(s["ready_s"] for s in servers))


def _launch_lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("# pytest-p2p: launching arm")]


def test_auto_starts_sequentially_once_then_in_parallel_with_the_learned_kv_size(tmp_path: Path) -> None:
    res = _runner(tmp_path, starts=3, windows=1, concurrency=[1]).run()
    assert res.status == "complete", res.errors
    starts = _starts(res.run_dir)  # every attempt; on a loaded box the screen may re-run a start (in parallel)
    assert sorted({s["start"] for s in starts}) == [1, 2, 3] and starts[0]["start"] == 1
    assert starts[0]["start_mode"] == "sequential" and all(s["start_mode"] == "parallel" for s in starts[1:])
    first = starts[0]["servers"]
    assert first["p2p_off"]["spawned_s"] >= first["p2p_on"]["ready_s"]  # one after the other
    assert not _overlap(starts[0]) and all(_overlap(s) for s in starts[1:])
    # only start 1's servers sized their caches by profiling; the learned size is 95 % of the smallest figure,
    # over arms and ranks, and every later server of either arm got exactly that size
    logs = sorted(res.run_dir.glob("scenarios/*-c1/server_start*.log"))
    profiled = [p for p in logs if kv_cache_gib(p.read_text())]
    assert sorted(p.parent.name for p in profiled) == ["p2p_off-c1", "p2p_on-c1"]
    assert all(p.name.startswith("server_start1.") for p in profiled)
    gib = [g for p in profiled for g in kv_cache_gib(p.read_text())]
    assert len(gib) == 4  # two arms x two ranks (TP=2)
    learned = math.floor(min(gib) * GIB * 0.95)
    assert starts[0]["kv_learned_bytes"] == learned
    assert all(not KV_FLAG.search(ln) for p in profiled for ln in _launch_lines(p))
    later = [p for p in logs if p not in profiled]
    assert len(later) >= 4
    for p in later:
        (line,) = _launch_lines(p)
        got = KV_FLAG.search(line)
        assert got is not None and int(got.group(1)) == learned, (p, line)
    for rec in starts[1:]:
        assert rec["kv_cache_memory_bytes"] == learned and str(rec["kv_source"]).startswith("learned")
    assert any(n.startswith("start 2: parallel start") for n in res.notes), res.notes
    last = {s["start"]: s for s in starts}  # the attempt each start's kept windows ran on
    for k, d in _reps(res.run_dir, "p2p_on", "c1").items():
        assert d["meta"]["start_mode"] == last[k]["start_mode"]
        assert d["meta"]["kv_cache_memory_bytes"] == last[k]["kv_cache_memory_bytes"] and d["meta"]["start_s"] > 0


def test_a_rig_kv_size_starts_in_parallel_from_the_first_start(tmp_path: Path) -> None:
    runner = _runner(tmp_path, starts=2, windows=1, concurrency=[1])
    assert isinstance(runner.backend, ModelBackend)
    server = runner.backend.server
    runner.backend.server = parse_server({"command": list(server.command), "model": server.model,
                                          "args": {**server.args, "kv-cache-memory-bytes": 1 << 30},
                                          "env": dict(server.env), "startup_timeout_s": 60,
                                          "load": {"input_len": 8, "output_len": 4, "warmup": 0}}, "rig.yaml")
    res = runner.run()
    assert res.status == "complete", res.errors
    starts = _starts(res.run_dir)
    assert len(starts) >= 2 and {s["start_mode"] for s in starts} == {"parallel"}  # from start 1 on
    assert all(_overlap(s) for s in starts)
    assert {s["kv_source"] for s in starts} == {"rig (server.args.kv-cache-memory-bytes)"}
    log = res.run_dir / "scenarios" / "p2p_off-c1" / "server_start1.log"
    assert "--kv-cache-memory-bytes 1073741824" in _launch_lines(log)[0]
    assert not kv_cache_gib(log.read_text())  # no server profiled its KV cache


# p2p_on's second server (start 2) dies while starting; p2p_off's takes a minute to come up, so only a
# teardown at once (not after it got ready) ends it before "Application startup complete"
FLAKY = r"""
import os, sys, time
arm = "p2p_off" if os.environ.get("NCCL_P2P_DISABLE") == "1" else "p2p_on"
count = os.environ["LAUNCHES"] + "." + arm
n = len(open(count).read()) if os.path.exists(count) else 0
open(count, "a").write("x")
with open(os.environ["PIDS_FILE"], "a") as fh:
    fh.write(f"{os.getpid()}\n")
if n == 1 and arm == "p2p_on":
    time.sleep(0.5)
    print("RuntimeError: NCCL error: unhandled system error (SIMULATED, parallel start)", flush=True)
    sys.exit(1)
if n == 1:
    os.environ["PYTEST_P2P_STANDIN_STARTUP_DELAY_S"] = "60"
os.execv(sys.executable, [sys.executable, "-m", "pytest_p2p.serve.standin", *sys.argv[1:]])
"""


def test_a_server_dying_in_a_parallel_start_tears_down_the_other_and_the_start_is_run_again(tmp_path: Path) -> None:
    wrapper = tmp_path / "flaky.py"
    wrapper.write_text(FLAKY)
    pids = tmp_path / "pids"
    server = parse_server({"command": [sys.executable, str(wrapper)], "model": "m", "args": {"tensor-parallel-size": 2},
                           "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": "1",
                                   "LAUNCHES": str(tmp_path / "launches"), "PIDS_FILE": str(pids)},
                           "startup_timeout_s": 120, "load": {"input_len": 8, "output_len": 4, "warmup": 0}},
                          "resident-rig.yaml")
    # a start made ahead would meet the dying server before its launch, or at it, as timing has it (the 2x H200
    # suite, 2026-11-27); that path: tests/test_start_ahead.py. Here the parallel start itself.
    config = parse_campaign({**BASE, "starts": 2, "windows": 1, "concurrency": [1], "start_ahead": False},
                            "resident-rig.yaml")
    runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                            results_root=tmp_path / "results", rig_name="resident", simulated=True,
                            lease=GpuLease(tmp_path / "locks"))
    runner.progress = Progress("gpu0-gpu1", total=4)
    res = runner.run()
    assert res.status == "complete", res.errors
    # the failed attempt measured nothing, so the retry adds nothing to the line: it ends with the last window
    # (until 2026-11-28 a retry added its whole launch, and the line stopped short of its end)
    measured = len(list(res.run_dir.glob("scenarios/*/run_*.json")))
    assert runner.progress.total == runner.progress.done == measured, (runner.progress.total, res.notes)
    note = next(n for n in res.notes if n.startswith("start 2 attempt 1 set aside and re-run"))
    assert "server for arm p2p_on on gpu0-gpu1 exited with code 1 before it was ready" in note, note
    assert [(s["start"], s["attempt"], s["start_mode"]) for s in _starts(res.run_dir)][:2] == [
        (1, 1, "sequential"), (2, 2, "parallel")]  # a start the screen re-runs on a loaded box would follow
    failed = res.run_dir / "scenarios" / "p2p_off-c1" / "server_start2.try1.failed.log"
    text = failed.read_text()
    assert "teardown of arm p2p_off" in text and "Application startup complete" not in text
    assert any(a.kind == "failed" and a.rep == 2 for a in res.set_aside)
    assert sorted(_reps(res.run_dir, "p2p_off", "c1")) == [1, 2]
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) >= 6 and not [p for p in started if _alive(p)]  # nothing left running


def test_sleep_residency_starts_one_after_the_other_and_parallel_with_it_is_a_config_error(tmp_path: Path) -> None:
    for residency in ("sleep", "restart"):
        with pytest.raises(ConfigError, match=r"campaign\.start_mode: start_mode parallel needs residency"):
            parse_campaign({"residency": residency, "start_mode": "parallel"}, "rig.yaml")
    assert parse_campaign({"residency": "auto", "start_mode": "parallel"}, "rig.yaml").start_mode == "parallel"
    res = _runner(tmp_path, residency="sleep", starts=2, windows=1, concurrency=[1]).run()
    assert res.status == "complete", res.errors
    assert len(_starts(res.run_dir)) >= 2 and {s["start_mode"] for s in _starts(res.run_dir)} == {"sequential"}


@pytest.mark.parametrize(("campaign", "kv", "costs", "text"), [
    ({}, None, (240.0, 120.0), "in parallel after start 1"),
    ({}, 1 << 30, (120.0, 120.0), "every start's servers in parallel"),
    ({"start_mode": "sequential"}, 1 << 30, (240.0, 240.0), "one after the other"),
    ({"residency": "sleep"}, None, (240.0, 240.0), "one after the other"),
])
def test_the_plan_counts_a_parallel_start_once_and_says_how_starts_launch(
        tmp_path: Path, campaign: dict[str, Any], kv: int | None, costs: tuple[float, float], text: str) -> None:
    config = parse_campaign({**BASE, "starts": 3, **campaign}, "rig.yaml")
    server = parse_server({"command": ["vllm", "serve"], "model": "m",
                           "args": {} if kv is None else {"kv_cache_memory_bytes": kv}}, "rig.yaml")
    runner = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={}),
                            results_root=tmp_path, rig_name="r", lease=GpuLease(tmp_path / "locks"))
    assert (_start_estimate(runner, 1), _start_estimate(runner, 2)) == costs  # type: ignore[arg-type]
    assert text in plan_line(runner, ["c1", "c2"])  # type: ignore[arg-type]


def test_the_kv_cache_figures_are_read_from_vllm_logs() -> None:
    real = ROOT / "fixtures" / "logs" / "vllm-0.24.0-h200x2" / "serve_tp2_p2p_off_disable_custom_ar.log"
    assert kv_cache_gib(real.read_text(encoding="utf-8", errors="replace")) == [41.22]
    text = ("(Worker_TP0 pid=1834) INFO 11-26 09:20:01 [gpu_worker.py:508] Available KV cache memory: 21.34 GiB\n"
            "\x1b[1;36m(Worker_TP1 pid=1835)\x1b[0;0m INFO 11-26 09:20:01 [gpu_worker.py:508] Available KV cache "
            "memory: 21.3 GiB\n"
            "(Worker_TP1 pid=1835) INFO 11-26 09:20:01 [gpu_worker.py:508] Available KV cache memory: -1.5 GiB\n")
    assert kv_cache_gib(text) == [21.34, 21.3, -1.5]
    skipped = ("(Worker_TP0 pid=9) INFO 11-26 09:20:01 [gpu_worker.py:429] Initial free memory 78.2 GiB, reserved "
               "20.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory "
               "profiling.")
    assert kv_cache_gib(skipped) == []


def _standin(tmp_path: Path, **env: str) -> Any:
    return parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": "m",
                         "args": {"tensor-parallel-size": 2}, "startup_timeout_s": 120,
                         "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", **env}}, "rig.yaml")


def test_servers_started_together_share_one_idle_snapshot_and_are_checked_once_all_are_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pretend NVML: each live server of ours holds 5000 MiB and a compute pid on gpu0. Checked server by
    server, the first one torn down would find its sibling's memory and pid (a false "not released")."""
    snapshots: list[int] = []

    def usage(indices: Sequence[int]) -> list[GpuUse]:
        live = list(server_mod._LIVE)
        snapshots.append(len(live))
        return [GpuUse(0, 100.0 + 5000.0 * len(live), live)]

    monkeypatch.setattr(server_mod, "gpu_usage", usage)
    logs = [tmp_path / "on.log", tmp_path / "off.log"]
    with server_mod.launch_all(_standin(tmp_path), [PRESETS["p2p_on"], PRESETS["p2p_off"]], (0, 1), {},
                               logs) as servers:
        assert [s.arm for s in servers] == ["p2p_on", "p2p_off"] and all(s.alive() for s in servers)
        assert snapshots == [0]  # once, before either server was spawned
        assert servers[0].idle is servers[1].idle
        pids = [s.pid for s in servers]
    assert snapshots[1:] == [0]  # the release check: once, after both were stopped
    assert not [p for p in pids if _alive(p)]
    for log in logs:
        assert "teardown of arm" in log.read_text()


@pytest.fixture
def _ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handling (an xdist worker ignores SIGINT), put back afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    signals.reset()
    yield
    signals.reset()
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("_ctrl_c")
def test_ctrl_c_while_servers_start_together_tears_them_all_down(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers take a minute to come up; Ctrl-C as soon as both are spawned ends the wait and stops both.

    Ctrl-C is pressed again while no teardown has begun: Python raises KeyboardInterrupt in whatever runs in
    the main thread, and one that lands in a gc callback is swallowed ("Exception ignored in ... gc_callback":
    hypothesis installs one, seen on a 1x H200 with 16 workers, 2026-11-27), as a user's first Ctrl-C can be.
    """
    spawned, tearing_down = threading.Event(), threading.Event()
    real_spawn, real_teardown_all = server_mod.spawn, server_mod.teardown_all
    started: list[int] = []

    def spawn(*args: Any, **kwargs: Any) -> Any:
        srv = real_spawn(*args, **kwargs)
        started.append(srv.pid)
        if len(started) == 2:
            spawned.set()
        return srv

    def teardown_all(servers: list[Any]) -> None:
        tearing_down.set()
        real_teardown_all(servers)

    def interrupt() -> None:
        spawned.wait(60)
        for _ in range(10):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            if tearing_down.wait(5):
                return

    monkeypatch.setattr(server_mod, "spawn", spawn)
    monkeypatch.setattr(server_mod, "teardown_all", teardown_all)
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt), \
            server_mod.launch_all(_standin(tmp_path, PYTEST_P2P_STANDIN_STARTUP_DELAY_S="60"),
                                  [PRESETS["p2p_on"], PRESETS["p2p_off"]], (0, 1), {},
                                  [tmp_path / "on.log", tmp_path / "off.log"]):
        pytest.fail("the servers cannot be ready: they start in 60 s")
    assert len(started) == 2
    for log in (tmp_path / "on.log", tmp_path / "off.log"):
        text = log.read_text()
        assert "teardown of arm" in text and "Application startup complete" not in text
    assert not server_mod._LIVE and not [p for p in started if _alive(p)]


def test_servers_started_together_never_share_a_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may offer a port again while the sibling that got it is not yet listening on it."""
    first, second = server_mod.free_port(), server_mod.free_port()
    offered = iter([first, first, second])
    monkeypatch.setattr(server_mod, "free_port", lambda host="127.0.0.1": next(offered))
    with server_mod.launch_all(_standin(tmp_path), [PRESETS["p2p_on"], PRESETS["p2p_off"]], (0, 1), {},
                               [tmp_path / "on.log", tmp_path / "off.log"]) as servers:
        assert [s.port for s in servers] == [first, second]


def _env_key(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in env if v.startswith(b"VLLM_API_KEY="))


def test_a_restarted_server_keeps_its_api_key_so_vllm_keeps_its_compile_cache(tmp_path: Path) -> None:
    """vLLM hashes VLLM_API_KEY into its torch.compile cache key: a new key per start recompiled every start
    (about 20 s of each 7B start on H100, 2026-11-26) and left a cache directory behind each time. The key is
    one per arm and pair; the arms' keys differ, so two servers started together never share a cache directory."""
    keys: dict[str, list[str]] = {"p2p_on": [], "p2p_off": []}
    for start in (1, 2):
        logs = [tmp_path / f"on{start}.log", tmp_path / f"off{start}.log"]
        with server_mod.launch_all(_standin(tmp_path), [PRESETS["p2p_on"], PRESETS["p2p_off"]], (0, 1), {},
                                   logs) as servers:
            for srv in servers:
                assert _env_key(srv.pid) == srv.api_key  # what the server enforces is what it was given
                keys[srv.arm].append(srv.api_key)
    assert keys["p2p_on"][0] == keys["p2p_on"][1] and keys["p2p_off"][0] == keys["p2p_off"][1]
    assert keys["p2p_on"][0] != keys["p2p_off"][0]
    assert server_mod.api_key_for("p2p_on", (2, 3)) != keys["p2p_on"][0]  # another pair: another key


def test_the_api_key_outlives_the_pytest_process_so_each_nights_first_start_loads_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key per pytest process still recompiled each night's first start (156 s against 93-99 s for the later
    starts on 2x H100, 2026-11-26): the key comes from a per-user secret file instead, private (0600 in a 0700
    directory), made once and then only read."""
    key_path = tmp_path / "cache" / "pytest-p2p" / "server-key"
    monkeypatch.setenv(server_mod.KEY_FILE_ENV, str(key_path))
    monkeypatch.setattr(server_mod, "_KEYS", {})
    tonight = {arm: server_mod.api_key_for(arm, (0, 1)) for arm in ("p2p_on", "p2p_off")}
    assert oct(key_path.stat().st_mode & 0o777) == "0o600" and oct(key_path.parent.stat().st_mode & 0o777) == "0o700"
    secret = key_path.read_bytes()
    monkeypatch.setattr(server_mod, "_KEYS", {})  # the next night: a new pytest process
    assert {arm: server_mod.api_key_for(arm, (0, 1)) for arm in tonight} == tonight
    assert key_path.read_bytes() == secret
    assert tonight["p2p_on"] != tonight["p2p_off"] != server_mod.api_key_for("p2p_off", (2, 3))
    assert all(secret.strip().decode() not in key for key in tonight.values())


@pytest.mark.parametrize("problem", ["others-may-read", "too-short", "not-writable"])
def test_an_unusable_key_file_costs_only_the_compile_and_says_which_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: str) -> None:
    key_path = tmp_path / "server-key"
    if problem == "not-writable":
        key_path = tmp_path / "not-a-directory" / "server-key"  # a file where the directory goes (root too)
        key_path.parent.write_text("")
    else:
        key_path.write_text("x" * 64 + "\n" if problem == "others-may-read" else "short\n")
        key_path.chmod(0o644 if problem == "others-may-read" else 0o600)
    monkeypatch.setenv(server_mod.KEY_FILE_ENV, str(key_path))
    monkeypatch.setattr(server_mod, "_KEYS", {})
    with pytest.warns(RuntimeWarning, match=re.escape(str(key_path.parent))) as seen:
        first = server_mod.api_key_for("p2p_on", (0, 1))
        assert server_mod.api_key_for("p2p_on", (0, 1)) == first  # still one key per arm and pair tonight
        server_mod.api_key_for("p2p_off", (0, 1))
    assert len(seen) == 1
    monkeypatch.setattr(server_mod, "_KEYS", {})
    with pytest.warns(RuntimeWarning):
        assert server_mod.api_key_for("p2p_on", (0, 1)) != first  # nothing lasting: a new key each process
    if problem != "not-writable":
        assert key_path.read_text().strip() in ("x" * 64, "short")  # a file we did not make is never rewritten


def test_pytest_processes_racing_to_make_the_secret_agree_on_one(tmp_path: Path) -> None:
    """xdist workers (or two overlapping nights) make the file at once: linked into place whole, first one wins."""
    key_path = tmp_path / "k" / "server-key"
    code = ("import sys; from pathlib import Path; from pytest_p2p.serve import server as s; "
            "print(s._user_secret(Path(sys.argv[1])).decode())")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(key_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    seen = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(seen) == 1 and len(next(iter(seen))) == 64
    assert sorted(x.name for x in key_path.parent.iterdir()) == ["server-key"]  # no temporary file left
