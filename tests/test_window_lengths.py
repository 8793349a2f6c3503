"""``campaign.window_s`` per point: longer windows where the window pairs spread most (issue 24).

The committed 7B rig's c64 window pairs spread 2.6-4.2 % a night against c16's 1.1-2 %, so c64 sits at the edge of
+-2 % with 8 starts while c16 has room (benchmarks/verdict_prior_committed.py table 4c). A table per point sizes
each point's windows from its own warm-up for its own length; everything else about the design stays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.campaign import backends
from pytest_p2p.campaign.blocks import plan_line
from pytest_p2p.campaign.config import CampaignConfig, PerPoint, parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.verdict.store_design import design_key

SECTION = {"kind": "model", "concurrency": [16, 64]}


def _parse(window_s: object) -> CampaignConfig:
    return parse_campaign({**SECTION, "window_s": window_s}, "rig.yaml")


def test_a_table_gives_each_point_its_length_and_a_number_stays_one_length() -> None:
    cfg = _parse({"default": 5, 64: 8.5})
    assert cfg.window_s == PerPoint(5.0, (("c64", 8.5),))
    assert (cfg.window_s_for("c16"), cfg.window_s_for("c64"), cfg.window_s_mean(["c16", "c64"])) == (5.0, 8.5, 6.75)
    assert cfg.to_dict()["window_s"] == {"default": 5.0, "c64": 8.5}
    assert _parse({"default": 5, "c64": 8.5}).window_s == cfg.window_s  # 64 or c64
    # a table that says one length is that number (the same design as ``window_s: 6.5``)
    assert _parse({"default": 6.5, 16: 6.5}).window_s == 6.5 == _parse(6.5).window_s
    assert _parse({64: 8.5}).window_s == PerPoint(15.0, (("c64", 8.5),))  # the key's default where left out
    none = _parse(None)
    assert none.window_s is None and none.window_s_for("c64") is None and none.window_s_mean(["c64"]) is None


@pytest.mark.parametrize(("window_s", "where", "says"), [
    ({"default": 5, 32: 8}, "campaign.window_s.c32", "no point c32 in concurrency [16, 64]"),
    ({"default": 0.01}, "campaign.window_s.default", "expected a number 0.1..86400, got 0.01"),
    ({64: "long"}, "campaign.window_s.c64", "expected a number 0.1..86400, got 'long'"),
    ({"fast": 3}, "campaign.window_s.fast", "expected a concurrency like 8 or 'c8'"),
])
def test_a_bad_table_names_the_point_and_the_file(window_s: object, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _parse(window_s)
    assert str(exc.value).startswith(f"rig.yaml: {where}: ") and says in str(exc.value), str(exc.value)


def test_a_table_is_its_own_design_whatever_order_it_was_written_in() -> None:
    def key(window_s: object) -> str | None:
        cfg = parse_campaign({**SECTION, "residency": "resident", "window_s": window_s}, "rig.yaml")
        return design_key("model", json.loads(json.dumps(cfg.to_dict())), "output_throughput", "higher")

    table = key({"default": 5, 64: 8.5})
    assert table == key({64: 8.5, "default": 5}) == key({"c64": 8.5, "default": 5.0})
    assert table is not None and json.loads(table)["window_s"] == {"c64": 8.5, "default": 5.0}
    assert len({table, key(5), key(8.5), key({"default": 5, 64: 9})}) == 4  # other lengths, other designs
    assert key({"default": 6.5}) == key(6.5)


def test_each_point_s_windows_are_sized_for_its_own_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in campaign: the first warm-up at each point sizes its windows for that point's length (what the
    sizing is handed, not how long a window took: this box's speed is no part of it), and the plan line says the
    lengths and prices the mean."""
    sized: list[tuple[int, float]] = []
    real = backends.window_prompts

    def spy(warm: Any, concurrency: int, window_s: float) -> int:
        sized.append((concurrency, window_s))
        return real(warm, concurrency, window_s)

    monkeypatch.setattr(backends, "window_prompts", spy)
    runner = _runner(tmp_path, starts=2, window_s={"default": 0.3, 2: 0.6})
    line = plan_line(runner, ["c1", "c2"])  # type: ignore[arg-type]
    assert "windows of 0.3 s (c1), 0.6 s (c2)" in line, line
    res = runner.run()
    assert res.status == "complete", res.errors
    assert sorted(set(sized)) == [(1, 0.3), (2, 0.6)]
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["campaign"]["window_s"] == {"default": 0.3, "c2": 0.6}
