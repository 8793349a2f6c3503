"""The P2P copy probe: peer vs host-staged copy bandwidth and latency for one GPU pair.

The copy probe does not depend on NCCL, so it runs once per pair, not per arm. It runs
in a subprocess (its own CUDA context, the pair made visible through
:func:`pytest_p2p.envs.subprocess_env`) so that a wedged copy is killed with its
process group instead of hanging pytest; launched through ``allreduce.run_ranks``, it also
dies with pytest, even a SIGKILLed one (:mod:`pytest_p2p.children`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from .. import heartbeat
from ..envs import subprocess_env
from ..errors import ProbeError
from ..jsontypes import JSONObject
from ..util import atomic_write_json
from ._jsonneed import need_dict, need_list, to_float, to_int
from .allreduce import last_line, run_ranks
from .config import ProbeConfig

SCHEMA = 1
WORKER_MODULE = "pytest_p2p.probes._p2pcopy_worker"
MODES = ("peer", "host_staged")


class _CopyModeMeasured(TypedDict):
    unidir_gbs: dict[str, float]  # direction ("0->1", "1->0") -> GB/s
    bidir_gbs: float
    latency_us: dict[str, float]  # direction -> us per 4-byte copy


class CopyModeResult(_CopyModeMeasured, total=False):
    """One copy mode of a result: its numbers read as numbers, its labels kept as recorded."""

    latency_timing: object  # how the latency was timed (the worker writes a string)
    method: object  # how the copy was made (the worker writes a string)
    unidir_trials_gbs: dict[str, list[float]]  # direction -> GB/s of each kept round (absent before trials)


@dataclass
class P2PCopyResult:
    pair: tuple[int, int]
    bytes: int
    can_access_peer: dict[str, bool]
    modes: dict[str, CopyModeResult]  # "peer", "host_staged"
    meta: JSONObject = field(default_factory=dict)
    log_path: Path | None = None

    @property
    def peer_access(self) -> bool:
        return bool(self.can_access_peer) and all(self.can_access_peer.values())

    def unidir_gbs(self, mode: str) -> float:
        """The slower direction: a pair is as good as its worse way."""
        return float(min(self.modes[mode]["unidir_gbs"].values()))

    def unidir_trials(self, mode: str) -> list[float]:
        """The slower direction of each kept round (``[]`` for a recording made before trials).

        Peer and host-staged rounds alternate in the worker, so round ``i`` of one mode and
        round ``i`` of the other ran side by side: a pair.
        """
        per_dir = self.modes[mode].get("unidir_trials_gbs")
        if not per_dir:
            return []
        return [min(values) for values in zip(*per_dir.values(), strict=True)]

    def latency_us(self, mode: str) -> float:
        return float(max(self.modes[mode]["latency_us"].values()))

    def to_dict(self) -> JSONObject:
        return {"schema": SCHEMA, "probe": "p2pcopy", "pair": list(self.pair), "bytes": self.bytes,
                "can_access_peer": self.can_access_peer, "modes": self.modes, "meta": self.meta,
                "log": self.log_path.name if self.log_path else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, object], source: str, log_path: Path | None = None) -> P2PCopyResult:
        try:
            if d.get("schema") != SCHEMA or d.get("probe") != "p2pcopy":
                raise ValueError(f"not a P2P copy probe result of schema {SCHEMA}")
            recorded = need_dict(d["modes"], "modes")
            modes = {m: _mode(need_dict(recorded[m], f"modes.{m}"), m) for m in MODES}
            pair_ids = need_list(d["pair"], "pair")
            return cls((to_int(pair_ids[0]), to_int(pair_ids[1])), to_int(d["bytes"]),
                       {k: bool(x) for k, x in need_dict(d["can_access_peer"], "can_access_peer").items()}, modes,
                       dict(need_dict(d.get("meta", {}), "meta")), log_path)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ProbeError(f"{source}: unreadable P2P copy probe result ({type(exc).__name__}: {exc})") from None


def _mode(recorded: JSONObject, name: str) -> CopyModeResult:
    """One mode of a recorded result, its numbers converted (``float()`` of each, as recorded)."""
    mode: CopyModeResult = {
        "unidir_gbs": _per_direction(recorded["unidir_gbs"], f"modes.{name}.unidir_gbs"),
        "bidir_gbs": to_float(recorded["bidir_gbs"]),
        "latency_us": _per_direction(recorded["latency_us"], f"modes.{name}.latency_us"),
    }
    if "latency_timing" in recorded:
        mode["latency_timing"] = recorded["latency_timing"]
    if "method" in recorded:
        mode["method"] = recorded["method"]
    if "unidir_trials_gbs" in recorded:
        trials = need_dict(recorded["unidir_trials_gbs"], f"modes.{name}.unidir_trials_gbs")
        mode["unidir_trials_gbs"] = {k: [to_float(x) for x in need_list(v, f"modes.{name}.unidir_trials_gbs.{k}")]
                                     for k, v in trials.items()}
        if len({len(v) for v in mode["unidir_trials_gbs"].values()}) > 1:
            raise ValueError(f"modes.{name}.unidir_trials_gbs: the directions have different trial counts")
    return mode


def _per_direction(value: object, what: str) -> dict[str, float]:
    return {k: to_float(x) for k, x in need_dict(value, what).items()}


def run_p2p_copy(
    pair: tuple[int, int],
    cfg: ProbeConfig,
    out_dir: str | os.PathLike[str],
    rig_env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    worker: Sequence[str] | None = None,
) -> P2PCopyResult:
    """Run the copy probe for ``pair``; writes ``p2pcopy.json`` and ``p2pcopy.log`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    what = f"P2P copy probe, pair gpu{pair[0]}-gpu{pair[1]}"
    spec_path, raw_path, log = out / "p2pcopy_spec.json", out / "p2pcopy_raw.json", out / "p2pcopy.log"
    if raw_path.exists():
        raw_path.unlink()
    atomic_write_json(spec_path, {"bytes": cfg.copy_bytes - cfg.copy_bytes % 4, "reps": cfg.copy_reps,
                                  "latency_reps": 100, "trials": cfg.trials, "out": str(raw_path)})
    env = subprocess_env(pair, rig_env, nccl_debug=None)
    cmd = [*(worker or [python, "-m", WORKER_MODULE]), str(spec_path)]
    with heartbeat.phase(f"probe P2P copy gpu{pair[0]}-gpu{pair[1]}"):
        run_ranks([cmd], [env], [log], cfg.timeout_s, what)
    try:
        raw = json.loads(raw_path.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
        raw.update({"schema": SCHEMA, "probe": "p2pcopy", "pair": list(pair)})
        meta = {k: raw.pop(k) for k in ("reps", "device_names", "torch_version", "trials", "warmup") if k in raw}
        raw["meta"] = meta
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{what}: no readable result {raw_path} ({exc}); last log line: {last_line([log])}") from None
    result = P2PCopyResult.from_dict(raw, str(raw_path), log)
    atomic_write_json(out / "p2pcopy.json", result.to_dict())
    return result
