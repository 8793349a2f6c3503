"""``server.cpus: auto``: each server of a launch on whole cores of its own, its children and threads included.

Why: on 2x H200 (7B, TP=2, c64) a vLLM server's engine core is CPU-bound and two starts of one server differed by
several per cent while windows of one start agreed to 1-2 %; placement is what a start draws afresh.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.errors import ConfigError
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.cores import cpu_list, l3_domains, parse_cpu_list, physical_cores, server_blocks

STANDIN = [sys.executable, "-m", "pytest_p2p.serve.standin"]


def _sysfs(tmp_path: Path, n_cpus: int, smt: bool, l3: int | None) -> Path:
    """A fake ``/sys/devices/system/cpu``: ``n_cpus`` threads, siblings ``k`` and ``k + n/2`` where ``smt``, and
    last-level caches of ``l3`` cores each (``None``: the kernel says nothing about them)."""
    cores = n_cpus // 2 if smt else n_cpus
    for cpu in range(n_cpus):
        core = cpu % cores
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        topo.joinpath("thread_siblings_list").write_text(f"{core},{core + cores}\n" if smt else f"{cpu}\n")
        if l3 is not None:
            lo = core // l3 * l3
            cache = tmp_path / f"cpu{cpu}" / "cache" / "index3"
            cache.mkdir(parents=True)
            members = [c for c in range(lo, min(lo + l3, cores))]
            cache.joinpath("shared_cpu_list").write_text(
                cpu_list(members + ([c + cores for c in members] if smt else [])) + "\n")
    return tmp_path


@pytest.mark.parametrize(("n_cpus", "smt", "l3", "n", "want"), [
    # 32 threads of 16 cores in two caches of 8: each server gets 5 whole cores (10 threads) inside one cache
    (32, True, 8, 2, [[0, 1, 2, 3, 4, 16, 17, 18, 19, 20], [8, 9, 10, 11, 12, 24, 25, 26, 27, 28]]),
    # no cache information: the next free cores, in order
    (32, False, None, 2, [list(range(0, 10)), list(range(10, 20))]),
    # caches of 4 cores, blocks of 5: no cache has room, so across the next free cores
    (16, False, 4, 2, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]),
    (2, False, None, 1, [[0]]),
    (2, False, None, 2, []),  # 2 cores cannot give two servers and the load generator one each
])
def test_server_blocks_are_whole_cores_of_their_own_inside_one_cache_where_one_has_room(
        tmp_path: Path, n_cpus: int, smt: bool, l3: int | None, n: int, want: list[list[int]]) -> None:
    sysfs = _sysfs(tmp_path, n_cpus, smt, l3)
    blocks = server_blocks(n, range(n_cpus), sysfs)
    assert blocks == want
    taken = [c for b in blocks for c in b]
    assert len(taken) == len(set(taken)) and len(taken) < n_cpus  # none shared, some left for the load generator
    for block in blocks:  # whole cores: a thread's sibling is in the same block
        assert all(set(core) <= set(block) for core in physical_cores(range(n_cpus), sysfs) if set(core) & set(block))


def test_the_caches_are_read_from_the_kernel_s_lists(tmp_path: Path) -> None:
    sysfs = _sysfs(tmp_path, 16, False, 4)
    assert [[c[0] for c in d] for d in l3_domains(physical_cores(range(16), sysfs), sysfs)] == \
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


@settings(deadline=None, max_examples=200)
@given(st.sets(st.integers(0, 300), max_size=60))
def test_cpu_list_is_what_the_kernel_writes_and_reads_back(cpus: set[int]) -> None:
    text = cpu_list(cpus)
    assert (parse_cpu_list(text) if text else set()) == cpus
    assert "--" not in text and not text.startswith(",")


def test_a_wrong_cpus_value_names_the_key_and_the_file() -> None:
    with pytest.raises(ConfigError) as err:
        parse_server({"command": ["vllm", "serve"], "model": "m", "cpus": "pinned"}, "rigs/h200.yaml")
    assert "server.cpus" in str(err.value) and "rigs/h200.yaml" in str(err.value) and "'pinned'" in str(err.value)
    assert parse_server({"model": "m"}, "rig.yaml").cpus == "none"
    assert "cpus" not in parse_server({"model": "m"}, "rig.yaml").to_dict()  # run records before the key stay


def _affinity(pid: int) -> set[int]:
    return os.sched_getaffinity(pid)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _wait_for(cond: object, timeout: float = 30.0) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_pinned_server_s_engine_core_runs_on_its_block_too(tmp_path: Path) -> None:
    """The real process tree: the stand-in's API server is pinned right after its exec, and the engine core it
    starts later inherits the block (vLLM's engine core and workers are children of its API server)."""
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.server import launch

    one = min(os.sched_getaffinity(0))
    config = parse_server({"command": STANDIN, "model": "m", "flags": ["engine-child"], "startup_timeout_s": 60,
                           "cpus": "auto"}, "rig.yaml")
    with launch(config, PRESETS["p2p_on"], (0, 1), None, tmp_path / "server.log", cpus=(one,)) as srv:
        assert srv.cpus == (one,)
        _wait_for(lambda: _children(srv.pid))
        assert _affinity(srv.pid) == {one}
        assert [_affinity(c) for c in _children(srv.pid)] == [{one}]
    cpus = set(os.sched_getaffinity(0))
    with launch(config, PRESETS["p2p_on"], (0, 1), None, tmp_path / "alone.log") as srv:  # one server: block 1 of 1
        want = set(server_blocks(1, cpus)[0]) if len(physical_cores(cpus)) >= 2 else cpus
        assert _affinity(srv.pid) == want
        assert srv.cpus == (tuple(sorted(want)) if len(physical_cores(cpus)) >= 2 else ())


def test_a_server_started_ahead_runs_anywhere_while_held_and_on_its_block_once_continued(tmp_path: Path) -> None:
    """Its block is the one the launch before it runs on: held, its imports must not compete with that launch's
    engine core. Pinned at the continue, every thread of it, before its GPU work."""
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.server import continue_all, drop_ahead, spawn_ahead

    cpus = set(os.sched_getaffinity(0))
    config = parse_server({"command": STANDIN, "model": "m", "flags": ["engine-child"], "startup_timeout_s": 60,
                           "cpus": "auto", "env": {"PYTEST_P2P_STANDIN_STARTUP_DELAY_S": "2"}}, "rig.yaml")
    held = spawn_ahead(config, [PRESETS["p2p_on"]], (0, 1), None, [tmp_path / "ahead.log"])
    continued = False
    try:
        _wait_for(lambda: held[0].held_at is not None)
        assert _affinity(held[0].server.pid) == cpus and held[0].server.cpus == ()
        assert held[0].cpus == (tuple(server_blocks(1, cpus)[0]) if len(physical_cores(cpus)) >= 2 else ())
        one = min(cpus)
        held[0].cpus = (one,)  # one CPU: a block this box surely has, whatever its size
        continued = True
        with continue_all(held) as servers:
            srv = servers[0]
            assert srv.cpus == (one,)
            tids = [int(t) for t in os.listdir(f"/proc/{srv.pid}/task")]
            assert tids and all(_affinity(t) == {one} for t in tids)
            _wait_for(lambda: _children(srv.pid))
            assert [_affinity(c) for c in _children(srv.pid)] == [{one}]
    finally:
        if not continued:
            drop_ahead(held)


def test_xdist_workers_take_disjoint_shares_of_whole_cores(tmp_path: Path) -> None:
    """Under xdist each worker runs its own pairs' servers; its blocks are cut from its own share, so two workers'
    servers never get the same cores."""
    from pytest_p2p.serve.cores import worker_share

    sysfs = _sysfs(tmp_path, 32, True, None)  # 16 cores, two threads each
    shares = [worker_share(k, 3, range(32), sysfs) for k in range(3)]
    assert [len(s) for s in shares] == [10, 10, 12]  # 5, 5 and 6 cores: the remainder to the last
    assert sorted(c for s in shares for c in s) == list(range(32))
    assert shares[0] == [0, 1, 2, 3, 4, 16, 17, 18, 19, 20]
    assert worker_share(0, 1, range(32), sysfs) == list(range(32))
    assert worker_share(0, 40, range(32), sysfs) == list(range(32))  # more shares than cores: no split


def test_only_a_worker_of_several_keeps_to_a_share() -> None:
    from types import SimpleNamespace

    from pytest_p2p.plugin.session import worker_cpus
    from pytest_p2p.serve.cores import worker_share

    cpus = os.sched_getaffinity(0)
    two = SimpleNamespace(workerinput={"workerid": "gw1", "workercount": 2})
    assert worker_cpus(two) == worker_share(1, 2, cpus)  # type: ignore[arg-type]
    assert worker_cpus(SimpleNamespace(workerinput={"workerid": "gw0", "workercount": 1})) is None  # type: ignore[arg-type]
    assert worker_cpus(SimpleNamespace()) is None  # type: ignore[arg-type]  # the controller, or no xdist
