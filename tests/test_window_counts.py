"""``campaign.windows`` per point: more window pairs where they spread most (issue 24).

At the committed 7B rig's six real nights pooled, c64's window pairs spread 3.3 % and c16's 1.65 %: with 2 pairs per
start c64 meets +-2 % at 98 % on about one night in four, while c16 has room. Four c64 pairs per start meet it on
87-94 % (benchmarks/verdict_prior_committed.py table 4d). A table per point gives each point its own count; a rep
number still names one window pair of one start (a start takes as many numbers as its fullest point), so every
reader of the results directory, the verdict and the store keep their meaning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _reps, _runner

from pytest_p2p.campaign.blocks import plan_line
from pytest_p2p.campaign.config import CampaignConfig, PerPoint, parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.report.render import build_summary
from pytest_p2p.results.layout import point_reps
from pytest_p2p.results.read import RunReader
from pytest_p2p.verdict.campaign_judge import _design
from pytest_p2p.verdict.store_design import design_key

SECTION = {"kind": "model", "concurrency": [16, 64]}


def _parse(windows: object, **more: Any) -> CampaignConfig:
    return parse_campaign({**SECTION, "windows": windows, **more}, "rig.yaml")


def test_a_table_gives_each_point_its_count_and_a_number_stays_one_count() -> None:
    cfg = _parse({"default": 2, 64: 4})
    assert cfg.windows == PerPoint(2, (("c64", 4),))
    assert (cfg.windows_for("c16"), cfg.windows_for("c64"), cfg.window_stride) == (2, 4, 4)
    assert cfg.window_pairs(["c16", "c64"]) == 6 and cfg.windows_text(["c16", "c64"]) == "2 (c16), 4 (c64)"
    assert cfg.to_dict()["windows"] == {"default": 2, "c64": 4}
    assert _parse({"default": 2, "c64": 4}).windows == cfg.windows  # 64 or c64
    # a table that says one count is that number (the same design as ``windows: 2``)
    assert _parse({"default": 2, 16: 2}).windows == 2 == _parse(2).windows
    assert _parse({64: 6}).windows == PerPoint(4, (("c64", 6),))  # the key's default (4) where left out
    # the stride is the fullest point's, even where the default names no point of the campaign
    assert _parse({"default": 9, 16: 2, 64: 3}).window_stride == 3
    one = _parse(3)
    assert (one.windows_for("c64"), one.window_stride, one.windows_text(["c16"])) == (3, 3, "3")


@pytest.mark.parametrize(("windows", "where", "says"), [
    ({"default": 2, 32: 4}, "campaign.windows.c32", "no point c32 in concurrency [16, 64]"),
    ({"default": 0}, "campaign.windows.default", "expected an integer 1..1000, got 0"),
    ({64: 2.5}, "campaign.windows.c64", "expected an integer 1..1000, got 2.5"),
    ({"many": 3}, "campaign.windows.many", "expected a concurrency like 8 or 'c8'"),
])
def test_a_bad_table_names_the_point_and_the_file(windows: object, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _parse(windows)
    assert str(exc.value).startswith(f"rig.yaml: {where}: ") and says in str(exc.value), str(exc.value)


def test_rep_numbers_keep_one_stride_and_leave_the_sparser_point_s_unused() -> None:
    cfg = _parse({"default": 2, 64: 4}, arms=["p2p_on", "p2p_off"])
    assert cfg.window_reps("c64", [1, 2]) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert cfg.window_reps("c16", [1, 2]) == [1, 2, 5, 6]
    keys = cfg.window_keys(["c16", "c64"], [2])
    assert len(keys) == 2 * (2 + 4) and ("p2p_off", "c16", 6) in keys and ("p2p_off", "c16", 7) not in keys


def test_a_table_is_its_own_design_and_a_number_keeps_the_stores_key() -> None:
    def key(windows: object) -> str | None:
        cfg = parse_campaign({**SECTION, "residency": "resident", "windows": windows}, "rig.yaml")
        return design_key("model", json.loads(json.dumps(cfg.to_dict())), "output_throughput", "higher")

    table = key({"default": 2, 64: 4})
    assert table == key({64: 4, "default": 2}) == key({"c64": 4, "default": 2})
    assert table is not None and json.loads(table)["windows"] == {"c64": 4, "default": 2}
    assert len({table, key(2), key(4), key({"default": 2, 64: 3})}) == 4  # other counts, other designs
    two = key(2)
    assert two is not None and json.loads(two)["windows"] == 2  # the chain's stores keep matching a number


def test_the_campaign_measures_each_point_s_own_count_and_decides_on_its_starts(tmp_path: Path) -> None:
    """The stand-in campaign of 3 starts, 2 window pairs at c1 and 3 at c2: every window where the table puts it
    (ABBA within each point's own pairs), the progress line counted to its end, each point decided on its own
    blocks, and run.json, the plan line and the store's view of the design saying the table."""
    runner = _runner(tmp_path, starts=3, windows={"default": 2, 2: 3})
    line = plan_line(runner, ["c1", "c2"])  # type: ignore[arg-type]
    assert "3 starts x window pairs 2 (c1), 3 (c2)" in line, line
    res = runner.run()
    assert res.status == "complete", res.errors
    assert res.reps == 9  # 3 starts x the stride (3)
    for point, per_start in (("c1", 2), ("c2", 3)):
        for arm in ("p2p_on", "p2p_off"):
            got = _reps(res.run_dir, arm, point)
            want = [(s - 1) * 3 + w for s in (1, 2, 3) for w in range(1, per_start + 1)]
            assert sorted(got) == want, (arm, point, sorted(got))
            for k, d in got.items():
                assert (d["meta"]["start"], d["meta"]["window"]) == ((k - 1) // 3 + 1, (k - 1) % 3 + 1)
        comp = res.decisions[point]["components"]
        assert comp["starts"] == 3 and comp["window_pairs"] == 3 * per_start, (point, comp)
    # the line counted to its end: the plan's 30 windows, and what this box's load made it measure again (a window
    # pair re-measured, a start re-run: both arms, every point's own pairs)
    assert runner.progress is not None and runner.progress.done == runner.progress.total
    if not any("set aside and re-run" in n for n in res.notes):  # a failed attempt adds what it had measured
        again = sum(2 for n in res.notes if " screened and re-measured" in n) + sum(
            2 * (2 + 3) for n in res.notes if n.startswith("start ") and " screened and re-run" in n)
        assert runner.progress.total == 3 * 2 * (2 + 3) + again, res.notes
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["campaign"]["windows"] == {"default": 2, "c2": 3}
    assert "per point, 2 (c1), 3 (c2) window pair(s)" in meta["schedule"], meta["schedule"]
    assert _design(res.run_dir) == ("resident", 3, 9)
    # the report expects at each point its own numbers: nothing is missing, and a lost window would be named
    summary = build_summary(RunReader(res.run_dir))
    assert summary["missing"] == [], summary["missing"]
    assert {(sc["point"], sc["expected_reps"]) for sc in summary["scenarios"]} == {("c1", 6), ("c2", 9)}
    (res.run_dir / "scenarios" / "p2p_on-c1" / "run_8.json").unlink()
    assert build_summary(RunReader(res.run_dir))["missing"] == ["p2p_on-c1: run 8 missing (6 expected)"]


def test_the_reader_s_rep_numbers_follow_the_table_and_refuse_to_guess() -> None:
    assert point_reps(6, 2, ["c1", "c2"]) == {"c1": [1, 2, 3, 4, 5, 6], "c2": [1, 2, 3, 4, 5, 6]}
    assert point_reps(6, {"default": 2, "c2": 3}, ["c1", "c2"]) == {"c1": [1, 2, 4, 5], "c2": [1, 2, 3, 4, 5, 6]}
    # a table it cannot read (no count for c1) claims every number, as a number of windows would
    assert point_reps(4, {"c2": 2}, ["c1", "c2"]) == {"c1": [1, 2, 3, 4], "c2": [1, 2, 3, 4]}
