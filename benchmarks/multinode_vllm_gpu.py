"""Issue 27 item 4 on a 2-GPU machine: a TP=2 ``vllm serve`` under Ray's executor across two Ray "nodes" of one host.

    MULTINODE_GPUS=0,1 python3 benchmarks/multinode_vllm_gpu.py [--out DIR] [--arms socket,p2p_on]
    python3 benchmarks/multinode_vllm_gpu.py --standin      # CI box: the SIMULATED stand-in server, a real Ray cluster

Per arm (``socket``: NCCL forced onto ``NET/Socket`` over ``lo``; ``p2p_on``: ``P2P`` between the GPUs):

1. a local Ray cluster of two nodes (``ray.cluster_utils.Cluster``: a head and one more raylet), each started
   with ``--num-gpus 1``, the resource ``p2p_host:node-a|b``, the arm's NCCL variables
   (``serve.multinode.ray_server_env``'s advice: a raylet's environment is its workers') and
   ``CUDA_VISIBLE_DEVICES``: ``socket`` its one GPU (as on separate machines); ``p2p_on`` its GPU first, then the
   other's (``--visible``): a process that cannot see the peer GPU cannot open a P2P path to it, so NCCL would
   fall back (SHM) and the arm would only prove the isolation;
2. ``vllm serve`` through the plugin's own path (``ray_server_config``, ``ray_server_env``, ``serve.server.launch``):
   ``--distributed-executor-backend ray``, TP 2, ``--load-format dummy``, ``--enforce-eager``,
   ``--disable-custom-all-reduce``, FLASH_ATTN, a tiny Llama (``python3 -m pytest_p2p.serve.tinymodel``);
3. where Ray put each worker (its actor table: pid -> Ray node), the GPU each used (NCCL's ``nvmlDev``);
4. one short load (the plugin's load generator, c8, 16 prompts), then the per-worker transport proof
   (``serve.multinode.worker_proof``, and the same logs placed on the Ray nodes) printed rank by rank;
5. teardown: the server (launch's own check: no process, the GPUs' memory back), the Ray cluster, then every
   process recorded on the way (raylets, their workers, the actors) and NVML's compute processes on the GPUs must
   be gone; leftovers are named, killed and make the run FAIL.

Last stdout line: ``MULTINODE_VLLM OK`` or ``MULTINODE_VLLM FAIL: <why>``; logs and ``summary.json`` under
``$OUT/multinode_vllm/`` (or ``--out``). Every step has a hard limit (SIGALRM in the step, then a watchdog thread
that kills every recorded process and exits), so a hang ends as a FAIL line naming the step, never as silence.

What vLLM 0.24.0's Ray executor does with two raylets on one IP (read in the wheel, ``vllm/v1/executor/``):

* The default executor is ``RayExecutorV2`` (``VLLM_USE_RAY_V2_EXECUTOR_BACKEND`` defaults to "1" in envs.py,
  although its annotation says False). ``initialize_ray_cluster(require_gpu_on_driver=False)`` asks for one
  placement group of ``world_size`` bundles ``{GPU: 1}`` with strategy ``PACK``; vLLM has no flag for another
  strategy and the plugin passes none (``ray_executor_args`` gives only the backend and the TP/PP sizes). With
  ONE GPU per raylet, PACK cannot put both bundles on one node, so the two workers land on two Ray nodes: the
  split of the GPUs between the raylets is what makes this a crossing (one raylet with both GPUs would pack both
  workers on it, silently). The script checks the placement from Ray's actor table and fails if not crossed.
* Workers are actors with ``num_gpus=VLLM_RAY_PER_WORKER_GPUS`` (default 1; a fraction would let two workers
  share a raylet's GPU: the script leaves it at 1) and ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1``: Ray does
  not set ``CUDA_VISIBLE_DEVICES``, so a worker keeps its raylet's (inherited at ``ray start``). The executor
  reads each worker's Ray GPU ids (``get_accelerator_ids``: the ids the raylet saw in ITS ``CUDA_VISIBLE_DEVICES``,
  i.e. physical ids), groups them per Ray node id (not per IP) and gives each worker ``local_rank`` = its index on
  its node (0 on both here) and ``assigned_physical_gpu_ids`` = its node's ids; the worker maps local rank 0 ->
  physical id -> its index in its own ``CUDA_VISIBLE_DEVICES`` -> ``cuda:0``. Checked here with Ray 2.60: raylets
  started with ``CUDA_VISIBLE_DEVICES=2`` / ``=3`` give actors ids ``['2']`` / ``['3']`` and that env.
  Failure modes: raylets not split (both report GPU id 0 -> both workers on one GPU: NCCL "Duplicate GPU
  detected"), or a worker whose env lacks its id ("Physical device N ... is not visible in CUDA_VISIBLE_DEVICES").
* Driver variables reach the workers with ``setdefault`` (``get_driver_env_vars``: all of the driver's env
  except ``CUDA_VISIBLE_DEVICES``, ``VLLM_HOST_IP``, ``LOCAL_RANK`` ...): a value the raylet already has WINS.
  So a raylet started with other NCCL variables than the arm's keeps them; the script starts a fresh cluster per
  arm with the arm's variables on both raylets, and the per-rank proof names a worker whose ``NCCL_*`` differs.
* The TCPStore runs on rank 0's node IP (Ray's ``NodeManagerAddress``; the same host IP for both raylets here),
  the scheduler-output queue is shared memory for workers on the driver's Ray node and ZMQ/TCP for the other.
  V2 has no "one IP per node" check, so two raylets on one IP are fine.
* The old ``RayDistributedExecutor`` (``--executor v1`` sets ``VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0``) refuses two
  Ray nodes on one IP ("Every node should have a unique IP address"): it counts IPs from vLLM's ``get_ip()``
  (``VLLM_HOST_IP``, never copied from the driver). For v1 the script starts raylet A with ``VLLM_HOST_IP`` = the
  Ray node IP and raylet B with ``127.0.0.1``, and the driver with A's (v1 pins bundle 0 to ``node:<driver IP>``,
  a resource only the Ray node IP has; ``--node-ip-address 127.0.0.1`` for a raylet does not work: the driver
  then dials the host IP and waits on the GCS forever, tried with Ray 2.60).
* NCCL sees one host (same hostname and boot id): its ``nNodes`` is 1 and its ``host:pid`` prefixes name the same
  host for both workers. ``socket`` is still proven (NET connections are judged whatever the nodes); for ``p2p_on``
  the proof is also run on the logs placed on their Ray nodes (pid -> node from the actor table), so the P2P
  connections between the two Ray nodes are judged as a crossing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_p2p.errors import P2PError  # noqa: E402
from pytest_p2p.probes.arms import PRESETS  # noqa: E402
from pytest_p2p.probes.netproof import CrossingProof, ProcessLog, prove_crossing, split_by_process  # noqa: E402
from pytest_p2p.serve.procs import cmdline, proc_state, stat_fields  # noqa: E402

MARK = "MULTINODE_VLLM"
HOSTS = ("node-a", "node-b")
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
VLLM_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
# per arm: the preset, what the crossing must show, the variables added on top of the preset (raylets and driver),
# and what each raylet's CUDA_VISIBLE_DEVICES shows: "own" (its GPU only, as on separate machines) or "peer" (its
# GPU first, then the other's: Ray still takes only the first, and NCCL can reach the peer for P2P)
ARMS: dict[str, tuple[str, str, dict[str, str], str]] = {
    "socket": ("socket", "NET/Socket", {"NCCL_SOCKET_IFNAME": "lo"}, "own"),
    "p2p_on": ("p2p_on", "P2P", {}, "peer"),
}
WORKER_CLASSES = ("RayWorkerProc", "RayWorkerWrapper")  # vLLM 0.24's V2 and V1 executors' actor classes


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class Args:
    out: Path
    gpus: tuple[int, int]
    arms: tuple[str, ...]
    standin: bool
    executor: str
    visible: str
    model_dir: Path | None
    concurrency: int
    num_prompts: int
    startup_s: float
    budget_s: float


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Args:
    """The command line and ``MULTINODE_GPUS``; a bad value exits 2 with argparse's one line naming it."""
    env = os.environ if environ is None else environ
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", default=os.path.join(env.get("OUT", "."), "multinode_vllm"))
    ap.add_argument("--gpus", default=env.get("MULTINODE_GPUS", "0,1"),
                    help="the two physical GPUs, one per Ray node (default $MULTINODE_GPUS, else 0,1)")
    ap.add_argument("--arms", default="socket,p2p_on", help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--standin", action="store_true", help="the SIMULATED stand-in server instead of vLLM (no GPU): "
                    "its Ray executor prints every worker's NCCL lines; the Ray cluster is real")
    ap.add_argument("--executor", choices=("v2", "v1"), default="v2", help="vLLM's Ray executor (v2: 0.24's default)")
    ap.add_argument("--visible", choices=("auto", "own", "peer"), default="auto",
                    help="each raylet's CUDA_VISIBLE_DEVICES: its GPU only (own), its GPU then the other's (peer), "
                    "or per arm (auto: socket own, p2p_on peer)")
    ap.add_argument("--model-dir", default=None, help="a tiny Llama (default: made under --out)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds for one server to be ready")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds for the whole run; then the watchdog")
    a = ap.parse_args(list(argv))
    gpus = [g.strip() for g in a.gpus.split(",") if g.strip()]
    if len(gpus) != 2 or not all(g.isdigit() for g in gpus) or gpus[0] == gpus[1]:
        ap.error(f"--gpus / MULTINODE_GPUS: two different GPU indices like 0,1, got {a.gpus!r}")
    arms = tuple(x.strip() for x in a.arms.split(",") if x.strip())
    unknown = [x for x in arms if x not in ARMS]
    if not arms or unknown:
        ap.error(f"--arms: {', '.join(unknown) or 'none given'}: not one of {', '.join(ARMS)}")
    for name, value in (("--concurrency", a.concurrency), ("--num-prompts", a.num_prompts)):
        if value < 1:
            ap.error(f"{name}: at least 1, got {value}")
    if a.startup_timeout <= 0 or a.budget <= a.startup_timeout:
        ap.error(f"--budget ({a.budget} s) must exceed --startup-timeout ({a.startup_timeout} s), both positive")
    return Args(Path(a.out), (int(gpus[0]), int(gpus[1])), arms, a.standin, a.executor, a.visible,
                Path(a.model_dir) if a.model_dir else None, a.concurrency, a.num_prompts, a.startup_timeout, a.budget)


