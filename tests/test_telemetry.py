from __future__ import annotations

import threading
import time
from pathlib import Path

from pytest_p2p.campaign import telemetry as tm


def r(idx: int, gen: int | None, width: int | None, reasons: int | None = 0, t: float = 1.0) -> dict:
    return {"wall_epoch": t, "index": idx, "pcie.link.gen.current": gen, "pcie.link.width.current": width,
            "throttle_reasons": reasons, "temperature.gpu": 80, "power.draw": 600.0, "simulated": ""}


def test_idle_and_app_clock_bits_are_not_throttling() -> None:
    rows = [r(0, 5, 16, tm.REASON_GPU_IDLE | tm.REASON_APP_CLOCKS | tm.REASON_SYNC_BOOST)]
    flags = tm.assess(rows, {0: (5, 16)})
    assert not flags.throttled and not flags.downtrained


def test_thermal_and_power_brake_bits_flag_the_rep() -> None:
    rows = [r(0, 5, 16, 0), r(1, 5, 16, tm.REASON_HW_THERMAL | tm.REASON_SW_POWER_CAP, t=2.0),
            r(0, 5, 16, tm.REASON_HW_POWER_BRAKE, t=3.0)]
    flags = tm.assess(rows, {0: (5, 16), 1: (5, 16)})
    assert flags.throttled and flags.reasons == ["hw_power_brake", "hw_thermal"]
    assert "GPU 1 throttled" in flags.details[0] and "sw_power_cap" not in flags.details[0]
    assert flags.power_capped == 1


def test_running_at_the_power_cap_is_reported_not_throttling() -> None:
    """What 2x H100 showed at c64: every P2P-on window at the software power cap. Counted as throttling it set
    every window aside and excluded the arm's c64 data; it is the GPU at its rated limit, in both arms."""
    rows = [r(0, 5, 16, tm.REASON_SW_POWER_CAP, t=float(t)) for t in range(5)]
    flags = tm.assess(rows, {0: (5, 16)})
    assert flags.throttled is False and flags.reasons == [] and flags.power_capped == 5
    assert flags.to_dict()["power_capped"] == 5


def test_downtrain_judged_on_best_sample() -> None:
    # GPU 0 drops to Gen1 between bursts but reaches Gen5 x16: fine. GPU 1 never exceeds Gen3 x16.
    rows = [r(0, 1, 16), r(0, 5, 16), r(0, 1, 16), r(1, 3, 16), r(1, 3, 16), r(1, 2, 16)]
    flags = tm.assess(rows, {0: (5, 16), 1: (5, 16)})
    assert flags.downtrained
    assert flags.details == ["GPU 1 link reached at most Gen3 x16 during the rep, expected Gen5 x16"]
    narrow = tm.assess([r(0, 5, 8)] * 3, {0: (5, 16)})
    assert narrow.downtrained
    assert not tm.assess([r(0, 5, 8)] * 2, {0: (5, 16)}).downtrained  # two instants judge nothing
    unknown = tm.assess([r(0, None, None)], {0: (5, 16)})
    assert not unknown.downtrained  # no reading is not a downtrain


def test_csv_round_trip_and_columns(tmp_path: Path) -> None:
    rows = [r(0, 5, 16, 0), {**r(1, None, None), "energy_mj": 12}]
    path = tmp_path / "t.csv"
    path.write_text(tm.rows_to_csv(rows))
    header = path.read_text().splitlines()[0].split(",")
    assert header == list(tm.COLUMNS)
    back = tm.read_csv(path)
    assert back[0]["pcie.link.gen.current"] == 5 and back[1]["pcie.link.gen.current"] is None
    assert back[1]["energy_mj"] == 12 and back[0]["power.draw"] == 600.0


def test_simulated_sampler_labels_every_row(tmp_path: Path) -> None:
    reader = tm.make_reader([0, 1], simulated=True, link={0: (5, 16), 1: (5, 16)})
    sampler = tm.Sampler(reader, hz=10).start()
    reader.load = 1.0  # type: ignore[attr-defined]
    sampler.mark("start")
    time.sleep(0.25)
    sampler.mark("end")
    sampler.stop()
    path = sampler.write_csv(tmp_path / "telemetry_run1.csv")
    rows = tm.read_csv(path)
    assert len(rows) >= 6 and all(row["simulated"] == tm.SIMULATED_MARK for row in rows)
    assert "simulated" in path.read_text().splitlines()[0]
    assert sampler.simulated and sampler.marks["end"] > sampler.marks["start"]
    flags = tm.assess(sampler.window(), {0: (5, 16), 1: (5, 16)})
    assert flags.simulated and not flags.throttled and not flags.downtrained
    e0 = [x["energy_mj"] for x in rows if x["index"] == 0]
    assert e0 == sorted(e0) and e0[-1] > e0[0]


def test_sampler_survives_reader_errors() -> None:
    class Broken(tm.SimulatedReader):
        def read(self):  # type: ignore[override]
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    s = tm.Sampler(Broken(gpus=[0]), hz=10).start()
    time.sleep(0.15)
    s.stop()
    assert s.rows == [] and "GPU_IS_LOST" in s.errors[0]


def test_window_holds_no_sample_read_before_its_start_mark() -> None:
    """A background read still in flight when ``start`` is marked must land before the window."""

    class Slow(tm.Reader):
        def read(self):  # type: ignore[override]
            t = time.time()
            if threading.current_thread().name == "p2p-telemetry":
                time.sleep(0.3)
            return [{"wall_epoch": t, "index": 0}]

    s = tm.Sampler(Slow(), hz=20).start()
    time.sleep(0.15)  # the background thread is inside a slow read now
    s.mark("start")
    time.sleep(0.4)  # ... and has appended it by now
    s.mark("end")
    s.stop()
    t0 = s.mark_rows["start"][0]["wall_epoch"]
    assert all(row["wall_epoch"] >= t0 for row in s.window())


def test_nvml_that_cannot_start_is_a_clear_error(monkeypatch) -> None:
    import sys
    import types

    import pytest

    from pytest_p2p.errors import P2PError

    shut: list[bool] = []
    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: shut.append(True),
                                 nvmlDeviceGetCount=lambda: 1)

    def no_handle(i: int) -> None:
        raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")

    fake.nvmlDeviceGetHandleByIndex = no_handle
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)  # this test wants the fake NVML, not "no driver"
    with pytest.raises(P2PError, match=r"GPU\(s\) \[0, 7\].*INVALID_ARGUMENT"):
        tm.make_reader([0, 7], simulated=False)
    assert shut == [True]  # the init is undone


def test_nvml_row_from_a_fake_nvml_leaves_unreported_fields_empty():
    """The NVML reader's row, against the fake pynvml modelled on the H200 (no utilisation getter there)."""
    from test_live_nvml import fake_pynvml

    from pytest_p2p.campaign.telemetry import _nvml_read
    from pytest_p2p.evidence.nvml import Nvml, NvmlGpu

    row = _nvml_read(NvmlGpu(Nvml(fake_pynvml(gen_cur=(5, 4))), 1, 1), 1)
    assert row["pcie.link.gen.current"] == 4 and row["pcie.link.width.current"] == 16
    assert row["throttle_reasons"] == 1 and row["energy_mj"] == 3125389 and row["power.draw"] == 78.779
    assert row["utilization.gpu"] is None and row["memory.used"] == 0 and row["simulated"] == ""
