"""Direct NCCL calls through ctypes, for timing: the same library torch loaded, no torch in the loop.

Why: torch's ``dist.all_reduce`` costs ~20 us of host time per call (more than a
small all-reduce takes on NVLink), and inside a captured CUDA graph each collective
carries torch's event record/wait nodes, and SHM/NET transports need proxy host nodes;
either way a small message measures the framework, not the link. nccl-tests calls
``ncclAllReduce`` back to back on one stream from C; calling it through ctypes costs a
few microseconds of host time, below the device time of even the smallest all-reduce,
so the stream stays full and the measured time per op is the device's, as in
nccl-tests. vLLM's ``pynccl`` drives NCCL the same way.

Only ``ncclGetUniqueId``, ``ncclCommInitRank``, ``ncclAllReduce``, ``ncclGetErrorString``
and ``ncclCommDestroy`` are used; their signatures are stable since NCCL 2.0.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_p2p.probes._worker_types import Dist, NcclArgs, Tensor, Torch

NCCL_FLOAT32 = 7  # ncclFloat32 in ncclDataType_t
NCCL_SUM = 0  # ncclSum in ncclRedOp_t


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def load_library() -> ctypes.CDLL:
    """The NCCL torch uses: by soname first (dlopen returns the copy already in the process)."""
    errors = []
    candidates = [os.environ.get("PYTEST_P2P_NCCL_SO", ""), "libnccl.so.2"]
    try:
        import nvidia.nccl as pkg  # the pip wheel torch depends on

        for base in pkg.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "lib", "libnccl.so*")))
    except ImportError:
        pass
    for name in filter(None, candidates):
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise OSError("libnccl not loadable: " + "; ".join(errors))


class DirectComm:
    """An NCCL communicator of its own over the pair, created with an id shared through torch.distributed."""

    def __init__(self, dist: Dist, torch: Torch, rank: int, world: int) -> None:
        self.lib = load_library()
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p
        self.lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
        uid = UniqueId()
        if rank == 0:
            self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        box = [bytes(uid.internal) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        if not isinstance(box[0], bytes) or len(box[0]) != 128:
            raise RuntimeError("ncclUniqueId broadcast from rank 0 was lost or malformed")
        ctypes.memmove(uid.internal, box[0], 128)
        self.comm = ctypes.c_void_p()
        self._check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank), "ncclCommInitRank")
        self.torch = torch

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed: {self.lib.ncclGetErrorString(code).decode()} (ncclResult {code})")

    def prepare(self, x: Tensor) -> NcclArgs:
        """The converted arguments of an in-place float32 sum of ``x`` on the current stream.

        Built once per size: looking up the stream through torch and converting seven
        arguments costs more host time per call than a small all-reduce takes on the device.
        """
        stream = ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)
        ptr = ctypes.c_void_p(x.data_ptr())
        return (ptr, ptr, ctypes.c_size_t(x.numel()), ctypes.c_int(NCCL_FLOAT32), ctypes.c_int(NCCL_SUM),
                self.comm, stream)

    def all_reduce(self, x: Tensor) -> None:
        """In-place float32 sum of ``x`` on the current CUDA stream (asynchronous, like nccl-tests)."""
        self._check(self.lib.ncclAllReduce(*self.prepare(x)), "ncclAllReduce")

    def run(self, args: NcclArgs, times: int) -> None:
        """``times`` back-to-back all-reduces with prepared arguments; the hot loop is one ctypes call."""
        call = self.lib.ncclAllReduce
        for _ in range(times):
            code = call(*args)
            if code:
                self._check(code, "ncclAllReduce")

    def close(self) -> None:
        if self.comm:
            self.lib.ncclCommDestroy(self.comm)
            self.comm = ctypes.c_void_p()
