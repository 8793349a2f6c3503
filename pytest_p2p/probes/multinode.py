"""Probes across nodes, placed by Ray: each node's evidence read where it lives, NCCL ranks one per GPU.

Why Ray: vLLM's multi-node executor is Ray, so a rig that serves across nodes already runs a
Ray cluster, and Ray can pin work to a node (``NodeAffinitySchedulingStrategy``) or spread
ranks one per node (a placement group with ``STRICT_SPREAD``: two bundles never share a node,
so the all-reduce *must* cross). Ray is an optional extra (``pip install 'pytest-p2p[multinode]'``)
and is imported only here, inside the functions of a multi-node run.

A rig host is matched to a Ray node by, in order: a custom resource ``p2p_host:<name>`` the
node was started with (``ray start --resources '{"p2p_host:trinity-a": 1}'``; this is how two
Ray "nodes" on one host are told apart), the host's ``address`` (the node's IP), its hostname.

Each rank runs the worker (``_multinode_worker``) in a subprocess of a Ray actor on its node,
with the rig's, the host's and the arm's environment; its log comes back to the driver as
``rank<r>.log`` and the proof reads every one of them (:mod:`.netproof`).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..envs import subprocess_env
from ..errors import ProbeError
from ..jsontypes import JSONObject, as_dict, as_dicts, as_float, as_int
from ..util import atomic_write_json, atomic_write_text
from .allreduce import Row
from .netproof import CrossingProof, ProcessLog, prove_crossing

if TYPE_CHECKING:
    from ..evidence.nodes import NodeEvidence
    from ..evidence.nodespec import NodesSpec
    from .arms import Arm

INSTALL_HINT = "pip install 'pytest-p2p[multinode]' (Ray >= 2.40)"
HOST_RESOURCE = "p2p_host:"
WORKER_MODULE = "pytest_p2p.probes._multinode_worker"
#: a command that replaces the rank worker (CI's replaying fake, tests/fake_multinode_worker.py): how the plugin's own
#: checks are run end to end on a box without GPUs (benchmarks/multinode_pytest_gpu.py --fake)
WORKER_ENV = "PYTEST_P2P_MULTINODE_WORKER"
MAX_LOG_BYTES = 16 * 1024 * 1024  # a rank's log sent back to the driver, at most


class _RayApi(Protocol):
    """The part of the ``ray`` module used here, typed the same with or without Ray's own stubs."""

    def get(self, refs: object, *, timeout: float | None = None) -> object: ...

    def kill(self, actor: object) -> None: ...

    def nodes(self) -> list[dict[str, object]]: ...


def _ray() -> _RayApi:
    import ray

    return ray  # type: ignore[return-value]


@dataclass(frozen=True)
class RayNode:
    node_id: str
    address: str
    hostname: str
    resources: Mapping[str, float]


@dataclass(frozen=True)
class NodeReport:
    """A node's evidence and where the task that read it really ran."""

    host: str
    ran_on: str  # the Ray node id the task ran on
    hostname: str
    evidence: NodeEvidence


@dataclass
class RankRun:
    rank: int
    host: str
    node_id: str
    returncode: int
    log: Path
    result: JSONObject | None


@dataclass
class MultiNodeResult:
    arm: str
    strategy: str
    ranks: list[RankRun]
    rows: list[Row] = field(default_factory=list)
    sendrecv: list[Row] = field(default_factory=list)
    correct: bool = False
    proof: CrossingProof | None = None

    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.bytes) if self.rows else None

    def to_dict(self) -> JSONObject:
        return {"probe": "allreduce-multinode", "arm": self.arm, "strategy": self.strategy,
                "ranks": [{"rank": r.rank, "host": r.host, "node_id": r.node_id, "returncode": r.returncode,
                           "log": r.log.name} for r in self.ranks],
                "rows": [vars(r) for r in self.rows], "sendrecv": [vars(r) for r in self.sendrecv],
                "correct": self.correct, "proof": self.proof.to_dict() if self.proof else None}


def ray_address(option: str | None) -> str | None:
    """``--p2p-ray-address``, else ``RAY_ADDRESS``; None: no cluster named (a single-host run)."""
    return option or os.environ.get("RAY_ADDRESS") or None


