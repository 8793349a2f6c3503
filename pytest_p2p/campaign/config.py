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
      residency: auto         # model: resident (both arms' servers up at once, GPU memory split) | sleep
                              # (vLLM sleep mode: the idle arm sleeps) | restart (a server start per rep) | auto
                              # (resident; sleep when the two servers do not fit on the pair, said in the notes)
      starts: 3               # resident/sleep: server starts per arm (the unit of replication)
      windows: 4              # resident/sleep: window pairs per point within one start, ABBA over windows
      window_s: 15            # resident/sleep: seconds of measured load per window (null: prompts_per_concurrency)
      max_starts: null        # resident/sleep adaptive: add starts up to this many while the uplift is inconclusive

Every number is range-checked (``reps: 100000000`` or ``concurrency: 1e29`` is a
ConfigError naming the key and the range, not a hang or a MemoryError an hour later).

Why these knobs: the NCCL env is fixed at process start, so an arm switch costs a
server start -- unless both arms' servers stay resident (``residency``): then the arms
alternate over short measurement windows (ABBA) inside one start of each, the start is
sampled a few times per campaign (``starts``) because a server start has an effect of
its own, and most of the wall time is measured load instead of vLLM start-ups
(docs/campaign-design.md); cooldown and waiting for VRAM to be free keep one rep's leftovers out
of the next; telemetry decides whether a rep is trustworthy (throttling, link
downtraining) and ``exclude_throttled`` whether untrustworthy reps are dropped.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from ..errors import ConfigError
from ..jsontypes import JSONObject
from ..options import MAX_REPS
from ..stats.uplift_rule import RULES, UpliftRule, parse_min_uplift
from ..util import format_size
from ..validate import boolean, float_in, int_in, join, mapping, sequence, size, string
from .schedule import MODES

KINDS = ("auto", "model", "probe")
RESIDENCY = ("auto", "resident", "sleep", "restart")
MAX_STARTS = 100
MAX_WINDOWS = 1000
T = TypeVar("T", bound=Hashable)
DEFAULT_SIZES = (8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024)


def metric_direction(metric: str) -> str | None:
    """``higher``/``lower`` from the metric registry (:mod:`pytest_p2p.metrics`, the one definition);
    ``None`` for a metric that is unknown or informational (cannot decide an uplift)."""
    from ..metrics import direction

    got = direction(metric)
    return got if got in ("higher", "lower") else None


# Upper bounds: far beyond any real campaign, low enough that a typo cannot hang or exhaust memory.
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
    "rep_retries", "max_reps", "max_time_s", "residency", "starts", "windows", "window_s", "max_starts",
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
    min_uplift_raw: object = None  # as the rig file wrote it; parsed per kind by uplift_rule_for
    uplift_rule: str = "point"
    uplift_metric: str | None = None
    uplift_direction: str | None = None
    request_timeout_s: float | None = None
    rep_retries: int = 2
    max_reps: int | None = None
    max_time_s: float | None = None
    residency: str = "auto"
    starts: int = 3
    windows: int = 4
    window_s: float | None = 15.0
    max_starts: int | None = None
    source: str = "rig.yaml"
    explicit: frozenset[str] = field(default_factory=frozenset)  # keys the rig file set

    # -- derived -------------------------------------------------------------------------
    def resolve_kind(self, has_server: bool) -> str:
        if self.kind != "auto":
            return self.kind
        return "model" if has_server else "probe"

    def resident_mode(self, kind: str) -> str | None:
        """``resident`` or ``sleep`` when a model campaign keeps its arms' servers up across windows;
        ``None`` for the restart-per-rep design (and for probe campaigns: a probe process is cheap)."""
        if kind != "model" or self.arm_b is None or self.residency == "restart":
            return None
        return "sleep" if self.residency == "sleep" else "resident"

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
            # the replicate count of either design: reps (a server start each) or starts (resident arms)
            starts = min(reps, MAX_STARTS)
            out = replace(out, reps=reps, max_reps=None if out.max_reps is None else max(out.max_reps, reps),
                          starts=starts, max_starts=None if out.max_starts is None else max(out.max_starts, starts))
        if arms:
            out = replace(out, arms=tuple(arms))
        if kind is not None:
            out = replace(out, kind=kind)
        return out

    def to_dict(self) -> JSONObject:
        """Every rig-file key but ``min_uplift`` (run.json records the parsed rule under ``uplift.rule``)."""
        return {k: getattr(self, k) for k in _KEYS if k != "min_uplift"}


