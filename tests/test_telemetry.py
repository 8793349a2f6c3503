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


class _Watched(tm.SimulatedReader):
    """The simulated reader, telling the test when the background thread has read ``wanted`` times.

    Lets a test wait for the sampler's own thread instead of sleeping and hoping: the rows of
    ``start()``, ``mark()`` and ``stop()`` are read synchronously, so a count of rows alone
    passes with the background thread switched off.
    """

    def __init__(self, wanted: int = 2, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.wanted = wanted
        self.background: list[dict] = []
        self.enough = threading.Event()

    def read(self):  # type: ignore[override]
        rows = super().read()
        if threading.current_thread().name == "p2p-telemetry":
            self.background += rows
            if len(self.background) >= self.wanted * len(self.gpus):
                self.enough.set()
        return rows


def test_simulated_sampler_labels_every_row(tmp_path: Path) -> None:
    reader = _Watched(gpus=[0, 1], link={0: (5, 16), 1: (5, 16)})
    sampler = tm.Sampler(reader, hz=10).start()
    reader.load = 1.0
    sampler.mark("start")
    assert reader.enough.wait(60), "the background sampler never read"
    sampler.mark("end")
    sampler.stop()
    path = sampler.write_csv(tmp_path / "telemetry_run1.csv")
    rows = tm.read_csv(path)
    assert all(row["simulated"] == tm.SIMULATED_MARK for row in rows)
    assert "simulated" in path.read_text().splitlines()[0]
    assert sampler.simulated and sampler.marks["end"] > sampler.marks["start"]
    window = sampler.window()
    assert sum(any(row is b for b in reader.background) for row in window) >= 2 * len(reader.gpus)
    flags = tm.assess(window, {0: (5, 16), 1: (5, 16)})
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
    """A background read still in flight when ``start`` is marked must land before the window.

    No sleeps: the background read waits until the main thread is inside ``mark`` (asking for
    the sampler's lock, or reading without it), so the race happens on every run.
    """
    armed, in_flight, marking = threading.Event(), threading.Event(), threading.Event()
    slow_rows: list[dict] = []

    class Slow(tm.Reader):
        def read(self):  # type: ignore[override]
            t = time.time()
            if threading.current_thread().name != "p2p-telemetry":
                if armed.is_set():
                    marking.set()  # a mark reading without the lock: the background read may land now
                return [{"wall_epoch": t, "index": 0}]
            if not slow_rows:
                slow_rows.append({"wall_epoch": t, "index": 0})
                in_flight.set()
                assert marking.wait(60), "the main thread never marked"
                return list(slow_rows)
            return [{"wall_epoch": t, "index": 0}]

    class Watched:
        """The sampler's lock, telling the background read when the main thread asks for it."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            if armed.is_set() and threading.current_thread() is threading.main_thread():
                marking.set()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    s = tm.Sampler(Slow(), hz=20)
    s._lock = Watched()  # type: ignore[assignment]
    s.start()
    assert in_flight.wait(60), "the background thread never read"
    armed.set()
    s.mark("start")
    deadline = time.monotonic() + 60
    while not any(row is slow_rows[0] for row in s.window("none", "none")):  # every row: until it has landed
        assert time.monotonic() < deadline, "the slow background read was never appended"
        time.sleep(0.01)
    s.mark("end")
    s.stop()
    window = s.window()
    assert slow_rows and slow_rows[0] in s.rows, "the slow background read was never appended"
    assert not any(row is slow_rows[0] for row in window)
    t0 = s.mark_rows["start"][0]["wall_epoch"]
    assert all(row["wall_epoch"] >= t0 for row in window)