def connect(address: str | None) -> None:
    """Attach to a running Ray cluster (``auto``, ``ray://host:10001``, ``host:6379``); a clear error without Ray."""
    try:
        import ray
    except ImportError:
        raise ProbeError(f"a multi-node rig needs Ray: {INSTALL_HINT}") from None
    if ray.is_initialized():
        return
    from .. import signals

    try:
        with signals.kept():  # Ray's own SIGTERM handler would exit pytest without any teardown
            ray.init(address=address or "auto", ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ProbeError(f"cannot attach to the Ray cluster at {address or 'auto'} (--p2p-ray-address or "
                         f"RAY_ADDRESS): {exc}") from None


def cluster_nodes() -> list[RayNode]:
    out = []
    for n in _ray().nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources")
        resources = {str(k): float(v) for k, v in res.items() if isinstance(v, (int, float))} \
            if isinstance(res, dict) else {}
        out.append(RayNode(str(n.get("NodeID")), str(n.get("NodeManagerAddress", "")),
                           str(n.get("NodeManagerHostname", "")), resources))
    return out


def match_hosts(spec: NodesSpec, nodes: Sequence[RayNode]) -> dict[str, RayNode]:
    """Each rig host's Ray node (see the module docstring); a host with none is a ProbeError naming it."""
    out: dict[str, RayNode] = {}
    for host in spec.hosts:
        found = [n for n in nodes if f"{HOST_RESOURCE}{host.name}" in n.resources] or \
            [n for n in nodes if host.address and n.address == host.address] or \
            [n for n in nodes if n.hostname == host.name]
        if len(found) != 1:
            seen = ", ".join(f"{n.hostname}/{n.address}" for n in nodes) or "none"
            why = "no Ray node" if not found else f"{len(found)} Ray nodes"
            raise ProbeError(f"rig host {host.name}: {why} matches it (by resource '{HOST_RESOURCE}{host.name}', "
                             f"address {host.address or '-'} or hostname); alive nodes: {seen}")
        out[host.name] = found[0]
    return out


def _read_node_task(root: str, host: str) -> NodeReport:
    """Runs on the node: reads its sysfs/proc (``root``) and says where it ran."""
    import ray

    from ..evidence.nodes import read_node

    return NodeReport(host, ray.get_runtime_context().get_node_id(), socket.gethostname(), read_node(root, host, host))


def gather_evidence(spec: NodesSpec, placed: Mapping[str, RayNode], rig_dir: Path,
                    timeout_s: float = 60.0) -> dict[str, NodeReport]:
    """One task pinned to each host's node (hard node affinity); each reads that node's evidence."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ..evidence.nodespec import sysfs_root

    task = ray.remote(num_cpus=0)(_read_node_task)
    refs = {h.name: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(placed[h.name].node_id,
                                                                                    soft=False))
            .remote(str(sysfs_root(h, rig_dir)), h.name) for h in spec.hosts}
    try:
        reports: dict[str, NodeReport] = {h: ray.get(r, timeout=timeout_s) for h, r in refs.items()}
    except ray.exceptions.GetTimeoutError:
        raise ProbeError(f"node evidence: a task did not finish in {timeout_s:g} s (a node without free "
                         "scheduling slots, or a hung file system)") from None
    for host, rep in reports.items():
        if rep.ran_on != placed[host].node_id:
            raise ProbeError(f"node evidence of {host}: the task ran on node {rep.ran_on}, not on "
                             f"{placed[host].node_id} (node affinity not honoured)")
    return reports


# --------------------------------------------------------------------------- ranks


class _Rank:
    """A Ray actor holding one rank: it runs the worker subprocess on its node and returns its log."""

    def where(self) -> tuple[str, str, int]:
        import ray

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        return ray.get_runtime_context().get_node_id(), str(ray.util.get_node_ip_address()), port  # type: ignore

    def run(self, cmd: list[str], layers: list[dict[str, str]], extra: dict[str, str], workdir: str,
            timeout_s: float) -> tuple[int, str, str | None]:
        os.makedirs(workdir, exist_ok=True)
        env = subprocess_env(None, *layers, extra)  # CUDA_VISIBLE_DEVICES stays Ray's: this rank's GPU
        log = os.path.join(workdir, f"rank{extra['RANK']}.log")
        with open(log, "wb") as fh:
            try:
                code = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=timeout_s, check=False).returncode
            except subprocess.TimeoutExpired:
                code = -9
        with open(log, "rb") as fh:
            text = fh.read(MAX_LOG_BYTES).decode("utf-8", "replace")
        out = os.path.join(workdir, f"result{extra['RANK']}.json")
        result = open(out, encoding="utf-8").read() if os.path.exists(out) else None  # noqa: SIM115
        return code, text, result


def run_allreduce_ray(spec: NodesSpec, placement: Sequence[str], arm: Arm, rig_env: Mapping[str, str] | None,
                      out_dir: Path, *, expect: str | None = None, sizes: Sequence[int] = (1 << 20, 1 << 28),
                      iters: int = 20, warmup: int = 5, gpus_per_rank: float = 1.0, strategy: str = "STRICT_SPREAD",
                      worker: Sequence[str] | None = None, timeout_s: float = 300.0) -> MultiNodeResult:
    """NCCL all-reduce and pipeline send/recv with one rank per entry of ``placement`` (rig host names).

    The ranks are bundles of one placement group (``STRICT_SPREAD``: each on its own node, for
    a crossing); rank r runs on the node Ray gave bundle r, which must be ``placement[r]``'s.
    Writes ``rank<r>.log``, ``multinode.json`` and ``crossing_proof.json`` under ``out_dir``.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    world = len(placement)
    placed = match_hosts(spec, cluster_nodes())
    bundle: dict[str, float] = {"CPU": 1.0}
    if gpus_per_rank:
        bundle["GPU"] = gpus_per_rank
    bundles = []
    for h in placement:  # pinned to the host where its node carries the host resource; else placed by strategy
        res = f"{HOST_RESOURCE}{h}"
        bundles.append(dict(bundle, **{res: 0.001}) if res in placed[h].resources else dict(bundle))
    pg = placement_group(bundles, strategy=strategy)
    what = f"multi-node all-reduce, arm {arm.name}, {world} ranks on {', '.join(placement)}"
    actors: list[object] = []
    try:
        try:
            ray.get(pg.ready(), timeout=min(timeout_s, 120.0))
        except ray.exceptions.GetTimeoutError:
            raise ProbeError(f"{what}: Ray could not place {world} bundles {bundle} with {strategy} (each rig host "
                             f"needs its '{HOST_RESOURCE}<name>' resource, a free GPU and a CPU)") from None
        order = _bundle_order(ray.util.placement_group_table(pg), placement, placed, what)
        actor_cls: object = ray.remote(_Rank)
        for r in range(world):
            actors.append(_call(actor_cls, "options", num_cpus=1, num_gpus=gpus_per_rank, scheduling_strategy=(
                PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=order[r]))))
        wheres = _triples(_ray().get([_call(a, "where") for a in actors], timeout=60))
        for r, (node_id, _, _) in enumerate(wheres):
            if node_id != placed[placement[r]].node_id:
                raise ProbeError(f"{what}: rank {r} landed on node {node_id}, not on {placement[r]}'s")
        master_ip, port = wheres[0][1], wheres[0][2]
        work = f"/tmp/p2p-multinode-{os.getpid()}-{arm.name}"
        spec_json = json.dumps({"sizes": list(sizes), "iters": iters, "warmup": warmup, "out_dir": work})
        cmd = [*(worker or shlex.split(os.environ.get(WORKER_ENV, "")) or [sys.executable, "-m", WORKER_MODULE]),
               spec_json]
        refs = []
        for r, a in enumerate(actors):
            extra = {"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "MASTER_ADDR": master_ip,
                     "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1", "P2P_HOST": placement[r]}
            layers = [dict(rig_env or {}), dict(spec.host(placement[r]).env), dict(arm.env)]
            refs.append(_call(a, "run", cmd, layers, extra, work, timeout_s))
        try:
            outs = _runs(_ray().get(refs, timeout=timeout_s + 30))
        except ray.exceptions.GetTimeoutError:
            raise ProbeError(f"{what}: timed out after {timeout_s:g} s (a hung NCCL rank?)") from None
    finally:
        for a in actors:
            _ray().kill(a)
        remove_placement_group(pg)
    return _collect(outs, placement, placed, arm, expect or arm.expect_transport, strategy, out_dir, what, rig_env,
                    spec)


