"""Issue 27 end to end: the plugin itself, ``pytest -m p2p``, on a multi-node rig of two Ray "nodes" on one host.

    MULTINODE_GPUS=0,1 python3 benchmarks/multinode_pytest_gpu.py [--out DIR] [--limit 420]
    python3 benchmarks/multinode_pytest_gpu.py --fake      # CI box: same plumbing, no GPU, no torch, no vLLM

The two GPU scripts before it (``multinode_gpu.py``, ``multinode_vllm_gpu.py``) drive the probe and the server
from Python. This one runs what a user runs, so what the glue adds (option parsing, the rig loader, the
``p2p_multinode`` fixture, ``--p2p-ray-address``, skips and their reasons) is exercised too:

1. a Ray cluster as a rig owner starts one, with the ``ray`` CLI in separate processes: ``ray start --head``
   (GPU A only, ``p2p_host:node-a``) and ``ray start --address 127.0.0.1:P`` (GPU B only, ``p2p_host:node-b``),
   each raylet with the environment its workers need (a Ray worker inherits its raylet's, and vLLM copies a
   driver variable only where the raylet lacks it): the three no-multicast variables, the ``socket`` arm's NCCL
   variables over ``lo``, ``NCCL_DEBUG=INFO``, ``RAY_DEDUP_LOGS=0 RAY_COLOR_PREFIX=0``; a private ``--temp-dir``;
2. a rig for this host: ``nodes:`` node-a / node-b with each GPU's PCI bus id (nvidia-smi), one crossing with
   ``transport: {socket: NET/Socket}``, no NIC expectations (loopback only: nothing to judge a line rate on),
   ``stages`` on both GPUs and a ``server:`` section serving a tiny Llama with dummy weights at TP=2 under Ray;
3. ``python3 -m pytest -m p2p --pyargs pytest_p2p --p2p-live --p2p-rig RIG --p2p-ray-address 127.0.0.1:P
   --p2p-campaign off ...`` (the campaign measures one host's pairs; it has no cross-node form yet), then a table
   of every test with its outcome and reason, the probe's and the server's transport proofs, and the last line
   ``MULTINODE_PYTEST OK`` or ``MULTINODE_PYTEST FAIL: <why>``;
4. teardown, always (finally, SIGTERM/SIGINT, the hard ``--limit``): the pytest process group, every process
   of our Ray session (found by the private temp dir in its command line), ``ray stop`` on a GPU machine; any
   process left, or a GPU compute process that was not there before, is named and fails the run.

``--fake``: the raylets declare one GPU each to Ray but have none; node evidence comes from the recorded seed
trees (``fixtures/sysfs``), each rank runs ``tests/fake_multinode_worker.py`` (``PYTEST_P2P_MULTINODE_WORKER``)
replaying ``fixtures/logs/multinode/loopback_socket``, and the server is the SIMULATED stand-in whose Ray
executor prints both workers' NCCL lines (``serve/standin_ray.py``). Everything is written under ``--out``
(default ``$OUT/multinode_pytest``): ``rig.yaml``, ``pytest.log``, ``junit.xml``, ``results/``, ``ray.log``,
``summary.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET  # noqa: S405 - our own pytest's junit file
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_p2p.envs import MULTICAST_OFF  # noqa: E402
from pytest_p2p.serve.procs import cmdline, proc_state  # noqa: E402
from pytest_p2p.serve.ready import free_port  # noqa: E402
from pytest_p2p.serve.server import gpu_usage  # noqa: E402

MARK = "MULTINODE_PYTEST"
HOSTS = ("node-a", "node-b")
NO_MULTICAST = dict(MULTICAST_OFF)  # NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# the socket arm over loopback: what NCCL needs to cross "nodes" that share one host's lo
LOOPBACK = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
RAY_LOGS = {"RAY_DEDUP_LOGS": "0", "RAY_COLOR_PREFIX": "0"}  # every worker's NCCL lines, prefix unhidden
# Ray 2.60's 'ray start --head' turns token authentication on, and a second raylet or driver without the head's
# token is refused ("InvalidAuthToken"); a cluster on one host's loopback, for one run, goes without it
RAY_LOCAL = {"RAY_AUTH_MODE": "disabled"}
VLLM_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1"}
CROSSING = "node-a~node-b"
# the tests that must PASS for the run to prove anything (the rest may skip with their reason)
REQUIRED = ("test_crossing_transport", "test_server_across_nodes")
# the recorded seed trees standing in for the nodes' sysfs under --fake, and a GPU each tree holds
FAKE_TREES = {"node-a": ("trinity-a", "0000:41:00.0"), "node-b": ("trinity-b", "0000:01:00.0")}
FAKE_WORKER_ENV = "PYTEST_P2P_MULTINODE_WORKER"
RUN_ENV = "P2P_MULTINODE_PYTEST_RUN"  # = the run's Ray temp dir, in every process it starts: how teardown finds them


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class Args:
    out: Path
    gpus: tuple[int, int]
    fake: bool
    limit_s: float
    port: int
    num_cpus: int
    model_dir: Path | None


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Args:
    env = os.environ if environ is None else environ
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", default=os.path.join(env.get("OUT", "."), "multinode_pytest"))
    ap.add_argument("--gpus", default=env.get("MULTINODE_GPUS", "0,1"), help="the two GPUs, one per Ray node")
    ap.add_argument("--fake", action="store_true", help="no GPU: recorded trees, fake rank worker, stand-in server")
    ap.add_argument("--limit", type=float, default=420.0, help="seconds for everything; then all is torn down")
    ap.add_argument("--port", type=int, default=0, help="the Ray head's GCS port (default: a free one)")
    ap.add_argument("--num-cpus", type=int, default=4, help="CPUs each raylet declares")
    ap.add_argument("--model-dir", default=None, help="a tiny Llama (default: made under --out)")
    a = ap.parse_args(list(argv))
    gpus = [g.strip() for g in a.gpus.split(",") if g.strip()]
    if len(gpus) != 2 or not all(g.isdigit() for g in gpus) or gpus[0] == gpus[1]:
        ap.error(f"--gpus / MULTINODE_GPUS: two different GPU indices like 0,1, got {a.gpus!r}")
    if a.limit < 60:
        ap.error(f"--limit: at least 60 s, got {a.limit:g}")
    if a.num_cpus < 2:
        ap.error(f"--num-cpus: at least 2 (a rank and a vLLM worker), got {a.num_cpus}")
    return Args(Path(a.out), (int(gpus[0]), int(gpus[1])), a.fake, a.limit, a.port or free_port(), a.num_cpus,
                Path(a.model_dir) if a.model_dir else None)


# ----------------------------------------------------------------------------- the rig


def gpu_bus_ids(gpus: Sequence[int]) -> list[str]:
    """Each GPU's PCI bus id as nvidia-smi prints it (``00000000:19:00.0``); the rig loader normalises it."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    by_index = {int(i): b.strip() for i, b in (line.split(",", 1) for line in out.splitlines() if "," in line)}
    missing = [g for g in gpus if g not in by_index]
    if missing:
        raise RuntimeError(f"GPU {missing} not listed by nvidia-smi (it shows {sorted(by_index)})")
    return [by_index[g] for g in gpus]


