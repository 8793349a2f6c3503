"""The ``baseline:`` section of the rig file: where history lives and how strictly to judge.

Defaults come from ``benchmarks/verdict_power.py`` (see docs/baselines.md): the 20 most
recent accepted runs, a campaign-level family-wise alpha of 1 % (Holm over every primary
of every scenario and the uplift history), a 3 % practical tolerance and at least 3
baseline runs keep false alarms of unchanged campaigns under 1 % per campaign while
catching a 10 % drop of a primary metric (see the table there for the conditions).  With the
campaign's resident default (3 starts x 4 windows) and 10 baseline runs, a -10 % drop confined
to one scenario is found in >= 95 % of campaigns while the run-to-run spread is <= 1 % (table 6,
"Power at the defaults"); a campaign that cannot reach that says so in its verdict
(``campaign_judge._power``).

```yaml
baseline:
  db: .p2p/history.db        # relative to the rootdir
  name: accepted             # default baseline for --p2p-compare
  depth: 20                  # most recent accepted runs comparable with tonight, per key
  rule: noise                # noise (bounds + tolerance) | fixed (tolerance only)
  alpha: 1%                  # family-wise false-alarm rate of a whole campaign (Holm)
  min_reps: 2
  min_runs: 3                # fewer baseline runs: inconclusive "baseline too short" unless far off
  primary: [output_throughput]  # only these can fail (default: the metric registry's per kind)
  uplift_tolerance: 3%       # a drop of the on/off uplift ratio against its history worth failing
  tolerance:
    default: 3%
    mean_ttft_ms: {rel: 10%, abs: 2.0}
  directions: {my_metric: higher}
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..metrics import default_primaries, direction
from ..schema import bounded, key, key_factory, load, word
from ..validate import join, mapping, number, percent, sequence, string

DEFAULT_DB = ".p2p/history.db"
DEFAULT_NAME = "accepted"
RULES = ("noise", "fixed")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Tolerance:
    """A change smaller than ``max(rel * |baseline|, abs)`` is not worth failing CI for."""

    rel: float = 0.03
    abs: float = 0.0

    def threshold(self, baseline: float) -> float:
        return max(self.rel * abs(baseline), self.abs)


def check_name(name: object, source: str, path: str = "") -> str:
    """Baseline names are short identifiers (so that ``--p2p-compare tests/`` is caught, not used)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(source, path, f"a baseline name is letters, digits, '.', '_' or '-' "
                                        f"(at most 64, e.g. 'accepted', 'pre-driver-upgrade'), got {name!r}")
    return name


def _tolerance(value: object, source: str, path: str) -> Tolerance:
    if isinstance(value, Mapping):
        m = mapping(value, source, path, allowed=("rel", "abs"))
        rel = percent(m["rel"], source, join(path, "rel")) if "rel" in m else 0.0
        ab = number(m["abs"], source, join(path, "abs"), lo=0.0) if "abs" in m else 0.0
        tol = Tolerance(rel=rel, abs=ab)
    else:
        tol = Tolerance(rel=percent(value, source, path), abs=0.0)
    if tol.rel < 0 or tol.rel >= 1:
        raise ConfigError(source, path, f"a relative tolerance must be in [0 %, 100 %), got {tol.rel:.1%}")
    return tol


def _alpha(value: object, source: str, path: str) -> float:
    alpha = percent(value, source, path)
    if not 1e-6 <= alpha <= 0.2:
        raise ConfigError(source, path, f"expected 0.0001 % .. 20 %, got {alpha:.4%}")
    return alpha


def _directions(value: object, source: str, path: str) -> dict[str, str]:
    return {k: string(d, source, join(path, k), choices=("higher", "lower"))
            for k, d in mapping(value, source, path).items()}


@dataclass(frozen=True)
class BaselineConfig:
    """The section, one field per key (:mod:`pytest_p2p.schema`); ``tolerance`` and ``primary``: parse_baseline."""

    db: str | None = key(None, word())  # None: DEFAULT_DB under the rootdir
    name: str = key(DEFAULT_NAME, check_name, accepts="letters, digits, `.`, `_`, `-` (at most 64)")
    depth: int = key(20, bounded(1, 1000))
    rule: str = key("noise", word(*RULES))
    # family-wise over the campaign's primaries
    alpha: float = key(0.01, _alpha, accepts="a percentage 0.0001 % .. 20 %")
    min_reps: int = key(2, bounded(1, 1000))
    min_runs: int = key(3, bounded(1, 1000))
    default_tolerance: Tolerance = Tolerance()
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    # metric -> "higher" | "lower"
    directions: Mapping[str, str] = key_factory(dict, _directions, accepts="`{metric: higher \\| lower}`")
    primary: tuple[str, ...] = ()  # empty: metrics.default_primaries(kind, point)
    # None: the primary metric's relative tolerance
    uplift_tolerance: float | None = key(None, lambda v, s, p: _tolerance(v, s, p).rel,
                                            accepts="a percentage 0 % .. 100 %")

    def tolerance(self, metric: str) -> Tolerance:
        return self.tolerances.get(metric, self.default_tolerance)

    def primaries(self, kind: str | None, point: str) -> tuple[str, ...]:
        """The metrics of this scenario that can fail the check."""
        return self.primary or default_primaries(kind or "model", point)


def parse_baseline(value: object, source: str, path: str) -> BaselineConfig:
    """Parse the ``baseline`` section (``None``: defaults)."""
    cfg, m = load(BaselineConfig, value, source, path, also=("tolerance", "primary"))
    if "tolerance" in m:
        tpath = join(path, "tolerance")
        tols: dict[str, Tolerance] = {}
        raw = m["tolerance"]
        if not isinstance(raw, Mapping):
            cfg = replace(cfg, default_tolerance=_tolerance(raw, source, tpath))
        else:
            for metric, tv in mapping(raw, source, tpath).items():
                tol = _tolerance(tv, source, join(tpath, metric))
                if metric == "default":
                    cfg = replace(cfg, default_tolerance=tol)
                else:
                    tols[metric] = tol
        cfg = replace(cfg, tolerances=tols)
    if "primary" in m:
        ppath = join(path, "primary")
        raw_p = m["primary"]
        names = [raw_p] if isinstance(raw_p, str) else sequence(raw_p, source, ppath)
        prim = []
        for i, name in enumerate(names):
            text = string(name, source, join(ppath, str(i)))
            if direction(text, cfg.directions) not in ("higher", "lower"):
                raise ConfigError(source, ppath, f"primary metric {text!r} has no direction to judge "
                                                 "(add it under baseline.directions)")
            prim.append(text)
        cfg = replace(cfg, primary=tuple(prim))
    return cfg
