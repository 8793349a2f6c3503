"""Run nccl-tests' ``all_reduce_perf`` next to our probe, when it is installed.

A second, independent measurement of the same link from the reference tool. Without
MPI it runs as one process driving both GPUs (``-g 2``), so NCCL connects the ranks
by "direct pointer" within the process, not by CUMEM/IPC as our one-process-per-GPU
probe and vLLM do: its transport is reported as such and not used as proof.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..envs import subprocess_env
from ..errors import ProbeError
from .allreduce import kill_group
from .arms import Arm

BINARY = "all_reduce_perf"
DEFAULT_ARGS = ("-b", "4", "-e", "256M", "-f", "4", "-g", "2", "-n", "20", "-w", "5")
TRANSPORT_NOTE = "single process, -g 2: NCCL 'direct pointer' P2P within one process (not CUMEM/IPC)"


def find_all_reduce_perf(env: Mapping[str, str] | None = None) -> str | None:
    """``$NCCL_TESTS_BIN/all_reduce_perf`` if set, else the one on ``PATH``."""
    env = os.environ if env is None else env
    bindir = env.get("NCCL_TESTS_BIN")
    if bindir:
        cand = Path(bindir) / BINARY
        return str(cand) if cand.is_file() and os.access(cand, os.X_OK) else None
    return shutil.which(BINARY, path=env.get("PATH"))


def run_nccl_tests(
    pair: tuple[int, int],
    arm: Arm,
    rig_env: Mapping[str, str] | None,
    out_dir: str | os.PathLike[str],
    timeout_s: float = 300.0,
    args: Sequence[str] = DEFAULT_ARGS,
    binary: str | None = None,
) -> dict[str, Any] | None:
    """Run ``all_reduce_perf`` under the arm's env; ``None`` when it is not installed.

    Writes ``nccl_tests.log``; returns ``{"command", "transport_note", "parsed", "log"}``
    where ``parsed`` is the nccl-tests parser's ``to_dict()`` (or its return value).
    """
    exe = binary or find_all_reduce_perf()
    if exe is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "nccl_tests.log"
    cmd = [exe, *args]
    env = subprocess_env(pair, rig_env, arm.env)
    what = f"nccl-tests {' '.join(cmd)} (arm {arm.name}, pair gpu{pair[0]}-gpu{pair[1]})"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise ProbeError(f"{what}: timed out after {timeout_s:g} s; log {log}") from None
        finally:
            kill_group(proc)
    text = log.read_text(errors="replace")
    if code != 0:
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise ProbeError(f"{what}: exited with status {code}; last line: {tail[0]}")
    from .nccltests import parse_all_reduce_perf

    parsed = parse_all_reduce_perf(text, str(log))
    as_dict = parsed.to_dict() if hasattr(parsed, "to_dict") else parsed
    return {"command": cmd, "transport_note": TRANSPORT_NOTE, "parsed": as_dict, "log": log.name}
