"""What a server's log says: the likely cause of a failure, its last lines for a message, its KV cache size.

Why: a server that fails to start or dies under load must end in one paragraph naming
the cause the user can fix (out of GPU memory, port in use, NCCL, a missing model), not
"exit code 1"; the campaign's liveness check reads the same two helpers. The KV cache
size a server found by profiling (:func:`kv_cache_gib`) is what lets the next start of
several servers skip the profiling (``--kv-cache-memory-bytes``), which two servers
cannot do side by side on one GPU (``campaign.backends``).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path

_CAUSES: tuple[tuple[str, str], ...] = (
    (r"out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory|"
     r"No available memory for the cache blocks|less than desired GPU memory utilization",
     "out of GPU memory (lower --gpu-memory-utilization or --max-model-len, or free the GPUs)"),
    (r"address already in use|Errno 98", "port in use (another server on the port)"),
    (r"Engine core proc \S+ (\(pid \d+\) )?died unexpectedly|EngineDeadError",
     "the vLLM engine core died (killed from outside, or crashed: see the lines above)"),
    (r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|NCCL WARN",
     "NCCL error (see the NCCL INFO/WARN lines above; check the arm's NCCL_* env and the GPU pair)"),
    (r"does not appear to have a file named|Repository Not Found|HFValidationError|"
     r"not a valid model|No such file or directory.*(config\.json|model)|Invalid repository ID|"
     r"We couldn't connect to 'https://huggingface.co'|LocalEntryNotFoundError",
     "missing model (check server.model: a local directory, or set HF_HUB_OFFLINE=0)"),
    (r"No module named", "missing Python module (is vLLM installed for this interpreter?)"),
    (r"No CUDA GPUs are available|CUDA driver initialization failed|no CUDA-capable device",
     "no GPU visible (CUDA_VISIBLE_DEVICES / driver)"),
    (r"unrecognized arguments|error: argument|invalid choice", "bad command-line arguments for this server"),
)


def likely_cause(log_text: str, returncode: int | None = None) -> str:
    """The most likely reason a server failed, from its log (last match wins: the final error)."""
    best: tuple[int, str] | None = None
    for pattern, cause in _CAUSES:
        for m in re.finditer(pattern, log_text, re.IGNORECASE):
            if best is None or m.start() > best[0]:
                best = (m.start(), cause)
    if best:
        return best[1]
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}" + (" (the kernel OOM killer?)" if returncode == -9 else "")
    return "unknown (read the log)"


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])



def pair_key(pair: Sequence[int]) -> str:
    return "-".join(f"gpu{i}" for i in pair)


#: vLLM 0.24's line (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``, ``format_gib``: bytes /
#: 2**30 rounded to 2 places), once per worker process: ``(Worker_TP0 pid=1834) INFO 11-22 11:25:03
#: [gpu_worker.py:508] Available KV cache memory: 40.71 GiB``. Negative when profiling went wrong.
_KV_LINE = re.compile(r"Available KV cache memory: (-?\d+(?:\.\d+)?) GiB")
GIB = 1 << 30


def kv_cache_gib(log_text: str) -> list[float]:
    """Every ``Available KV cache memory`` figure in a vLLM log (one per rank that printed it), in GiB, in order.

    ``[]`` for a log without one: a server started with ``--kv-cache-memory-bytes`` (it skips the sizing and
    says ``reserved ... GiB memory for KV Cache``), or one that failed before sizing its cache.
    """
    return [float(m.group(1)) for m in _KV_LINE.finditer(log_text)]