def rig_dict(bus_ids: Sequence[str], model: str, *, fake: bool, sysfs: Mapping[str, str] | None = None
             ) -> dict[str, object]:
    """The multi-node rig of this host: two nodes of one GPU each, one loopback socket crossing, TP=2 under Ray.

    No ``nics:`` and no ``busbw_min_line_rate``: the crossing is ``lo``, which has no RDMA port and no
    link speed, so a line-rate share could only be judged against another NIC's speed (a false verdict).
    No ``nvidia_peermem`` either: GPUDirect RDMA is not what a socket crossing needs.
    """
    hosts: dict[str, dict[str, object]] = {}
    for host, bus in zip(HOSTS, bus_ids, strict=True):
        hosts[host] = {"gpus": [bus]}
        if sysfs:
            hosts[host]["sysfs"] = sysfs[host]
    command = [sys.executable, "-m", "pytest_p2p.serve.standin"] if fake else \
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    server: dict[str, object] = {
        "command": command, "model": model, "served_model_name": "tiny",
        "args": {"tensor-parallel-size": 2, "load-format": "dummy", "attention-backend": "FLASH_ATTN",
                 "max-model-len": 512, "gpu-memory-utilization": 0.3, "max-num-seqs": 8, "dtype": "bfloat16"},
        "flags": ["enforce-eager", "disable-custom-all-reduce"],
        "env": {**NO_MULTICAST, **VLLM_ENV} if not fake else
        {**NO_MULTICAST, "PYTEST_P2P_STANDIN_RAY_HOSTS": ",".join(HOSTS)},
        "startup_timeout_s": 60 if fake else 200, "request_timeout_s": 60, "teardown_timeout_s": 30,
    }
    return {
        "rig": "multinode-pytest" + ("-fake" if fake else ""),
        "description": "two Ray nodes on one host, one GPU each, NCCL crossing over loopback sockets (issue 27)",
        "env": {**NO_MULTICAST, **LOOPBACK},
        "arms": ["socket"],
        "nodes": {"hosts": hosts,
                  "crossings": [{"between": list(HOSTS), "transport": {"socket": "NET/Socket"}}],
                  "stages": [f"{h}:{b}" for h, b in zip(HOSTS, bus_ids, strict=True)]},
        "server": server,
    }


