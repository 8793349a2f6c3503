"""The uplift threshold rule: does arm A beat arm B by enough at this point?

Stage-free (here, not in the verdict stage) so that the campaign, which parses
``campaign.min_uplift`` and takes adaptive looks, never imports a later stage; the
verdict and the report import it from here too (one home, no re-export).

The rig file says ``min_uplift: {default: 5%, 8: 8%}`` (keys are concurrencies for a
model campaign, sizes for a probe campaign).  The rule is
:func:`pytest_p2p.stats.decide_uplift` — three outcomes on one-sided confidence bounds at
``alpha`` (default 1 %): **pass** when the lower bound clears the threshold, **fail** when
the upper bound is below it, **inconclusive** otherwise, with the pairs that would decide.
Why not the point estimate: on 3 noisy pairs it passed a true 0 % uplift in up to 23 %
of campaigns and failed a true +9 % one in up to 28 % (issue 9).  Each kind of wrong
verdict now has probability at most ``alpha``.

``uplift_rule`` is kept for old rig files: ``bounds`` (the rule above), and the former
``point`` / ``ci_lower`` are read as ``bounds`` (a point estimate is never judged).
When the campaign adds pairs adaptively (``plan = (first look, max pairs)``), the
verdict at ``n`` pairs uses the per-look alpha of :class:`~pytest_p2p.stats.SequentialPlan`,
so the error rate holds across the looks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import SupportsFloat, SupportsIndex

from ..errors import ConfigError
from ..jsontypes import JSONObject, as_float, as_int
from ..util import format_size, parse_size
from ..validate import join, percent
from .decide import Outcome, SequentialPlan, decide_uplift
from .tdist import StatsError

RULES = ("bounds", "point", "ci_lower")
MIN_PAIRS = {"bounds": 2, "point": 2, "ci_lower": 2}
DEFAULT_ALPHA = 0.01


def point_key(key: object, kind: str, source: str = "rig.yaml", path: str = "campaign.min_uplift") -> str:
    """Normalise a ``min_uplift`` key to a point label: ``8`` -> ``c8`` (model), ``8KiB`` -> ``s8KiB`` (probe)."""
    if isinstance(key, bool):
        raise ConfigError(source, path, f"expected a concurrency or size key, got {key!r}")
    text = str(key).strip()
    if kind == "model":
        digits = text[1:] if text[:1] in ("c", "C") else text
        if digits.isdigit() and int(digits) > 0:
            return f"c{int(digits)}"
        raise ConfigError(source, join(path, text), "expected a concurrency like 8 or 'c8' (or 'default')")
    try:
        return "s" + format_size(parse_size(text[1:] if text[:1] in ("s", "S") else text))
    except ValueError:
        raise ConfigError(source, join(path, text), "expected a size like '8KiB' (or 'default')") from None


@dataclass(frozen=True)
class UpliftRule:
    """Thresholds per point (fractions: 0.05 = 5 %) and how they are judged."""

    default: float = 0.05
    per_point: Mapping[str, float] = field(default_factory=dict)
    rule: str = "bounds"
    alpha: float = DEFAULT_ALPHA
    plan: tuple[int, int] | None = None  # (first look, max pairs) when pairs are added adaptively

    def threshold(self, point: str) -> float:
        return self.per_point.get(point, self.default)

    def min_pairs(self) -> int:
        return MIN_PAIRS[self.rule]

    def family_alpha(self, points: int) -> float:
        """The one-sided alpha of each point's decision in a campaign: one family per campaign, so a wrong verdict
        at any of its ``points`` has probability at most :attr:`alpha` (Bonferroni)."""
        return self.alpha / max(1, points)

    def in_family(self, points: int) -> UpliftRule:
        """This rule with its alpha split over a campaign's ``points`` (:meth:`family_alpha`): how a campaign judges
        each point, also where it is judged again from its files."""
        return replace(self, alpha=self.family_alpha(points))

    def alpha_for(self, pairs: int) -> float:
        """The one-sided alpha of a verdict taken at ``pairs`` pairs (per-look alpha under a plan)."""
        if self.plan is None:
            return self.alpha
        first, last = self.plan
        sp = SequentialPlan(self.alpha, max(1, min(first, last)), max(first, last))
        return sp.alpha_at(min(max(pairs, sp.min_pairs), sp.max_pairs))

    def to_dict(self) -> JSONObject:
        return {"default": self.default, "per_point": dict(self.per_point), "rule": self.rule,
                "alpha": self.alpha, "plan": list(self.plan) if self.plan else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, object], rule: str) -> UpliftRule:
        """The inverse of :meth:`to_dict` (absent keys: the defaults), with ``rule`` the rule's name as the caller
        resolved it. Raises ``ValueError`` (or ``TypeError``) where a value is not what :meth:`to_dict` writes."""
        per_point = d.get("per_point") or {}
        if not isinstance(per_point, Mapping):
            raise ValueError("per_point is not a mapping")
        plan = d.get("plan")
        if plan is not None and not (isinstance(plan, list) and len(plan) == 2):
            raise ValueError("plan is not [first, last]")
        alpha = _number(d.get("alpha", DEFAULT_ALPHA))
        if not 0 < alpha < 0.5:
            raise ValueError("alpha is not in (0, 0.5)")
        return cls(default=_number(d.get("default", 0.05)),
                   per_point={str(k): _number(v) for k, v in per_point.items()}, rule=rule, alpha=alpha,
                   plan=(int(_number(plan[0])), int(_number(plan[1]))) if plan is not None else None)


def _number(value: object) -> float:
    """``float(value)`` for what JSON can hold; TypeError for null, a list or an object (as float() raises)."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not {type(value).__name__!r}")


