"""The uplift threshold rule: does arm A beat arm B by enough at this point?

The rig file says ``min_uplift: {default: 5%, 8: 8%}`` (keys are concurrencies for a
model campaign, sizes for a probe campaign) and ``uplift_rule: point | ci_lower``:

* ``point``: the paired point estimate must reach the threshold. Needs >= 1 pair.
* ``ci_lower``: the lower bound of the 95 % CI must reach it — the conservative rule
  ("we are confident the uplift is at least X"). Needs >= 2 pairs; with fewer the
  rule cannot be evaluated and that is an error, never a silent pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, P2PError
from ..util import format_size, parse_size
from ..validate import join, percent

RULES = ("point", "ci_lower")
MIN_PAIRS = {"point": 1, "ci_lower": 2}


class TooFewRepsError(P2PError):
    """The chosen uplift rule needs more paired reps than the campaign produced."""


def point_key(key: Any, kind: str, source: str = "rig.yaml", path: str = "campaign.min_uplift") -> str:
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
    rule: str = "point"

    def threshold(self, point: str) -> float:
        return self.per_point.get(point, self.default)

    def min_pairs(self) -> int:
        return MIN_PAIRS[self.rule]

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default, "per_point": dict(self.per_point), "rule": self.rule}


def parse_min_uplift(value: Any, rule: str, kind: str, source: str, path: str) -> UpliftRule:
    """``5%`` (one threshold everywhere) or ``{default: 5%, 8: 8%}``."""
    if rule not in RULES:
        raise ConfigError(source, path, f"uplift rule must be one of {', '.join(RULES)}, got {rule!r}")
    if value is None:
        return UpliftRule(rule=rule)
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
    ci95: tuple[float, float] | None
    n: int
    threshold: float
    rule: str
    passed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "point": self.point, "metric": self.metric, "faster_arm": self.faster_arm,
            "slower_arm": self.slower_arm, "estimate": self.estimate,
            "ci95": list(self.ci95) if self.ci95 else None, "n": self.n,
            "threshold": self.threshold, "rule": self.rule, "passed": self.passed, "message": self.message,
        }


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def judge(uplift: Mapping[str, Any], point: str, rule: UpliftRule, *, metric: str, faster_arm: str,
          slower_arm: str) -> UpliftVerdict:
    """Apply ``rule`` to one :func:`~pytest_p2p.campaign.stats.paired_uplift` result.

    Raises :class:`TooFewRepsError` when the rule cannot be evaluated with the pairs at hand.
    """
    n = int(uplift.get("n") or 0)
    est = uplift.get("estimate")
    ci = uplift.get("ci95")
    need = rule.min_pairs()
    what = f"uplift of {faster_arm} over {slower_arm} in {metric} at {point}"
    if n < need or est is None or (rule.rule == "ci_lower" and ci is None):
        raise TooFewRepsError(
            f"{what}: the '{rule.rule}' rule needs at least {need} paired rep(s) of both arms, got {n} "
            f"(raise campaign.reps / --p2p-reps, or use uplift_rule: point)"
        )
    thr = rule.threshold(point)
    judged = float(ci[0]) if rule.rule == "ci_lower" and ci is not None else float(est)
    passed = judged >= thr
    ci_t = (float(ci[0]), float(ci[1])) if ci is not None else None
    ci_text = f", 95 % CI {_pct(ci_t[0])} .. {_pct(ci_t[1])}" if ci_t else ""
    basis = "CI lower bound" if rule.rule == "ci_lower" else "point estimate"
    verdict = "meets" if passed else "is below"
    message = (f"{what}: {_pct(float(est))}{ci_text} over {n} paired rep(s); "
               f"{basis} {_pct(judged)} {verdict} the threshold {_pct(thr)}")
    return UpliftVerdict(point=point, metric=metric, faster_arm=faster_arm, slower_arm=slower_arm,
                         estimate=float(est), ci95=ci_t, n=n, threshold=thr, rule=rule.rule,
                         passed=passed, message=message)