def _triples(value: object) -> list[tuple[str, str, int]]:
    return [(str(v[0]), str(v[1]), int(v[2])) for v in value] if isinstance(value, list) else []


def _runs(value: object) -> list[tuple[int, str, str | None]]:
    out = []
    for v in value if isinstance(value, list) else []:
        code, text, result = v
        out.append((int(code), str(text), None if result is None else str(result)))
    return out


def _call(handle: object, method: str, *args: object, **kwargs: object) -> object:
    """``handle.method.remote(*args)`` (``options`` is called directly, then ``.remote()``): typed the same
    with or without Ray's stubs installed."""
    if method == "options":
        return getattr(getattr(handle, "options")(**kwargs), "remote")()  # noqa: B009
    return getattr(getattr(handle, method), "remote")(*args)  # noqa: B009


def _bundle_order(table: Mapping[str, object], placement: Sequence[str], placed: Mapping[str, RayNode],
                  what: str) -> list[int]:
    """For each rank, the bundle Ray put on its host's node (ranks keep the rig's pipeline order)."""
    raw = table.get("bundles_to_node_id")
    by_node: dict[str, list[int]] = {}
    for index, node in sorted((raw or {}).items() if isinstance(raw, Mapping) else []):
        by_node.setdefault(str(node), []).append(int(index))
    order = []
    for r, host in enumerate(placement):
        free = by_node.get(placed[host].node_id, [])
        if not free:
            got = ", ".join(f"bundle {i} on {n}" for n, ids in by_node.items() for i in ids)
            raise ProbeError(f"{what}: Ray placed no bundle on {host}'s node for rank {r} ({got})")
        order.append(free.pop(0))
    return order


