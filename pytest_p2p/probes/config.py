"""The rig file's ``probe:`` section: what the all-reduce and P2P copy probes measure and check.

Sizes span nccl-tests' usual sweep (4 B to 256 MiB, x4 steps) plus the *decode sizes*
of a model: the messages tensor parallelism all-reduces on every decode step, which is
where P2P on/off shows up in serving latency (the seed's Qwen trace: 8-512 KiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from ..errors import ConfigError
from ..util import format_size

# names, not 'from .. import validate as v': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would escape 'except P2PError'
from ..validate import boolean, float_in, int_in, join, mapping, percent, sequence, size, string

PROBE_KEYS = ("sizes", "decode_sizes", "decode", "iters", "warmup", "graph", "direct", "graph_launches", "timeout_s",
              "thresholds", "uplift", "arms", "copy_bytes", "copy_reps", "nccl_tests", "trials", "alpha")
THRESHOLD_KINDS = ("busbw_min_gbs", "latency_max_us")
DECODE_KEYS = ("hidden", "tp", "batches", "dtype_bytes")
UPLIFT_KEYS = ("faster", "slower", "at", "min")

# nccl-tests' -b 4 -e 256M -f 4 sweep, plus 128 MiB: the size large-message busbw is usually quoted at.
DEFAULT_SIZES = tuple(sorted({4 * 4**k for k in range(14)} | {128 * 1024**2}))
DEFAULT_DECODE_SIZES = (8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024)
#: upper bounds of the section's numbers: far beyond any real probe, low enough that a typo cannot hang the run
MAX_SIZE = 16 * 1024**3  # one all-reduce / copy buffer
MAX_COUNT = 100_000  # iterations, warm-ups, launches, copy repetitions
MAX_TIMEOUT_S = 7 * 86400.0
MAX_THRESHOLD = 1e9  # GB/s or us
MAX_TRIALS = 1000  # timed trials per size: each costs a few ms at decode sizes, far more at 256 MiB


@dataclass(frozen=True)
class Thresholds:
    """Per-size limits: ``busbw_min_gbs`` (decimal GB/s) and ``latency_max_us`` (time per all-reduce)."""

    busbw_min_gbs: Mapping[int, float] = field(default_factory=dict)
    latency_max_us: Mapping[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {k: {format_size(s): x for s, x in getattr(self, k).items()} for k in THRESHOLD_KINDS}


@dataclass(frozen=True)
class Uplift:
    """``faster`` must beat ``slower`` by at least ``min`` (a fraction) at each size of ``at``."""

    faster: str = "p2p_on"
    slower: str = "p2p_off"
    at: tuple[int, ...] | None = None  # None: the decode sizes
    min: float = 0.05


@dataclass(frozen=True)
class ProbeConfig:
    sizes: tuple[int, ...] = tuple(sorted(set(DEFAULT_SIZES) | set(DEFAULT_DECODE_SIZES)))
    decode_sizes: tuple[int, ...] = DEFAULT_DECODE_SIZES
    iters: int = 20  # all-reduces per captured graph; iters x graph_launches = most all-reduces in one trial
    warmup: int = 5  # eager all-reduces per size before capture (and before timing)
    # False: back-to-back launches queued behind a gate kernel, timed by CUDA events (nccl-tests' own loop
    # without its host-bound failure); True: the batch captured in a CUDA graph (nccl-tests -G), which costs
    # NCCL's per-op graph nodes at small sizes; see docs/performance.md
    graph: bool = False
    direct: bool = True  # time with back-to-back ncclAllReduce calls through ctypes (falls back to the torch path)
    graph_launches: int = 5  # replays of the captured batch per trial
    trials: int = 10  # timed trials per size after the warm-up (which is set aside): the checks judge on them
    alpha: float = 0.01  # each one-sided bound of the probe checks' intervals (98 % two-sided)
    timeout_s: float = 300.0  # whole probe, per arm and pair
    thresholds: Thresholds = field(default_factory=Thresholds)
    per_arm_thresholds: Mapping[str, Thresholds] = field(default_factory=dict)
    uplift: Uplift = field(default_factory=Uplift)
    arms: tuple[str, ...] | None = None  # None: every arm the rig defines
    copy_bytes: int = 64 * 1024**2
    copy_reps: int = 20
    nccl_tests: bool = True  # also run nccl-tests' all_reduce_perf when it is on PATH

    @property
    def uplift_sizes(self) -> tuple[int, ...]:
        return self.uplift.at if self.uplift.at is not None else self.decode_sizes

    def thresholds_for(self, arm: str) -> Thresholds:
        """The rig-wide thresholds with the arm's own (``per_arm``) overriding them size by size."""
        own = self.per_arm_thresholds.get(arm)
        if own is None:
            return self.thresholds
        return Thresholds(
            {**self.thresholds.busbw_min_gbs, **own.busbw_min_gbs},
            {**self.thresholds.latency_max_us, **own.latency_max_us},
        )

    def select_arms(self, defined: Mapping[str, object], source: str = "rig", path: str = "probe.arms") -> list[str]:
        if self.arms is None:
            return list(defined)
        for i, name in enumerate(self.arms):
            if name not in defined:
                raise ConfigError(source, join(path, i),
                                  f"arm {name!r} is not defined; defined arms: {', '.join(defined)}")
        return list(self.arms)