def parse_min_uplift(value: object, rule: str, kind: str, source: str, path: str) -> UpliftRule:
    """``5%`` (one threshold everywhere) or ``{default: 5%, 8: 8%}``."""
    if rule not in RULES:
        raise ConfigError(source, path, f"uplift rule must be one of {', '.join(RULES)}, got {rule!r}")
    if value is None:
        return UpliftRule(rule=rule)
    # ``rule`` is validated above; every rule name is judged on bounds (see the module doc)
    if not isinstance(value, Mapping):
        return UpliftRule(default=percent(value, source, path), rule=rule)
    default = 0.05
    per: dict[str, float] = {}
    for key, val in value.items():  # not validate.mapping: YAML gives int keys for ``8: 8%``
        if key == "default":
            default = percent(val, source, join(path, key))
        else:
            per[point_key(key, kind, source, path)] = percent(val, source, join(path, key))
    return UpliftRule(default=default, per_point=per, rule=rule)


@dataclass(frozen=True)
class UpliftVerdict:
    point: str
    metric: str
    faster_arm: str
    slower_arm: str
    estimate: float | None
    ci95: tuple[float, float] | None  # the decision interval, coverage ``level`` (1 - 2 alpha)
    n: int
    threshold: float
    rule: str
    passed: bool  # outcome == "pass"
    message: str
    outcome: str = "pass"  # pass | fail | inconclusive
    pairs_needed: int | None = None
    level: float | None = None

    @property
    def inconclusive(self) -> bool:
        return self.outcome == Outcome.INCONCLUSIVE.value

    def to_dict(self) -> JSONObject:
        return {
            "point": self.point, "metric": self.metric, "faster_arm": self.faster_arm,
            "slower_arm": self.slower_arm, "estimate": self.estimate,
            "ci95": list(self.ci95) if self.ci95 else None, "n": self.n,
            "threshold": self.threshold, "rule": self.rule, "passed": self.passed, "message": self.message,
            "outcome": self.outcome, "pairs_needed": self.pairs_needed, "level": self.level,
        }


def _ratios(value: object) -> list[float]:
    """The ``ratios`` of a paired-uplift result as floats; a wrong shape raises ``TypeError`` like ``float()``."""
    if not value:
        return []
    if not isinstance(value, Iterable):
        raise TypeError(f"'{type(value).__name__}' object is not iterable")
    out: list[float] = []
    for r in value:
        if not isinstance(r, (str, bytes, bytearray, SupportsFloat, SupportsIndex)):
            raise TypeError(f"float() argument must be a string or a real number, not '{type(r).__name__}'")
        out.append(float(r))
    return out


