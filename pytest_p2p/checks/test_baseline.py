"""Built-in check: no campaign scenario regressed against the chosen baseline.

Parametrised by the campaign stage (``p2p_pair`` x ``p2p_scenario``, ids like
``gpu0-gpu1-p2p_on-c8``); it runs only with ``--p2p-compare[=NAME]`` and skips, with
the reason, when there is no baseline yet or the baseline is not comparable (another
model or arm definition). Only primary metrics can fail, with the whole campaign under
one family-wise error rate (docs/baselines.md). A regression fails with
``PerformanceRegression`` (an AssertionError, so allure files it as a product defect)
naming the likely causes; an inconclusive verdict skips with the reason (``--p2p-strict``:
fails). ``test_uplift_unchanged[<pair>-<point>]`` judges the uplift against its history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_p2p.campaign.result import CampaignResult
    from pytest_p2p.plugin.verdict import BaselineSession


def scenario_parts(scenario: object) -> tuple[str, str]:
    """``(arm, point)`` from the campaign's scenario object or its id ``p2p_on-c8``."""
    arm, point = getattr(scenario, "arm", None), getattr(scenario, "point", None)
    if arm is not None and point is not None:
        return str(getattr(arm, "name", arm)), str(point)
    text = str(getattr(scenario, "id", None) or getattr(scenario, "name", None) or scenario)
    arm_name, sep, pt = text.rpartition("-")
    if not sep:
        raise ValueError(f"cannot read arm and point from scenario {scenario!r} (expected e.g. 'p2p_on-c8')")
    return arm_name, pt


@pytest.mark.p2p
def test_no_regression(p2p_campaign: CampaignResult, p2p_scenario: str, p2p_baseline: BaselineSession,
                       request: pytest.FixtureRequest) -> None:
    arm, point = scenario_parts(p2p_scenario)
    p2p_baseline.check_scenario(p2p_campaign.run_dir, arm, point, node=request.node)


@pytest.mark.p2p
def test_uplift_unchanged(p2p_campaign: CampaignResult, p2p_point: str, p2p_baseline: BaselineSession,
                          request: pytest.FixtureRequest) -> None:
    """The on/off uplift at this point did not fall against the baseline runs' uplift.

    Judged apart from absolute levels: a slower day moves both arms and leaves the ratio;
    a P2P-only loss moves the ratio — an interconnect regression even when levels moved too.
    """
    p2p_baseline.check_uplift_history(p2p_campaign.run_dir, p2p_point, node=request.node)


@pytest.mark.p2p
def test_links_not_downtrained(p2p_campaign: CampaignResult, p2p_baseline: BaselineSession) -> None:
    """The pair's PCIe generation/width and NVLink count did not drop since the newest baseline run."""
    p2p_baseline.check_links(p2p_campaign.run_dir)
