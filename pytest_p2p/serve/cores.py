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

__all__ = ["SYSFS_CPU", "client_cpus", "cpu_list", "l3_domains", "parse_cpu_list", "physical_cores", "server_blocks",
           "split_cores", "worker_share"]

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


def cpu_list(cpus: Iterable[int]) -> str:
    """The kernel's spelling of a CPU set (``0-3,8``): what ``taskset -c`` and ``/proc/PID/status`` write."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(set(cpus)):
        if run and cpu != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(cpu)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def l3_domains(cores: Sequence[tuple[int, ...]], sysfs: Path = SYSFS_CPU) -> list[list[tuple[int, ...]]]:
    """Physical ``cores`` grouped by the last-level cache they share (``cache/index3/shared_cpu_list``), the
    groups in the order of their lowest core; where the kernel does not say, all cores are one group."""
    groups: dict[frozenset[int], list[tuple[int, ...]]] = {}
    for core in cores:
        try:
            key = frozenset(parse_cpu_list((sysfs / f"cpu{core[0]}" / "cache" / "index3" / "shared_cpu_list")
                                           .read_text()))
        except (OSError, ValueError):
            key = frozenset()
        groups.setdefault(key, []).append(core)
    return list(groups.values())


def server_blocks(n: int, cpus: Iterable[int], sysfs: Path = SYSFS_CPU) -> list[list[int]]:
    """CPUs for ``n`` servers started together: a block of whole physical cores each, none shared, and at
    least one core left for the load generator; ``[]`` where there are fewer than ``n + 1`` cores.

    Why (``server.cpus: auto``): a vLLM server at high concurrency is CPU-bound in its engine core, which
    hands every step to its workers through shared memory that they poll. Left to the scheduler, each start
    places these processes afresh -- near each other or across last-level caches -- and two starts of one
    server differ by several per cent (2x H200, 7B TP=2, c64: 10.4-11.6 k tok/s a start, within a start
    1-2 %). A block of its own keeps every start's processes together, and keeps a server off the cores the
    other arm's server has just used (the cost of a window after the other server's, docs/campaign-design.md).
    On that 32-core VM, whose CPUs share one cache, two pinned nights narrowed neither spread and a third of the
    cores a server ran P2P on at c64 2.5 % slower (docs/rig-file.md#server-cpus), so it is a rig's choice, off by
    default. Each block is ``cores // (n + 1)``
    cores, taken inside one last-level cache where one has room for it (first fit, in the kernel's order),
    else across the next free cores; the rest stay with the load generator.
    """
    cores = physical_cores(cpus, sysfs)
    if n < 1 or len(cores) < n + 1:
        return []
    size = len(cores) // (n + 1)
    domains = l3_domains(cores, sysfs)
    blocks: list[list[tuple[int, ...]]] = []
    for _ in range(n):
        room = next((d for d in domains if len(d) >= size), None)
        if room is None:  # no cache has room: the next free cores, in order
            free = [c for d in domains for c in d]
            block = free[:size]
            domains = [[c for c in d if c not in block] for d in domains]
        else:
            block = room[:size]
            room[:] = room[size:]
        domains = [d for d in domains if d]
        blocks.append(block)
    return [sorted(c for core in block for c in core) for block in blocks]


def worker_share(index: int, count: int, cpus: Iterable[int], sysfs: Path = SYSFS_CPU) -> list[int]:
    """The ``index``-th (0-based) of ``count`` shares of whole physical cores, the lower shares first; every CPU
    where there are fewer cores than shares (or one share).

    For ``server.cpus: auto`` under xdist: each worker cuts its servers' blocks out of its own share, so two
    workers' servers (on two GPU pairs) never get the same cores. The cores that do not divide evenly go to
    the last share."""
    cores = physical_cores(cpus, sysfs)
    if count < 2 or len(cores) < count or not 0 <= index < count:
        return sorted(c for core in cores for c in core)
    size = len(cores) // count
    mine = cores[index * size:] if index == count - 1 else cores[index * size:(index + 1) * size]
    return sorted(c for core in mine for c in core)
