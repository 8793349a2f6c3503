"""``campaign.warmup_order``: whose warm-up a launch's first window follows (docs/campaign-design.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.campaign import blocks
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.campaign.schedule import order, warm_order


def test_reversed_the_first_window_s_server_warms_last_and_first_where_it_sizes_the_windows() -> None:
    arms = ["on", "off"]
    assert warm_order(arms, [1], "windows") == [("on", 1), ("off", 1)]  # start 1's first pair: on, off
    assert warm_order(arms, [2], "windows") == [("off", 2), ("on", 2)]  # the first arm alternates
    assert warm_order(arms, [1], "reverse") == [("off", 1), ("on", 1)]
    assert warm_order(arms, [1], "reverse", sized=False) == [("on", 1), ("off", 1), ("on", 1)]
    # starts made at once: the launch's first window (start 3's on) follows its own warm-up
    assert warm_order(arms, [3, 4], "reverse") == [("on", 4), ("off", 4), ("off", 3), ("on", 3)]
    with pytest.raises(ValueError, match="windows, reverse"):
        warm_order(arms, [1], "sideways")


@pytest.mark.parametrize("how", ["windows", "reverse"])
def test_a_launch_s_first_window_follows_the_warm_up_the_order_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    how: str) -> None:
    """Through the real path on the stand-in, windows with a time budget: every warm-up and window in order."""
    events: list[tuple[str, str, str, int]] = []  # (warm | window, arm, point, start)
    real_warm, real_window = CampaignRunner._warm, blocks._Start.window

    def warm(self: Any, handle: Any, arm: str, point: str, rep: int) -> None:
        events.append(("warm", arm, point, (rep - 1) // self.config.windows + 1))
        real_warm(self, handle, arm, point, rep)

    def window(self: Any, point: str, arm: str, start: int, w: int) -> None:
        events.append(("window", arm, point, start))
        real_window(self, point, arm, start, w)

    monkeypatch.setattr(CampaignRunner, "_warm", warm)
    monkeypatch.setattr(blocks._Start, "window", window)
    runner = _runner(tmp_path, starts=2, concurrency=[2], window_s=0.3, warmup_order=how)
    res = runner.run()
    assert res.status == "complete", res.errors
    arms = ["p2p_on", "p2p_off"]
    launches: list[list[tuple[str, str, str, int]]] = []  # a launch begins with a warm-up after a window
    for e in events:
        if not launches or (e[0] == "warm" and launches[-1][-1][0] == "window"):
            launches.append([])
        launches[-1].append(e)
    assert len(launches) >= 2  # 2 starts (a start the screen re-ran on this loaded box is one more)
    for i, mine in enumerate(launches):
        start = mine[0][3]
        warms = [e[1] for e in mine if e[0] == "warm"]
        first = next(e for e in mine if e[0] == "window")
        assert first[1] == order(arms, start, 1)[0]
        before = mine[mine.index(first) - 1]
        assert before[0] == "warm" and (before[1] == first[1]) == (how == "reverse"), mine
        # the night's first launch sizes the windows, on the first window's arm either way
        assert warms == [a for a, _ in warm_order(arms, [start], how, sized=i > 0)], mine
    assert launches[0][0][1] == order(arms, 1, 1)[0] == "p2p_on"