# ----------------------------------------------------------------------------- diagnosis of failure texts

# (pattern in a server log or an error, the diagnosis): first match wins, most specific first
DIAGNOSES: tuple[tuple[str, str], ...] = (
    (r"Every node should have a unique IP address",
     "vLLM's v1 Ray executor refuses two Ray nodes on one IP: give each raylet its own VLLM_HOST_IP "
     "(--executor v1 does), or use the v2 executor"),
    (r"Duplicate GPU detected",
     "both Ray workers on one GPU: the raylets were not started with one CUDA_VISIBLE_DEVICES each "
     "(Ray gave both GPU id 0)"),
    (r"is not visible in CUDA_VISIBLE_DEVICES",
     "a Ray worker's CUDA_VISIBLE_DEVICES lacks the GPU Ray assigned it: the raylet's env and its --num-gpus disagree"),
    (r"No CUDA GPUs are available|no CUDA-capable device",
     "a Ray worker sees no GPU: its raylet was started with an empty CUDA_VISIBLE_DEVICES"),
    (r"Failed to import Ray|No module named '?ray'?",
     "the server's Python cannot import Ray: install it where vLLM is (PYTHONPATH=/tmp/site, ray_wheels.sh install)"),
    (r"No module named '?vllm'?", "the server's Python cannot import vLLM: PYTHONPATH=/tmp/site missing?"),
    (r"cupy is not installed",
     "Ray compiled-graph NCCL channels need cupy: unset VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE"),
    (r"Failed to connect to GCS|Timed out while waiting for GCS|Could not find any running Ray instance",
     "the vLLM driver cannot reach the Ray cluster (RAY_ADDRESS, or a node IP the driver cannot dial)"),
    (r"Waiting for creating a placement group|placement group.*(?:infeasible|cannot be scheduled)",
     "Ray cannot place the workers' GPU bundles: fewer free GPUs in the cluster than TP x PP "
     "(a raylet without --num-gpus, or a GPU held by a leftover actor)"),
    (r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks",
     "out of GPU memory: another process holds the GPU (see the leftover/NVML lines)"),
    (r"NCCL WARN.*(?:socket|Connect|bootstrap)|ncclSystemError|ncclRemoteError|ncclInternalError",
     "NCCL could not connect the workers (socket/bootstrap): NCCL_SOCKET_IFNAME=lo reachable? see the NCCL WARN lines"),
    (r"ActorDiedError|The actor died|RayWorkerProc failed|RayActorError",
     "a Ray worker died: its own lines, prefixed (RayWorkerProc pid=...), are in the server log"),
    (r"Address already in use", "a port is taken (a leftover server or Ray process?)"),
    (r"not ready (?:in|after|within)|timed out|did not become ready",
     "the server was not ready in time: see the last lines of its log"),
)


