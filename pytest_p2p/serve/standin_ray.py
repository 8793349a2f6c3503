"""The stand-in's Ray executor: every worker's NCCL lines as a multi-node ``vllm serve`` prints them (SIMULATED).

With ``--distributed-executor-backend ray`` a real vLLM driver prints each Ray worker's output
behind ``(RayWorkerWrapper pid=…, ip=…)``, NCCL's ``host:pid:tid [dev] NCCL INFO`` lines
included, its own rank's lines unprefixed. CI has no cluster, so the stand-in prints such a log
for the workers of the rig's stages (``PYTEST_P2P_STANDIN_RAY_HOSTS``: one host per stage, in
order) and the arm's environment: a ring over the stages, ``P2P/CUMEM`` between stages on one
host and, across hosts, what NCCL would pick -- ``NET/IB/0/GDRDMA`` with InfiniBand on and
``NCCL_NET_GDR_LEVEL`` set above ``LOC``, ``NET/IB/0`` without it or at ``LOC``, ``NET/Socket/0``
with ``NCCL_IB_DISABLE=1`` or ``NCCL_NET=Socket``. A host named in ``PYTEST_P2P_STANDIN_RAY_NO_PEERMEM`` prints NCCL's
"GPU Direct RDMA Disabled ... (no module)" and falls back as NCCL does: the per-worker proof
(:func:`pytest_p2p.serve.multinode.worker_proof`) must name that worker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

HOSTS_ENV = "PYTEST_P2P_STANDIN_RAY_HOSTS"
NO_PEERMEM_ENV = "PYTEST_P2P_STANDIN_RAY_NO_PEERMEM"
SHOWN_ENV = ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_GDR_LEVEL", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
             "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")


def _net(env: Mapping[str, str], host: str, no_peermem: set[str]) -> tuple[str, str]:
    """(``Using network`` name, the transport of this host's crossing connections)."""
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1" or env.get("NCCL_NET", "").strip().lower() == "socket":
        return "Socket", "NET/Socket/0"
    level = env.get("NCCL_NET_GDR_LEVEL", "").strip().upper()
    gdr = level not in ("", "LOC", "0") and host not in no_peermem  # LOC (0): GPUDirect RDMA never used
    return "IB", "NET/IB/0/GDRDMA" if gdr else "NET/IB/0"


def ray_worker_lines(stages: int, env: Mapping[str, str], pid: int, version: str) -> list[str]:
    """The NCCL lines of ``stages`` workers (one GPU each) in one pipeline ring, merged as the driver prints them."""
    hosts = [h.strip() for h in env.get(HOSTS_ENV, "").split(",") if h.strip()]
    hosts = hosts or ["node-a", "node-b"]
    hosts = [hosts[min(r, len(hosts) - 1)] for r in range(stages)]
    no_peermem = {h.strip() for h in env.get(NO_PEERMEM_ENV, "").split(",") if h.strip()}
    nodes = list(dict.fromkeys(hosts))
    comm = f"0x{(pid * 2654435761) & 0xFFFFFFFFFFFF:012x}"
    out: list[str] = []
    for r, host in enumerate(hosts):
        wpid = pid + 1 + r
        dev = hosts[:r].count(host)
        ip = f"10.0.0.{nodes.index(host) + 1}"
        lead = "" if r == 0 else f"(RayWorkerWrapper pid={wpid}, ip={ip}) "
        p = f"{lead}{host}:{wpid}:{wpid} [{dev}] NCCL INFO "
        name, net = _net(env, host, no_peermem)
        if r == 0:
            out.append(p + f"NCCL version {version}+cuda13.0")
        out += [p + f"{k} set by environment to {env[k]}" for k in SHOWN_ENV if k in env]
        out.append(p + f"Using network {name}")
        if name == "IB":
            state = "Disabled" if host in no_peermem else "Enabled"
            out.append(p + f"NET/IB : GPU Direct RDMA {state} for HCA 0 'mlx5_0'"
                       + (" (no module)" if host in no_peermem else ""))
        out.append(p + f"comm 0x55d0{wpid} rank {r} nRanks {stages} nNodes {len(nodes)} localRanks "
                       f"{hosts.count(host)} localRank {dev} MNNVL 0")
        nxt, prv = (r + 1) % stages, (r - 1) % stages
        for ch in ("00", "01"):
            for peer, side in ((nxt, "send"), (prv, "receive")):
                if peer == r:
                    continue
                a, b = (r, peer) if side == "send" else (peer, r)
                da, db = hosts[:a].count(hosts[a]), hosts[:b].count(hosts[b])
                if hosts[peer] == host:
                    if side == "send":
                        out.append(p + f"Channel {ch}/0 : {a}[{da}] -> {b}[{db}] via P2P/CUMEM")
                else:
                    out.append(p + f"Channel {ch}/0 : {a}[{da}] -> {b}[{db}] [{side}] via {net}")
        out.append(p + "Connected all rings")
        out.append(p + f"comm 0x55d0{wpid} rank {r} nranks {stages} cudaDev {dev} nvmlDev {dev} "
                       f"busId {0x18 + 0x10 * r:x}000 commId {comm} - Init COMPLETE")
    return out


def print_ray_worker_lines(stages: int, version: str) -> None:
    print("\n".join(ray_worker_lines(stages, os.environ, os.getpid(), version)), flush=True)
