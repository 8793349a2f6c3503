"""Client processes stay off each other's sibling threads; the server and clients split whole cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_p2p.serve.cores import client_cpus, parse_cpu_list, physical_cores, split_cores


def _sysfs(tmp_path: Path, siblings: dict[int, str]) -> Path:
    for cpu, text in siblings.items():
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(text + "\n")
    return tmp_path


def _smt(tmp_path: Path, n: int) -> Path:
    """n CPUs, CPU k and k + n/2 two threads of one core (a common cloud layout)."""
    half = n // 2
    return _sysfs(tmp_path, {c: f"{c % half},{c % half + half}" for c in range(n)})


@pytest.mark.parametrize(("text", "cpus"), [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}),
                                            ("0,8\n", {0, 8}), ("", set())])
def test_cpu_lists_are_read_as_the_kernel_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["a", "3-1", "1-x", "-2"])
def test_a_bad_cpu_list_names_the_part(text: str) -> None:
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list(text)


def test_siblings_are_grouped_and_a_foreign_sibling_left_out(tmp_path: Path) -> None:
    sysfs = _smt(tmp_path, 16)
    assert physical_cores(range(16), sysfs)[:2] == [(0, 8), (1, 9)]
    assert physical_cores([3, 11, 5], sysfs) == [(3, 11), (5,)]


def test_without_topology_every_cpu_is_its_own_core(tmp_path: Path) -> None:
    assert physical_cores([2, 0, 1], tmp_path / "missing") == [(0,), (1,), (2,)]
    bad = _sysfs(tmp_path, {0: "zero"})
    assert physical_cores([0, 1], bad) == [(0,), (1,)]


def test_client_processes_take_one_thread_of_each_core_before_any_sibling(tmp_path: Path) -> None:
    sysfs = _smt(tmp_path, 16)
    # the old rule (the highest CPUs) put 4 clients on 15, 14, 13, 12: siblings of 7, 6, 5, 4
    assert client_cpus(4, range(16), sysfs) == [7, 6, 5, 4]
    picked = client_cpus(8, range(16), sysfs)
    assert len({c % 8 for c in picked}) == 8  # eight physical cores, none twice
    assert client_cpus(10, range(16), sysfs)[8:] == [15, 14]  # only then the second threads
    assert client_cpus(3, [4, 5, 12, 13], sysfs) == [5, 4, 13]


def test_without_smt_the_highest_cpus_are_used(tmp_path: Path) -> None:
    sysfs = _sysfs(tmp_path, {c: str(c) for c in range(8)})
    assert client_cpus(3, range(8), sysfs) == [7, 6, 5]
    assert client_cpus(2, [], sysfs) == []


def test_server_and_clients_split_whole_cores(tmp_path: Path) -> None:
    sysfs = _smt(tmp_path, 16)
    server, clients = split_cores(range(16), sysfs)
    assert server == [0, 1, 2, 3, 8, 9, 10, 11]
    assert clients == [4, 5, 6, 7, 12, 13, 14, 15]
    assert not {c % 8 for c in server} & {c % 8 for c in clients}
    assert split_cores([0, 8], sysfs) == ([0, 8], [0, 8])  # one core: nothing to split


def test_this_machines_topology_covers_every_cpu_once() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    groups = physical_cores(cpus)
    assert sorted(c for g in groups for c in g) == cpus
    assert sorted(client_cpus(len(cpus), cpus)) == cpus
