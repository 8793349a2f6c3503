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
from typing import TypedDict

from .telemetry import SIMULATED_MARK, Cell, Row

METHOD_COUNTER = "nvml_energy_counter"
METHOD_POWER = "power_integration"


class WindowEnergy(TypedDict):
    """What :func:`window_energy` measured (GPU keys are indexes as strings, JSON's only key type)."""

    method: str
    simulated: bool
    window_s: float | None
    joules: dict[str, float | None]
    total_joules: float | None
    avg_watts: float | None
    idle_watts: dict[str, float | None]
    idle_total_watts: float | None
    output_tokens: int | None
    tokens_per_joule: float | None
    joules_per_token: float | None
    notes: list[str]


def _float(value: Cell) -> float:
    """A cell as ``float()`` reads it (an empty cell is the ``TypeError`` float(None) raises)."""
    if value is None:
        raise TypeError("float() argument must be a string or a real number, not 'NoneType'")
    return float(value)


def _wall(row: Row) -> float:
    return _float(row["wall_epoch"])


def _by_gpu(rows: Sequence[Row]) -> dict[int, list[Row]]:
    out: dict[int, list[Row]] = {}
    for r in rows:
        index = r.get("index")
        if isinstance(index, int):
            out.setdefault(index, []).append(r)
    for rs in out.values():
        rs.sort(key=_wall)
    return out


def idle_watts(rows: Sequence[Row]) -> dict[int, float | None]:
    """Mean sampled power per GPU over the idle rows taken before a rep."""
    out: dict[int, float | None] = {}
    for g, rs in _by_gpu(rows).items():
        ws = [float(w) for r in rs if isinstance(w := r.get("power.draw"), (int, float))]
        out[g] = sum(ws) / len(ws) if ws else None
    return out


def _integrate_power(rs: Sequence[Row]) -> float | None:
    pts = [(_wall(r), float(w)) for r in rs if isinstance(w := r.get("power.draw"), (int, float))]
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
) -> WindowEnergy:
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
            durations.append(_wall(e) - _wall(s))
        mj0 = s.get("energy_mj") if s is not None else None
        mj1 = e.get("energy_mj") if e is not None else None
        if isinstance(mj0, int) and isinstance(mj1, int) and mj1 >= mj0:
            joules[g] = (mj1 - mj0) / 1000.0
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


def energy_metrics(energy: Mapping[str, object]) -> dict[str, float]:
    """The energy numbers that are aggregated like any other metric."""
    return {k: float(v) for k in ENERGY_METRICS if isinstance(v := energy.get(k), (int, float))}
