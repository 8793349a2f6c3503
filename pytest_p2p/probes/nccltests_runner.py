"""Run nccl-tests' ``all_reduce_perf`` next to our probe, when it is installed.

A second, independent measurement of the same link from the reference tool. Without
MPI it runs as one process driving both GPUs (``-g 2``), so NCCL connects the ranks
by "direct pointer" within the process, not by CUMEM/IPC as our one-process-per-GPU
probe and vLLM do: its transport is reported as such and not used as proof. With
``mpi=True`` (and ``mpirun`` on PATH) it runs one process per GPU (``-np 2 ... -g 1``),
the configuration the reference numbers in docs/performance.md were taken with.
NCCL's INFO output goes to its own files (``NCCL_DEBUG_FILE``) so that stdout stays the
table the parser reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import signals
from ..children import die_with_parent
from ..envs import subprocess_env
from ..errors import ProbeError
from ..jsontypes import JSONObject
from .allreduce import kill_group
from .arms import Arm

BINARY = "all_reduce_perf"
DEFAULT_ARGS = ("-b", "4", "-e", "256M", "-f", "4", "-n", "20", "-w", "5")
TRANSPORT_NOTE = {
    False: "single process, -g 2: NCCL 'direct pointer' P2P within one process (not CUMEM/IPC)",
    True: "mpirun -np 2, -g 1: one process per GPU (CUMEM/IPC/SHM as the arm selects)",
}


def mpirun_prefix(env: Mapping[str, str], nprocs: int = 2) -> list[str] | None:
    """``mpirun -np N`` forwarding the NCCL/CUDA variables (Open MPI needs ``-x``; Hydra forwards all)."""
    exe = shutil.which("mpirun", path=env.get("PATH"))
    if exe is None:
        return None
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    prefix = [exe, "-np", str(nprocs)]
    if "Open MPI" in version or "OpenRTE" in version:
        prefix += ["--allow-run-as-root", "--bind-to", "none"]
        for key in sorted(env):
            if key.startswith(("NCCL_", "CUDA_", "LD_LIBRARY_PATH", "PATH")):
                prefix += ["-x", key]
    return prefix


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
    mpi: bool = False,
) -> JSONObject | None:
    """Run ``all_reduce_perf`` under the arm's env; ``None`` when it (or, with ``mpi``, mpirun) is missing.

    Writes ``nccl_tests.log`` (its stdout) and ``nccl_tests.nccl.<pid>.log`` (NCCL INFO);
    returns ``{"command", "mpi", "transport_note", "parsed", "log"}`` where ``parsed`` is
    the nccl-tests parser's ``to_dict()``.
    """
    exe = binary or find_all_reduce_perf()
    if exe is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "nccl_tests.log"
    env = subprocess_env(pair, rig_env, arm.env, {"NCCL_DEBUG_FILE": str(out / "nccl_tests.nccl.%p.log")})
    if mpi:
        prefix = mpirun_prefix(env)
        if prefix is None:
            return None
        cmd = [*prefix, exe, *args, "-g", "1"]
    else:
        cmd = [exe, *args, "-g", "2"]
    what = f"nccl-tests {' '.join(cmd)} (arm {arm.name}, pair gpu{pair[0]}-gpu{pair[1]})"
    proc: subprocess.Popen[bytes] | None = None
    with open(log, "wb") as fh:
        try:
            with signals.held():  # an interrupt inside Popen would lose the process the finally must kill
                proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=die_with_parent())
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ProbeError(f"{what}: timed out after {timeout_s:g} s; log {log}") from None
        finally:  # also on success: mpirun or the binary may leave a child behind in the group
            if proc is not None:
                kill_group(proc)
    text = log.read_text(errors="replace")
    if code != 0:
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise ProbeError(f"{what}: exited with status {code}; last line: {tail[0]}")
    from .nccltests import parse_all_reduce_perf

    parsed = parse_all_reduce_perf(text, str(log)).to_dict()
    return {"command": cmd, "mpi": mpi, "transport_note": TRANSPORT_NOTE[mpi], "parsed": parsed, "log": log.name}
