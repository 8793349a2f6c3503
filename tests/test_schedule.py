from __future__ import annotations

import pytest

from pytest_p2p.campaign.schedule import build_schedule, describe


def order(slots):
    return [(s.rep, s.arm) for s in slots]


def test_interleaved_is_ab_ab_ab() -> None:
    slots = build_schedule(["A", "B"], 3)
    assert [s.arm for s in slots] == ["A", "B", "A", "B", "A", "B"]
    assert [s.rep for s in slots] == [1, 1, 2, 2, 3, 3]
    assert [s.position for s in slots] == list(range(6))
    assert describe(slots) == "A B | A B | A B"


def test_abba_counterbalances() -> None:
    slots = build_schedule(["A", "B"], 4, "abba")
    assert "".join(s.arm for s in slots) == "ABBAABBA"
    # each arm is first in half the blocks
    firsts = [s.arm for s in slots if s.position % 2 == 0]
    assert firsts.count("A") == firsts.count("B") == 2


def test_random_is_seeded_and_keeps_blocks() -> None:
    a = build_schedule(["A", "B", "C"], 6, "random", seed=7)
    assert order(a) == order(build_schedule(["A", "B", "C"], 6, "random", seed=7))
    orders = {tuple(s.arm for s in a if s.rep == r) for r in range(1, 7)}
    assert all(sorted(o) == ["A", "B", "C"] for o in orders)
    assert len(orders) > 1  # six shuffles of three arms are not all equal with this seed
    assert order(a) != order(build_schedule(["A", "B", "C"], 6, "random", seed=8))


@pytest.mark.parametrize("arms,reps,mode", [([], 1, "interleaved"), (["A", "A"], 1, "interleaved"),
                                            (["A"], 0, "interleaved"), (["A"], 1, "zigzag")])
def test_bad_schedules(arms, reps, mode) -> None:
    with pytest.raises(ValueError):
        build_schedule(arms, reps, mode)
