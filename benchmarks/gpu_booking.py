"""Was any GPU used by two launches at once? A sampler independent of the lease it checks (issue 28).

    python3 benchmarks/gpu_booking.py --out booking.json &   # then the runs; SIGTERM it afterwards

Why not trust the lease's own notes: the claim under test is the lease's. This samples, 5 times a
second, who is on each GPU from two sources the lease never touches:

* NVML's compute processes of each GPU (where the driver shows pids), and
* ``/proc``: every probe rank (``pytest_p2p.probes._*worker``) and vLLM process, with the GPUs its
  ``CUDA_VISIBLE_DEVICES`` names.

A *launch* is a process's parent: the two ranks of one probe are started by one pytest process.
A sample where one GPU has processes of two different launches is a **double booking**. At the
end it writes the samples' summary (and every double booking seen, with pids and command lines)
to ``--out`` and prints ``BOOKING OK: <n> samples, 0 double bookings`` or ``BOOKING FAIL ...``.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

MARKERS = ("pytest_p2p.probes._", "vllm", "VLLM::")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _ppid(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return -1


def proc_owners() -> dict[int, set[tuple[int, int]]]:
    """GPU -> {(launch, pid)} from /proc (probe ranks and vLLM processes with CUDA_VISIBLE_DEVICES)."""
    out: dict[int, set[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmd = _read(f"/proc/{entry.name}/cmdline").replace(b"\0", b" ").decode(errors="replace")
        if not any(m in cmd for m in MARKERS) or "gpu_booking" in cmd:
            continue
        env = dict(kv.split(b"=", 1) for kv in _read(f"/proc/{entry.name}/environ").split(b"\0") if b"=" in kv)
        visible = env.get(b"CUDA_VISIBLE_DEVICES", b"").decode()
        pid = int(entry.name)
        for gpu in (int(g) for g in visible.split(",") if g.strip().isdigit()):
            out.setdefault(gpu, set()).add((_ppid(pid), pid))
    return out


def nvml_owners(handles: list[object]) -> dict[int, set[tuple[int, int]]]:
    import pynvml

    out: dict[int, set[tuple[int, int]]] = {}
    for i, h in enumerate(handles):
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        except pynvml.NVMLError:
            continue
        for p in procs:
            out.setdefault(i, set()).add((_ppid(p.pid), p.pid))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hz", type=float, default=5.0)
    ns = ap.parse_args()
    import pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    samples = busy = nvml_seen = 0
    doubles: list[dict[str, object]] = []
    while not stop:
        t = time.time()
        owners: dict[int, set[tuple[int, int]]] = {}
        nv = nvml_owners(handles)
        nvml_seen += sum(len(v) for v in nv.values())
        for src in (proc_owners(), nv):
            for gpu, who in src.items():
                owners.setdefault(gpu, set()).update(who)
        samples += 1
        busy += bool(owners)
        for gpu, who in owners.items():
            launches = {launch for launch, _ in who if launch > 1}
            if len(launches) > 1 and len(doubles) < 200:
                doubles.append({"t": t, "gpu": gpu, "launches": sorted(launches), "pids": sorted(p for _, p in who),
                                "cmds": {str(p): _read(f"/proc/{p}/cmdline").replace(b"\0", b" ").decode(
                                    errors="replace")[:200] for _, p in who}})
        time.sleep(max(0.0, 1.0 / ns.hz - (time.time() - t)))
    result = {"samples": samples, "samples_with_a_gpu_process": busy, "nvml_process_sightings": nvml_seen,
              "double_bookings": doubles}
    Path(ns.out).write_text(json.dumps(result, indent=1))
    verdict = "OK" if not doubles else "FAIL"
    print(f"BOOKING {verdict}: {samples} samples ({busy} with a GPU process), {len(doubles)} double bookings")
    return 0 if not doubles else 1


if __name__ == "__main__":
    raise SystemExit(main())