class _ProbeFields(TypedDict, total=False):
    """The :class:`ProbeConfig` fields a ``probe:`` section sets (the others keep their defaults)."""

    sizes: tuple[int, ...]
    decode_sizes: tuple[int, ...]
    iters: int
    warmup: int
    graph: bool
    direct: bool
    graph_launches: int
    timeout_s: float
    thresholds: Thresholds
    per_arm_thresholds: Mapping[str, Thresholds]
    uplift: Uplift
    arms: tuple[str, ...] | None
    copy_bytes: int
    copy_reps: int
    nccl_tests: bool
    trials: int
    alpha: float


class _UpliftFields(TypedDict, total=False):
    faster: str
    slower: str
    at: tuple[int, ...] | None
    min: float


#: the section's counts and their lower bounds; its switches
_COUNT_KEYS: tuple[tuple[Literal["iters", "warmup", "graph_launches", "copy_reps"], int], ...] = (
    ("iters", 1), ("warmup", 0), ("graph_launches", 1), ("copy_reps", 1))
#: the alpha of the probe checks' bounds: 0.0005 (99.9 % intervals) .. 0.25 (50 %)
ALPHA_RANGE = (0.0005, 0.25)
_BOOL_KEYS: tuple[Literal["graph", "direct", "nccl_tests"], ...] = ("graph", "direct", "nccl_tests")


def parse_probe(value: object, source: str, path: str) -> ProbeConfig:
    body = mapping(value, source, path, allowed=PROBE_KEYS)
    kw: _ProbeFields = {}
    if "decode_sizes" in body and "decode" in body:
        raise ConfigError(source, join(path, "decode"), "give decode_sizes or decode, not both")
    decode: tuple[int, ...] = DEFAULT_DECODE_SIZES
    if "decode_sizes" in body:
        decode = _sizes(body["decode_sizes"], source, join(path, "decode_sizes"))
    elif "decode" in body:
        decode = _decode_sizes(body["decode"], source, join(path, "decode"))
    kw["decode_sizes"] = decode
    base = _sizes(body["sizes"], source, join(path, "sizes")) if "sizes" in body else DEFAULT_SIZES
    kw["sizes"] = tuple(sorted(set(base) | set(decode)))
    for count, lo in _COUNT_KEYS:
        if count in body:
            kw[count] = int_in(body[count], source, join(path, count), lo, MAX_COUNT)
    for switch in _BOOL_KEYS:
        if switch in body:
            kw[switch] = boolean(body[switch], source, join(path, switch))
    if "trials" in body:  # 2 at least: one trial has no spread, so no bound
        kw["trials"] = int_in(body["trials"], source, join(path, "trials"), 2, MAX_TRIALS)
    if "alpha" in body:
        kw["alpha"] = float_in(body["alpha"], source, join(path, "alpha"), *ALPHA_RANGE)
    if "timeout_s" in body:
        kw["timeout_s"] = float_in(body["timeout_s"], source, join(path, "timeout_s"), 1, MAX_TIMEOUT_S)
    if "copy_bytes" in body:
        kw["copy_bytes"] = size(body["copy_bytes"], source, join(path, "copy_bytes"))
        if not 4 <= kw["copy_bytes"] <= MAX_SIZE:
            raise ConfigError(source, join(path, "copy_bytes"), f"expected 4 B .. {format_size(MAX_SIZE)}, got "
                                                               f"{kw['copy_bytes']} B")
    if "thresholds" in body:
        kw["thresholds"], kw["per_arm_thresholds"] = _thresholds(body["thresholds"], source,
                                                                 join(path, "thresholds"))
    if "uplift" in body:
        kw["uplift"] = _uplift(body["uplift"], source, join(path, "uplift"))
    if "arms" in body:
        names = sequence(body["arms"], source, join(path, "arms"))
        kw["arms"] = tuple(string(n, source, join(join(path, "arms"), i)) for i, n in enumerate(names))
    return ProbeConfig(**kw)


