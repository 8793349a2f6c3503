"""Hooks the campaign stage publishes (registered by ``plugin/campaign.py`` in ``pytest_addhooks``).

Later stages subscribe by implementing them in their glue module (``plugin/report.py``,
``plugin/verdict.py``); the campaign never imports them. Implementations must be cheap and
must not raise for a campaign that failed or was interrupted: the outcome says so, and the
run directory holds what was measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..campaign.outcome import CampaignOutcome


@pytest.hookspec
def pytest_p2p_campaign_finished(config: pytest.Config, outcome: CampaignOutcome) -> None:
    """A campaign's run directory is final (complete, interrupted or failed).

    Called in the process that ran the campaign, right after ``run.json`` got its final
    status; under xdist called again on the controller with ``outcome.worker`` set, once the
    worker has finished (the controller prints the terminal summary). Report: render the
    summary and record the run for the terminal table; verdict: judge/save against baselines.
    """
