"""The ``campaign:`` section of the rig file.

Example (every key optional; the values shown are the defaults unless noted)::

    campaign:
      kind: auto              # model (a server per arm and rep) | probe (NCCL all-reduce only) | auto
      arms: [p2p_on, p2p_off] # the first is "A", the second "B": uplift is A over B
      concurrency: [1, 2, 4, 8]
      sizes: [8KiB, 32KiB, 128KiB, 512KiB]   # probe campaigns: decode-size all-reduces
      reps: 3
      schedule: interleaved   # interleaved (AB-AB-AB) | abba | random
      seed: 0
      smoke: true             # one tiny request per arm before anything is timed
      warmup: 4               # warm-up requests per concurrency level, excluded from metrics
      prompts_per_concurrency: 8
      input_len: null         # null: the server section's load defaults
      output_len: null
      cooldown_s: 5
      idle_baseline_s: 2
      vram_free_timeout_s: 120
      vram_free_mib: 2048
      scenario_timeout_s: 900
      telemetry_hz: 2
      exclude_throttled: true
      min_uplift: {default: 5%, 8: 8%}
      uplift_rule: bounds     # pass/fail/inconclusive on confidence bounds (point, ci_lower: read as bounds)
      uplift_metric: output_throughput   # probe default: time_us
      uplift_direction: null  # higher | lower; null: from the metric's name
      request_timeout_s: null # null: the server section's request_timeout_s
      rep_retries: 2          # a rep whose server died (or that completed no request) is re-run this often
      max_reps: null          # adaptive: add interleaved pairs up to this many while the uplift is inconclusive
      max_time_s: null        # adaptive: ... or until this many seconds of campaign have passed

Every number is range-checked (``reps: 100000000`` or ``concurrency: 1e29`` is a
ConfigError naming the key and the range, not a hang or a MemoryError an hour later).

Why these knobs: the NCCL env is fixed at process start, so an arm switch costs a
server start; cooldown and waiting for VRAM to be free keep one rep's leftovers out
of the next; telemetry decides whether a rep is trustworthy (throttling, link
downtraining) and ``exclude_throttled`` whether untrustworthy reps are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from ..stats.uplift_rule import RULES, UpliftRule, parse_min_uplift
from ..util import format_size
from ..validate import boolean, float_in, int_in, join, mapping, sequence, size, string
from .schedule import MODES

KINDS = ("auto", "model", "probe")
DEFAULT_SIZES = (8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024)


def metric_direction(metric: str) -> str | None:
    """``higher``/``lower`` from the metric registry (:mod:`pytest_p2p.metrics`, the one definition);
    ``None`` for a metric that is unknown or informational (cannot decide an uplift)."""
    from ..metrics import direction

    got = direction(metric)
    return got if got in ("higher", "lower") else None


# Upper bounds: far beyond any real campaign, low enough that a typo cannot hang or exhaust memory.
MAX_REPS = 1000
MAX_CONCURRENCY = 4096
MAX_PROMPTS = 100_000
MAX_TOKENS = 1_000_000
MAX_SIZE = 16 * 1024**3
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


_KEYS = (
    "kind", "arms", "concurrency", "sizes", "reps", "schedule", "seed", "smoke", "warmup",
    "prompts_per_concurrency", "input_len", "output_len", "cooldown_s", "idle_baseline_s",
    "vram_free_timeout_s", "vram_free_mib", "scenario_timeout_s", "telemetry_hz", "exclude_throttled",
    "min_uplift", "uplift_rule", "uplift_metric", "uplift_direction", "request_timeout_s",
    "rep_retries", "max_reps", "max_time_s",
)


@dataclass(frozen=True)
class CampaignConfig:
    kind: str = "auto"
    arms: tuple[str, ...] = ("p2p_on", "p2p_off")
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    sizes: tuple[int, ...] = DEFAULT_SIZES
    reps: int = 4  # even, with abba: linear drift cancels in the uplift (docs/baselines.md)
    schedule: str = "abba"
    seed: int = 0
    smoke: bool = True
    warmup: int = 4
    prompts_per_concurrency: int = 8
    input_len: int | None = None
    output_len: int | None = None
    cooldown_s: float = 5.0
    idle_baseline_s: float = 2.0
    vram_free_timeout_s: float = 120.0
    vram_free_mib: int = 2048
    scenario_timeout_s: float = 900.0
    telemetry_hz: float = 2.0
    exclude_throttled: bool = True
    min_uplift_raw: Any = None
    uplift_rule: str = "point"
    uplift_metric: str | None = None
    uplift_direction: str | None = None
    request_timeout_s: float | None = None
    rep_retries: int = 2
    max_reps: int | None = None
    max_time_s: float | None = None
    source: str = "rig.yaml"
    explicit: frozenset[str] = field(default_factory=frozenset)  # keys the rig file set

    # -- derived -------------------------------------------------------------------------
    def resolve_kind(self, has_server: bool) -> str:
        if self.kind != "auto":
            return self.kind
        return "model" if has_server else "probe"

    def points(self, kind: str) -> list[str]:
        """Point labels: ``c<N>`` for a model campaign, ``s<size>`` for a probe campaign."""
        if kind == "model":
            return [f"c{c}" for c in self.concurrency]
        return [f"s{format_size(s)}" for s in self.sizes]

    def metric(self, kind: str) -> str:
        return self.uplift_metric or ("output_throughput" if kind == "model" else "time_us")

    def direction(self, kind: str) -> str:
        metric = self.metric(kind)
        got = self.uplift_direction or metric_direction(metric)
        if got is None:
            raise ConfigError(self.source, "campaign.uplift_direction",
                              f"metric {metric!r} has no known direction: set uplift_direction: higher|lower")
        return got

    def uplift_rule_for(self, kind: str) -> UpliftRule:
        """The threshold rule; with adaptive pairs (``max_reps`` above ``reps``) it carries the sequential plan,
        so a verdict at ``n`` pairs uses that look's alpha (the error rate holds across looks)."""
        rule = parse_min_uplift(self.min_uplift_raw, self.uplift_rule, kind, self.source, "campaign.min_uplift")
        if self.max_reps is not None and self.max_reps > self.reps:
            rule = replace(rule, plan=(self.reps, self.max_reps))
        return rule

    @property
    def arm_a(self) -> str:
        return self.arms[0]

    @property
    def arm_b(self) -> str | None:
        return self.arms[1] if len(self.arms) > 1 else None

    def with_overrides(self, *, reps: int | None = None, arms: list[str] | None = None,
                       kind: str | None = None) -> CampaignConfig:
        """Command-line overrides (``--p2p-reps``, ``--p2p-arms``, ``--p2p-campaign``)."""
        out = self
        if reps is not None:
            reps = int_in(reps, "--p2p-reps", "", 1, MAX_REPS)
            out = replace(out, reps=reps, max_reps=None if out.max_reps is None else max(out.max_reps, reps))
        if arms:
            out = replace(out, arms=tuple(arms))
        if kind is not None:
            out = replace(out, kind=kind)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every rig-file key but ``min_uplift`` (run.json records the parsed rule under ``uplift.rule``)."""
        return {k: getattr(self, k) for k in _KEYS if k != "min_uplift"}


def _int_list(value: Any, source: str, path: str, hi: int) -> tuple[int, ...]:
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else sequence(value, source, path)
    out = tuple(int_in(v, source, join(path, i), 1, hi) for i, v in enumerate(items))
    if not out:
        raise ConfigError(source, path, "expected at least one value")
    if len(set(out)) != len(out):
        raise ConfigError(source, path, f"values repeat: {list(out)}")
    return out


def parse_campaign(value: Any, source: str, path: str = "campaign") -> CampaignConfig:
    """Validate the ``campaign:`` section; ``None`` gives the defaults."""
    m = mapping(value, source, path, allowed=_KEYS)
    kw: dict[str, Any] = {"source": source, "explicit": frozenset(m)}

    def p(key: str) -> str:
        return join(path, key)

    if "kind" in m:
        kw["kind"] = string(m["kind"], source, p("kind"), KINDS)
    if "arms" in m:
        arms = tuple(string(a, source, join(p("arms"), i)) for i, a in enumerate(sequence(m["arms"], source,
                                                                                          p("arms"))))
        if not arms:
            raise ConfigError(source, p("arms"), "expected at least one arm")
        if len(set(arms)) != len(arms):
            raise ConfigError(source, p("arms"), f"arm names repeat: {list(arms)}")
        kw["arms"] = arms
    if "concurrency" in m:
        kw["concurrency"] = _int_list(m["concurrency"], source, p("concurrency"), MAX_CONCURRENCY)
    if "sizes" in m:
        sizes = tuple(size(v, source, join(p("sizes"), i)) for i, v in enumerate(sequence(m["sizes"], source,
                                                                                          p("sizes"))))
        if not sizes or any(s <= 0 or s > MAX_SIZE for s in sizes):
            raise ConfigError(source, p("sizes"), f"expected a list of sizes from 1 B to {format_size(MAX_SIZE)} "
                                                  "like [8KiB, 128KiB]")
        kw["sizes"] = sizes
    for key, lo, hi in (("reps", 1, MAX_REPS), ("seed", 0, 2**32 - 1), ("warmup", 0, MAX_PROMPTS),
                        ("prompts_per_concurrency", 1, MAX_PROMPTS), ("vram_free_mib", 0, 10**7),
                        ("rep_retries", 0, 10)):
        if key in m:
            kw[key] = int_in(m[key], source, p(key), lo, hi)
    for key in ("input_len", "output_len"):
        if key in m and m[key] is not None:
            kw[key] = int_in(m[key], source, p(key), 1, MAX_TOKENS)
    if "max_reps" in m and m["max_reps"] is not None:
        kw["max_reps"] = int_in(m["max_reps"], source, p("max_reps"), 1, MAX_REPS)
    for key in ("cooldown_s", "idle_baseline_s", "vram_free_timeout_s"):
        if key in m:
            kw[key] = float_in(m[key], source, p(key), 0, DAY_S)
    for key, hi_s in (("scenario_timeout_s", WEEK_S), ("request_timeout_s", DAY_S), ("max_time_s", WEEK_S)):
        if key in m and m[key] is not None:
            kw[key] = float_in(m[key], source, p(key), 0.001, hi_s)
    if "telemetry_hz" in m:
        kw["telemetry_hz"] = float_in(m["telemetry_hz"], source, p("telemetry_hz"), 1, 10)
    for key in ("smoke", "exclude_throttled"):
        if key in m:
            kw[key] = boolean(m[key], source, p(key))
    if "schedule" in m:
        kw["schedule"] = string(m["schedule"], source, p("schedule"), MODES)
    if "uplift_rule" in m:
        kw["uplift_rule"] = string(m["uplift_rule"], source, p("uplift_rule"), RULES)
    if "uplift_metric" in m and m["uplift_metric"] is not None:
        kw["uplift_metric"] = string(m["uplift_metric"], source, p("uplift_metric"))
    if "uplift_direction" in m and m["uplift_direction"] is not None:
        kw["uplift_direction"] = string(m["uplift_direction"], source, p("uplift_direction"), ("higher", "lower"))
    if "min_uplift" in m:
        kw["min_uplift_raw"] = m["min_uplift"]
    cfg = CampaignConfig(**kw)
    # Validate the threshold table now (for whichever kinds it could be used with), not mid-campaign.
    kinds = ("model", "probe") if cfg.kind == "auto" else (cfg.kind,)
    errors: list[ConfigError] = []
    for kind in kinds:
        try:
            cfg.uplift_rule_for(kind)
        except ConfigError as exc:
            errors.append(exc)
    if len(errors) == len(kinds):
        raise errors[0]
    if cfg.max_reps is not None and cfg.max_reps < cfg.reps:
        raise ConfigError(source, p("max_reps"), f"max_reps ({cfg.max_reps}) is below reps ({cfg.reps}): adaptive "
                                                 "repetitions only add pairs")
    if cfg.uplift_rule == "ci_lower" and cfg.reps < 2:
        raise ConfigError(source, p("reps"), f"uplift_rule ci_lower needs reps >= 2 (a CI needs spread), got "
                                             f"{cfg.reps}")
    if cfg.uplift_metric is not None and cfg.uplift_direction is None:
        cfg.direction("model")  # raises for an unknown metric without a direction
    return cfg