def write_rig(path: Path, rig: Mapping[str, object]) -> None:
    """As JSON, which is YAML: no YAML writer needed, and what is read back is exactly what was meant."""
    path.write_text(json.dumps(rig, indent=1) + "\n")


def raylet_env(base: Mapping[str, str], gpu: int, *, fake: bool) -> dict[str, str]:
    """One raylet's environment: its workers (vLLM's, the probe's ranks) inherit it."""
    from pytest_p2p.probes.arms import PRESETS

    env = {**base, **NO_MULTICAST, **PRESETS["socket"].env, **LOOPBACK, **RAY_LOGS, **RAY_LOCAL, "NCCL_DEBUG": "INFO",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [base.get("PYTHONPATH")])])}
    if fake:
        env["FAKE_MN_LOGS"] = str(ROOT / "fixtures" / "logs" / "multinode" / "loopback_socket")
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env.update(VLLM_ENV)
        env.update({"CUDA_VISIBLE_DEVICES": str(gpu), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return env


# ----------------------------------------------------------------------------- the Ray cluster


def ray_cli() -> list[str]:
    """The ``ray`` CLI of this Python (its console script may not be on PATH where Ray came as a wheel dir)."""
    return [sys.executable, "-m", "ray.scripts.scripts"]


@dataclass
class RayCluster:
    """Two ``ray start`` raylets on this host, found again by their private temp dir for the teardown."""

    port: int
    temp_dir: str
    log: Path
    num_cpus: int
    started: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, envs: Sequence[Mapping[str, str]], *, fake: bool) -> None:
        for i, (host, env) in enumerate(zip(HOSTS, envs, strict=True)):
            head = ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}"] \
                if i == 0 else [f"--address={self.address}"]
            cmd = [*ray_cli(), "start", *head, "--num-gpus=1", f"--num-cpus={self.num_cpus}",
                   f"--resources={json.dumps({f'p2p_host:{host}': 1})}", "--disable-usage-stats",
                   f"--object-store-memory={1 << 30}"]  # logs and small results only: no share of /dev/shm needed
            self.started.append(host)
            with self.log.open("a") as fh:
                fh.write(f"$ {' '.join(cmd)}\n")
                fh.flush()
                subprocess.run(cmd, env={**env, RUN_ENV: self.temp_dir}, stdout=fh, stderr=subprocess.STDOUT,
                               timeout=120, check=True)

    def pids(self) -> list[int]:
        """Every live process of this run: Ray's (GCS, raylets, workers, a rank's subprocess, vLLM's workers) and
        pytest's tree, each carrying :data:`RUN_ENV` = our temp dir, inherited from the raylet or pytest it came
        from (a Ray worker renames its command line, a daemon is re-parented to init: neither hides the mark)."""
        return marked(self.temp_dir)

    def others(self) -> list[int]:
        """Raylets of other Ray sessions on this machine (another lane, another engineer's test)."""
        return [p for p in all_pids() if "raylet/raylet" in (c := full_cmdline(p)) and self.temp_dir not in c]

    def stop(self, *, ray_stop: bool) -> None:
        """SIGTERM our session's processes, then ``ray stop`` where no other Ray session runs, then SIGKILL the rest.

        ``ray stop`` ends every Ray process of this user whatever its session, so it runs only when every
        raylet here is ours; our own processes are found by the private temp dir in any case.
        """
        if not self.started:
            return
        signal_all(self.pids(), signal.SIGTERM)
        others = self.others()
        with self.log.open("a") as fh:
            if ray_stop and not others:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run([*ray_cli(), "stop"], stdout=fh, stderr=subprocess.STDOUT, timeout=60, check=False)
            elif ray_stop:
                fh.write(f"no 'ray stop': raylets of another Ray session run here (pids {others})\n")
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.5)
        signal_all(self.pids(), signal.SIGKILL)


