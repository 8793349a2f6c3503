"""Student-t and normal quantiles for the verdict, without scipy.

Kept for callers that import them from here; the one implementation lives in the
stage-free decision library, :mod:`pytest_p2p.stats.tdist`.
"""

from __future__ import annotations

from ..stats.tdist import t_cdf, t_quantile, z_quantile

__all__ = ["t_cdf", "t_quantile", "z_quantile"]
