"""The campaign's view of the GPUs of its pair: expected links, free VRAM, bounded waits.

Why here and not in the runner: these are the only places the campaign touches the
hardware (through the evidence stage's one NVML door, :mod:`pytest_p2p.evidence.nvml`),
and the only places it waits on something outside its control. Each wait is bounded and
each failure is a :class:`CampaignError` naming what it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..errors import CampaignError

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from ..evidence.nvml import NvmlGpu

T = TypeVar("T")
Link = dict[int, tuple[int | None, int | None]]


def expected_links(evidence: Evidence | None, gpus: Sequence[int]) -> Link:
    """The link each GPU should reach under load: the evidence's loaded reading, else its max."""
    out: Link = {}
    if evidence is None:
        return out
    for g in gpus:
        try:
            ge = evidence.gpu(g)
        except (KeyError, AttributeError):
            continue
        reading = ge.pcie.loaded or ge.pcie.max
        out[g] = (reading.gen, reading.width)
    return out


def wait_vram_free(gpus: Sequence[int], limit_mib: int, timeout_s: float, *, live: bool,
                   sleep: Callable[[float], None] = time.sleep) -> str:
    """Wait until every GPU of the pair uses at most ``limit_mib`` (a previous server's memory is back)."""
    if not live:
        return "skipped: no live NVML (simulated run)"
    from ..evidence.nvml import nvml_session

    with nvml_session() as nv:
        handles = {g: nv.gpu(g) for g in gpus}
        start = time.monotonic()
        while True:
            used: dict[int, int] = {}
            for g, h in handles.items():
                mem = h.memory()
                if mem is not None:
                    used[g] = int(mem.used_mib)
            busy = {g: u for g, u in used.items() if u > limit_mib}
            if not busy:
                return f"free after {time.monotonic() - start:.1f} s ({used} MiB used)"
            if time.monotonic() - start > timeout_s:
                detail = ", ".join(f"GPU {g}: {u} MiB" for g, u in busy.items())
                holders = _holders({g: handles[g] for g in busy})
                raise CampaignError(f"VRAM not free after {timeout_s:.0f} s ({detail} used, limit {limit_mib} MiB): "
                                    + (f"held by {holders}" if holders else
                                       "another process holds the GPU, or a previous server left one behind"))
            sleep(1.0)


def _holders(handles: Mapping[int, NvmlGpu]) -> str:
    """``GPU 1: pid 4242 (python3) 70000 MiB``: who to stop, from NVML (issue 30: name the process, not just MiB)."""
    from ..serve.server import process_name

    parts = [f"GPU {g}: pid {pid} ({process_name(pid)}) {'?' if mib is None else mib} MiB"
             for g, h in handles.items() for pid, mib in (h.compute_processes() or [])]
    return ", ".join(parts)


class Abandoned(CampaignError):
    """A bounded call was given up (its time limit, or ``abandon`` said why); its thread is left to die."""


def call_with_timeout(fn: Callable[[], T], timeout_s: float, what: str, *,
                      abandon: Callable[[], str | None] | None = None, poll_s: float = 0.5) -> T:
    """Run ``fn`` in a thread; past ``timeout_s`` raise (the slot's teardown then kills the server).

    ``abandon`` is asked every ``poll_s`` while ``fn`` runs: a non-``None`` answer (a dead
    server's cause) ends the wait at once with that cause, instead of letting a load
    generator retry against a server that is gone until the scenario's time limit.
    """
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="p2p-scenario", daemon=True)
    t.start()
    deadline = time.monotonic() + timeout_s
    while t.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            raise Abandoned(f"{what} exceeded its scenario timeout of {timeout_s:.0f} s "
                            "(campaign.scenario_timeout_s)")
        t.join(min(left, poll_s) if abandon is not None else left)
        if t.is_alive() and abandon is not None:
            why = abandon()
            if why is not None:
                raise Abandoned(f"{what}: {why}")
    if "error" in box:
        err = box["error"]
        assert isinstance(err, BaseException)
        raise err
    return box["value"]  # type: ignore[return-value]  # set by target() when no error was raised