def diagnose(text: str) -> str | None:
    """The first known failure in ``text`` (a server log, an error message), as one line saying what to do."""
    for pattern, why in DIAGNOSES:
        if re.search(pattern, text, re.IGNORECASE):
            return why
    return None


# ----------------------------------------------------------------------------- where each worker ran


def process_pids(logs: Sequence[ProcessLog]) -> list[int | None]:
    """The pid of each log from :func:`split_by_process` (its source ends ``(<host> pid <pid>)``)."""
    out: list[int | None] = []
    for log in logs:
        m = re.search(r"pid (\d+)\)$", log.source)
        out.append(int(m.group(1)) if m else None)
    return out


def nvml_devs(log: ProcessLog) -> set[int]:
    """The GPUs (NVML index) this process's NCCL communicators ran on (``... nvmlDev N busId ...``)."""
    return {int(d) for d in re.findall(r"\bnvmlDev (\d+)", log.text)}


def placed(logs: Sequence[ProcessLog], actor_nodes: Mapping[int, str], gpu_nodes: Mapping[int, str]
           ) -> tuple[list[ProcessLog], list[str]]:
    """Each worker's log on the Ray node that ran it, and how each was placed (for the printout).

    The actor table (pid -> Ray node) decides; else the GPU it used (each raylet owns one GPU); else
    the host of NCCL's prefix (the stand-in names the node there; real NCCL names the one host).
    """
    devs = [nvml_devs(log) & set(gpu_nodes) for log in logs]
    by_gpu = all(len(d) == 1 for d in devs) and len({min(d) for d in devs}) == len(devs)  # one GPU each, distinct
    out, how = [], []
    for log, pid, dev in zip(logs, process_pids(logs), devs, strict=True):
        if pid is not None and pid in actor_nodes:
            node, why = actor_nodes[pid], "Ray actor table"
        elif by_gpu:
            node, why = gpu_nodes[min(dev)], "the raylet owning its GPU"
        else:
            node, why = log.node or "?", "NCCL host prefix"
        out.append(ProcessLog(log.text, log.source, node, log.env))
        how.append(f"pid {pid} on {node} ({why}; nvmlDev {sorted(nvml_devs(log)) or '?'})")
    return out, how


