"""benchmarks/window_noise.py: the position line (each start's first window against its later ones), read from a
compact file of real windows, and the prefix-cache line from a stand-in campaign's rep files."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import window_noise  # noqa: E402

RUN = Path(__file__).resolve().parent.parent / "fixtures" / "results" / "h100x2-at-once-20261127.windows.json"


def test_the_first_windows_of_the_real_run_sit_apart() -> None:
    """The 2x H100 run of 2026-11-27 (the figures docs/gpu-runs.md quotes; scipy's ttest_1samp agrees)."""
    lines = {p: window_noise.position(p, window_noise.windows(RUN, "p2p_on", p),
                                      window_noise.windows(RUN, "p2p_off", p)) for p in ("c16", "c64")}
    assert "-9.49 points (sd 7.12 over 6 starts, paired t p = 0.022)" in lines["c16"]
    assert "-7.31 points (sd 5.32 over 6 starts, paired t p = 0.020)" in lines["c64"]


RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
NIGHT = RESULTS / "campaign2_compact-h200-ahead-5x2-2026-11-27.json"


def test_the_start_means_of_the_real_night_split_by_the_arm_that_went_first() -> None:
    """The 2x H200 night of 2026-11-27 (fifth session): c16's start means 23.2 / 27.9 / 23.4 / 27.8 / 23.8 %; the
    test is the verdict's own (``stats.sequence_fit``'s F on the log start means), and 5 starts are judged plain."""
    arms = ("p2p_on", "p2p_off")
    c16 = window_noise.first_arm("c16", window_noise.windows(NIGHT, "p2p_on", "c16"),
                                 window_noise.windows(NIGHT, "p2p_off", "c16"), arms)
    assert "p2p_on first +23.5 % (3 starts), p2p_off first +27.8 % (2); difference -4.4 points" in c16, c16
    assert "F = 400, p = 0.00027 (not fitted below 6 starts)" in c16, c16
    c64 = window_noise.first_arm("c64", window_noise.windows(NIGHT, "p2p_on", "c64"),
                                 window_noise.windows(NIGHT, "p2p_off", "c64"), arms)
    assert "difference +0.7 points, F = 0.2, p = 0.69" in c64, c64
    six = NIGHT.with_name("campaign2_compact-h200-ahead-6x2-2026-11-27.json")
    c64 = window_noise.first_arm("c64", window_noise.windows(six, "p2p_on", "c64"),
                                 window_noise.windows(six, "p2p_off", "c64"), arms)
    assert "difference -2.8 points, F = 7.44, p = 0.053 (fitted by the verdict)" in c64, c64
    alike = {(s, w): {"output_throughput": 100.0} for s in (1, 2, 3, 4) for w in (1, 2)}
    half = {(s, w): {"output_throughput": 80.0} for s in (1, 2, 3, 4) for w in (1, 2)}
    assert "difference +0.0 points, F = 0, p = 1" in window_noise.first_arm("c8", alike, half, arms)
    assert "too few starts" in window_noise.first_arm("c8", {(1, 1): {"output_throughput": 1.0}},
                                                      {(1, 1): {"output_throughput": 1.0}}, arms)


def test_windows_alike_by_position_give_no_gap() -> None:
    a = {(s, w): {"output_throughput": 100.0 + s + (w % 2)} for s in (1, 2, 3) for w in (1, 2, 3)}
    b = {(s, w): {"output_throughput": 80.0 + 0.8 * (s + (w % 2))} for s in (1, 2, 3) for w in (1, 2, 3)}
    line = window_noise.position("c8", a, b)  # every window pair's ratio is 1.25: no gap, no spread
    assert "+0.00 points" in line and "p = 1.000" in line
    one = {(1, 1): {"output_throughput": 1.0}}
    assert "too few starts" in window_noise.position("c8", one, one)


def test_the_report_names_the_prefix_cache_of_a_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_campaign_resident import _runner

    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    assert window_noise.main([str(res.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "prefix cache: hit rate 0.0% at most over 24 windows" in out and "first window vs later" in out
    # how many client processes a start's windows took depends on how fast this machine makes prompts (a loaded
    # 32-core GPU machine raised it to 2 for start 3, 2026-11-28): the line names one count per start, and the
    # invariant that none changed within a start
    assert re.search(r"c2 client processes by start \(1: \d+, 2: \d+, 3: \d+\)", out), out
    assert "one count within every start" in out


def test_a_start_measured_with_two_client_counts_is_named() -> None:
    """The fifteenth night's c64 (2x H200, before the count was held): p2p_on's window 8 (start 4) was late, so
    p2p_off's window 8 ran on two client processes and p2p_on's on one; starts 5-8 ran on two."""
    def rep(arm: str, start: int, n: int) -> dict[str, object]:
        return {"client_processes": n, "client_lateness": "late" if (arm, start, n) == ("p2p_on", 4, 1) else "",
                "meta": {"start": start}}

    scen = {"p2p_on-c64": [rep("p2p_on", s, 1 if s <= 4 else 2) for s in range(1, 9)],
            "p2p_off-c64": [rep("p2p_off", s, 1 if s < 4 else 2) for s in range(1, 9)] + [rep("p2p_off", 4, 1)]}
    line = window_noise.clients(scen, ("p2p_on", "p2p_off"), "c64")
    assert line is not None and "(1: 1, 2: 1, 3: 1, 4: 1/2, 5: 2" in line and "1 late window(s)" in line, line
    assert line.endswith("start(s) [4] measured with two counts"), line
    assert window_noise.clients({"p2p_on-c64": [{"meta": {"start": 1}}]}, ("p2p_on", "p2p_off"), "c64") is None


THIRTEENTH = (Path(__file__).resolve().parent.parent / "benchmarks" / "results"
              / "campaign2_compact-h200-8x2x6.5-thirteenth-2026-11-28.json")


def test_the_first_window_by_arm_says_whose_window_is_off() -> None:
    """The thirteenth session's night (2x H200): p2p_on's first c64 window 2.31 % below its second, p2p_off's
    0.17 % (docs/campaign-design.md: over three nights p2p_on's gap is -1.65 %, p = 0.011)."""
    arms = ("p2p_on", "p2p_off")
    line = window_noise.arm_position("c64", {a: window_noise.windows(THIRTEENTH, a, "c64") for a in arms})
    assert "p2p_on -2.31 points (sd 3.30, p = 0.088); p2p_off -0.17 points (sd 3.37, p = 0.889)" in line, line
    slow_first = {(s, w): {"output_throughput": 90.0 if w == 1 else 100.0} for s in (1, 2, 3) for w in (1, 2)}
    steady = {(s, w): {"output_throughput": 100.0 + s} for s in (1, 2, 3) for w in (1, 2)}
    line = window_noise.arm_position("c8", {"on": slow_first, "off": steady})
    assert "on -10.54 points (sd 0.00, p = 0.000); off +0.00 points (sd 0.00, p = 1.000)" in line, line
    assert "on too few starts" in window_noise.arm_position("c8", {"on": {(1, 1): {"output_throughput": 1.0}}})


def test_after_its_own_window_is_told_from_after_the_other_s() -> None:
    """The thirteenth session's night: p2p_on's c64 windows after p2p_off's ran 3.82 % slower than after its own,
    TTFT 11.4 % longer (docs/campaign-design.md); the order is the windows' own start times."""
    scen = window_noise.scenarios(THIRTEENTH)
    arms = ("p2p_on", "p2p_off")
    line = window_noise.after_own(scen, arms, "c64")
    assert "p2p_on -3.82 points (sd 0.46 over 4 starts, p = 0.000)" in line, line
    assert "p2p_off +1.19 points (sd 2.08 over 4 starts, p = 0.334)" in line, line
    assert "p2p_on +11.40 points" in window_noise.after_own(scen, arms, "c64", "mean_ttft_ms")

    def rep(arm: str, start: int, window: int, at: str, value: float) -> dict[str, object]:
        return {"output_throughput": value, "meta": {"start": start, "window": window, "started_at": at}}

    # X Y Y X in two starts: the second arm's second window follows its own first and runs 10 % faster
    made = {"on-c8": [rep("on", 1, 1, "01", 100.0), rep("on", 1, 2, "04", 100.0),
                      rep("on", 2, 1, "12", 100.0), rep("on", 2, 2, "13", 110.0)],
            "off-c8": [rep("off", 1, 1, "02", 50.0), rep("off", 1, 2, "03", 55.0),
                       rep("off", 2, 1, "11", 50.0), rep("off", 2, 2, "14", 50.0)]}
    line = window_noise.after_own(made, ("on", "off"), "c8")
    assert "on too few starts with both" in line and "off too few starts with both" in line  # one start each
    made["on-c8"] += [rep("on", 3, 1, "22", 100.0), rep("on", 3, 2, "23", 110.0)]
    made["off-c8"] += [rep("off", 3, 1, "21", 50.0), rep("off", 3, 2, "24", 50.0)]
    assert "on -9.53 points (sd 0.00 over 2 starts, p = 0.000)" in window_noise.after_own(made, ("on", "off"), "c8")


def test_the_first_pair_gap_is_split_by_the_arm_that_went_first() -> None:
    """The thirteenth session's night (c64: -1.99 points where p2p_on went first, -2.28 where p2p_off did); and a
    made switching cost: the second arm's second window after its own runs 4 % fast, so the gap is 0 where the first
    arm went first and -4 points where the other did (``first_arm_of``: p2p_on first in odd starts)."""
    arms = ("p2p_on", "p2p_off")
    line = window_noise.position_by_first_arm("c64", window_noise.windows(THIRTEENTH, "p2p_on", "c64"),
                                              window_noise.windows(THIRTEENTH, "p2p_off", "c64"), arms)
    assert "p2p_on first -1.99 points (se 2.38, 4 starts); p2p_off first -2.28 points (se 1.98, 4 starts)" in line
    on = {(s, w): {"output_throughput": 100.0 * (1.04 if (s % 2 == 0 and w == 2) else 1.0) * (1 + s / 100)}
          for s in range(1, 7) for w in (1, 2)}
    off = {(s, w): {"output_throughput": 60.0 * (1 + s / 100)} for s in range(1, 7) for w in (1, 2)}
    line = window_noise.position_by_first_arm("c8", on, off, arms)
    assert "p2p_on first +0.00 points (se 0.00, 3 starts); p2p_off first -3.92 points (se 0.00, 3 starts)" in line
    assert "p2p_off first too few starts" in window_noise.position_by_first_arm(
        "c8", {k: v for k, v in on.items() if k[0] == 1}, off, arms)


def test_five_nights_pooled_give_the_documented_figures() -> None:
    """The five default-order nights of the committed rig (eleventh to fifteenth sessions), pooled: the figures
    docs/campaign-design.md quotes, and the gaps each arm's own switching cost predicts."""
    nights = [RESULTS / f"campaign2_compact-{n}.json" for n in (
        "h200-8x2x6-eleventh-2026-11-27", "h100-8x2x6-twelfth-2026-11-28", "h200-8x2x6.5-thirteenth-2026-11-28",
        "h200-8x2x6.5-pinned-fourteenth-2026-11-28", "h200-8x2x6.5-fifteenth-2026-11-28")]
    lines = window_noise.pooled(nights, ("p2p_on", "p2p_off"))
    text = "\n".join(lines)
    assert lines[0] == "== pooled over 5 night(s)"
    assert "c64 window pairs within a start (output_throughput ratio): sd 3.31% on 40 df" in text
    assert ("c64 first window vs later by the arm that went first: p2p_on first -1.54 (se 0.77, 20 starts); "
            "p2p_off first -2.83 (se 1.09, 20 starts)") in text
    assert "p2p_on -2.35 (se 0.67, 20 starts); p2p_off +0.43 (se 0.44, 20 starts)" in text
    assert "c64 predicted by those for 2 window pairs in the default warm-up order: p2p_on first -0.43, " \
           "p2p_off first -2.35" in text
    one = window_noise.pooled(nights[:1], ("p2p_on", "p2p_off"))
    assert one[0] == "== pooled over 1 night(s)" and len(one) == 1 + 2 * 4


def test_six_nights_pooled_give_the_documented_figures() -> None:
    """The five nights and the seventeenth session's (night 3 of the committed rig's chain): the c64 window-pair
    spread docs/performance.md quotes (3.3 % on 48 df), and the switching-cost picture unchanged."""
    nights = [RESULTS / f"campaign2_compact-{n}.json" for n in (
        "h200-8x2x6-eleventh-2026-11-27", "h100-8x2x6-twelfth-2026-11-28", "h200-8x2x6.5-thirteenth-2026-11-28",
        "h200-8x2x6.5-pinned-fourteenth-2026-11-28", "h200-8x2x6.5-fifteenth-2026-11-28",
        "h200-8x2x6.5-seventeenth-2026-11-28")]
    text = "\n".join(window_noise.pooled(nights, ("p2p_on", "p2p_off")))
    kept = (RESULTS / "window_noise_pooled-six-default-nights-2026-11-28.txt").read_text()
    assert text in kept
    assert "c64 window pairs within a start (output_throughput ratio): sd 3.27% on 48 df" in text
    assert "c64 after the other server's window vs after its own: p2p_on -2.10 (se 0.66, 24 starts)" in text
