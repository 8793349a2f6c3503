"""A resident run re-judged by the report (no decision of its own in run.json) is judged on its start means.

Seen on 4x H100 (2026-11-26): a resident campaign that failed at its second start's teardown wrote no
decisions, and summary.md re-judged its 6 window pairs as 6 independent pairs: ``+20.7 % (98 % CI
+17.7 .. +23.7 %) PASS`` where the start means give df = 1 and an interval of about -38 .. +136 %.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from campaign_fakes import forget_decisions
from test_campaign_resident import _reps, _runner

from pytest_p2p.report.render import build_summary
from pytest_p2p.results.read import RunReader
from pytest_p2p.stats.nested import decide_nested


def test_a_resident_run_without_decisions_is_judged_on_start_means(tmp_path: Path) -> None:
    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    run_json = res.run_dir / "run.json"
    meta = json.loads(run_json.read_text())
    meta["decisions"] = {}  # as a campaign that failed before deciding leaves it
    run_json.write_text(json.dumps(meta))

    entry = next(e for e in build_summary(RunReader(res.run_dir))["uplift"] if e["point"] == "c2")
    on, off = _reps(res.run_dir, "p2p_on", "c2"), _reps(res.run_dir, "p2p_off", "c2")
    blocks: dict[int, list[tuple[float, float]]] = {}
    for k in sorted(on):
        blocks.setdefault(on[k]["meta"]["start"], []).append((on[k]["output_throughput"],
                                                              off[k]["output_throughput"]))
    assert entry["n"] == len(blocks) == 3  # starts, not the 6 window pairs
    assert entry.get("needed_unit") == "starts"
    level = entry["level"]
    assert level is not None
    want = decide_nested(list(blocks.values()), threshold=float(entry["threshold"] or 0), alpha=(1 - level) / 2)
    assert entry["interval"] is not None
    assert math.isclose(entry["interval"][0], want.lower) and math.isclose(entry["interval"][1], want.upper)
    assert entry["outcome"] == want.outcome.value


def test_the_report_and_the_check_judge_a_run_without_decisions_alike(tmp_path: Path) -> None:
    """Both take the campaign's decision rule: start means at the campaign's alpha (split over its points, spent
    over its looks), the launches and the first arm's order as the campaign groups them. The report judged at
    the per-point alpha (98 % where the check said 99 % for 2 points), so a cut-short run's table and its
    ``test_uplift`` could disagree, as a decided run's did before 3e3a8a1."""
    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    forget_decisions(res)

    entries = {e["point"]: e for e in build_summary(RunReader(res.run_dir))["uplift"]}
    assert sorted(entries) == sorted(res.points) == ["c1", "c2"]
    for point, entry in entries.items():
        v = res.uplift_verdict(point)
        assert entry["level"] == v.level and 0.99 <= v.level < 1  # the family of 2 points at 1 %
        assert entry["interval"] is not None and v.ci95 is not None
        assert math.isclose(entry["interval"][0], v.ci95[0]) and math.isclose(entry["interval"][1], v.ci95[1])
        assert entry["outcome"] == v.outcome and entry["n"] == v.n == 3