# ----------------------------------------------------------------------------- processes


def all_pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def full_cmdline(pid: int) -> str:
    """The whole command line: a Ray worker names the session's temp dir far past the first 160 characters."""
    return cmdline(pid, 1 << 16)


def alive(pid: int) -> bool:
    st = proc_state(pid)
    return st is not None and st[0] not in ("Z", "X")


def marked(value: str) -> list[int]:
    """Live processes whose environment has ``RUN_ENV=value`` (another user's cannot be read: never ours)."""
    want = f"{RUN_ENV}={value}".encode()
    out = []
    for p in all_pids():
        try:
            env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if p != os.getpid() and want in env and alive(p):
            out.append(p)
    return out


def signal_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, sig)


def gpu_users(gpus: Sequence[int]) -> set[int]:
    """Compute processes on ``gpus`` (NVML, as the plugin's teardown reads them); empty where there is none."""
    return {p for use in gpu_usage(gpus) or [] for p in use.pids}


# ----------------------------------------------------------------------------- pytest's outcomes


@dataclass(frozen=True)
class Outcome:
    test: str  # the node id: pytest_p2p/checks/test_multinode.py::test_server_across_nodes
    outcome: str  # passed, failed, error, skipped
    why: str  # the skip reason or the failure's first line; "" for a pass


