"""The one place that builds environments for the subprocesses we start.

Probes and servers run in their own processes because NCCL reads its environment
once, at communicator creation: an arm is therefore a process environment. Building
it in one place guarantees the invariants every subprocess needs:

* ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that ``CUDA_VISIBLE_DEVICES`` names the GPUs
  NVML names (NVML enumerates by bus id; CUDA's default order is "fastest first").
* ``CUDA_VISIBLE_DEVICES`` = the pair, by NVML index.
* NVLink multicast (NVLS / symmetric-memory multicast) off unless the rig or the arm
  turns it on explicitly: it is irrelevant to a GPU pair's P2P path, and on shared
  NVSwitch hosts a program using it can take the GPUs out of service.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def subprocess_env(
    gpus: Sequence[int] | None,
    *layers: Mapping[str, str] | None,
    nccl_debug: str | None = "INFO",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for a probe or server process.

    ``layers`` (rig env, then arm env, then anything the caller adds) override the
    inherited environment in order. ``gpus`` are NVML indices; ``None`` leaves
    ``CUDA_VISIBLE_DEVICES`` as inherited.
    """
    env = dict(os.environ if base is None else base)
    for key, value in MULTICAST_OFF.items():
        env.setdefault(key, value)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    if nccl_debug:
        env["NCCL_DEBUG"] = nccl_debug
    for layer in layers:
        if layer:
            env.update({str(k): str(v) for k, v in layer.items()})
    return env
