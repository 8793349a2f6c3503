from __future__ import annotations

import pytest

from pytest_p2p.campaign.energy import METHOD_COUNTER, METHOD_POWER, energy_metrics, window_energy


def row(t: float, g: int, w: float | None, mj: int | None, sim: str = "") -> dict:
    return {"wall_epoch": t, "index": g, "power.draw": w, "energy_mj": mj, "simulated": sim}


def test_counter_deltas_per_gpu_and_tokens_per_joule() -> None:
    start = [row(100.0, 0, 300.0, 5_000_000), row(100.0, 1, 280.0, 7_000_000)]
    end = [row(110.0, 0, 310.0, 8_000_000), row(110.0, 1, 290.0, 9_500_000)]
    # sampled power in between is deliberately unrepresentative: the counter must win
    window = [*start, row(105.0, 0, 10.0, None), row(105.0, 1, 10.0, None), *end]
    idle = [row(90.0, 0, 70.0, None), row(91.0, 0, 72.0, None), row(90.0, 1, 65.0, None)]
    e = window_energy(start, end, window, output_tokens=11_000, idle_rows=idle)
    assert e["method"] == METHOD_COUNTER
    assert e["joules"] == {"0": 3000.0, "1": 2500.0}
    assert e["total_joules"] == 5500.0 and e["window_s"] == 10.0
    assert e["avg_watts"] == pytest.approx(550.0)
    assert e["tokens_per_joule"] == pytest.approx(2.0) and e["joules_per_token"] == pytest.approx(0.5)
    assert e["idle_watts"] == {"0": 71.0, "1": 65.0} and e["idle_total_watts"] == 136.0
    assert not e["simulated"] and e["notes"] == []
    assert energy_metrics(e) == {"tokens_per_joule": 2.0, "joules_per_token": 0.5, "avg_watts": 550.0}


def test_falls_back_to_power_integration_and_says_so() -> None:
    rows = [row(0.0, 0, 100.0, None), row(1.0, 0, 200.0, None), row(2.0, 0, 200.0, None)]
    e = window_energy(rows[:1], rows[-1:], rows, output_tokens=350)
    assert e["method"] == METHOD_POWER
    assert e["total_joules"] == pytest.approx(150.0 + 200.0)
    assert e["tokens_per_joule"] == pytest.approx(1.0)
    assert any("integrated sampled power" in n for n in e["notes"])


def test_counter_going_backwards_is_not_trusted() -> None:
    start = [row(0.0, 0, 100.0, 9_000)]
    end = [row(1.0, 0, 100.0, 1_000)]
    e = window_energy(start, end, [*start, *end])
    assert e["method"] == METHOD_POWER and e["total_joules"] == pytest.approx(100.0)


def test_missing_gpu_energy_gives_no_tokens_per_joule_and_simulated_is_labelled() -> None:
    start = [row(0.0, 0, None, 0, "SIMULATED"), row(0.0, 1, None, None, "SIMULATED")]
    end = [row(1.0, 0, None, 1000, "SIMULATED"), row(1.0, 1, None, None, "SIMULATED")]
    e = window_energy(start, end, [*start, *end], output_tokens=10)
    assert e["total_joules"] is None and e["tokens_per_joule"] is None
    assert e["simulated"] and any("SIMULATED" in n for n in e["notes"])
    assert energy_metrics(e) == {}
