"""Family-wise error control over the judged quantities of one campaign (Holm's step-down).

Why: a campaign judges many quantities (metrics x concurrencies x arms); testing each
at alpha makes *some* false alarm nearly certain.  Holm's procedure keeps the
probability of any false alarm in the family at most ``alpha`` under any dependence
between the tests, and is uniformly more powerful than Bonferroni.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values in the input order (``None`` stays ``None`` and is not counted).

    ``adjusted_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j))`` over the ascending order;
    rejecting where ``adjusted <= alpha`` is Holm's step-down test at family-wise ``alpha``.
    """
    idx = sorted((i for i, p in enumerate(p_values) if p is not None), key=lambda i: float(p_values[i] or 0.0))
    m = len(idx)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, i in enumerate(idx):
        p = float(p_values[i] or 0.0)
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def holm_reject(p_values: Sequence[float | None], alpha: float) -> list[bool]:
    """Which hypotheses Holm rejects at family-wise ``alpha``."""
    return [p is not None and p <= alpha for p in holm_adjust(p_values)]
