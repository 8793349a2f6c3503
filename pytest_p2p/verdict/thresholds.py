"""The uplift threshold rule, re-exported from the stage-free :mod:`pytest_p2p.stats.uplift_rule`.

Kept so that existing imports work; new code (the campaign in particular, which must not
import a later stage) imports ``pytest_p2p.stats.uplift_rule``.
"""

from __future__ import annotations

from ..stats.uplift_rule import (
    DEFAULT_ALPHA,
    MIN_PAIRS,
    RULES,
    TooFewRepsError,
    UpliftRule,
    UpliftVerdict,
    judge,
    parse_min_uplift,
    point_key,
)

__all__ = ["DEFAULT_ALPHA", "MIN_PAIRS", "RULES", "TooFewRepsError", "UpliftRule", "UpliftVerdict", "judge",
           "parse_min_uplift", "point_key"]