def judge(uplift: Mapping[str, object], point: str, rule: UpliftRule, *, metric: str, faster_arm: str,
          slower_arm: str) -> UpliftVerdict:
    """Apply the bounds rule to one :func:`~pytest_p2p.stats.summary.paired_uplift` result.

    Uses the paired ratios it carries (already turned round for lower-is-better metrics).
    Fewer than 2 pairs is *inconclusive* (no spread known), never a pass and never an error.
    """
    ratios = _ratios(uplift.get("ratios"))
    thr = rule.threshold(point)
    what = f"uplift of {faster_arm} over {slower_arm} in {metric} at {point}"
    alpha = rule.alpha_for(len(ratios))
    try:
        d = decide_uplift(ratios, [1.0] * len(ratios), threshold=thr, alpha=alpha, quantity=what)
    except StatsError as exc:
        d = None
        message = f"{what}: cannot be judged ({exc})"
    if d is None or not ratios:
        message = f"{what}: no paired reps of both arms to judge" if not ratios else message
        return UpliftVerdict(point=point, metric=metric, faster_arm=faster_arm, slower_arm=slower_arm,
                             estimate=None, ci95=None, n=len(ratios), threshold=thr, rule=rule.rule, passed=False,
                             message=message, outcome=Outcome.INCONCLUSIVE.value, pairs_needed=None)
    ci = (d.lower, d.upper) if d.n >= 2 else None
    message = d.reason + f" (one-sided alpha {alpha:.3g} per wrong verdict)"
    return UpliftVerdict(point=point, metric=metric, faster_arm=faster_arm, slower_arm=slower_arm,
                         estimate=d.estimate, ci95=ci, n=d.n, threshold=thr, rule=rule.rule,
                         passed=d.outcome is Outcome.PASS, message=message, outcome=d.outcome.value,
                         pairs_needed=d.pairs_needed, level=d.level)


@dataclass(frozen=True)
class DecisionRecord:
    """A campaign's uplift decision as ``run.json`` keeps it (``campaign.adaptive.decision_json``), read once for
    the check (:func:`from_decision`) and the report (``report.render``)."""

    outcome: str  # pass | fail | inconclusive
    estimate: float | None
    lower: float | None
    upper: float | None
    level: float
    pairs_needed: int | None
    needed_unit: str  # what pairs_needed counts: "pairs", or "starts" for resident arms
    reason: str | None
    stopped: str | None


def read_decision(decision: Mapping[str, object], faster_arm: str, slower_arm: str) -> DecisionRecord | None:
    """``decision`` if it decides the uplift of ``faster_arm`` over ``slower_arm`` with an outcome and a level,
    else ``None``."""
    outcome, level = decision.get("outcome"), as_float(decision.get("level"))
    if (not str(decision.get("quantity") or "").startswith(f"uplift of {faster_arm} over {slower_arm}")
            or outcome not in ("pass", "fail", "inconclusive") or level is None):
        return None
    reason, stopped = decision.get("reason"), decision.get("stopped")
    return DecisionRecord(str(outcome), as_float(decision.get("estimate")), as_float(decision.get("lower")),
                          as_float(decision.get("upper")), level, as_int(decision.get("pairs_needed")),
                          str(decision.get("needed_unit") or "pairs"), reason if isinstance(reason, str) else None,
                          stopped if isinstance(stopped, str) and stopped else None)


def from_decision(decision: Mapping[str, object], point: str, rule: UpliftRule, *, metric: str, faster_arm: str,
                  slower_arm: str) -> UpliftVerdict | None:
    """The campaign's own decision at ``point`` (``run.json``'s ``decisions``, ``adaptive.decision_json``) as a
    verdict, or ``None`` where it is not a decision on these two arms.

    Why not :func:`judge` again: the campaign decides on its own unit and alpha -- resident arms on the start
    means (windows nest in server starts), its alpha split over its points and spent over its looks -- and its
    report shows that decision. The check judged the window pairs anew, as if each had its own server start,
    at another level: on 2x H100 (2026-11-27, 2 starts) the report said 99 % CI -98.8 .. +11704.8 % and the
    check 98 % CI -87.8 .. +1092.3 %; with 2 windows a start its interval is too narrow, and red could
    mean a start-to-start difference. One decision, one interval, one level, everywhere.
    """
    d = read_decision(decision, faster_arm, slower_arm)
    if d is None:
        return None
    quantity = f"uplift of {faster_arm} over {slower_arm}"
    message = ((d.reason or f"{quantity}: {d.outcome}").replace(quantity, f"{quantity} in {metric} at {point}", 1)
               + f" (one-sided alpha {(1 - d.level) / 2:.3g} per wrong verdict: the campaign's decision"
               + (f"; adding {d.needed_unit} stopped: {d.stopped})" if d.outcome == "inconclusive" and d.stopped
                  else ")"))
    return UpliftVerdict(point=point, metric=metric, faster_arm=faster_arm, slower_arm=slower_arm,
                         estimate=d.estimate,
                         ci95=(d.lower, d.upper) if d.lower is not None and d.upper is not None else None,
                         n=as_int(decision.get("n")) or 0, threshold=rule.threshold(point), rule=rule.rule,
                         passed=d.outcome == "pass", message=message, outcome=d.outcome,
                         pairs_needed=d.pairs_needed, level=d.level)
