"""The order in which arms run: interleaved so that drift cancels.

A campaign alternates arms rep by rep (the seed's AB-AB-AB) instead of running all
of A then all of B, because a GPU that warms up or a host that gets busier over the
hour would otherwise show up as an arm effect. Rep k of every arm forms a *block*;
the statistics pair rep k of A with rep k of B. Within a block the order is:

* ``interleaved``: A B | A B | A B (the seed's default).  B always runs one slot after A,
  so a drift linear in slot position biases every paired ratio by one slot's drift: at
  -0.5 %/slot (a GPU warming up) the uplift is biased by +0.5 pp and its 95 % interval
  covers the truth only ~89 % of the time (issue 9).  It cancels nothing linear.
* ``abba``: A B | B A | A B | B A — counterbalanced.  With an **even** number of reps each
  arm runs first in half the blocks, so a linear drift cancels *exactly* in the mean paired
  log ratio (the uplift); with an odd number a residual of one slot's drift / reps remains.
  This is the recommended order (the demo rig uses it with 4 reps).
* ``random``: each block a seeded shuffle — reproducible from the seed; cancels a linear
  drift only on average (it turns the bias into extra variance).

Absolute levels (the baseline comparison) see the drift averaged over the run in every
schedule; it is the same in the baseline runs and the current run when they share the
schedule and rep count, so it cancels there too.

A slot is one server start (model) or one probe process group (probe): the NCCL
environment is fixed at process start, so an arm change always means a new process;
all points (concurrencies or sizes) of that arm and rep run inside the slot.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

MODES = ("interleaved", "abba", "random")


@dataclass(frozen=True)
class Slot:
    rep: int  # 1-based
    arm: str
    position: int  # 0-based index in the whole schedule


def build_schedule(arms: Sequence[str], reps: int, mode: str = "interleaved", seed: int = 0) -> list[Slot]:
    """The timed slots in run order; every arm appears exactly once per rep."""
    if not arms:
        raise ValueError("a schedule needs at least one arm")
    if len(set(arms)) != len(arms):
        raise ValueError(f"arm names repeat: {list(arms)}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if mode not in MODES:
        raise ValueError(f"schedule must be one of {', '.join(MODES)}, got {mode!r}")
    rng = random.Random(seed)
    order: list[tuple[int, str]] = []
    for rep in range(1, reps + 1):
        block = list(arms)
        if mode == "abba" and rep % 2 == 0:
            block.reverse()
        elif mode == "random":
            rng.shuffle(block)
        order.extend((rep, arm) for arm in block)
    return [Slot(rep=rep, arm=arm, position=i) for i, (rep, arm) in enumerate(order)]


def describe(slots: Sequence[Slot]) -> str:
    """``p2p_on p2p_off | p2p_off p2p_on`` — written into run.json so a reader sees the real order."""
    blocks: dict[int, list[str]] = {}
    for slot in slots:
        blocks.setdefault(slot.rep, []).append(slot.arm)
    return " | ".join(" ".join(b) for _, b in sorted(blocks.items()))


def order(arms: Sequence[str], start: int, window: int) -> list[str]:
    """The arms' order in window pair ``window`` of server start ``start`` (both 1-based), resident arms:
    ABBA over a start's window pairs, and the first arm alternating between starts."""
    return list(reversed(arms)) if (window % 2 == 0) != (start % 2 == 0) else list(arms)


WARMUP_ORDERS = ("windows", "reverse")


def warm_order(arms: Sequence[str], group: Sequence[int], how: str, *, sized: bool = True) -> list[tuple[str, int]]:
    """``(arm, start)`` in the order a launch's servers warm up at a point, before its first window pair there.

    ``windows``: the order of that window pair, so every first window follows another server's warm-up or window.
    ``reverse``: the reverse, so the launch's first window follows its own server's warm-up and each arm runs half
    its windows right after its own activity instead of a quarter (docs/campaign-design.md, "A server's window
    after its own"). Where the point's windows are not ``sized`` yet, the first window's server warms first as
    well: the first warm-up sizes a point's windows (``ModelBackend.warm``), and on the first window's arm, as
    with ``windows``, or every window would be sized on the other arm's rate."""
    if how not in WARMUP_ORDERS:
        raise ValueError(f"warm-up order must be one of {', '.join(WARMUP_ORDERS)}, got {how!r}")
    seq = [(arm, s) for s in group for arm in order(arms, s, 1)]
    if how == "windows":
        return seq
    return ([] if sized else seq[:1]) + seq[::-1]


def first_arm(arms: Sequence[str], start: int, among: Sequence[str] = ()) -> str:
    """The arm that goes first at every point of server start ``start``: the start's *sequence*, as the verdict
    labels it (``stats.decide_nested(sequences=)`` fits the order's effect from 6 starts on).

    ``among``: the two arms an uplift compares (the campaign's first two); the first of *them* in the start's
    order. Why: with three arms (A, B, C, then C, B, A) a start's first arm is A or C, and "C first" names an arm
    the uplift of A over B does not compare, though A and B too alternate which of them goes first."""
    got = next((a for a in order(arms, start, 1) if not among or a in among), None)
    if got is None:  # a caller's bug, not a rig's: the uplift's arms are the campaign's first two
        raise ValueError(f"first_arm: none of {list(among)} is among the campaign's arms {list(arms)}")
    return got


def sequence_label(arms: Sequence[str], start: int) -> str:
    """``"<arm> first"``: the label of start ``start``'s sequence for the uplift of ``arms[0]`` over ``arms[1]``,
    as ``stats.decide_nested(sequences=)`` takes it -- the one spelling the campaign's decision, its aggregate
    interval and the report's re-judgement share (:func:`first_arm` among the uplift's two arms)."""
    return f"{first_arm(arms, start, arms[:2])} first"


def rep_of(start: int, window: int, stride: int) -> int:
    """Rep number of window pair ``window`` (1-based) of start ``start`` (1-based), ``stride`` numbers a start
    (``CampaignConfig.window_stride``)."""
    return (start - 1) * stride + window

