"""Built-in checks on a P2P on/off campaign (one campaign per GPU pair, run once per session).

``test_uplift[gpu0-gpu1-c8]``: arm A beats arm B by the rig's threshold at that point;
``test_transport[gpu0-gpu1-p2p_off]``: the arm used the transport it claims (NCCL proof);
``test_attestation``: the server did not route around the arm (vLLM custom all-reduce);
``test_no_throttling`` / ``test_no_failed_requests`` per scenario; ``test_campaign_complete``.
On the demo rig every one of these runs against the SIMULATED stand-in — the messages say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pytest

from pytest_p2p.jsontypes import as_float
from pytest_p2p.plugin.policy import inconclusive

if TYPE_CHECKING:
    from pytest_p2p.campaign.result import CampaignResult

pytestmark = pytest.mark.p2p


def _sim(campaign: CampaignResult) -> str:
    return " [SIMULATED: demo rig, stand-in server]" if campaign.simulated else ""


def _where(campaign: CampaignResult) -> str:
    return f"(results: {campaign.run_dir})"


def _messages(value: object) -> list[str]:
    """A JSON list of messages as text; any other value is one message (never read as "none")."""
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _requests_failed(rep: Mapping[str, object]) -> bool:
    """A rep with a failed request, none completed, or a failure count that is not a number."""
    failed = as_float(rep.get("failed") or 0)
    return failed is None or failed > 0 or not rep.get("completed")


def test_campaign_complete(p2p_campaign: CampaignResult) -> None:
    """Every scheduled rep ran; a failed or interrupted campaign lists what is missing and why."""
    c = p2p_campaign
    problems = [*c.errors, *(f"missing: {m}" for m in c.missing)]
    assert c.status == "complete" and not problems, (
        f"campaign {c.pair_key} is {c.status}{_sim(c)} {_where(c)}:\n  " + "\n  ".join(problems))


def test_uplift(p2p_campaign: CampaignResult, p2p_point: str, request: pytest.FixtureRequest) -> None:
    """Arm A over arm B at this point, paired by rep, against the rig's ``min_uplift``.

    Decided on confidence bounds (``pytest_p2p.stats.decide_uplift``): pass when the lower
    bound clears the threshold, fail when the upper bound is below it; inconclusive skips
    with the reason and the pairs that would decide (``--p2p-strict`` makes it fail).
    """
    c = p2p_campaign
    verdict = c.uplift_verdict(p2p_point)  # too few pairs or starts: inconclusive, never an error
    if verdict.inconclusive:
        inconclusive(request.config, f"{verdict.message}{_sim(c)} {_where(c)}")
    assert verdict.passed, f"{verdict.message}{_sim(c)} {_where(c)}"


def test_transport(p2p_campaign: CampaignResult, p2p_campaign_arm: str) -> None:
    """The NCCL INFO lines of this arm's run prove the transport the arm expects (P2P/CUMEM, SHM, ...)."""
    from pytest_p2p.probes.transport import proof_from_dict

    c = p2p_campaign
    arm = p2p_campaign_arm
    proof = c.proofs.get(arm)
    expect = c.expect_transport[arm]
    assert proof is not None, (f"arm {arm}: no transport proof was captured (server/probe log without NCCL INFO "
                               f"lines?){_sim(c)} {_where(c)}")
    ok, why = proof_from_dict(proof).satisfies(expect)
    assert ok, f"arm {arm} expected {expect}: {why}{_sim(c)} {_where(c)}"


def test_attestation(p2p_campaign: CampaignResult, p2p_campaign_arm: str) -> None:
    """The server's own log agrees with the arm (e.g. no CUSTOM all-reduce in a P2P-off arm)."""
    c = p2p_campaign
    if c.kind != "model":
        pytest.skip("probe campaign: no server to attest")
    att = c.attestations.get(p2p_campaign_arm)
    assert att is not None, f"arm {p2p_campaign_arm}: no server attestation{_sim(c)} {_where(c)}"
    problems = _messages(att.get("problems") or [])
    assert not problems, (f"arm {p2p_campaign_arm}: the server log contradicts the arm{_sim(c)} {_where(c)}:\n  "
                          + "\n  ".join(problems))


def test_no_throttling(p2p_campaign: CampaignResult, p2p_scenario: str) -> None:
    """No rep ran on a thermally/power-throttled GPU or a link that never reached its expected state.

    Expected: the evidence's link reading under load (else its maximum); see ``telemetry.assess``.
    """
    c = p2p_campaign
    arm, point = str(p2p_scenario).rsplit("-", 1)
    reps = c.rep_data.get((arm, point), {})
    if not reps:
        pytest.fail(f"scenario {p2p_scenario}: no rep was measured {_where(c)}", pytrace=False)
    bad = []
    for k, data in sorted(reps.items()):
        f = data.get("flags") or {}
        if not isinstance(f, dict):
            bad.append(f"rep {k}: flags are not an object: {f!r:.80}")
        elif f.get("throttled") or f.get("downtrained"):
            bad.append(f"rep {k}: " + "; ".join(_messages(f.get("details") or f.get("reasons") or ["flagged"])))
    excluded = c.config.exclude_throttled if c.config is not None else False
    note = " (excluded from the statistics: campaign.exclude_throttled)" if excluded else ""
    assert not bad, f"scenario {p2p_scenario}{_sim(c)}{note} {_where(c)}:\n  " + "\n  ".join(bad)


def test_no_failed_requests(p2p_campaign: CampaignResult, p2p_scenario: str) -> None:
    """Every timed request of every rep completed (a failed request is not a slow one)."""
    c = p2p_campaign
    if c.kind != "model":
        pytest.skip("probe campaign: no requests")
    arm, point = str(p2p_scenario).rsplit("-", 1)
    reps = c.rep_data.get((arm, point), {})
    if not reps:
        pytest.fail(f"scenario {p2p_scenario}: no rep was measured {_where(c)}", pytrace=False)
    bad = [f"rep {k}: {d.get('failed')} failed, {d.get('completed')} completed"
           for k, d in sorted(reps.items()) if _requests_failed(d)]
    assert not bad, f"scenario {p2p_scenario}{_sim(c)} {_where(c)}:\n  " + "\n  ".join(bad)