def _int_list(value: object, source: str, path: str, hi: int) -> tuple[int, ...]:
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else sequence(value, source, path)
    return _distinct(tuple(int_in(v, source, join(path, i), 1, hi) for i, v in enumerate(items)), source, path,
                     "value", "values")


def _arms(value: object, source: str, path: str) -> tuple[str, ...]:
    return _distinct(tuple(string(a, source, join(path, i)) for i, a in enumerate(sequence(value, source, path))),
                     source, path, "arm", "arm names")


def _distinct(items: tuple[T, ...], source: str, path: str, one: str, many: str) -> tuple[T, ...]:
    """``items`` if there is at least one and none repeats; else the error naming ``path``."""
    if not items:
        raise ConfigError(source, path, f"expected at least one {one}")
    if len(set(items)) != len(items):
        raise ConfigError(source, path, f"{many} repeat: {list(items)}")
    return items


def _sizes(value: object, source: str, path: str) -> tuple[int, ...]:
    sizes = tuple(size(v, source, join(path, i)) for i, v in enumerate(sequence(value, source, path)))
    if not sizes or any(s <= 0 or s > MAX_SIZE for s in sizes):
        raise ConfigError(source, path, f"expected a list of sizes from 1 B to {format_size(MAX_SIZE)} "
                                        "like [8KiB, 128KiB]")
    return sizes


