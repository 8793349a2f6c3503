"""Arms: the whole tuple of settings that decides which transport a GPU pair uses.

An arm is a process environment (NCCL reads its variables once, at communicator
creation) plus the vLLM switches that decide whether NCCL is used at all (vLLM's
custom all-reduce and symmetric-memory all-reduce do their own peer checks and would
keep using P2P in a "P2P off" arm). Each arm declares the transport it *expects*, so
that the NCCL log of every run can prove the arm did what its name says.

The presets ``p2p_on`` and ``p2p_off`` are exactly the seed report's arms: the only
difference is ``NCCL_P2P_DISABLE``; ``NCCL_CUMEM_ENABLE=1`` and custom all-reduce
disabled are held constant in both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ConfigError

# names, not 'from .. import validate as v': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would escape 'except P2PError'
from ..validate import boolean, env_mapping, join, mapping, show, string

# Transport names as the proof reports them (NCCL's "via ..." words, coarse to fine).
KNOWN_TRANSPORTS = (
    "P2P", "P2P/CUMEM", "P2P/IPC", "P2P/direct pointer",
    "SHM", "NET", "NET/Socket", "NET/IB", "NET/IB/GDRDMA", "COLLNET",
)

ARM_KEYS = ("preset", "env", "expect_transport", "custom_all_reduce", "symm_mem", "description")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.]+$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ServerArm(Protocol):
    """What a later stage (the vLLM server launch, the campaign) needs of an arm, typed end to end.

    :class:`Arm` satisfies it; a stage takes ``ServerArm`` so a test may pass a small fake
    without ``hasattr`` probing: every member is always there.
    """

    @property
    def name(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def expect_transport(self) -> str: ...

    def vllm_flags(self) -> list[str]: ...

    def vllm_env(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison; ``env`` is applied on top of the rig's env for every process of the arm."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    expect_transport: str = "P2P"
    custom_all_reduce: bool | None = None  # None: leave vLLM's default
    symm_mem: bool | None = None  # None: leave vLLM's default
    description: str = ""

    def vllm_flags(self) -> list[str]:
        """vLLM serve flags this arm implies (custom all-reduce is a flag; it has no enable flag)."""
        return ["--disable-custom-all-reduce"] if self.custom_all_reduce is False else []

    def vllm_env(self) -> dict[str, str]:
        """vLLM environment switches this arm implies (symmetric-memory all-reduce is an env variable)."""
        if self.symm_mem is None:
            return {}
        return {"VLLM_ALLREDUCE_USE_SYMM_MEM": "1" if self.symm_mem else "0"}

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "env": dict(self.env),
            "expect_transport": self.expect_transport,
            "custom_all_reduce": self.custom_all_reduce,
            "symm_mem": self.symm_mem,
            "description": self.description,
        }


PRESETS: dict[str, Arm] = {
    "p2p_on": Arm(
        "p2p_on",
        {"NCCL_CUMEM_ENABLE": "1", "NCCL_P2P_DISABLE": "0"},
        "P2P/CUMEM",
        custom_all_reduce=False,
        description="NCCL peer-to-peer over cuMem handles (the seed's P2P ON arm)",
    ),
    "p2p_off": Arm(
        "p2p_off",
        {"NCCL_CUMEM_ENABLE": "1", "NCCL_P2P_DISABLE": "1"},
        "SHM",
        custom_all_reduce=False,
        description="NCCL P2P disabled: staged through shared host memory (the seed's P2P OFF arm)",
    ),
    "ipc": Arm(
        "ipc",
        {"NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_DISABLE": "0"},
        "P2P/IPC",
        custom_all_reduce=False,
        description="NCCL peer-to-peer over legacy CUDA IPC handles (cuMem off)",
    ),
    "socket": Arm(
        "socket",
        {"NCCL_CUMEM_ENABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"},
        "NET/Socket",
        custom_all_reduce=False,
        description="P2P and SHM off, NCCL forced onto TCP sockets (a worst case, for contrast)",
    ),
    # Across nodes (docs/multinode.md): judged per crossing, on the connections between ranks of different nodes.
    "gdr": Arm(
        "gdr",
        {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "5"},
        "NET/IB/GDRDMA",
        custom_all_reduce=False,
        description="InfiniBand/RoCE verbs with GPUDirect RDMA at any NIC-GPU distance (GDR level as seed 004 sets it)",
    ),
    "no_gdr": Arm(
        "no_gdr",
        {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "LOC"},
        "NET/IB",
        custom_all_reduce=False,
        description="InfiniBand/RoCE verbs, GPUDirect RDMA off: host-staged (the fallback a GDR rig must catch)",
    ),
}

DEFAULT_ARMS = ("p2p_on", "p2p_off")


def parse_arms(value: object, source: str, path: str) -> dict[str, Arm]:
    """Parse the rig file's ``arms:`` section.

    Accepted forms: absent (the seed's ``p2p_on`` and ``p2p_off``); a list of preset
    names; a mapping ``name -> preset name | null | {preset, env, expect_transport,
    custom_all_reduce, symm_mem, description}``. In the mapping form an arm named like
    a preset starts from that preset unless ``preset`` says otherwise, and its ``env``
    is merged over the preset's. ``p2p_on`` and ``p2p_off`` are always defined (the
    uplift check compares them); other presets only when named.
    """
    arms: dict[str, Arm] = {name: PRESETS[name] for name in DEFAULT_ARMS}
    if value is None:
        return arms
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            name = string(item, source, join(path, i), choices=PRESETS)
            arms[name] = PRESETS[name]
        return arms
    for name, spec in mapping(value, source, path).items():
        where = join(path, name)
        if not _NAME_RE.match(name):
            raise ConfigError(source, where, "arm names may use letters, digits, '_' and '.' only "
                                             "(they appear in test ids and directory names)")
        arms[name] = _parse_arm(name, spec, source, where)
    return arms


def _parse_arm(name: str, spec: object, source: str, where: str) -> Arm:
    if spec is None or isinstance(spec, str):
        preset_name = name if spec is None else spec
        if preset_name not in PRESETS:
            raise ConfigError(source, where, f"no preset named {preset_name!r}; presets: {', '.join(PRESETS)}")
        return _renamed(PRESETS[preset_name], name)
    body = mapping(spec, source, where, allowed=ARM_KEYS)
    base: Arm | None = None
    if "preset" in body:
        preset_name = string(body["preset"], source, join(where, "preset"), choices=PRESETS)
        base = PRESETS[preset_name]
    elif name in PRESETS:
        base = PRESETS[name]
    env = dict(base.env) if base else {}
    user_env = env_mapping(body.get("env"), source, join(where, "env"))
    for key in user_env:
        if not _ENV_RE.match(key):
            raise ConfigError(source, join(join(where, "env"), key), "not a valid environment variable name")
    env.update(user_env)
    if "expect_transport" in body:
        expect = string(body["expect_transport"], source, join(where, "expect_transport"),
                          choices=KNOWN_TRANSPORTS)
    elif base is not None:
        expect = base.expect_transport
    else:
        raise ConfigError(source, where, "an arm without a preset must say which transport it expects "
                                         f"(expect_transport: one of {', '.join(KNOWN_TRANSPORTS)})")
    car = _opt_bool(body, "custom_all_reduce", source, where, base.custom_all_reduce if base else None)
    symm = _opt_bool(body, "symm_mem", source, where, base.symm_mem if base else None)
    desc = body.get("description", base.description if base else "")
    if not isinstance(desc, str):
        raise ConfigError(source, join(where, "description"), f"expected a string, got {show(desc)}")
    return Arm(name, env, expect, car, symm, desc)


def _opt_bool(body: Mapping[str, object], key: str, source: str, where: str, default: bool | None) -> bool | None:
    if key not in body or body[key] is None:
        return default if key not in body else None
    return boolean(body[key], source, join(where, key))


def _renamed(arm: Arm, name: str) -> Arm:
    if arm.name == name:
        return arm
    return Arm(name, dict(arm.env), arm.expect_transport, arm.custom_all_reduce, arm.symm_mem, arm.description)
