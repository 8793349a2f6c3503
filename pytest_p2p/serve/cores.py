"""Which CPUs share a physical core, so the load generator's client processes can stay off each other's.

Linux numbers hardware threads, not cores: on a machine with SMT, CPU ``k`` and CPU
``k + n/2`` are often two threads of one core, sharing its execution units. Pinning two
busy client processes to siblings halves each; pinning a client next to the server's
engine or API-server thread slows the server, and then the client, not the interconnect,
shapes TPOT (docs/performance.md: the C = 256 case). The kernel says which threads are
siblings in ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``; where it cannot
say (no sysfs, a container that hides it), every CPU is taken as a core of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["SYSFS_CPU", "client_cpus", "parse_cpu_list", "physical_cores", "split_cores"]

SYSFS_CPU = Path("/sys/devices/system/cpu")


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel CPU list such as ``0-3,8,10-11``; ValueError naming the part it cannot read."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"not a CPU list: {text.strip()!r} (part {part!r})") from None
        if first < 0 or last < first:
            raise ValueError(f"not a CPU list: {text.strip()!r} (part {part!r})")
        out.update(range(first, last + 1))
    return out


def physical_cores(cpus: Iterable[int], sysfs: Path = SYSFS_CPU) -> list[tuple[int, ...]]:
    """``cpus`` grouped by physical core (sibling threads together), ordered by their lowest CPU.

    Only the given CPUs appear: a sibling outside them (another cgroup's) is left out of its group.
    """
    mine = sorted(set(cpus))
    seen: set[int] = set()
    groups: list[tuple[int, ...]] = []
    for cpu in mine:
        if cpu in seen:
            continue
        try:
            siblings = parse_cpu_list((sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())
        except (OSError, ValueError):
            siblings = {cpu}
        group = tuple(sorted((siblings | {cpu}) & set(mine) - seen))
        seen.update(group)
        groups.append(group)
    return groups


def client_cpus(n: int, cpus: Sequence[int], sysfs: Path = SYSFS_CPU) -> list[int]:
    """One CPU for each of ``n`` client processes: one thread of each physical core, the highest cores first.

    A second thread of a core is handed out only once every core has one client process,
    so clients share a core only when there are more of them than cores.
    """
    cores = physical_cores(cpus, sysfs)[::-1]
    order = [core[depth] for depth in range(max((len(c) for c in cores), default=0))
             for core in cores if depth < len(core)]
    return [order[w % len(order)] for w in range(n)] if order else []


def split_cores(cpus: Iterable[int], sysfs: Path = SYSFS_CPU) -> tuple[list[int], list[int]]:
    """Whole physical cores split in two halves: (the lower half's CPUs, the upper half's CPUs).

    For a server and its load generator on one machine: no core has a thread on each side.
    With one core (or none) there is nothing to split; both sides get every CPU.
    """
    cores = physical_cores(cpus, sysfs)
    if len(cores) < 2:
        every = sorted(c for core in cores for c in core)
        return every, every
    half = len(cores) // 2
    return sorted(c for core in cores[:half] for c in core), sorted(c for core in cores[half:] for c in core)
