"""The per-pytest-session view of the rig: which rig, which evidence, which pairs.

Resolution order (stated once, used everywhere):

* **evidence**: ``--p2p-snapshot`` (or ``PYTEST_P2P_SNAPSHOT`` / ini ``p2p_snapshot``) replays
  a recording; otherwise live NVML when a driver answers; otherwise, unless ``--p2p-live``
  demands a GPU, the **demo rig**: the embedded snapshot recorded on our 2x H200 NVLink
  machine, replayed and labelled as such, with the stand-in server for model campaigns.
* **rig**: ``--p2p-rig`` (or ``PYTEST_P2P_RIG`` / ini ``p2p_rig``); else the demo rig file
  in demo mode; else auto-detection (every GPU, every pair, links at their maximum).
* **relative paths** (rig, snapshot, results): from the command line or the environment,
  against the directory pytest ran in; from the ini file, against the rootdir (as ``p2p_db``).

Cheap things (option parsing, rig and snapshot files) are resolved at configure time so
that a bad value is a usage error before collection; live NVML is read on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pytest

from ..errors import EvidenceError
from ..evidence.model import Evidence
from ..jsontypes import JSONObject
from ..options import LIVE, RESULTS, RIG, SNAPSHOT, Resolved, path_of, resolve
from .rig import ResolvedRig, Rig, auto_rig, load_rig
from .rig import resolve as resolve_rig
from .xdist_roles import worker_slot

SESSION_KEY = pytest.StashKey["P2PSession"]()

DEMO_SNAPSHOT = "h200x2-nvlink.snapshot.json"
DEMO_RIG = "rig.yaml"


def demo_path(name: str) -> Path:
    """A file shipped inside the package (works from an installed wheel)."""
    return Path(str(resources.files("pytest_p2p") / "demo" / name))


@dataclass
class P2PSession:
    rig: Rig
    results_root: Path
    snapshot: Resolved[str | None]
    require_live: bool
    demo_reason: str | None = None  # why the demo rig is used (no NVML here: ...)
    _evidence: Evidence | None = None
    _resolved: ResolvedRig | None = None
    _loaded: bool = False
    _end: Evidence | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def demo(self) -> bool:
        return self.demo_reason is not None

    @property
    def live(self) -> bool:
        return self.evidence.source == "live"

    @property
    def simulated(self) -> bool:
        """True when any stage substitutes simulation for hardware (the demo rig's stand-in server)."""
        server = self.rig.server
        return self.demo or bool(server is not None and server.simulated)

    @property
    def evidence(self) -> Evidence:
        if self._evidence is None:
            self._evidence = self._gather()
        return self._evidence

    def evidence_at_end(self) -> Evidence:
        """A second live NVML reading, taken once, when the first end-of-session check asks for it."""
        if self._end is None:
            from ..evidence.live import gather_live

            self._end = gather_live(load=False)
        return self._end

    def evidence_under_load(self) -> Evidence:
        """Evidence with PCIe read under load and CUDA peer access (live: runs the load once)."""
        ev = self.evidence
        if ev.source == "live" and not self._loaded:
            from ..evidence.live import read_under_load

            read_under_load(ev)
        self._loaded = True
        return ev

    def _gather(self) -> Evidence:
        """Idle evidence; :meth:`evidence_under_load` adds the load readings once, when a check needs them."""
        from ..evidence.snapshot import load_snapshot

        if self.snapshot.value is not None:
            return load_snapshot(self.snapshot.value, origin=self.snapshot.origin)
        if self.demo:
            ev = load_snapshot(demo_path(DEMO_SNAPSHOT))
            ev.notes.insert(0, f"demo rig: replaying the embedded snapshot because {self.demo_reason}")
            return ev
        from ..evidence.live import gather_live

        return gather_live(load=False)

    @property
    def resolved(self) -> ResolvedRig:
        if self._resolved is None:
            self._resolved = resolve_rig(self.rig, self.evidence)
        return self._resolved

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return self.resolved.pairs

    @property
    def gpus(self) -> list[int]:
        return self.resolved.gpus

    @property
    def label(self) -> str:
        ev = self.evidence
        text = ev.label
        if self.demo:
            text = f"DEMO — {text}; model campaigns use the SIMULATED stand-in server"
        return text

    def snapshot_dict(self) -> JSONObject:
        from ..evidence.snapshot import envelope

        return envelope(self.evidence)


def _from_config(config: pytest.Config) -> P2PSession:
    rig_opt = resolve(config, RIG)
    snap = resolve(config, SNAPSHOT)
    results = resolve(config, RESULTS)
    require_live = bool(resolve(config, LIVE).value)
    if snap.value is not None and require_live:
        raise pytest.UsageError(f"--p2p-live demands live NVML but {snap.where()} asks for a replay")
    demo_reason: str | None = None
    if snap.value is None:
        from ..evidence.live import nvml_available

        ok, why = nvml_available()
        if not ok:
            if require_live:
                raise EvidenceError(f"--p2p-live: {why}")
            demo_reason = f"no live GPU here ({why})"
    if snap.value is not None:
        snap = Resolved(str(_path(config, snap.value, snap.origin)), snap.origin)
    if rig_opt.value is not None:
        rig = load_rig(_path(config, rig_opt.value, rig_opt.origin), origin=rig_opt.origin)
    elif demo_reason is not None and demo_path(DEMO_RIG).is_file():
        rig = load_rig(demo_path(DEMO_RIG))
    else:
        rig = auto_rig()
    if rig.server.cpus == "auto":
        _take_worker_share(config)
    root = _path(config, results.value, results.origin)
    return P2PSession(rig=rig, results_root=root, snapshot=snap, require_live=require_live, demo_reason=demo_reason)


def worker_cpus(config: pytest.Config) -> list[int] | None:
    """The CPUs this xdist worker's servers and load clients keep to under ``server.cpus: auto``: its share of
    the process's CPUs (:func:`..serve.cores.worker_share`, by ``workerid`` ``gwK`` of ``workercount``); ``None``
    outside a worker, with one worker, or where xdist named the worker otherwise."""
    from ..serve.cores import worker_share

    slot = worker_slot(config)
    if slot is None or slot[1] < 2:
        return None
    return worker_share(*slot, os.sched_getaffinity(0))


def _take_worker_share(config: pytest.Config) -> None:
    """Keep this worker's process, and so every server and client it starts, on its share of the CPUs: the
    blocks of ``server.cpus: auto`` are cut from the CPUs a process may use, and every worker would otherwise cut
    the same ones (docs/rig-file.md#server-cpus)."""
    cpus = worker_cpus(config)
    if cpus:
        os.sched_setaffinity(0, set(cpus))


def _path(config: pytest.Config, value: str, origin: str) -> Path:
    """A relative path from an ini file is relative to the rootdir (as ``p2p_db`` is), else to where pytest ran."""
    return path_of(config, Resolved(value, origin))


def get_session(config: pytest.Config) -> P2PSession:
    """The session's rig/evidence view, created on first use and kept in ``config.stash``."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        session = _from_config(config)
        config.stash[SESSION_KEY] = session
    return session
