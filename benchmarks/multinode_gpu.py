"""Issue 27 on a 2-GPU machine: two Ray "nodes" on one host, one GPU each, the all-reduce probe across them.

    python3 benchmarks/multinode_gpu.py [--out DIR] [--sizes 1M,64M,256M] [--iters 20]

What it does (under 3 minutes on 2x H100; no network needed):

1. starts a local Ray cluster of two nodes (``ray.cluster_utils.Cluster``: a head and one more raylet),
   the first started with ``CUDA_VISIBLE_DEVICES=0``, the second with ``CUDA_VISIBLE_DEVICES=1``,
   ``--num-gpus 1`` each and the resources ``p2p_host:node-a`` / ``p2p_host:node-b``: what two
   ``ray start`` on one machine with the GPUs split give, in one process;
2. measures the loopback's TCP rate (4 streams, 2 s): the "line rate" of this fabric;
3. runs the all-reduce + neighbour send/recv probe with ``STRICT_SPREAD`` (one rank per Ray node) under
   the ``socket`` arm (``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket``, ``NCCL_SOCKET_IFNAME=lo``):
   NCCL must cross over the network path;
4. proves the transport from every rank's log (``NET/Socket`` expected; ``NET/IB/GDRDMA`` is also asked, and
   must FAIL naming both ranks: the fallback report a GDR rig would give), and reports busbw as a share of the
   measured loopback rate.

Output: ``$OUT/multinode_gpu/`` (or ``--out``): ``rank0.log``, ``rank1.log``, ``crossing_proof.json``,
``multinode.json``, ``summary.json``; the last stdout line is ``MULTINODE_GPU OK`` or ``MULTINODE_GPU FAIL: ...``.
Needs Ray (``pip install 'pytest-p2p[multinode]'``; offline: benchmarks/ray_wheels.sh) and torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPUS = os.environ.get("MULTINODE_GPUS", "0,1").split(",")  # the two physical GPUs, one per Ray "node"
sys.path.insert(0, str(ROOT))

from pytest_p2p.evidence.nodespec import parse_nodes  # noqa: E402
from pytest_p2p.probes.arms import PRESETS  # noqa: E402
from pytest_p2p.probes.netproof import ProcessLog, judge_line_rate, prove_crossing  # noqa: E402
from pytest_p2p.util import parse_size  # noqa: E402

NODES = {"hosts": {"node-a": {}, "node-b": {}},
         "crossings": [{"between": ["node-a", "node-b"], "transport": {"socket": "NET/Socket"},
                        "busbw_min_line_rate": "1%"}]}


def loopback_gbps(seconds: float = 2.0, streams: int = 4, chunk: int = 1 << 20) -> float:
    """TCP throughput over 127.0.0.1 with ``streams`` parallel connections (Gb/s, decimal)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(streams)
    port = srv.getsockname()[1]
    received = [0] * streams
    stop = time.monotonic() + seconds

    def sink(i: int, conn: socket.socket) -> None:
        buf = bytearray(chunk)
        with conn:
            while True:
                n = conn.recv_into(buf)
                if not n:
                    return
                received[i] += n

    def source() -> None:
        data = b"\0" * chunk
        with socket.create_connection(("127.0.0.1", port)) as c:
            while time.monotonic() < stop:
                c.sendall(data)

    senders = [threading.Thread(target=source) for _ in range(streams)]
    for t in senders:
        t.start()
    sinks = []
    for i in range(streams):
        conn, _ = srv.accept()
        sinks.append(threading.Thread(target=sink, args=(i, conn)))
        sinks[-1].start()
    start = time.monotonic()
    for t in senders + sinks:
        t.join()
    srv.close()
    return sum(received) * 8 / (time.monotonic() - start) / 1e9


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "multinode_gpu"))
    ap.add_argument("--sizes", default="1M,64M,256M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--fake", action="store_true", help="CI: GPUs declared to Ray only, the stand-in worker replays "
                    "fixtures/logs/multinode/loopback_socket (tests the plumbing without torch or a GPU)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    import ray
    from ray.cluster_utils import Cluster

    from pytest_p2p.probes.multinode import cluster_nodes, match_hosts, run_allreduce_ray

    spec = parse_nodes(NODES, "multinode_gpu.py")
    assert spec is not None
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = GPUS[0]  # each raylet (and its workers) inherits its own GPU
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "num_gpus": 1, "resources": {"p2p_host:node-a": 1}, "include_dashboard": False})
    os.environ["CUDA_VISIBLE_DEVICES"] = GPUS[1]
    cluster.add_node(num_cpus=2, num_gpus=1, resources={"p2p_host:node-b": 1})
    if saved is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES")
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = saved
    summary: dict[str, object] = {}
    problems: list[str] = []
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        nodes = cluster_nodes()
        placed = match_hosts(spec, nodes)
        print(f"ray {ray.__version__}: {len(nodes)} nodes: "
              + ", ".join(f"{h} = {n.node_id[:12]} GPU {n.resources.get('GPU')}" for h, n in placed.items()))
        line = loopback_gbps()
        print(f"loopback TCP: {line:.1f} Gb/s (4 streams)")
        rig_env = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_NVLS_ENABLE": "0"}
        worker = None
        if args.fake:
            rig_env["FAKE_MN_LOGS"] = str(ROOT / "fixtures" / "logs" / "multinode" / "loopback_socket")
            worker = [sys.executable, str(ROOT / "tests" / "fake_multinode_worker.py")]
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        res = run_allreduce_ray(spec, ["node-a", "node-b"], PRESETS["socket"], rig_env, out, expect="NET/Socket",
                                sizes=sizes, iters=args.iters, strategy="STRICT_SPREAD", timeout_s=args.timeout,
                                worker=worker)
        assert res.proof is not None
        print("ranks: " + ", ".join(f"rank {r.rank} on {r.host} ({r.node_id[:12]})" for r in res.ranks))
        print(f"transport proof (expect NET/Socket): {res.proof.outcome}: {res.proof.message}")
        for r in res.rows:
            print(f"  all-reduce {r.bytes:>11} B  {r.time_us:10.1f} us  busbw {r.busbw_gbs:7.2f} GB/s")
        for r in res.sendrecv:
            print(f"  send/recv  {r.bytes:>11} B  {r.time_us:10.1f} us  {r.algbw_gbs:7.2f} GB/s per hop")
        big = res.largest()
        outcome, msg = judge_line_rate(big.busbw_gbs if big else None, line, 0.01, "node-a~node-b socket")
        print(f"busbw vs loopback: {msg}")
        logs = [ProcessLog((out / f"rank{r}.log").read_text(), f"rank{r}.log", h)
                for r, h in enumerate(["node-a", "node-b"])]
        gdr = prove_crossing(logs, "NET/IB/GDRDMA", arm_env=PRESETS["gdr"].env)
        print(f"the same logs against a GDR rig (must fail): {gdr.outcome}: {gdr.message}")
        if res.proof.outcome != "pass":
            problems.append(f"transport proof {res.proof.outcome}")
        if not res.correct:
            problems.append("wrong all-reduce or send/recv values")
        if gdr.outcome != "fail" or len(gdr.failed()) != 2:
            problems.append("the GDR expectation did not fail on both ranks")
        if len({r.node_id for r in res.ranks}) != 2:
            problems.append("both ranks on one Ray node")
        visible = [re.findall(r"CUDA_VISIBLE_DEVICES=(\S+)", lg.text)[:1] for lg in logs]
        print(f"CUDA_VISIBLE_DEVICES per rank: {visible}")
        if len({tuple(v) for v in visible}) != 2 or not all(visible):
            problems.append(f"the ranks did not see one different GPU each (CUDA_VISIBLE_DEVICES {visible})")
        summary = {"ray": ray.__version__, "loopback_gbps": line, "busbw_share_of_loopback": outcome,
                   "line_rate_message": msg, "proof": res.proof.to_dict(), "gdr_proof": gdr.to_dict(),
                   "rows": [vars(r) for r in res.rows], "sendrecv": [vars(r) for r in res.sendrecv],
                   "correct": res.correct, "wall_s": round(time.monotonic() - t0, 1)}
    except Exception as exc:  # noqa: BLE001 - one line to read; the traceback is in the log above it
        import traceback

        traceback.print_exc()
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        ray.shutdown()
        cluster.shutdown()
    summary["problems"] = problems
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"wall {time.monotonic() - t0:.0f} s")
    print("MULTINODE_GPU OK" if not problems else f"MULTINODE_GPU FAIL: {'; '.join(problems)}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