def placement_problems(logs: Sequence[ProcessLog], gpus: Sequence[int], world: int, *, check_gpus: bool = True
                       ) -> list[str]:
    """A crossing needs ``world`` workers on as many different Ray nodes, each on its own GPU of ``gpus``.

    ``check_gpus=False`` for the stand-in, whose ``nvmlDev`` numbers are those of separate machines.
    """
    problems = []
    nodes = [log.node for log in logs]
    if len(logs) != world:
        problems.append(f"{len(logs)} worker log(s) with NCCL lines in the server log, expected {world}")
    elif len(set(nodes)) != world:
        problems.append(f"the workers did not cross Ray nodes: {nodes}")
    devs = [nvml_devs(log) for log in logs]
    used = [d for ds in devs for d in ds]
    if check_gpus and used and (len(used) != len(set(used)) or not set(used) <= set(gpus)):
        problems.append(f"workers' GPUs (nvmlDev) {[sorted(d) for d in devs]}: expected one each of {list(gpus)}")
    return problems


def proof_lines(proof: CrossingProof) -> list[str]:
    """The proof rank by rank, as printed."""
    lines = [f"  proof (expect {proof.expect}): {proof.outcome}: {proof.message} [{proof.completeness}]"]
    for r in proof.ranks:
        env = f"; env differs: {', '.join(r.env_diff)}" if r.env_diff else ""
        lines.append(f"    rank {r.rank} on {r.node}: {r.outcome}: {r.message}{env}")
    return lines


# ----------------------------------------------------------------------------- summary


@dataclass
class ArmResult:
    arm: str
    expect: str
    visible: str = "own"
    ready_s: float | None = None
    load: dict[str, object] = field(default_factory=dict)
    placement: list[str] = field(default_factory=list)
    proof: dict[str, object] | None = None
    placed_proof: dict[str, object] | None = None
    leftovers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    diagnosis: str | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))