def parse_junit(path: Path) -> list[Outcome]:
    """Every test case of a junit xml with its outcome and first line of reason."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - our own pytest's file
        mod = case.get("classname", "")
        test = f"{mod.replace('.', '/')}.py::{case.get('name', '')}" if mod else case.get("name", "")
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error"}.get(tag, tag)
                text = (el.get("message") or el.text or "").strip()
                why = text.splitlines()[0] if text else ""
                break
        out.append(Outcome(test, outcome, why))
    return out


def judge(outcomes: Sequence[Outcome], leftovers: Sequence[str], returncode: int | None) -> list[str]:
    """Why the run is not OK: a failure or error, a required check that did not pass, a leftover process."""
    problems = [f"{o.test} {o.outcome.upper()}: {o.why}" for o in outcomes if o.outcome in ("failed", "error")]
    for name in REQUIRED:
        mine = [o for o in outcomes if o.test.endswith(f"::{name}")]
        if not mine:
            problems.append(f"{name} did not run")
        elif mine[0].outcome == "skipped":  # a failure is named above already
            problems.append(f"{name} SKIPPED: {mine[0].why}")
    if not outcomes:
        problems.append(f"no test outcome (pytest exit {returncode})")
    elif returncode not in (0, None) and not problems:
        problems.append(f"pytest exited {returncode} without a failed test")
    if leftovers:
        problems.append("left behind: " + "; ".join(leftovers))
    return problems


def table(outcomes: Sequence[Outcome]) -> list[str]:
    width = max((len(o.test) for o in outcomes), default=10)
    return [f"  {o.test:<{width}}  {o.outcome.upper():8} {o.why}"[:240].rstrip() for o in outcomes]


def proof_lines(results: Path, pytest_out: str) -> list[str]:
    """The probe's proof (its JSON) and the lines the checks printed for the probe and the server."""
    lines = []
    proof = results / "multinode" / CROSSING / "socket" / "crossing_proof.json"
    if proof.exists():
        with contextlib.suppress(ValueError, OSError):
            d = json.loads(proof.read_text())
            lines.append(f"  probe {CROSSING} socket ({proof.name}): {d.get('outcome')}: {d.get('message')}")
    server = results / "multinode" / "server" / "socket.log"
    if server.exists():  # the server's log read again here, worker by worker (what the check judged, shown whole)
        from pytest_p2p.serve.multinode import worker_proof

        sp = worker_proof(server.read_text(errors="replace"), "NET/Socket", str(server), world_size=len(HOSTS))
        lines.append(f"  server log, per worker ({server.name}): {sp.outcome}: {sp.message}")
        lines += [f"    rank {r.rank} on {r.node}: {r.outcome}: {r.message}" for r in sp.ranks]
    printed = re.findall(rf"^((?:{CROSSING} arm|server arm) \S+.*?: (?:pass|fail|inconclusive): .*)$", pytest_out,
                         re.MULTILINE)
    lines += [f"  {p}" for p in dict.fromkeys(printed)]
    return lines or ["  (no transport proof found in the results or the pytest output)"]


# ----------------------------------------------------------------------------- the run


class Deadline(Exception):
    pass


def pytest_cmd(args: Args, rig: Path, address: str) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p", "--p2p-rig", str(rig),
           "--p2p-ray-address", address, "--p2p-results", str(args.out / "results"), "--p2p-campaign", "off",
           "-rA", "-p", "no:cacheprovider", "--junitxml", str(args.out / "junit.xml")]
    return cmd if args.fake else [*cmd[:7], "--p2p-live", *cmd[7:]]


def make_model(args: Args) -> str:
    if args.fake:
        return "tiny-simulated"
    if args.model_dir is not None:
        return str(args.model_dir)
    target = args.out / "tiny-model"
    if not (target / "config.json").exists():
        subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(target)], check=True,
                       capture_output=True, timeout=120)
    return str(target)


