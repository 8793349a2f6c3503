"""vLLM across nodes: the ``vllm serve`` arguments for Ray's executor and the rig's stages, and each worker's proof.

With ``--distributed-executor-backend ray`` vLLM runs one Ray worker per GPU, and the driver's
output carries every worker's lines behind a ``(RayWorkerWrapper pid=…, ip=…)`` prefix — NCCL's
``host:pid:tid [dev] NCCL INFO`` lines included. So the server log *is* every worker's log:
:func:`worker_proof` splits it per process (:func:`..probes.netproof.split_by_process`) and proves
the crossing transport rank by rank, naming the worker that fell back, as for the probe.

The rig's ``nodes.stages`` are the pipeline stages in order (``host:bus id``); a stage count above
the hosts' GPU count per stage is not checked here (vLLM refuses it with its own message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..errors import ConfigError
from ..evidence.nodespec import Stage
from ..probes.netproof import CrossingProof, prove_crossing, split_by_process
from .config import ServerConfig


def ray_executor_args(stages: Sequence[Stage], tensor_parallel: int = 1) -> list[str]:
    """``vllm serve`` flags for the rig's placement: pipeline stages across nodes, ``tensor_parallel`` GPUs each.

    The seed's rig (3 stages: two on node A, one on node B, TP 1) gives
    ``--distributed-executor-backend ray --pipeline-parallel-size 3 --tensor-parallel-size 1``.
    """
    if not stages:
        raise ConfigError("rig", "nodes.stages", "a multi-node server needs its stages (host:bus id, in order)")
    if len(stages) % tensor_parallel:
        raise ConfigError("rig", "nodes.stages", f"{len(stages)} GPUs do not split into stages of "
                                                 f"{tensor_parallel} (tensor-parallel size)")
    return ["--distributed-executor-backend", "ray", "--pipeline-parallel-size", str(len(stages) // tensor_parallel),
            "--tensor-parallel-size", str(tensor_parallel)]


def ray_server_config(server: ServerConfig, stages: Sequence[Stage]) -> ServerConfig:
    """The rig's server section with Ray's executor over the rig's stages (its own tensor-parallel size, else 1)."""
    tp = server.args.get("tensor-parallel-size", 1)
    flags = ray_executor_args(stages, tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else 1)
    placed = {flag.lstrip("-"): value for flag, value in zip(flags[::2], flags[1::2], strict=True)}
    return replace(server, args={**server.args, **placed})


def ray_server_env(address: str | None, arm_env: Mapping[str, str]) -> dict[str, str]:
    """The driver's environment: the cluster to join and the arm's NCCL variables.

    Ray workers inherit the environment of their node's raylet; which driver variables vLLM copies
    to them depends on its version. So start every node (``ray start``) with the arm's variables
    too — the per-rank proof names a worker whose ``NCCL_*`` differs, which is how a node started
    without them shows. ``NCCL_DEBUG=INFO`` makes every worker print its connections. The driver
    must print every worker's lines as they are: Ray by default folds lines that differ only in
    numbers into one ``[repeated Nx across cluster]`` (rank 1's NCCL lines vanish behind rank 0's,
    ``RAY_DEDUP_LOGS=0``) and wraps the ``(RayWorkerProc pid=…)`` prefix in colour codes that hide it
    from the per-process split (``RAY_COLOR_PREFIX=0``).
    """
    env = {"NCCL_DEBUG": "INFO", "RAY_DEDUP_LOGS": "0", "RAY_COLOR_PREFIX": "0", **arm_env}
    if address:
        env["RAY_ADDRESS"] = address
    return env


def worker_proof(server_log: str, expect: str, source: str = "server.log", *,
                 world_size: int | None = None) -> CrossingProof:
    """Every Ray worker's NCCL lines in a ``vllm serve`` log, proven against ``expect`` rank by rank."""
    return prove_crossing(split_by_process(server_log, source), expect, world_size=world_size)
