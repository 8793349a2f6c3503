"""Per-GPU telemetry during a rep: an NVML sampler thread, or a labelled simulation.

Why: a rep during which a GPU throttled (hot, power-capped) or its PCIe link trained
down measures the cooling or the cable, not the arm. The sampler records what the
seed's ``telemetry.csv`` had (link gen/width, temperature, utilisation, memory,
power, clocks) plus the throttle-reason bitmask and the total-energy counter, one
row per GPU per tick, and :func:`assess` turns the rows into flags.

With no NVML (the demo rig on a CPU machine) :class:`SimulatedSampler` writes rows
of the same shape whose ``simulated`` column says ``SIMULATED`` — never numbers that
could be mistaken for a measurement.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import P2PError
from ..jsontypes import JSONObject
from ..util import atomic_write_text

if TYPE_CHECKING:
    from ..evidence.nvml import NvmlGpu

COLUMNS = (
    "wall_epoch", "index", "pcie.link.gen.current", "pcie.link.width.current", "temperature.gpu",
    "utilization.gpu", "utilization.memory", "memory.used", "power.draw", "clocks.current.sm",
    "clocks.current.memory", "throttle_reasons", "energy_mj", "nvml_error", "simulated",
)
TEXT_COLUMNS = ("simulated", "nvml_error")
SIMULATED_MARK = "SIMULATED"

# nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits, from nvml.h.
REASON_GPU_IDLE = 0x1
REASON_APP_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
REASON_DISPLAY_CLOCKS = 0x100
# Only these mean "the GPU ran slower than it could because of heat or a power emergency";
# idle, application-clock and sync-boost bits are normal operation, and so is the software
# power cap: a GPU working flat out runs *at* its power limit. On 2x H100 (7B-shape Llama,
# TP=2, c64) every P2P-on window sampled sw_power_cap (at 197-462 W): counted as throttling,
# it re-ran every such window and excluded the arm's whole c64 data from the uplift. It is
# reported (``power_capped``), never a reason to set a rep aside; a lowered power limit shows
# as a slower run against the baseline, with the limit in the fingerprint.
THROTTLE_MASK = REASON_HW_SLOWDOWN | REASON_SW_THERMAL | REASON_HW_THERMAL | REASON_HW_POWER_BRAKE
REASON_NAMES = {REASON_SW_POWER_CAP: "sw_power_cap", REASON_HW_SLOWDOWN: "hw_slowdown",
                REASON_SW_THERMAL: "sw_thermal", REASON_HW_THERMAL: "hw_thermal",
                REASON_HW_POWER_BRAKE: "hw_power_brake"}

#: one CSV cell: a number NVML reported, the ``simulated`` mark, or ``None`` for a field the GPU does not report
Cell = int | float | str | None
#: one sample of one GPU: :data:`COLUMNS` -> cell
Row = dict[str, Cell]


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if mask & bit]


def _nvml_read(gpu: NvmlGpu, index: int) -> Row:
    """One row for one GPU; a field the GPU does not report is left empty (never guessed)."""
    util = gpu.utilization()
    mem = gpu.memory()
    power = gpu.power_w()
    return {
        "wall_epoch": round(time.time(), 3),
        "index": index,
        "pcie.link.gen.current": gpu.pcie_gen(),
        "pcie.link.width.current": gpu.pcie_width(),
        "temperature.gpu": gpu.temperature_c(),
        "utilization.gpu": None if util is None else util.gpu_percent,
        "utilization.memory": None if util is None else util.memory_percent,
        "memory.used": None if mem is None else mem.used_mib,
        "power.draw": None if power is None else round(power, 3),
        "clocks.current.sm": gpu.sm_clock_mhz(),
        "clocks.current.memory": gpu.mem_clock_mhz(),
        "throttle_reasons": gpu.clock_event_reasons(),
        "energy_mj": gpu.energy_mj(),
        "simulated": "",
        # which getters failed in this sample (GpuIsLost, Unknown): its empty cells are missing, not "not reported"
        "nvml_error": "; ".join(dict.fromkeys(gpu.take_faults())),
    }


class Reader:
    """Reads one row per GPU now; the NVML and the simulated readers share this interface."""

    simulated = False

    def read(self) -> list[Row]:  # pragma: no cover - interface
        raise NotImplementedError

    def set_load(self, level: float) -> None:
        """The runner says when the timed window runs (1.0) and when not (0.0); a simulation follows it."""

    def close(self) -> None:
        pass


_Reader = Reader  # the old private name


class NvmlReader(Reader):
    """Live rows through the evidence stage's NVML door (``evidence/nvml.py``), NVML open for the reader's life."""

    def __init__(self, gpus: Sequence[int]) -> None:
        from ..evidence.nvml import nvml_session

        self._stack = contextlib.ExitStack()
        try:
            nv = self._stack.enter_context(nvml_session())
            self._gpus = [(g, nv.gpu(g)) for g in gpus]
        except P2PError as exc:
            self._stack.close()
            raise P2PError(f"telemetry: NVML cannot read GPU(s) {list(gpus)}: {exc}") from None

    def read(self) -> list[Row]:
        return [_nvml_read(h, g) for g, h in self._gpus]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()


@dataclass
class SimulatedReader(Reader):
    """Plausible-shaped numbers for the demo rig, every row marked ``SIMULATED``.

    Link state comes from the evidence the demo uses (its snapshot), power follows a
    ``load`` level the runner sets, and the energy counter integrates that power, so the
    energy path is exercised end to end — as a simulation.
    """

    gpus: Sequence[int]
    link: Mapping[int, tuple[int | None, int | None]] = field(default_factory=dict)
    idle_w: float = 75.0
    busy_w: float = 450.0
    load: float = 0.0
    simulated: bool = True
    _energy_mj: dict[int, float] = field(default_factory=dict)
    _last: float | None = None

    def set_load(self, level: float) -> None:
        self.load = level

    def read(self) -> list[Row]:
        now = time.time()
        dt = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        rows: list[Row] = []
        for g in self.gpus:
            watts = self.idle_w + (self.busy_w - self.idle_w) * self.load + 3.0 * math.sin(now + g)
            self._energy_mj[g] = self._energy_mj.get(g, 1_000_000.0) + watts * dt * 1000.0
            gen, width = self.link.get(g, (None, None))
            rows.append({
                "wall_epoch": round(now, 3), "index": g, "pcie.link.gen.current": gen,
                "pcie.link.width.current": width, "temperature.gpu": round(35 + 20 * self.load),
                "utilization.gpu": round(95 * self.load), "utilization.memory": round(40 * self.load),
                "memory.used": 120000 if self.load > 0 else 1000, "power.draw": round(watts, 3),
                "clocks.current.sm": 1980 if self.load > 0 else 345, "clocks.current.memory": 3201,
                "throttle_reasons": REASON_GPU_IDLE if self.load == 0 else 0,
                "energy_mj": int(self._energy_mj[g]), "simulated": SIMULATED_MARK,
            })
        return rows


def rows_to_csv(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    return buf.getvalue()


def read_csv(path: str | Path) -> list[Row]:
    """Rows back from a telemetry CSV, numbers as numbers, empty cells as ``None``."""
    out: list[Row] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for raw in csv.DictReader(fh):
            row: Row = {}
            for k, v in raw.items():
                if k in TEXT_COLUMNS:
                    row[k] = v or ""
                elif v in ("", None):
                    row[k] = None
                else:
                    try:
                        row[k] = int(v)
                    except ValueError:
                        row[k] = float(v)
            out.append(row)
    return out


class Sampler:
    """Background thread reading ``reader`` at ``hz``; rows kept in memory, CSV written atomically.

    ``mark(name)`` records the wall time of an event (start/end of the timed window) so
    energy and flags can be computed over exactly that window.
    """

    def __init__(self, reader: Reader, hz: float = 2.0) -> None:
        self.reader = reader
        self.period = 1.0 / max(0.1, min(hz, 10.0))
        self.rows: list[Row] = []
        self.marks: dict[str, float] = {}
        self.mark_rows: dict[str, list[Row]] = {}
        self.mark_index: dict[str, tuple[int, int]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def simulated(self) -> bool:
        return bool(getattr(self.reader, "simulated", False))

    def _read(self) -> list[Row]:
        """One reading, appended to ``rows``; the caller holds the lock (see :meth:`mark`)."""
        try:
            rows = self.reader.read()
        except Exception as exc:  # a flaky read is recorded, never kills the rep
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return []
        self.rows.extend(rows)
        return rows

    def sample_now(self) -> list[Row]:
        with self._lock:
            return self._read()

    def mark(self, name: str) -> float:
        """Sample now and remember the samples as the rows *at* this event (energy reads them).

        Every read and its append to ``rows`` happen under one lock, so ``rows`` is in reading
        order and the window between two marks is exact: a background sample read before
        ``start`` cannot be appended after it, nor one read after ``end`` before it.
        """
        with self._lock:
            first = len(self.rows)
            rows = self._read()
            self.mark_index[name] = (first, len(self.rows))
        self.mark_rows[name] = rows
        self.marks[name] = time.time()
        return self.marks[name]

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample_now()

    def start(self) -> Sampler:
        self.sample_now()
        self._thread = threading.Thread(target=self._loop, name="p2p-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample_now()

    def window(self, start: str = "start", end: str = "end") -> list[Row]:
        """Rows from the sample taken at the ``start`` mark to the one taken at ``end`` (inclusive)."""
        with self._lock:
            lo = self.mark_index.get(start, (0, 0))[0]
            hi = self.mark_index.get(end, (len(self.rows), len(self.rows)))[1]
            return list(self.rows[lo:hi])

    def write_csv(self, path: str | Path) -> Path:
        with self._lock:
            rows = list(self.rows)
        return atomic_write_text(path, rows_to_csv(rows))

    def close(self) -> None:
        self.reader.close()


@dataclass
class RepFlags:
    """``throttled`` is ``None`` when no sample showed a throttle bit but some could not say (issue 30):
    a mask NVML failed to read is unknown, never "not throttled"."""

    throttled: bool | None
    downtrained: bool
    reasons: list[str]
    details: list[str]
    samples: int
    simulated: bool
    missing: list[str] = field(default_factory=list)  # per GPU: samples NVML failed to read, and when
    power_capped: int = 0  # samples at the software power cap (informational: the GPU ran at its limit)

    def to_dict(self) -> JSONObject:
        return {"throttled": self.throttled, "downtrained": self.downtrained, "reasons": self.reasons,
                "details": self.details, "samples": self.samples, "simulated": self.simulated,
                "telemetry_missing": list(self.missing), "power_capped": self.power_capped}


def assess(rows: Sequence[Row], expected_link: Mapping[int, tuple[int | None, int | None]],
           min_link_samples: int = 3) -> RepFlags:
    """Flags for one rep's timed window.

    * throttled: any sample with a thermal/power throttle-reason bit (:data:`THROTTLE_MASK`);
      ``None`` (unknown) when none had one but some sample's mask could not be read.
    * downtrained: a GPU whose link **never** reached the expected generation/width in the
      window. Judged on the best sample, because an idle-ish GPU legitimately drops its link
      speed between bursts; a link that trained down cannot reach the expected state at all.
      A GPU with fewer than ``min_link_samples`` link readings in the window is not judged
      (a window of two instantaneous samples, e.g. probe points read from one probe run,
      says nothing about training).
    * missing: per GPU, how many samples NVML failed to read (``nvml_error``), when, and why.
    """
    reasons: set[str] = set()
    details: list[str] = []
    best: dict[int, tuple[int, int]] = {}
    count: dict[int, int] = {}
    seen: dict[object, int] = {}
    unread: dict[object, int] = {}
    failed: dict[object, list[Row]] = {}
    capped = 0
    for r in rows:
        idx = r.get("index")
        seen[idx] = seen.get(idx, 0) + 1
        mask = r.get("throttle_reasons")
        if "throttle_reasons" in r and mask is None:
            unread[idx] = unread.get(idx, 0) + 1
        if r.get("nvml_error"):
            failed.setdefault(idx, []).append(r)
        if isinstance(mask, int) and mask & REASON_SW_POWER_CAP:
            capped += 1
        if isinstance(mask, int) and mask & THROTTLE_MASK:
            names = throttle_names(mask & THROTTLE_MASK)
            if not set(names) <= reasons:
                details.append(f"GPU {idx} throttled at {r.get('wall_epoch')}: {', '.join(names)} "
                               f"({r.get('temperature.gpu')} C, {r.get('power.draw')} W)")
            reasons.update(names)
        gen, width = r.get("pcie.link.gen.current"), r.get("pcie.link.width.current")
        if isinstance(idx, int) and isinstance(gen, int) and isinstance(width, int):
            g0, w0 = best.get(idx, (0, 0))
            best[idx] = (max(g0, gen), max(w0, width))
            count[idx] = count.get(idx, 0) + 1
    downtrained = False
    for idx, (egen, ewidth) in expected_link.items():
        if idx not in best or count.get(idx, 0) < min_link_samples:
            continue
        bgen, bwidth = best[idx]
        if (egen is not None and bgen < egen) or (ewidth is not None and bwidth < ewidth):
            downtrained = True
            details.append(f"GPU {idx} link reached at most Gen{bgen} x{bwidth} during the rep, "
                           f"expected Gen{egen} x{ewidth}")
    missing = [f"GPU {idx}: {len(bad)} of {seen[idx]} samples not read by NVML ({bad[0].get('nvml_error')}), "
               f"from {bad[0].get('wall_epoch')} to {bad[-1].get('wall_epoch')}" for idx, bad in failed.items()]
    throttled: bool | None = bool(reasons)
    if not reasons and unread:
        throttled = None
        details.append("throttle state unknown: the reason mask was not read in "
                       + ", ".join(f"{n} of {seen[i]} samples of GPU {i}" for i, n in unread.items())
                       + "; the rep is neither flagged nor cleared by it")
    simulated = any(r.get("simulated") == SIMULATED_MARK for r in rows)
    return RepFlags(throttled=throttled, downtrained=downtrained, reasons=sorted(reasons),
                    details=details, samples=len(rows), simulated=simulated, missing=missing, power_capped=capped)


def make_reader(gpus: Sequence[int], *, simulated: bool,
                link: Mapping[int, tuple[int | None, int | None]] | None = None) -> Reader:
    """NVML when the run is live, the labelled simulation otherwise.

    A live run never falls back to the simulation: a NVML that cannot start is an error
    (:class:`NvmlReader`), not numbers that would read like a measurement.
    """
    if simulated:
        return SimulatedReader(gpus=list(gpus), link=dict(link or {}))
    return NvmlReader(gpus)
