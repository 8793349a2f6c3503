"""The one door to NVML: every ``pynvml`` import and every ``nvmlInit``/``nvmlShutdown`` is here.

Why one module: NVML was started in four places (evidence, telemetry, the campaign's VRAM
wait, the server's GPU-usage check), each with its own error handling, and a test suite
running on a GPU machine could not keep any of them away from the real driver. Here:

* ``PYTEST_P2P_NVML=off`` makes NVML behave exactly as "no driver" (the project's own test
  suite sets it, so its tests are hermetic on GPU machines; a test that wants a particular
  topology installs a fake ``pynvml`` in ``sys.modules`` and unsets the variable).
* :func:`nvml_session` starts NVML once per ``with`` block and always shuts it down; it
  yields an :class:`Nvml` whose :class:`NvmlGpu` handles have typed getters.
* A getter a GPU does not report, or that this nvidia-ml-py does not have (a driver or
  library older than the getter), returns ``None`` ("not reported") instead of raising.
  Reads a caller cannot do without (count, handle, bus id, name) raise :class:`EvidenceError`.

pynvml is imported lazily (never at import time of this module).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from ..errors import EvidenceError
from ..util import normalize_bus_id

T = TypeVar("T")
P = ParamSpec("P")

ENV_SWITCH = "PYTEST_P2P_NVML"
REPLAY_HINT = ("Replay a recording instead: --p2p-snapshot FILE (pytest) or --snapshot FILE "
               "(python -m pytest_p2p; '--snapshot demo' replays the bundled 2x H200 recording)")


class Pynvml(Protocol):
    """The part of the ``pynvml`` module called by attribute here and in :mod:`.live`.

    Every other getter is called by name through :func:`nvml_call` (so a name this
    nvidia-ml-py lacks is 'not reported', not an AttributeError) and returns ``object``.
    """

    NVML_NVLINK_ERROR_DL_REPLAY: int
    NVML_NVLINK_ERROR_DL_CRC_FLIT: int
    NVML_NVLINK_ERROR_DL_CRC_DATA: int

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object: ...

    def nvmlDeviceGetTopologyCommonAncestor(self, a: object, b: object, /) -> int: ...


class NvmlUnavailable(EvidenceError):
    """NVML cannot be used here: switched off, pynvml missing, no driver, or no GPU."""


def nvml_switched_off() -> bool:
    """``PYTEST_P2P_NVML=off`` (also ``0``, ``false``, ``no``): act exactly as on a machine without a driver."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def _module() -> Pynvml:
    """The pynvml module, initialised; :class:`NvmlUnavailable` with the reason when it cannot be."""
    if nvml_switched_off():
        raise NvmlUnavailable(f"NVML is switched off ({ENV_SWITCH}=off): treated as a machine without a "
                              f"driver. {REPLAY_HINT}.")
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("pynvml is not importable: install nvidia-ml-py (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound/DriverNotLoaded, OSError from ctypes
        raise NvmlUnavailable(f"NVML could not start ({exc}): no NVIDIA driver is loaded on this machine, or it "
                              f"cannot be reached from here. {REPLAY_HINT}.") from None
    module: Pynvml = pynvml  # untyped library: the surface this package relies on
    return module


def _shutdown(nv: Pynvml) -> None:
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()


def nvml_get(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """``fn(*args)``, or ``None``: NVML getters raise NotSupported & co. on some GPUs, that is 'not reported'."""
    try:
        return fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - pynvml raises a zoo of NVMLError subclasses and ctypes errors
        return None


def nvml_call(nv: Pynvml, name: str, *args: object) -> object:
    """``nv.<name>(*args)``, or ``None`` when this nvidia-ml-py lacks the function or the GPU does not report it.

    The name is looked up inside the guard: a getter added in a newer NVML must not crash an
    older nvidia-ml-py before the call is even attempted.
    """
    return nvml_get(lambda: getattr(nv, name)(*args))


def text(value: object) -> str:
    """NVML strings are bytes in older nvidia-ml-py, str in newer."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def struct_field(struct: object, name: str) -> object:
    """A field of a struct pynvml returned (``c_nvmlPciInfo_t.busId``): AttributeError when absent, as ``.name``."""
    return getattr(struct, name)


def _items(value: object) -> Iterable[object]:
    """A list pynvml returned; TypeError for anything not iterable, as a ``for`` loop over it would raise."""
    if isinstance(value, Iterable):
        return value
    raise TypeError(f"'{type(value).__name__}' object is not iterable")


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class MemoryUse:
    total_mib: int
    used_mib: int


@dataclass(frozen=True)
class Utilization:
    gpu_percent: int
    memory_percent: int


#: pynvml errors that mean "this GPU or driver does not report that": not a fault of the sample
NOT_REPORTED = frozenset({"NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission",
                          "NVMLError_NoData", "NVMLError_NotFound", "NVMLError_ArgumentVersionMismatch",
                          "AttributeError", "TypeError"})


class NvmlGpu:
    """One GPU's NVML handle with typed getters; ``None`` from a getter means 'not reported'."""

    def __init__(self, nvml: Nvml, index: int, handle: object) -> None:
        self.nvml = nvml
        self.index = index
        self.handle = handle
        self.faults: list[str] = []  # getters that failed for a reason other than "not reported"

    def call(self, name: str, *args: object) -> object:
        """Guarded ``nvmlDevice...(handle, *args)``: ``None`` when not reported or not in this nvidia-ml-py.

        A failure that is not "not reported" (``NVMLError_GpuIsLost``, ``_Unknown``, a driver error
        mid-run) also returns ``None``, but is recorded in :attr:`faults`: telemetry must tell a GPU
        that never reports a throttle mask from a sample it could not read (issue 30).
        """
        try:
            fn = getattr(self.nvml.module, name)
        except AttributeError:
            return None  # an older nvidia-ml-py without this getter
        try:
            return fn(self.handle, *args)
        except Exception as exc:  # noqa: BLE001 - pynvml raises a zoo of NVMLError subclasses and ctypes errors
            if type(exc).__name__ not in NOT_REPORTED and len(self.faults) < 100:
                self.faults.append(f"{name}: {type(exc).__name__}")
            return None

    def take_faults(self) -> list[str]:
        """The faults recorded since the last call (a sampler reads them once per sample)."""
        got, self.faults = self.faults, []
        return got

    def _required(self, name: str) -> object:
        try:
            return getattr(self.nvml.module, name)(self.handle)
        except Exception as exc:  # noqa: BLE001 - NVMLError_GpuIsLost, _Unknown, AttributeError of an old library
            raise EvidenceError(f"NVML failed reading GPU {self.index} ({name}: {exc}); 'nvidia-smi' shows whether "
                                f"the GPU is still there") from None

    def bus_id(self) -> str:
        return normalize_bus_id(text(struct_field(self._required("nvmlDeviceGetPciInfo"), "busId")))

    def name(self) -> str:
        return text(self._required("nvmlDeviceGetName"))

    def uuid(self) -> str | None:
        got = self.call("nvmlDeviceGetUUID")
        return None if got is None else text(got)

    def memory(self) -> MemoryUse | None:
        mem = self.call("nvmlDeviceGetMemoryInfo")
        total, used = (None, None) if mem is None else (_int(getattr(mem, "total", None)),
                                                         _int(getattr(mem, "used", None)))
        if total is None or used is None:
            return None
        return MemoryUse(total_mib=total // 2**20, used_mib=used // 2**20)

    def utilization(self) -> Utilization | None:
        util = self.call("nvmlDeviceGetUtilizationRates")
        gpu, mem = (None, None) if util is None else (_int(getattr(util, "gpu", None)),
                                                       _int(getattr(util, "memory", None)))
        return None if gpu is None or mem is None else Utilization(gpu, mem)

    def power_w(self) -> float | None:
        mw = _int(self.call("nvmlDeviceGetPowerUsage"))
        return None if mw is None else mw / 1000.0

    def power_limit_w(self) -> float | None:
        mw = _int(self.call("nvmlDeviceGetEnforcedPowerLimit"))
        return None if mw is None else mw / 1000.0

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded, in millijoules (Volta and newer)."""
        return _int(self.call("nvmlDeviceGetTotalEnergyConsumption"))

    def sm_clock_mhz(self) -> int | None:
        return _int(self.call("nvmlDeviceGetClockInfo", self.nvml.constant("NVML_CLOCK_SM", 1)))

    def mem_clock_mhz(self) -> int | None:
        return _int(self.call("nvmlDeviceGetClockInfo", self.nvml.constant("NVML_CLOCK_MEM", 2)))

    def temperature_c(self) -> int | None:
        return _int(self.call("nvmlDeviceGetTemperature", self.nvml.constant("NVML_TEMPERATURE_GPU", 0)))

    def pstate(self) -> int | None:
        return _int(self.call("nvmlDeviceGetPerformanceState"))

    def clock_event_reasons(self) -> int | None:
        """The clocks-event (throttle) reason mask; older drivers only have the 'throttle' name."""
        reasons = self.call("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = self.call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return _int(reasons)

    def pcie_gen(self) -> int | None:
        return _int(self.call("nvmlDeviceGetCurrPcieLinkGeneration"))

    def pcie_width(self) -> int | None:
        return _int(self.call("nvmlDeviceGetCurrPcieLinkWidth"))

    def pcie_max_gen(self) -> int | None:
        return _int(self.call("nvmlDeviceGetMaxPcieLinkGeneration"))

    def pcie_max_width(self) -> int | None:
        return _int(self.call("nvmlDeviceGetMaxPcieLinkWidth"))

    def gpu_max_pcie_gen(self) -> int | None:
        return _int(self.call("nvmlDeviceGetGpuMaxPcieLinkGeneration"))

    def pcie_replay_counter(self) -> int | None:
        return _int(self.call("nvmlDeviceGetPcieReplayCounter"))

    def mig_mode(self) -> bool | None:
        """Whether MIG is enabled (current mode); ``None`` on GPUs without MIG or drivers without the getter."""
        got = self.call("nvmlDeviceGetMigMode")
        if not isinstance(got, (list, tuple)) or not got:
            return None
        current = _int(got[0])
        return None if current is None else current == 1

    def running_pids(self) -> list[int] | None:
        """PIDs of compute processes on this GPU (sorted); ``None`` when NVML does not say."""
        procs = self.call("nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        pids = {_int(getattr(p, "pid", None)) for p in _items(procs)}
        return sorted(p for p in pids if p is not None)


    def compute_processes(self) -> list[tuple[int, int | None]] | None:
        """``(pid, MiB it holds)`` of each compute process on this GPU (MiB ``None`` when NVML hides it, as
        in a container); ``None`` when NVML does not say. Names whoever took the memory a server needed."""
        procs = self.call("nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        out: dict[int, int | None] = {}
        for p in _items(procs):
            pid = _int(getattr(p, "pid", None))
            used = _int(getattr(p, "usedGpuMemory", None))
            if pid is not None:
                # NVML_VALUE_NOT_AVAILABLE (2**64-1) reads as "not shown", never as 16 EiB
                out[pid] = None if used is None or used >= (1 << 63) else used >> 20
        return sorted(out.items())


class Nvml:
    """An initialised NVML, valid inside :func:`nvml_session`. ``module`` is the raw pynvml for the evidence stage."""

    def __init__(self, module: Pynvml) -> None:
        self.module = module

    @property
    def error(self) -> type[Exception]:
        """pynvml's ``NVMLError`` (to catch a failure of a raw call)."""
        err = getattr(self.module, "NVMLError", Exception)
        return err if isinstance(err, type) and issubclass(err, Exception) else Exception

    def constant(self, name: str, default: int) -> object:
        return getattr(self.module, name, default)

    def call(self, name: str, *args: object) -> object:
        """Guarded ``nvml<name>(*args)`` for system-level getters."""
        return nvml_call(self.module, name, *args)

    def count(self) -> int:
        try:
            return int(self.module.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            raise EvidenceError(f"NVML started but cannot count the GPUs ({exc})") from None

    def gpu(self, index: int) -> NvmlGpu:
        """The GPU at NVML ``index`` (PCI bus order); :class:`EvidenceError` naming what exists when absent."""
        try:
            return NvmlGpu(self, index, self.module.nvmlDeviceGetHandleByIndex(int(index)))
        except Exception as exc:  # noqa: BLE001 - InvalidArgument for an index past the end, GpuIsLost, ...
            raise EvidenceError(f"NVML has no GPU with index {index} ({exc}); it counts "
                                f"{self._count_text()}") from None

    def gpu_by_bus_id(self, bus_id: str) -> NvmlGpu:
        """The GPU at a PCI bus id (any common spelling); the NVML index is looked up by scanning."""
        want = normalize_bus_id(bus_id)
        for i in range(self.count()):
            g = self.gpu(i)
            if nvml_get(g.bus_id) == want:
                return g
        raise EvidenceError(f"NVML sees no GPU at bus id {want} ({self._count_text()}); it left the bus, or the "
                            f"rig file names another machine's GPU")

    def gpus(self) -> list[NvmlGpu]:
        return [self.gpu(i) for i in range(self.count())]

    def _count_text(self) -> str:
        n = nvml_get(self.module.nvmlDeviceGetCount)
        return f"{n} GPU(s)" if n is not None else "an unknown number of GPUs"

    def driver_version(self) -> str | None:
        got = self.call("nvmlSystemGetDriverVersion")
        return None if got is None else text(got)

    def nvml_version(self) -> str | None:
        got = self.call("nvmlSystemGetNVMLVersion")
        return None if got is None else text(got)

    def cuda_driver_version(self) -> int | None:
        return _int(self.call("nvmlSystemGetCudaDriverVersion"))


@contextlib.contextmanager
def nvml_session() -> Iterator[Nvml]:
    """NVML started for the ``with`` block and shut down after it, however it is left.

    Raises :class:`NvmlUnavailable` (an :class:`EvidenceError`) when NVML is switched off, not
    installed or has no driver. A raw ``NVMLError`` escaping the block becomes an
    :class:`EvidenceError` (a GPU lost from the bus, a driver mismatch) instead of a traceback.
    """
    nv = _module()
    handle = Nvml(nv)
    try:
        yield handle
    except handle.error as exc:
        raise EvidenceError(f"NVML failed ({type(exc).__name__}: {exc}); 'nvidia-smi' shows whether every GPU is "
                            f"still there") from None
    finally:
        _shutdown(nv)


def why_no_nvml() -> str | None:
    """``None`` when NVML runs and sees at least one GPU; otherwise the reason it cannot be used (cheap)."""
    try:
        with nvml_session() as nv:
            count = nv.count()
    except EvidenceError as exc:
        return str(exc)
    if count == 0:
        return f"NVML is running but reports no GPU. {REPLAY_HINT}."
    return None


__all__ = ["ENV_SWITCH", "MemoryUse", "Nvml", "NvmlGpu", "NvmlUnavailable", "Pynvml", "Utilization", "nvml_call",
           "nvml_get", "nvml_session", "nvml_switched_off", "struct_field", "text", "why_no_nvml"]