def parse_campaign(value: object, source: str, path: str = "campaign") -> CampaignConfig:
    """Validate the ``campaign:`` section; ``None`` gives the defaults.

    Keys are checked in a fixed order (the first bad one is the error); a key the rig file
    leaves out keeps its default, and so does ``null`` where the key allows it.
    """
    m = mapping(value, source, path, allowed=_KEYS)
    d = CampaignConfig()

    def p(key: str) -> str:
        return join(path, key)

    def given(key: str) -> bool:
        """Set, and not ``null``."""
        return key in m and m[key] is not None

    def whole(key: str, lo: int, hi: int, default: int) -> int:
        return int_in(m[key], source, p(key), lo, hi) if key in m else default

    def whole_or_null(key: str, lo: int, hi: int, default: int | None) -> int | None:
        return int_in(m[key], source, p(key), lo, hi) if given(key) else default

    def real(key: str, lo: float, hi: float, default: float) -> float:
        return float_in(m[key], source, p(key), lo, hi) if key in m else default

    def flag(key: str, default: bool) -> bool:
        return boolean(m[key], source, p(key)) if key in m else default

    def word(key: str, choices: tuple[str, ...], default: str) -> str:
        return string(m[key], source, p(key), choices) if key in m else default

    kind = word("kind", KINDS, d.kind)
    arms = _arms(m["arms"], source, p("arms")) if "arms" in m else d.arms
    concurrency = (_int_list(m["concurrency"], source, p("concurrency"), MAX_CONCURRENCY) if "concurrency" in m
                   else d.concurrency)
    sizes = _sizes(m["sizes"], source, p("sizes")) if "sizes" in m else d.sizes
    reps = whole("reps", 1, MAX_REPS, d.reps)
    seed = whole("seed", 0, 2**32 - 1, d.seed)
    warmup = whole("warmup", 0, MAX_PROMPTS, d.warmup)
    prompts_per_concurrency = whole("prompts_per_concurrency", 1, MAX_PROMPTS, d.prompts_per_concurrency)
    vram_free_mib = whole("vram_free_mib", 0, 10**7, d.vram_free_mib)
    rep_retries = whole("rep_retries", 0, 10, d.rep_retries)
    input_len = whole_or_null("input_len", 1, MAX_TOKENS, d.input_len)
    output_len = whole_or_null("output_len", 1, MAX_TOKENS, d.output_len)
    max_reps = whole_or_null("max_reps", 1, MAX_REPS, d.max_reps)
    cooldown_s = real("cooldown_s", 0, DAY_S, d.cooldown_s)
    idle_baseline_s = real("idle_baseline_s", 0, DAY_S, d.idle_baseline_s)
    vram_free_timeout_s = real("vram_free_timeout_s", 0, DAY_S, d.vram_free_timeout_s)
    scenario_timeout_s = (float_in(m["scenario_timeout_s"], source, p("scenario_timeout_s"), 0.001, WEEK_S)
                          if given("scenario_timeout_s") else d.scenario_timeout_s)
    request_timeout_s = (float_in(m["request_timeout_s"], source, p("request_timeout_s"), 0.001, DAY_S)
                         if given("request_timeout_s") else d.request_timeout_s)
    max_time_s = (float_in(m["max_time_s"], source, p("max_time_s"), 0.001, WEEK_S) if given("max_time_s")
                  else d.max_time_s)
    residency = word("residency", RESIDENCY, d.residency)
    starts = whole("starts", 1, MAX_STARTS, d.starts)
    windows = whole("windows", 1, MAX_WINDOWS, d.windows)
    max_starts = whole_or_null("max_starts", 1, MAX_STARTS, d.max_starts)
    window_s = (float_in(m["window_s"], source, p("window_s"), 0.1, DAY_S) if given("window_s")
                else (None if "window_s" in m else d.window_s))
    telemetry_hz = real("telemetry_hz", 1, 10, d.telemetry_hz)
    smoke = flag("smoke", d.smoke)
    exclude_throttled = flag("exclude_throttled", d.exclude_throttled)
    schedule = word("schedule", MODES, d.schedule)
    uplift_rule = word("uplift_rule", RULES, d.uplift_rule)
    uplift_metric = (string(m["uplift_metric"], source, p("uplift_metric")) if given("uplift_metric")
                     else d.uplift_metric)
    uplift_direction = (string(m["uplift_direction"], source, p("uplift_direction"), ("higher", "lower"))
                        if given("uplift_direction") else d.uplift_direction)
    cfg = CampaignConfig(
        kind=kind, arms=arms, concurrency=concurrency, sizes=sizes, reps=reps, schedule=schedule, seed=seed,
        smoke=smoke, warmup=warmup, prompts_per_concurrency=prompts_per_concurrency, input_len=input_len,
        output_len=output_len, cooldown_s=cooldown_s, idle_baseline_s=idle_baseline_s,
        vram_free_timeout_s=vram_free_timeout_s, vram_free_mib=vram_free_mib, scenario_timeout_s=scenario_timeout_s,
        telemetry_hz=telemetry_hz, exclude_throttled=exclude_throttled,
        min_uplift_raw=m.get("min_uplift", d.min_uplift_raw), uplift_rule=uplift_rule,
        uplift_metric=uplift_metric, uplift_direction=uplift_direction, request_timeout_s=request_timeout_s,
        rep_retries=rep_retries, max_reps=max_reps, max_time_s=max_time_s, residency=residency, starts=starts,
        windows=windows, window_s=window_s, max_starts=max_starts, source=source, explicit=frozenset(m))
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
    if cfg.max_starts is not None and cfg.max_starts < cfg.starts:
        raise ConfigError(source, p("max_starts"), f"max_starts ({cfg.max_starts}) is below starts ({cfg.starts}): "
                                                   "adaptive starts only add server starts")
    if cfg.uplift_rule == "ci_lower" and cfg.reps < 2:
        raise ConfigError(source, p("reps"), f"uplift_rule ci_lower needs reps >= 2 (a CI needs spread), got "
                                             f"{cfg.reps}")
    if cfg.uplift_metric is not None and cfg.uplift_direction is None:
        cfg.direction("model")  # raises for an unknown metric without a direction
    return cfg