def _sizes(value: object, source: str, path: str) -> tuple[int, ...]:
    items = sequence(value, source, path)
    if not items:
        raise ConfigError(source, path, "expected at least one size")
    out = []
    for i, item in enumerate(items):
        n = size(item, source, join(path, i))
        if n < 4 or n % 4 or n > MAX_SIZE:
            raise ConfigError(source, join(path, i), f"all-reduce sizes are float32 buffers: a multiple "
                                                       f"of 4 bytes, 4 B .. {format_size(MAX_SIZE)}, got {n}")
        out.append(n)
    return tuple(sorted(set(out)))


def _decode_sizes(value: object, source: str, path: str) -> tuple[int, ...]:
    """``batch x hidden / tp x dtype_bytes`` for each batch, rounded down to whole float32 words."""
    body = mapping(value, source, path, allowed=DECODE_KEYS)
    for key in ("hidden", "batches"):
        if key not in body:
            raise ConfigError(source, path, f"missing key {key!r} (needs hidden, batches; optional tp, dtype_bytes)")
    hidden = int_in(body["hidden"], source, join(path, "hidden"), 1, 1_000_000)
    tp = int_in(body.get("tp", 1), source, join(path, "tp"), 1, 1024)
    dtype_bytes = int_in(body.get("dtype_bytes", 2), source, join(path, "dtype_bytes"), 1, 16)
    batches = sequence(body["batches"], source, join(path, "batches"))
    out = set()
    for i, b in enumerate(batches):
        batch = int_in(b, source, join(join(path, "batches"), i), 1, 1_000_000)
        n = batch * hidden // tp * dtype_bytes
        if n > MAX_SIZE:
            where = join(join(path, "batches"), i)
            raise ConfigError(source, where, f"batch {batch} x hidden {hidden} / tp {tp} x {dtype_bytes} B is above "
                                             f"{format_size(MAX_SIZE)}")
        out.add(max(4, n - n % 4))
    if not out:
        raise ConfigError(source, join(path, "batches"), "expected at least one batch size")
    return tuple(sorted(out))


def _size_map(value: object, source: str, path: str) -> dict[int, float]:
    return {size(k, source, join(path, k)): float_in(x, source, join(path, k), 0, MAX_THRESHOLD)
            for k, x in mapping(value, source, path).items()}


def _thresholds(value: object, source: str, path: str) -> tuple[Thresholds, dict[str, Thresholds]]:
    body = mapping(value, source, path, allowed=(*THRESHOLD_KINDS, "per_arm"))
    common = Thresholds(*(_size_map(body.get(k), source, join(path, k)) for k in THRESHOLD_KINDS))
    per_arm = {}
    for arm, spec in mapping(body.get("per_arm"), source, join(path, "per_arm")).items():
        where = join(join(path, "per_arm"), arm)
        inner = mapping(spec, source, where, allowed=THRESHOLD_KINDS)
        per_arm[arm] = Thresholds(*(_size_map(inner.get(k), source, join(where, k)) for k in THRESHOLD_KINDS))
    return common, per_arm


def _uplift(value: object, source: str, path: str) -> Uplift:
    body = mapping(value, source, path, allowed=UPLIFT_KEYS)
    kw: _UpliftFields = {}
    for key in ("faster", "slower"):
        if key in body:
            kw[key] = string(body[key], source, join(path, key))
    if "at" in body and body["at"] != "decode":
        kw["at"] = _sizes(body["at"], source, join(path, "at"))
    if "min" in body:
        kw["min"] = percent(body["min"], source, join(path, "min"))
    up = Uplift(**kw)
    if up.faster == up.slower:
        raise ConfigError(source, path, f"faster and slower name the same arm {up.faster!r}")
    return up