def arm_problems(res: ArmResult, proof: CrossingProof | None, placed_proof: CrossingProof | None,
                 num_prompts: int) -> list[str]:
    """What makes one arm fail: a request lost, its transport not proven on every rank, leftovers."""
    out = []
    done, failed = res.load.get("completed"), res.load.get("failed")
    if done != num_prompts or failed:
        out.append(f"load: {done} of {num_prompts} requests completed, {failed} failed")
    # socket: NET connections are judged as they are; P2P on one host only once placed on the Ray nodes
    judged = proof if res.expect.startswith("NET") else placed_proof
    if judged is None:
        out.append("no transport proof")
    elif judged.outcome != "pass":
        failed_ranks = "; ".join(r.message for r in judged.ranks if r.outcome != "pass")
        out.append(f"transport {judged.outcome} (expect {res.expect}): {failed_ranks or judged.message}")
    if res.leftovers:
        out.append(f"left behind: {'; '.join(res.leftovers)}")
    return out


def summary(args: Args, arms: Sequence[ArmResult], problems: Sequence[str], extra: Mapping[str, object]
            ) -> dict[str, object]:
    return {"ok": not problems, "simulated": args.standin, "gpus": list(args.gpus), "executor": args.executor,
            "arms": [a.to_dict() for a in arms], "problems": list(problems), **extra}


def final_line(problems: Sequence[str]) -> str:
    """The last stdout line: OK, or FAIL with every problem on one line."""
    if not problems:
        return f"{MARK} OK"
    return f"{MARK} FAIL: " + "; ".join(" ".join(p.split()) for p in problems)


# ----------------------------------------------------------------------------- processes and time limits


