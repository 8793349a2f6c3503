"""An interval for the ratio of two unpaired means (Welch), for results that were never paired.

Why a separate rule: two separate p2p-bench runs (P2P on, then P2P off) share no rep index,
so a paired interval would pair values that have nothing in common. The ratio of the means
is what p2p-bench reports; its interval is Welch's on the log scale (delta method for the
log of each mean), with Welch-Satterthwaite degrees of freedom.
"""

from __future__ import annotations

import math

from .tdist import t_quantile


def welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of ``va + vb``, each the variance of a mean of ``na`` / ``nb``
    values (both sides at least 2 values, not both zero)."""
    return (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))


def welch_ratio_interval(a: tuple[float, float, int], b: tuple[float, float, int], *,
                         level: float = 0.95) -> tuple[float, float] | None:
    """``(lower, upper)`` of ``mean_a / mean_b - 1`` from each arm's ``(mean, sample std, n)``.

    None when an arm has fewer than 2 values, no spread is known or a mean is not positive.
    """
    (ma, sa, na), (mb, sb, nb) = a, b
    if na < 2 or nb < 2 or ma <= 0 or mb <= 0 or sa < 0 or sb < 0:
        return None
    va, vb = (sa / ma) ** 2 / na, (sb / mb) ** 2 / nb  # variance of log(mean) by the delta method
    se = math.sqrt(va + vb)
    if se == 0.0:
        return None
    half = t_quantile(0.5 + level / 2, welch_df(va, na, vb, nb)) * se
    centre = math.log(ma / mb)
    return math.exp(centre - half) - 1.0, math.exp(centre + half) - 1.0
