"""Student-t and normal quantiles for the verdict, without scipy.

The t distribution is implemented once, in :mod:`pytest_p2p.campaign.stats` (regularized
incomplete beta by a Lentz continued fraction, inverse by bisection, exact to ~1e-10);
the verdict stage re-exports it here with the normal quantile it also needs.
"""

from __future__ import annotations

from statistics import NormalDist

from ..campaign.stats import t_cdf, t_quantile

__all__ = ["t_cdf", "t_quantile", "z_quantile"]


def z_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal."""
    return NormalDist().inv_cdf(p)
