"""A resident run re-judged by the report (no decision of its own in run.json) is judged on its start means.

Seen on 4x H100 (2026-11-26): a resident campaign that failed at its second start's teardown wrote no
decisions, and summary.md re-judged its 6 window pairs as 6 independent pairs: ``+20.7 % (98 % CI
+17.7 .. +23.7 %) PASS`` where the start means give df = 1 and an interval of about -38 .. +136 %.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

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
