"""Energy over the timed window of a rep, per GPU, and tokens per joule.

Why the counter: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since driver load, Volta and later) integrates power in the driver at a high
rate. Sampled ``power.draw`` at 1-10 Hz misses most of what happens between samples on a
GPU whose power swings within milliseconds — and on recent GPUs it is itself a 1 s
average. So energy = counter(end) - counter(start) per GPU; only where the counter is
unsupported (empty cells) do we integrate sampled power, and the result says so.

The idle baseline (mean power of the pair before the rep starts) is recorded alongside,
so a reader can subtract it if they want energy *attributable* to the workload; the
headline numbers (tokens per joule, joules per token, average watts) are gross, like
the seed's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .telemetry import SIMULATED_MARK, Row

METHOD_COUNTER = "nvml_energy_counter"
METHOD_POWER = "power_integration"


def _by_gpu(rows: Sequence[Row]) -> dict[int, list[Row]]:
    out: dict[int, list[Row]] = {}
    for r in rows:
        if isinstance(r.get("index"), int):
            out.setdefault(r["index"], []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["wall_epoch"])
    return out


def idle_watts(rows: Sequence[Row]) -> dict[int, float | None]:
    """Mean sampled power per GPU over the idle rows taken before a rep."""
    out: dict[int, float | None] = {}
    for g, rs in _by_gpu(rows).items():
        ws = [float(r["power.draw"]) for r in rs if isinstance(r.get("power.draw"), (int, float))]
        out[g] = sum(ws) / len(ws) if ws else None
    return out


def _integrate_power(rs: Sequence[Row]) -> float | None:
    pts = [(float(r["wall_epoch"]), float(r["power.draw"])) for r in rs
           if isinstance(r.get("power.draw"), (int, float))]
    if len(pts) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(pts, pts[1:], strict=False))


def window_energy(
    start_rows: Sequence[Row],
    end_rows: Sequence[Row],
    window_rows: Sequence[Row],
    *,
    output_tokens: int | None = None,
    idle_rows: Sequence[Row] = (),
) -> dict[str, Any]:
    """Energy of the window between ``start_rows`` and ``end_rows`` (the samples taken at its marks).

    ``window_rows`` (every sample in between, marks included) feed the power-integration fallback.
    """
    start, end, window = _by_gpu(start_rows), _by_gpu(end_rows), _by_gpu(window_rows)
    gpus = sorted(set(start) | set(end) | set(window))
    joules: dict[int, float | None] = {}
    methods: dict[int, str | None] = {}
    durations: list[float] = []
    for g in gpus:
        s = start.get(g, [None])[0]
        e = end.get(g, [None])[-1]
        if s is not None and e is not None:
            durations.append(float(e["wall_epoch"]) - float(s["wall_epoch"]))
        if (s is not None and e is not None and isinstance(s.get("energy_mj"), int)
                and isinstance(e.get("energy_mj"), int) and e["energy_mj"] >= s["energy_mj"]):
            joules[g] = (e["energy_mj"] - s["energy_mj"]) / 1000.0
            methods[g] = METHOD_COUNTER
        else:
            joules[g] = _integrate_power(window.get(g, []))
            methods[g] = METHOD_POWER if joules[g] is not None else None
    duration = max(durations) if durations else None
    known = [j for j in joules.values() if j is not None]
    total = sum(known) if known and len(known) == len(gpus) else None
    used = {m for m in methods.values() if m}
    method = "/".join(sorted(used)) if used else "unavailable"
    notes: list[str] = []
    if METHOD_POWER in used:
        notes.append("energy counter unsupported on some GPU: integrated sampled power.draw instead, which "
                     "misses power swings between samples")
    if total is None:
        notes.append("no energy for every GPU of the pair: tokens per joule not computed")
    simulated = any(r.get("simulated") == SIMULATED_MARK for r in [*start_rows, *end_rows, *window_rows])
    if simulated:
        method = f"SIMULATED {method}"
        notes.append("SIMULATED telemetry: these joules are a simulation, not a measurement")
    idle = idle_watts(idle_rows)
    idle_known = [w for w in idle.values() if w is not None]
    avg_watts = total / duration if total is not None and duration and duration > 0 else None
    tpj = output_tokens / total if output_tokens and total else None
    return {
        "method": method,
        "simulated": simulated,
        "window_s": duration,
        "joules": {str(g): j for g, j in joules.items()},
        "total_joules": total,
        "avg_watts": avg_watts,
        "idle_watts": {str(g): w for g, w in idle.items()},
        "idle_total_watts": sum(idle_known) if idle_known and len(idle_known) == len(idle) else None,
        "output_tokens": output_tokens,
        "tokens_per_joule": tpj,
        "joules_per_token": (1.0 / tpj) if tpj else None,
        "notes": notes,
    }


ENERGY_METRICS = ("tokens_per_joule", "joules_per_token", "avg_watts")


def energy_metrics(energy: Mapping[str, Any]) -> dict[str, float]:
    """The energy numbers that are aggregated like any other metric."""
    return {k: float(energy[k]) for k in ENERGY_METRICS if isinstance(energy.get(k), (int, float))}
