"""What one campaign produced, in memory: the object the built-in checks assert on.

Everything here is also on disk under ``run_dir`` (the results directory is the contract
with the verdict and report stages); this object only saves the checks a re-read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CampaignError
from .config import CampaignConfig

if TYPE_CHECKING:
    from ..stats.uplift_rule import UpliftVerdict

Json = dict[str, object]
Scenario = tuple[str, str]  # (arm, point)


@dataclass(frozen=True)
class RepAttempt:
    """A rep attempt that is not a measurement: why, and where its raw data was set aside."""

    arm: str
    rep: int
    attempt: int
    points: tuple[str, ...]
    cause: str
    kind: str = "failed"  # failed (dead server, nothing completed) | screened (an outlier, re-run)
    files: tuple[str, ...] = ()

    def to_dict(self) -> Json:
        return {"arm": self.arm, "rep": self.rep, "attempt": self.attempt, "points": list(self.points),
                "kind": self.kind, "cause": self.cause, "files": list(self.files)}


@dataclass
class CampaignResult:
    """What the checks assert on; everything is also on disk under ``run_dir``."""

    run_dir: Path
    pair: tuple[int, int]
    pair_key: str
    kind: str
    arms: list[str]
    points: list[str]
    reps: int
    simulated: bool
    status: str
    aggregates: dict[Scenario, Json] = field(default_factory=dict)
    rep_data: dict[Scenario, dict[int, Json]] = field(default_factory=dict)
    proofs: dict[str, Json | None] = field(default_factory=dict)
    attestations: dict[str, Json | None] = field(default_factory=dict)
    expect_transport: dict[str, str] = field(default_factory=dict)
    uplift: dict[str, Json] = field(default_factory=dict)  # point -> paired_uplift + labels
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    set_aside: list[RepAttempt] = field(default_factory=list)
    decisions: dict[str, Json] = field(default_factory=dict)  # point -> the uplift decision (stats.Decision)
    config: CampaignConfig | None = None

    def aggregate(self, arm: str, point: str) -> Json | None:
        return self.aggregates.get((arm, point))

    def flags(self, arm: str, point: str) -> dict[str, list[int]]:
        agg = self.aggregates.get((arm, point)) or {}
        got = agg.get("flags")
        if not isinstance(got, dict):
            return {"throttled_reps": [], "downtrained_reps": []}
        return {str(k): [int(x) for x in v] for k, v in got.items() if isinstance(v, list)}

    def uplift_verdict(self, point: str) -> UpliftVerdict:
        """The uplift verdict at ``point``: the campaign's own decision where it made one
        (:func:`~pytest_p2p.stats.uplift_rule.from_decision` says why), else the threshold rule applied to what
        was measured -- on the start means where the arms were resident (a campaign cut short before its
        decision), on the pairs where every rep had its own start; either at the campaign's alpha split over its
        points, as the campaign decides. Fewer than 2 starts or pairs is inconclusive.
        """
        from ..stats.uplift_rule import from_decision, judge

        cfg = self.config
        if cfg is None or cfg.arm_b is None:
            raise CampaignError("an uplift needs two arms in campaign.arms")
        rule, metric = cfg.uplift_rule_for(self.kind), cfg.metric(self.kind)
        decided = self.decisions.get(point)
        if isinstance(decided, dict):
            got = from_decision(decided, point, rule, metric=metric, faster_arm=cfg.arm_a, slower_arm=cfg.arm_b)
            if got is not None:
                return got
        up = self.uplift.get(point) or {"n": 0, "estimate": None, "ci95": None}
        if up.get("starts"):  # resident arms, no decision made: decide on the start means, at the campaign's alpha
            from .adaptive import decide_after

            a, b = self.rep_data.get((cfg.arm_a, point), {}), self.rep_data.get((cfg.arm_b, point), {})
            after = decide_after(a, b, cfg, self.kind, sorted(set(a) & set(b)), rule.threshold(point), len(self.points))
            got = from_decision(after, point, rule, metric=metric, faster_arm=cfg.arm_a, slower_arm=cfg.arm_b)
            if got is not None:
                return got
        return judge(up, point, rule.in_family(len(self.points)), metric=metric, faster_arm=cfg.arm_a,
                     slower_arm=cfg.arm_b)