def children_of(pids: Sequence[int]) -> set[int]:
    """Every live descendant of ``pids`` (a /proc scan of parent pids)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        fields = stat_fields(int(d.name)) if d.name.isdigit() else None
        if fields is not None and len(fields) > 1:
            parent[int(d.name)] = int(fields[1])
    found: set[int] = set()
    frontier = set(pids)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    st = proc_state(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmd_of(pid: int) -> str:
    return cmdline(pid, 90)


class StepTimeout(Exception):
    pass


class Steps:
    """Every step under a hard limit: SIGALRM raises in the step; past a grace, a watchdog kills and exits."""

    def __init__(self, budget_s: float, on_hard_timeout: Callable[[str], None], grace_s: float = 45.0) -> None:
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.grace_s = grace_s
        self.name = "start"
        self.deadline = self.t0 + budget_s
        self._hard = on_hard_timeout
        self._stop = threading.Event()
        signal.signal(signal.SIGALRM, self._alarm)
        threading.Thread(target=self._watch, daemon=True, name="watchdog").start()

    def _alarm(self, signum: int, frame: object) -> None:
        raise StepTimeout(f"step '{self.name}' timed out")

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() > min(self.deadline, self.t0 + self.budget_s) + self.grace_s:
                self._hard(self.name)

    def left(self) -> float:
        return self.t0 + self.budget_s - time.monotonic()

    @contextlib.contextmanager
    def step(self, name: str, limit_s: float) -> Iterator[None]:
        limit = max(1.0, min(limit_s, self.left()))
        self.name, self.deadline = name, time.monotonic() + limit
        print(f"[{time.monotonic() - self.t0:6.1f} s] {name} (limit {limit:.0f} s)", flush=True)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.deadline = self.t0 + self.budget_s

    def stop(self) -> None:
        self._stop.set()


# ----------------------------------------------------------------------------- the Ray cluster


class RayNodes:
    """Two Ray nodes on this host, one GPU each, and every process they start (for the leftover check)."""

    def __init__(self, gpus: tuple[int, int]) -> None:
        import ray

        self.ray = ray
        self.gpus = gpus
        self.seen: set[int] = set()
        self.roots: list[int] = []
        self.cluster: Cluster | None = None
        self.address = ""

    def start(self, env: Mapping[str, str], per_node_env: Sequence[Mapping[str, str]], visible: str = "own") -> None:
        """Head and second raylet, each with its one GPU and ``env``; registered first, so the watchdog can kill.

        ``visible="peer"``: raylet A sees ``a,b`` and B ``b,a`` with ``--num-gpus 1``; Ray takes the first id
        of each list (checked with Ray 2.60), so the workers still own one GPU each, and see the other one.
        """
        from ray.cluster_utils import Cluster

        saved = dict(os.environ)
        try:
            for i, gpu in enumerate(self.gpus):
                shown = [gpu] if visible == "own" else [gpu, self.gpus[1 - i]]
                os.environ.clear()
                os.environ.update({**saved, **env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, shown)),
                                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID", **per_node_env[i]})
                args = {"num_cpus": 2, "num_gpus": 1, "resources": {f"p2p_host:{HOSTS[i]}": 1}}
                if i == 0:
                    self.cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
                else:
                    assert self.cluster is not None
                    self.cluster.add_node(**args)
                self._record()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        assert self.cluster is not None
        self.address = self.cluster.address
        self.ray.init(address=self.address, log_to_driver=False)
        self._record()

    def _record(self) -> None:
        if self.cluster is None:
            return
        for node in [self.cluster.head_node, *self.cluster.worker_nodes]:
            if node is None:
                continue
            for infos in node.all_processes.values():
                for info in infos:
                    if info.process is not None and info.process.pid not in self.roots:
                        self.roots.append(info.process.pid)
        self.seen |= set(self.roots) | children_of(self.roots)

    def node_names(self) -> dict[str, str]:
        """Ray node id -> our host name (from the ``p2p_host:<name>`` resource each node was started with)."""
        out = {}
        for n in self.ray.nodes():
            for res in n.get("Resources", {}):
                if res.startswith("p2p_host:") and n.get("Alive"):
                    out[n["NodeID"]] = res.split(":", 1)[1]
        return out

    def workers(self) -> dict[int, str]:
        """Alive vLLM worker actors: pid -> our host name of the Ray node running it."""
        from ray._private import state

        names = self.node_names()
        out = {}
        try:
            table = state.actors()
        except Exception as exc:  # noqa: BLE001 - a private API: placement then falls back to the GPUs used
            print(f"  Ray's actor table unreadable ({type(exc).__name__}: {exc}): workers placed by their GPU")
            return {}
        for info in table.values():
            cls = str(info.get("ActorClassName", "")).rsplit(".", 1)[-1]
            if cls in WORKER_CLASSES and info.get("State") == "ALIVE":
                node = str(info.get("Address", {}).get("NodeID", "?"))
                out[int(info["Pid"])] = names.get(node, node[:12])
        self.seen |= set(out)
        self._record()
        return out

    def shutdown(self) -> None:
        self._record()
        with contextlib.suppress(Exception):
            self.ray.shutdown()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()

    def kill_all(self) -> None:
        """The watchdog's last resort: SIGKILL every process recorded (never anything else)."""
        for pid in sorted(self.seen | children_of(self.roots)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def leftovers(seen: set[int], gpus: Sequence[int], idle_pids: set[int], *, kill: bool = True) -> list[str]:
    """Recorded processes still alive after teardown, and compute processes NVML still sees on the GPUs."""
    from pytest_p2p.serve.server import gpu_usage

    deadline = time.monotonic() + 15
    while any(alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.5)
    out = [f"pid {p} ({cmd_of(p)})" for p in sorted(seen) if alive(p)]
    usage = gpu_usage(list(gpus)) or []
    for g in usage:
        out += [f"GPU {g.index}: compute pid {p} ({cmd_of(p)})" for p in g.pids if p not in idle_pids]
    if kill:
        for p in sorted(seen):
            if alive(p):
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
    return out


# ----------------------------------------------------------------------------- one arm


def server_config(args: Args, model_dir: Path) -> object:
    """The rig-like server section, placed on the two Ray nodes by the plugin's own ``ray_server_config``."""
    from pytest_p2p.evidence.nodespec import Stage
    from pytest_p2p.serve.config import parse_server
    from pytest_p2p.serve.multinode import ray_server_config

    command = ([sys.executable, "-m", "pytest_p2p.serve.standin", "serve"] if args.standin
               else [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"])
    cfg = parse_server({
        "command": command, "model": str(model_dir), "served_model_name": "tiny",
        "args": {"load-format": "dummy", "attention-backend": "FLASH_ATTN", "tensor-parallel-size": 2,
                 "max-model-len": 1024, "gpu-memory-utilization": 0.3, "max-num-seqs": 32, "dtype": "bfloat16"},
        "flags": ["enforce-eager", "disable-custom-all-reduce"],
        "env": {**NO_MULTICAST, **({} if args.standin else VLLM_ENV)},
        "startup_timeout_s": args.startup_s, "request_timeout_s": 60, "teardown_timeout_s": 30,
    }, "multinode_vllm_gpu.py")
    # a stage is "host:bus id" in a rig; only their number reaches vllm serve (TP 2 x PP 1), so the NVML index does
    return ray_server_config(cfg, [Stage(HOSTS[0], str(args.gpus[0])), Stage(HOSTS[1], str(args.gpus[1]))])


def per_node_env(args: Args) -> list[dict[str, str]]:
    """Per raylet: v1 needs a different ``VLLM_HOST_IP`` on each (its one-IP-per-node check); v2 nothing."""
    if args.executor != "v1":
        return [{}, {}]
    from ray.util import get_node_ip_address

    return [{"VLLM_HOST_IP": get_node_ip_address()}, {"VLLM_HOST_IP": "127.0.0.1"}]


def run_arm(args: Args, arm_name: str, model_dir: Path, steps: Steps, state: dict[str, RayNodes]) -> ArmResult:
    from pytest_p2p.serve.loadgen import run_load
    from pytest_p2p.serve.multinode import ray_server_env, worker_proof
    from pytest_p2p.serve.server import gpu_usage, launch
    from pytest_p2p.serve.standin_ray import HOSTS_ENV

    preset, expect, extra, arm_visible = ARMS[arm_name]
    visible = arm_visible if args.visible == "auto" else args.visible
    arm = PRESETS[preset]
    res = ArmResult(arm_name, expect, visible=visible)
    t0 = time.monotonic()
    out = args.out / arm_name
    out.mkdir(parents=True, exist_ok=True)
    log = out / "server.log"
    log.unlink(missing_ok=True)
    arm_env = {**arm.env, **extra, **NO_MULTICAST, "NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo"}
    executor = {"VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1" if args.executor == "v2" else "0"}
    nodes_env = per_node_env(args)
    idle = {p for g in (gpu_usage(list(args.gpus)) or []) for p in g.pids}
    proof = placed_proof = None
    try:
        with steps.step(f"{arm_name}: start two Ray nodes", 90):
            nodes = state["nodes"] = RayNodes(args.gpus)
            nodes.start({**arm_env, **executor, **({} if args.standin else VLLM_ENV)}, nodes_env, visible)
            print(f"  ray {nodes.ray.__version__} at {nodes.address}: "
                  + ", ".join(f"{h} = {nid[:12]}" for nid, h in sorted(nodes.node_names().items(), key=lambda x: x[1]))
                  + f"; CUDA_VISIBLE_DEVICES ({visible}): " + ", ".join(
                      f"{h}={g}" + (f",{args.gpus[1 - i]}" if visible == "peer" else "")
                      for i, (h, g) in enumerate(zip(HOSTS, args.gpus, strict=True))), flush=True)
        config = server_config(args, model_dir)
        env = {**ray_server_env(nodes.address, arm_env), **executor, **nodes_env[0],
               **({HOSTS_ENV: ",".join(HOSTS) if expect.startswith("NET") else f"{socket.gethostname()}," * 2}
                  if args.standin else {})}
        with steps.step(f"{arm_name}: vllm serve TP=2 under Ray, ready", args.startup_s + 60):
            srv_cm = launch(config, arm, args.gpus, None, log, extra_env=env,  # type: ignore[arg-type]
                            startup_timeout_s=args.startup_s)
            srv = srv_cm.__enter__()
        try:
            res.ready_s = srv.ready_s
            print(f"  ready in {srv.ready_s:.1f} s (pid {srv.pid}, {srv.base_url}, log {log})", flush=True)
            actors = nodes.workers() if not args.standin else {}
            with steps.step(f"{arm_name}: load c{args.concurrency} x {args.num_prompts}", 120):
                r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=args.concurrency,
                             num_prompts=args.num_prompts, input_len=64, output_len=32, warmup=0,
                             request_timeout_s=60.0, client_processes=1)
                res.load = {k: r.get(k) for k in ("completed", "failed", "output_throughput", "mean_ttft_ms",
                                                  "mean_tpot_ms", "duration")}
                print(f"  load: {json.dumps(res.load)}", flush=True)
        finally:
            with steps.step(f"{arm_name}: teardown of the server", 90):
                srv_cm.__exit__(None, None, None)
        text = log.read_text(errors="replace")
        logs = split_by_process(text, str(log))
        gpu_nodes = {args.gpus[0]: HOSTS[0], args.gpus[1]: HOSTS[1]}
        proof = worker_proof(text, expect, str(log), world_size=2)
        placed_logs, res.placement = placed(logs, actors, gpu_nodes)
        placed_proof = prove_crossing(placed_logs, expect, arm_env=arm_env, world_size=2)
        print("  workers: " + "; ".join(res.placement), flush=True)
        print("  per-worker proof as the plugin reads it (serve.multinode.worker_proof):", flush=True)
        print("\n".join(proof_lines(proof)), flush=True)
        print("  the same logs placed on their Ray nodes:", flush=True)
        print("\n".join(proof_lines(placed_proof)), flush=True)
        res.problems += placement_problems(placed_logs, args.gpus, 2, check_gpus=not args.standin)
    except (P2PError, StepTimeout, Exception) as exc:  # noqa: BLE001 - one line per arm; the log has the rest
        text = log.read_text(errors="replace") if log.exists() else ""
        res.diagnosis = diagnose(f"{exc}\n{text}")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        res.problems.append(f"{type(exc).__name__}: {first}" + (f" -> {res.diagnosis}" if res.diagnosis else ""))
        print(f"  FAILED: {exc}", flush=True)
    finally:
        nodes_now = state.pop("nodes", None)
        if nodes_now is not None:
            with steps.step(f"{arm_name}: Ray cluster shutdown and leftover check", 60):
                nodes_now.shutdown()
                res.leftovers = leftovers(nodes_now.seen, args.gpus, idle, kill=True)
        print(f"  leftovers: {res.leftovers or 'none'}", flush=True)
    res.proof = proof.to_dict() if proof else None
    res.placed_proof = placed_proof.to_dict() if placed_proof else None
    res.problems += arm_problems(res, proof, placed_proof, args.num_prompts) if proof else \
        ([f"left behind: {'; '.join(res.leftovers)}"] if res.leftovers else [])
    res.wall_s = round(time.monotonic() - t0, 1)
    return res


def make_model(args: Args, steps: Steps) -> Path:
    if args.model_dir is not None:
        return args.model_dir
    target = args.out / "tiny-model"
    if not (target / "config.json").exists():
        with steps.step("tiny model (pytest_p2p.serve.tinymodel)", 90):
            subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(target)], check=True,
                           capture_output=True, timeout=85)
    return target


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    state: dict[str, RayNodes] = {}
    results: list[ArmResult] = []
    problems: list[str] = []

    def hard_timeout(step: str) -> None:
        nodes = state.get("nodes")
        with contextlib.suppress(Exception):
            from pytest_p2p.serve import server

            server._kill_all_at_exit()  # noqa: SLF001 - the launcher's own last resort: our servers only
        if nodes is not None:
            nodes.kill_all()
        why = f"step '{step}' hung past its limit; every recorded process was SIGKILLed"
        with contextlib.suppress(OSError):
            (args.out / "summary.json").write_text(json.dumps(summary(args, results, [why], {}), indent=1))
        print(final_line([why]), flush=True)
        os._exit(1)

    steps = Steps(args.budget_s, hard_timeout)
    label = " [SIMULATED: stand-in server, GPUs declared to Ray only]" if args.standin else ""
    print(f"{MARK}: GPUs {args.gpus[0]} ({HOSTS[0]}) and {args.gpus[1]} ({HOSTS[1]}), arms {', '.join(args.arms)}, "
          f"executor {args.executor}{label}", flush=True)
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        problems.append(f"Ray is not importable here ({exc}): pip install 'pytest-p2p[multinode]' "
                        "(offline: benchmarks/ray_wheels.sh install)")
    if not problems:
        try:
            model_dir = make_model(args, steps)
        except (subprocess.SubprocessError, OSError, StepTimeout) as exc:
            problems.append(f"cannot make the tiny model: {exc}")
    if not problems:
        for arm_name in args.arms:
            print(f"== arm {arm_name} (expect {ARMS[arm_name][1]} between the Ray nodes){label}", flush=True)
            res = run_arm(args, arm_name, model_dir, steps, state)
            results.append(res)
            problems += [f"{arm_name}: {p}" for p in res.problems]
            print(f"== arm {arm_name}: {'OK' if not res.problems else 'FAIL'} in {res.wall_s:.0f} s", flush=True)
    steps.stop()
    wall = round(time.monotonic() - steps.t0, 1)
    (args.out / "summary.json").write_text(json.dumps(summary(args, results, problems, {"wall_s": wall}), indent=1,
                                                      default=str))
    print(f"wall {wall:.0f} s; summary {args.out / 'summary.json'}", flush=True)
    print(final_line(problems), flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