def run(args: Args, cluster: RayCluster, on_pytest: Callable[[subprocess.Popen[bytes]], None]) -> tuple[int, str]:
    """Start the cluster, write the rig, run pytest (``on_pytest`` learns its process, for the teardown)."""
    buses = [FAKE_TREES[h][1] for h in HOSTS] if args.fake else gpu_bus_ids(args.gpus)
    sysfs = {h: str(ROOT / "fixtures" / "sysfs" / FAKE_TREES[h][0]) for h in HOSTS} if args.fake else None
    for old in ("results", "junit.xml", "pytest.log", "ray.log"):  # a server log is appended to: start clean
        path = args.out / old
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    rig = args.out / "rig.yaml"
    write_rig(rig, rig_dict(buses, make_model(args), fake=args.fake, sysfs=sysfs))
    print(f"rig {rig}: " + ", ".join(f"{h} GPU {g} ({b})" for h, g, b in zip(HOSTS, args.gpus, buses, strict=True)),
          flush=True)
    cluster.start([raylet_env(os.environ, g, fake=args.fake) for g in args.gpus], fake=args.fake)
    print(f"ray cluster at {cluster.address} (temp dir {cluster.temp_dir}): {len(cluster.pids())} processes",
          flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("RAY_ADDRESS", None)
    env.update({**RAY_LOCAL, RUN_ENV: cluster.temp_dir})
    if args.fake:
        env[FAKE_WORKER_ENV] = f"{sys.executable} {ROOT / 'tests' / 'fake_multinode_worker.py'}"
    cmd = pytest_cmd(args, rig, cluster.address)
    print("$ " + " ".join(cmd), flush=True)
    log = args.out / "pytest.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(args.out))
        on_pytest(proc)
        code = proc.wait()
    return code, log.read_text(errors="replace")


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    label = " [SIMULATED: fake ranks, stand-in server, recorded node trees]" if args.fake else ""
    print(f"{MARK}: GPUs {args.gpus[0]} ({HOSTS[0]}) and {args.gpus[1]} ({HOSTS[1]}){label}", flush=True)
    idle = gpu_users(args.gpus) if not args.fake else set()
    temp = tempfile.mkdtemp(prefix="rpt", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    cluster = RayCluster(args.port, temp, args.out / "ray.log", args.num_cpus)
    procs: list[subprocess.Popen[bytes]] = []
    problems: list[str] = []
    code: int | None = None
    text = ""

    def on_signal(signum: int, frame: object) -> None:
        raise Deadline("time limit reached" if signum == signal.SIGALRM else f"signal {signal.Signals(signum).name}")

    saved = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_REAL, args.limit_s)
    try:
        code, text = run(args, cluster, procs.append)
    except (Deadline, subprocess.SubprocessError, OSError, RuntimeError) as exc:
        problems.append(f"{type(exc).__name__}: {exc}" + (f" (after {time.monotonic() - t0:.0f} s, --limit "
                                                          f"{args.limit_s:g})" if isinstance(exc, Deadline) else ""))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # the teardown is not itself interrupted
        seen = set()
        for p in procs:
            seen |= {p.pid}
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
        seen |= set(cluster.pids())
        cluster.stop(ray_stop=not args.fake)
        left = leftovers(seen, cluster, args.gpus, idle)
        shutil.rmtree(temp, ignore_errors=True)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    pytest_log = args.out / "pytest.log"
    text = text or (pytest_log.read_text(errors="replace") if pytest_log.exists() else "")
    junit = args.out / "junit.xml"
    outcomes = parse_junit(junit) if junit.exists() else []
    print(f"pytest exit {code}; {len(outcomes)} tests (log {pytest_log}):")
    print("\n".join(table(outcomes)))
    print("transport proofs:")
    print("\n".join(proof_lines(args.out / "results", text)))
    print(f"leftovers: {'; '.join(left) or 'none'}")
    problems += [p for p in judge(outcomes, left, code) if not (problems and p.startswith("no test outcome"))]
    wall = round(time.monotonic() - t0, 1)
    (args.out / "summary.json").write_text(json.dumps({
        "ok": not problems, "simulated": args.fake, "gpus": list(args.gpus), "pytest_exit": code,
        "tests": [vars(o) for o in outcomes], "leftovers": left, "problems": problems, "wall_s": wall}, indent=1))
    print(f"wall {wall:.0f} s; summary {args.out / 'summary.json'}")
    print(f"{MARK} OK" if not problems else f"{MARK} FAIL: " + "; ".join(" ".join(p.split()) for p in problems))
    return 0 if not problems else 1


def leftovers(seen: set[int], cluster: RayCluster, gpus: Sequence[int], idle: set[int]) -> list[str]:
    """Processes of ours still alive after the teardown (killed now), and GPU users that were not there before."""
    deadline = time.monotonic() + 10
    while any(alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = sorted({p for p in seen if alive(p)} | set(cluster.pids()))
    out = [f"pid {p} ({cmdline(p, 90)})" for p in left]
    signal_all(left, signal.SIGKILL)
    out += [f"GPU user pid {p} ({cmdline(p, 90)})" for p in sorted(gpu_users(gpus) - idle)]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
