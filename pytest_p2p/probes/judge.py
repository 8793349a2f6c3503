"""Pure judgements of probe results against the rig's thresholds (unit-tested; the checks print their messages)."""

from __future__ import annotations

from ..util import format_size
from .allreduce import AllReduceResult
from .config import Thresholds


def busbw_problems(result: AllReduceResult, thresholds: Thresholds) -> list[str]:
    """Sizes whose bus bandwidth is below the rig's floor (or that were not measured)."""
    out = []
    for size, floor in sorted(thresholds.busbw_min_gbs.items()):
        row = result.row(size)
        if row is None:
            out.append(f"{format_size(size)}: not measured (add it to probe.sizes)")
        elif row.busbw_gbs < floor:
            out.append(f"{format_size(size)}: busbw {row.busbw_gbs:.1f} GB/s < {floor:g} GB/s")
    return out


def latency_problems(result: AllReduceResult, thresholds: Thresholds) -> list[str]:
    """Sizes whose time per all-reduce is above the rig's ceiling (or that were not measured)."""
    out = []
    for size, ceiling in sorted(thresholds.latency_max_us.items()):
        row = result.row(size)
        if row is None:
            out.append(f"{format_size(size)}: not measured (add it to probe.sizes)")
        elif row.time_us > ceiling:
            out.append(f"{format_size(size)}: {row.time_us:.1f} us > {ceiling:g} us")
    return out


def uplift_table(faster: AllReduceResult, slower: AllReduceResult, sizes: tuple[int, ...],
                 minimum: float) -> tuple[list[str], list[str]]:
    """(lines, problems): per size, uplift = slower time / faster time - 1, which must be >= ``minimum``."""
    lines, problems = [], []
    for size in sizes:
        f, s = faster.row(size), slower.row(size)
        if f is None or s is None:
            problems.append(f"{format_size(size)}: not measured in both arms")
            continue
        up = s.time_us / f.time_us - 1 if f.time_us > 0 else float("inf")
        line = (f"{format_size(size)}: {faster.arm} {f.time_us:.1f} us vs {slower.arm} {s.time_us:.1f} us "
                f"-> uplift {up:+.1%} (min {minimum:.0%})")
        lines.append(line)
        if up < minimum:
            problems.append(line)
    return lines, problems
