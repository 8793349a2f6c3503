"""Types of the GPU workers: the torch surface they call, and the JSON they read and write.

The workers (``_allreduce_worker``, ``_p2pcopy_worker``, ``_nccl_direct``) run on GPU
machines only and import this module under ``TYPE_CHECKING``: nothing here runs there.
torch is not installed where the package is type-checked, so the part of it the
workers use is spelled out as Protocols (method names as torch's, arguments as the
workers pass them). The JSON shapes are the contract between a launcher
(:mod:`.allreduce`, :mod:`.p2pcopy`) and its worker.
"""

from __future__ import annotations

import ctypes
from contextlib import AbstractContextManager
from typing import Protocol, TypedDict, TypeVar

_T = TypeVar("_T")

#: a torch.dtype (only passed through)
DType = object
#: a torch.device (only passed through)
Device = object


class Tensor(Protocol):
    """The part of ``torch.Tensor`` the workers use."""

    @property
    def device(self) -> Device: ...

    def __getitem__(self, index: int | slice, /) -> Tensor: ...

    def __mul__(self, other: float, /) -> Tensor: ...

    # elementwise comparisons return a boolean tensor; torch's own stubs override object's the same way
    def __eq__(self, other: object, /) -> Tensor: ...  # type: ignore[override]

    def __ne__(self, other: object, /) -> Tensor: ...  # type: ignore[override]

    def copy_(self, src: Tensor, non_blocking: bool = False) -> Tensor: ...

    def zero_(self) -> Tensor: ...

    def fill_(self, value: float, /) -> Tensor: ...

    def sum(self) -> Tensor: ...

    def item(self) -> float: ...

    def nonzero(self) -> Tensor: ...

    def remainder(self, other: int, /) -> Tensor: ...

    def to(self, dtype: DType, /) -> Tensor: ...

    def data_ptr(self) -> int: ...

    def numel(self) -> int: ...

    def tolist(self) -> list[float]: ...


class CudaStream(Protocol):
    """``torch.cuda.Stream``."""

    @property
    def cuda_stream(self) -> int: ...

    def wait_stream(self, stream: CudaStream, /) -> None: ...


class CudaEvent(Protocol):
    """``torch.cuda.Event(enable_timing=True)``."""

    def record(self, stream: CudaStream | None = None) -> None: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end_event: CudaEvent, /) -> float: ...  # milliseconds


class CudaGraph(Protocol):
    """``torch.cuda.CUDAGraph``."""

    def replay(self) -> None: ...


class Cuda(Protocol):
    """The part of ``torch.cuda`` the workers use."""

    def synchronize(self, device: Device | None = None) -> None: ...

    def Stream(self, device: Device | None = None) -> CudaStream: ...  # torch's name

    def current_stream(self, device: Device | None = None) -> CudaStream: ...

    def stream(self, stream: CudaStream | None, /) -> AbstractContextManager[object]: ...

    def device(self, device: Device, /) -> AbstractContextManager[object]: ...

    def CUDAGraph(self) -> CudaGraph: ...  # torch's name

    def Event(self, enable_timing: bool = False) -> CudaEvent: ...  # torch's name

    def graph(self, cuda_graph: CudaGraph, *, stream: CudaStream | None = None,
              capture_error_mode: str = "global") -> AbstractContextManager[object]: ...


class Torch(Protocol):
    """The part of the ``torch`` module the workers use."""

    @property
    def cuda(self) -> Cuda: ...

    @property
    def int64(self) -> DType: ...

    @property
    def float32(self) -> DType: ...

    @property
    def float64(self) -> DType: ...

    def device(self, type: str, index: int, /) -> Device: ...

    def arange(self, end: int, *, device: Device, dtype: DType) -> Tensor: ...

    def tensor(self, data: list[int] | list[float], *, dtype: DType, device: Device) -> Tensor: ...

    def ones(self, size: int, *, dtype: DType, device: Device) -> Tensor: ...

    def zeros(self, size: int, *, dtype: DType, device: Device | None = None, pin_memory: bool = False) -> Tensor: ...


class Dist(Protocol):
    """The part of ``torch.distributed`` the workers use (after ``init_process_group``)."""

    def all_reduce(self, tensor: Tensor, /) -> object: ...

    def barrier(self) -> object: ...

    def broadcast_object_list(self, object_list: list[_T], src: int = 0) -> None: ...


#: the converted arguments of one ``ncclAllReduce`` call (sendbuff, recvbuff, count, datatype, op, comm, stream)
NcclArgs = tuple[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                 ctypes.c_void_p, ctypes.c_void_p]


class AllReduceSpec(TypedDict):
    """What the all-reduce launcher writes for its workers (``allreduce_spec.json``)."""

    sizes: list[int]
    check_sizes: list[int]
    iters: int
    warmup: int
    graph: bool
    direct: bool
    graph_launches: int
    out: str
    trials: int


class _CheckRequired(TypedDict):
    bytes: int
    graph: bool
    wrong: int
    first_wrong: dict[str, float] | None  # index, got, expected (rank 0's first wrong element)


class AllReduceCheck(_CheckRequired, total=False):
    """One exact-value check of the all-reduce worker."""

    direct: bool


class CopyMode(TypedDict, total=False):
    """One copy mode's measurements in the copy worker's result."""

    unidir_gbs: dict[str, float]
    unidir_trials_gbs: dict[str, list[float]]
    bidir_gbs: float
    latency_us: dict[str, float]
    latency_timing: str
    method: str


class _P2PCopyRawRequired(TypedDict):
    bytes: int
    reps: int
    can_access_peer: dict[str, bool]
    modes: dict[str, CopyMode]
    device_names: list[str]
    torch_version: str


class P2PCopyRaw(_P2PCopyRawRequired, total=False):
    """What the copy worker writes (``trials`` and ``warmup`` since it times rounds)."""

    trials: int
    warmup: dict[str, object]
