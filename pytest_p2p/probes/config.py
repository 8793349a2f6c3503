"""The rig file's ``probe:`` section: what the all-reduce and P2P copy probes measure and check.

Sizes span nccl-tests' usual sweep (4 B to 256 MiB, x4 steps) plus the *decode sizes*
of a model: the messages tensor parallelism all-reduces on every decode step, which is
where P2P on/off shows up in serving latency (the seed's Qwen trace: 8-512 KiB).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..schema import each, flag, key, key_factory, load, real, whole, word
from ..util import format_size

# names, not 'from .. import validate as v': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would escape 'except P2PError'
from ..validate import float_in, int_in, join, mapping, percent, sequence, size

THRESHOLD_KINDS = ("busbw_min_gbs", "latency_max_us")
DECODE_KEYS = ("hidden", "tp", "batches", "dtype_bytes")

# nccl-tests' -b 4 -e 256M -f 4 sweep, plus 128 MiB: the size large-message busbw is usually quoted at.
DEFAULT_SIZES = tuple(sorted({4 * 4**k for k in range(14)} | {128 * 1024**2}))
DEFAULT_DECODE_SIZES = (8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024)
#: upper bounds of the section's numbers: far beyond any real probe, low enough that a typo cannot hang the run
MAX_SIZE = 16 * 1024**3  # one all-reduce / copy buffer
MAX_COUNT = 100_000  # iterations, warm-ups, launches, copy repetitions
MAX_TIMEOUT_S = 7 * 86400.0
MAX_THRESHOLD = 1e9  # GB/s or us
MAX_TRIALS = 1000  # timed trials per size: each costs a few ms at decode sizes, far more at 256 MiB
#: the alpha of the probe checks' bounds: 0.0005 (99.9 % intervals) .. 0.25 (50 %)
ALPHA_RANGE = (0.0005, 0.25)


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


def _copy_bytes(value: object, source: str, path: str) -> int:
    n = size(value, source, path)
    if not 4 <= n <= MAX_SIZE:
        raise ConfigError(source, path, f"expected 4 B .. {format_size(MAX_SIZE)}, got {n} B")
    return n


def _size_map(value: object, source: str, path: str) -> Mapping[int, float]:
    return {size(k, source, join(path, k)): float_in(x, source, join(path, k), 0, MAX_THRESHOLD)
            for k, x in mapping(value, source, path).items()}


def _at(value: object, source: str, path: str) -> tuple[int, ...] | None:
    return None if value == "decode" else _sizes(value, source, path)


@dataclass(frozen=True)
class Thresholds:
    """Per-size limits: ``busbw_min_gbs`` (decimal GB/s) and ``latency_max_us`` (time per all-reduce)."""

    busbw_min_gbs: Mapping[int, float] = key_factory(dict, _size_map, accepts="`{size: GB/s}`, 0 .. 1e9")
    latency_max_us: Mapping[int, float] = key_factory(dict, _size_map, accepts="`{size: us}`, 0 .. 1e9")

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {k: {format_size(s): x for s, x in getattr(self, k).items()} for k in THRESHOLD_KINDS}


@dataclass(frozen=True)
class Uplift:
    """``faster`` must beat ``slower`` by at least ``min`` (a fraction) at each size of ``at``."""

    faster: str = key("p2p_on", word())
    slower: str = key("p2p_off", word())
    # None (or 'decode'): the decode sizes
    at: tuple[int, ...] | None = key(None, _at, accepts="`decode` or a list of sizes")
    min: float = key(0.05, percent, accepts="a percentage (`5%` or 0.05)")


@dataclass(frozen=True)
class ProbeConfig:
    # the sweep with the decode sizes added; ``sizes``, ``decode`` and ``thresholds`` are read by parse_probe
    sizes: tuple[int, ...] = tuple(sorted(set(DEFAULT_SIZES) | set(DEFAULT_DECODE_SIZES)))
    decode_sizes: tuple[int, ...] = key(DEFAULT_DECODE_SIZES, _sizes,
                                        accepts="a list of sizes, multiples of 4 B, 4 B .. 16 GiB")
    # all-reduces per captured graph; iters x graph_launches = most all-reduces in one trial
    iters: int = key(20, whole(1, MAX_COUNT))
    warmup: int = key(5, whole(0, MAX_COUNT))  # eager all-reduces per size before capture (and before timing)
    # False: back-to-back launches queued behind a gate kernel, timed by CUDA events (nccl-tests' own loop
    # without its host-bound failure); True: the batch captured in a CUDA graph (nccl-tests -G), which costs
    # NCCL's per-op graph nodes at small sizes; see docs/performance.md
    graph: bool = key(False, flag)
    # time with back-to-back ncclAllReduce calls through ctypes (falls back to the torch path)
    direct: bool = key(True, flag)
    graph_launches: int = key(5, whole(1, MAX_COUNT))  # replays of the captured batch per trial
    timeout_s: float = key(300.0, real(1, MAX_TIMEOUT_S))  # whole probe, per arm and pair
    thresholds: Thresholds = field(default_factory=Thresholds)
    per_arm_thresholds: Mapping[str, Thresholds] = field(default_factory=dict)
    uplift: Uplift = key(Uplift(), lambda v, s, p: _uplift(v, s, p), accepts="see `probe.uplift`")
    arms: tuple[str, ...] | None = key(None, each(word()))  # None: every arm the rig defines
    copy_bytes: int = key(64 * 1024**2, _copy_bytes, accepts="a size, 4 B .. 16 GiB")
    copy_reps: int = key(20, whole(1, MAX_COUNT))
    nccl_tests: bool = key(True, flag)  # also run nccl-tests' all_reduce_perf when it is on PATH
    # timed trials per size after the warm-up (which is set aside): the checks judge on them; 2 at least: one
    # trial has no spread, so no bound
    trials: int = key(10, whole(2, MAX_TRIALS))
    alpha: float = key(0.01, real(*ALPHA_RANGE))  # a check's false-failure rate, split over its sizes

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


def parse_probe(value: object, source: str, path: str) -> ProbeConfig:
    cfg, body = load(ProbeConfig, value, source, path, also=("sizes", "decode", "thresholds"))
    if "decode_sizes" in body and "decode" in body:
        raise ConfigError(source, join(path, "decode"), "give decode_sizes or decode, not both")
    if "decode" in body:
        cfg = replace(cfg, decode_sizes=_decode_sizes(body["decode"], source, join(path, "decode")))
    base = _sizes(body["sizes"], source, join(path, "sizes")) if "sizes" in body else DEFAULT_SIZES
    cfg = replace(cfg, sizes=tuple(sorted(set(base) | set(cfg.decode_sizes))))
    if "thresholds" in body:
        common, per_arm = _thresholds(body["thresholds"], source, join(path, "thresholds"))
        cfg = replace(cfg, thresholds=common, per_arm_thresholds=per_arm)
    return cfg


def _decode_sizes(value: object, source: str, path: str) -> tuple[int, ...]:
    """``batch x hidden / tp x dtype_bytes`` for each batch, rounded down to whole float32 words."""
    body = mapping(value, source, path, allowed=DECODE_KEYS)
    for name in ("hidden", "batches"):
        if name not in body:
            raise ConfigError(source, path, f"missing key {name!r} (needs hidden, batches; optional tp, dtype_bytes)")
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


def _thresholds(value: object, source: str, path: str) -> tuple[Thresholds, dict[str, Thresholds]]:
    common, body = load(Thresholds, value, source, path, also=("per_arm",))
    where = join(path, "per_arm")
    return common, {arm: load(Thresholds, spec, source, join(where, arm))[0]
                    for arm, spec in mapping(body.get("per_arm"), source, where).items()}


def _uplift(value: object, source: str, path: str) -> Uplift:
    up, _ = load(Uplift, value, source, path)
    if up.faster == up.slower:
        raise ConfigError(source, path, f"faster and slower name the same arm {up.faster!r}")
    return up
