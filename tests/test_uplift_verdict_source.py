"""The uplift check (``checks/test_campaign.py::test_uplift``) judges with the campaign's own decision.

Found on real vLLM (2x H100, 2026-11-27, 2 starts of a resident campaign): the report printed the campaign's
decision, ``99 % CI -98.8 % .. +11704.8 %``, while the check judged the window pairs anew as if each had a server
start of its own, ``98 % CI -87.8 % .. +1092.3 %``. With several windows a start that interval ignores the
start-to-start spread: red or green could then stand on one lucky start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_p2p.campaign import adaptive
from pytest_p2p.campaign.aggregate import uplift_at
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.result import CampaignResult

CFG = parse_campaign({"kind": "model", "arms": ["p2p_on", "p2p_off"], "concurrency": [16], "starts": 3,
                      "windows": 4, "residency": "resident", "min_uplift": "5%"}, "rig.yaml")
#: each start's uplift; its 4 windows agree to 0.1 %: 12 window pairs look tight, 3 start means do not
START_UPLIFT = {1: 0.30, 2: 0.02, 3: 0.16}


def _window(arm: str, start: int, window: int, value: float) -> dict[str, Any]:
    rep = (start - 1) * CFG.windows + window
    return {"completed": 100, "failed": 0, "output_throughput": value,
            "meta": {"arm": arm, "point": "c16", "rep": rep, "residency": "resident", "start": start,
                     "launch": start, "window": window}}


def _result(tmp_path: Path, *, decided: bool) -> CampaignResult:
    on: dict[int, dict[str, Any]] = {}
    off: dict[int, dict[str, Any]] = {}
    for start, up in START_UPLIFT.items():
        for w in range(1, CFG.windows + 1):
            base = 1000.0 * (1 + 0.001 * (w % 2))
            rep = (start - 1) * CFG.windows + w
            on[rep], off[rep] = _window("p2p_on", start, w, base * (1 + up)), _window("p2p_off", start, w, base)
    res = CampaignResult(run_dir=tmp_path, pair=(0, 1), pair_key="gpu0-gpu1", kind="model",
                         arms=["p2p_on", "p2p_off"], points=["c16"], reps=len(on), simulated=True, status="complete",
                         config=CFG)
    res.rep_data = {("p2p_on", "c16"): on, ("p2p_off", "c16"): off}
    reps = sorted(on)
    res.uplift["c16"] = uplift_at(on, off, CFG, "model", reps)
    if decided:
        rule = CFG.uplift_rule_for("model")
        d = adaptive.decide_starts(on, off, CFG, "model", reps, rule.threshold("c16"), rule.alpha)
        res.decisions["c16"] = {**adaptive.decision_json(d, stopped="fixed design (campaign.max_starts not set)"),
                                "needed_unit": "starts"}
    return res


def test_the_check_takes_the_campaign_s_decision_not_the_window_pairs(tmp_path: Path) -> None:
    from pytest_p2p.stats.uplift_rule import judge

    res = _result(tmp_path, decided=True)
    # the window pairs as independent pairs: 12 of them, tight, and a pass that stands on start 1 alone
    naive = judge(res.uplift["c16"], "c16", CFG.uplift_rule_for("model"), metric="output_throughput",
                  faster_arm="p2p_on", slower_arm="p2p_off")
    assert naive.passed and naive.n == 12
    v = res.uplift_verdict("c16")
    d = res.decisions["c16"]
    assert v.outcome == d["outcome"] == "inconclusive" and not v.passed and v.n == 3
    assert v.ci95 == (d["lower"], d["upper"]) and v.level == d["level"] and v.pairs_needed == d["pairs_needed"]
    assert v.message.startswith("uplift of p2p_on over p2p_off in output_throughput at c16 ")
    assert "3 starts x 4 window pairs" in v.message and "the campaign's decision" in v.message
    assert "adding starts stopped: fixed design" in v.message


def test_a_resident_campaign_cut_short_is_judged_on_its_start_means(tmp_path: Path) -> None:
    """No decision (the campaign ended before its last start, say): the check still takes the start as the unit,
    at the campaign's alpha, never the window pairs."""
    res = _result(tmp_path, decided=False)
    v = res.uplift_verdict("c16")
    assert v.outcome == "inconclusive" and v.n == 3 and "3 starts x 4 window pairs" in v.message


def test_a_decision_on_other_arms_is_not_taken(tmp_path: Path) -> None:
    res = _result(tmp_path, decided=True)
    res.decisions["c16"] = {**res.decisions["c16"], "quantity": "uplift of p2p_off over p2p_on", "outcome": "pass"}
    v = res.uplift_verdict("c16")
    assert v.outcome == "inconclusive" and "3 starts x 4 window pairs" in v.message  # decided again, on the starts