def _collect(outs: Sequence[tuple[int, str, str | None]], placement: Sequence[str], placed: Mapping[str, RayNode],
             arm: Arm, expect: str, strategy: str, out_dir: Path, what: str, rig_env: Mapping[str, str] | None,
             spec: NodesSpec) -> MultiNodeResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs, logs = [], []
    for r, (code, text, result) in enumerate(outs):
        log = atomic_write_text(out_dir / f"rank{r}.log", text)
        parsed = as_dict(json.loads(result)) if result else None
        runs.append(RankRun(r, placement[r], placed[placement[r]].node_id, code, log, parsed))
        env = {**(rig_env or {}), **spec.host(placement[r]).env, **arm.env}
        logs.append(ProcessLog(text, log.name, placement[r], env))
    res = MultiNodeResult(arm.name, strategy, runs)
    res.proof = prove_crossing(logs, expect, arm_env=arm.env, world_size=len(placement))
    atomic_write_json(out_dir / "crossing_proof.json", res.proof.to_dict())
    failed = [r for r in runs if r.returncode != 0 or r.result is None]
    if not failed:
        res.rows = _mean_rows([r.result for r in runs if r.result is not None], "rows", len(runs), all_reduce=True)
        res.sendrecv = _mean_rows([r.result for r in runs if r.result is not None], "sendrecv", len(runs))
        res.correct = all(bool(r.result and r.result.get("correct")) for r in runs)
    atomic_write_json(out_dir / "multinode.json", res.to_dict())
    if failed:
        bad = failed[0]
        tail = bad.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
        raise ProbeError(f"{what}: rank {bad.rank} on {bad.host} exited with status {bad.returncode}"
                         f"{'' if bad.result else ' without a result'}; last log line: {tail[0]} (logs in {out_dir})")
    return res


def _mean_rows(results: Sequence[JSONObject], key: str, world: int, *, all_reduce: bool = False) -> list[Row]:
    """Per size, the time averaged over ranks (as nccl-tests does); all-reduce bus bandwidth, else bytes/time."""
    times: dict[int, list[float]] = {}
    for res in results:
        for row in as_dicts(res.get(key)):
            n, t = as_int(row.get("bytes")), as_float(row.get("time_us"))
            if n is not None and t is not None:
                times.setdefault(n, []).append(t)
    rows = []
    for n, ts in sorted(times.items()):
        t = sum(ts) / len(ts)
        rows.append(Row.from_time(n, t, world) if all_reduce else Row.from_time(n, t, 2))
    if not all_reduce:  # a send/recv hop carries its bytes once: busbw = algbw
        rows = [Row(r.bytes, r.time_us, r.algbw_gbs, r.algbw_gbs) for r in rows]
    return rows
