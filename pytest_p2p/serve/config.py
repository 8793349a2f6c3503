"""The rig file's ``server`` section: which server to launch, how, and how to load it.

The command is a list so that it can be any argv prefix (``vllm serve``, or
``/opt/venv/bin/python3 -m vllm.entrypoints.cli.main serve`` where the ``vllm``
script is not on ``PATH``). The model is appended after it, then the constant
``args``/``flags``, then the arm's flags, then the per-run ``--host --port`` that only
the launcher knows (the per-run API key goes in the environment, ``VLLM_API_KEY``).

The literal first word ``python`` means *the interpreter running pytest*
(``sys.executable``), so the demo rig's ``[python, -m, pytest_p2p.serve.standin]``
works from an installed wheel in any virtual environment.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from ..errors import ConfigError
from ..jsontypes import JSONObject

# names, not 'from .. import validate as v': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would escape 'except P2PError'
from ..validate import boolean, env_mapping, float_in, int_in, join, mapping, sequence, show, string

STANDIN_MODULE = "pytest_p2p.serve.standin"

_KEYS = (
    "command", "model", "served_model_name", "args", "flags", "env", "startup_timeout_s",
    "request_timeout_s", "teardown_timeout_s", "idle_memory_tolerance_mib", "simulated", "load",
)
_LOAD_KEYS = ("input_len", "output_len", "num_prompts", "warmup", "seed", "endpoint", "client_processes", "transport",
              "tokenizer", "request_rate", "burstiness", "headers", "extra_body", "ca_file", "proxy",
              "connect_timeout_s")
#: headers the load client sets itself (a rig's value would make the request malformed)
_OWN_HEADERS = ("host", "content-length", "transfer-encoding", "x-request-id")
#: upper bounds of the section's numbers: far beyond any real use, small enough to never hang or overflow
MAX_TIMEOUT_S = 7 * 86400.0
MAX_TOKENS = 1_000_000
MAX_PROMPTS = 10_000_000
MAX_REQUEST_RATE = 1e6  # requests/s: one client machine sends far fewer; 'inf' is the closed loop
# Flags the launcher owns: a rig that sets them would fight the per-run values.
_RESERVED = ("host", "port", "api-key")


class ClientKeywords(TypedDict):
    """The load generator's keywords for the ``load:`` keys that say how to reach an endpoint."""

    burstiness: float
    headers: tuple[tuple[str, str], ...]
    extra_body: dict[str, object]
    ca_file: str | None
    proxy: str
    connect_timeout_s: float


@dataclass(frozen=True)
class LoadDefaults:
    """Default load shape for the ``p2p_load`` fixture and campaigns (vLLM ``random`` dataset style)."""

    input_len: int = 128
    output_len: int = 128
    num_prompts: int = 64
    warmup: int = 2
    seed: int = 0
    endpoint: str = "completions"
    client_processes: int = 0  # 0: automatic (loadclients.ClientPlanner); n: shard over n client processes
    transport: str = "raw"  # raw | openai | aiohttp (serve/transport.py)
    tokenizer: str | None = None  # None: the model directory (vLLM) or the stand-in's words
    request_rate: float = float("inf")  # requests/s (Poisson); inf: closed loop at the concurrency
    burstiness: float = 1.0  # gamma shape of the arrival gaps, as vllm bench serve's --burstiness
    # a user-supplied endpoint (serve/transport.py ClientOptions; docs/metrics.md)
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, object] = field(default_factory=dict)  # merged into every request, as bench's
    ca_file: str | None = None
    proxy: str = "env"  # env | none | http://HOST:PORT
    connect_timeout_s: float = 10.0

    def client_options(self) -> ClientKeywords:
        """The load generator's keywords for these keys (``make_spec(**load.client_options())``)."""
        return {"burstiness": self.burstiness, "headers": tuple(self.headers.items()),
                "extra_body": dict(self.extra_body), "ca_file": self.ca_file, "proxy": self.proxy,
                "connect_timeout_s": self.connect_timeout_s}


@dataclass(frozen=True)
class ServerConfig:
    command: tuple[str, ...] = ("vllm", "serve")
    model: str = ""
    served_model_name: str | None = None
    args: Mapping[str, object] = field(default_factory=dict)  # scalars or lists, as the rig file wrote them
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 300.0
    teardown_timeout_s: float = 60.0
    idle_memory_tolerance_mib: int = 1024
    simulated: bool = False
    load: LoadDefaults = field(default_factory=LoadDefaults)

    @property
    def model_name(self) -> str:
        """The name clients send in ``model`` (vLLM's ``--served-model-name`` wins over the path)."""
        return self.served_model_name or self.model

    def executable_argv(self) -> list[str]:
        """The command with a leading ``python`` resolved to the current interpreter."""
        argv = list(self.command)
        if argv and argv[0] == "python":
            argv[0] = sys.executable
        return argv

    def argv(self, arm_flags: list[str] | tuple[str, ...] = (), *, host: str, port: int) -> list[str]:
        """Full argv for one launch: command, model, rig args/flags, the arm's flags, per-run flags.

        The per-launch API key is not here: it travels as ``VLLM_API_KEY`` in the environment,
        so ``/proc/PID/cmdline`` (readable by every user) never shows it.
        """
        out = self.executable_argv()
        if self.model:
            out.append(self.model)
        for key, value in self.args.items():
            out.extend(_arg(key, value))
        out.extend(_flag(f) for f in self.flags)
        out.extend(arm_flags)
        if self.served_model_name:
            out += ["--served-model-name", self.served_model_name]
        out += ["--host", host, "--port", str(port)]
        return out

    def to_dict(self) -> JSONObject:
        return {
            "command": list(self.command), "model": self.model,
            "served_model_name": self.served_model_name, "args": dict(self.args),
            "flags": list(self.flags), "env": dict(self.env),
            "startup_timeout_s": self.startup_timeout_s, "request_timeout_s": self.request_timeout_s,
            "teardown_timeout_s": self.teardown_timeout_s,
            "idle_memory_tolerance_mib": self.idle_memory_tolerance_mib, "simulated": self.simulated,
            "load": {**self.load.__dict__, "headers": dict(self.load.headers), "extra_body": dict(self.load.extra_body),
                     "request_rate": "inf" if self.load.request_rate == float("inf") else self.load.request_rate},
        }


def _flag(name: str) -> str:
    return name if name.startswith("-") else f"--{name}"


def _arg(key: str, value: object) -> list[str]:
    """``{max-model-len: 2048}`` -> ``--max-model-len 2048``; true -> bare flag; false/null -> omitted."""
    if value is None or value is False:
        return []
    if value is True:
        return [_flag(key)]
    if isinstance(value, (list, tuple)):
        return [_flag(key), *(str(x) for x in value)]
    return [_flag(key), str(value)]


def is_standin(command: tuple[str, ...] | list[str]) -> bool:
    """True when the command runs our stand-in (module form or the file itself)."""
    return any(w == STANDIN_MODULE or w.endswith("pytest_p2p/serve/standin.py") for w in command)


def parse_server(value: object, source: str, path: str = "server") -> ServerConfig:
    """Parse the rig file's ``server`` section (``None``: vLLM defaults, model still required to launch)."""
    data = mapping(value, source, path, allowed=_KEYS)
    default = ServerConfig()
    command: tuple[str, ...] = default.command
    if "command" in data:
        raw = data["command"]
        words: Sequence[object]
        if isinstance(raw, str):
            try:
                words = shlex.split(raw)
            except ValueError as exc:
                raise ConfigError(source, join(path, "command"), f"cannot split {show(raw)}: {exc}") from None
        else:
            words = sequence(raw, source, join(path, "command"))
        if not words:
            raise ConfigError(source, join(path, "command"), "expected a non-empty command")
        command = tuple(string(w, source, join(join(path, "command"), i)) if not isinstance(w, (int, float))
                        else str(w) for i, w in enumerate(words))
    model = string(data["model"], source, join(path, "model")) if "model" in data else ""
    served = (string(data["served_model_name"], source, join(path, "served_model_name"))
              if data.get("served_model_name") is not None else None)
    args = dict(mapping(data.get("args"), source, join(path, "args")))
    for key, val in args.items():
        where = join(join(path, "args"), key)
        if key.lstrip("-") in _RESERVED or key.lstrip("-") == "served-model-name":
            raise ConfigError(source, where, "is set by the launcher (per-run host, free port, API key, "
                                             "served_model_name key); remove it")
        if isinstance(val, Mapping):
            raise ConfigError(source, where, f"expected a scalar or list, got {show(val)}")
    flags = tuple(string(f, source, join(join(path, "flags"), i))
                  for i, f in enumerate(sequence(data.get("flags") or [], source, join(path, "flags"))))
    env = env_mapping(data.get("env"), source, join(path, "env"))

    def num(key: str, dflt: float, lo: float = 0.001, hi: float = MAX_TIMEOUT_S) -> float:
        return float_in(data[key], source, join(path, key), lo, hi) if key in data else dflt

    simulated = (boolean(data["simulated"], source, join(path, "simulated"))
                 if "simulated" in data else is_standin(command))
    return ServerConfig(
        command=command, model=model, served_model_name=served, args=args, flags=flags, env=env,
        startup_timeout_s=num("startup_timeout_s", default.startup_timeout_s),
        request_timeout_s=num("request_timeout_s", default.request_timeout_s),
        teardown_timeout_s=num("teardown_timeout_s", default.teardown_timeout_s),
        idle_memory_tolerance_mib=(int_in(data["idle_memory_tolerance_mib"], source,
                                            join(path, "idle_memory_tolerance_mib"), 0, 1 << 30)
                                   if "idle_memory_tolerance_mib" in data else default.idle_memory_tolerance_mib),
        simulated=simulated,
        load=parse_load(data.get("load"), source, join(path, "load")),
    )


def parse_load(value: object, source: str, path: str) -> LoadDefaults:
    data = mapping(value, source, path, allowed=_LOAD_KEYS)
    d = LoadDefaults()

    def count(key: str, dflt: int, lo: int, hi: int) -> int:
        return int_in(data[key], source, join(path, key), lo, hi) if key in data else dflt

    endpoint = (string(data["endpoint"], source, join(path, "endpoint"), choices=("completions", "chat"))
                if "endpoint" in data else d.endpoint)
    transport = (string(data["transport"], source, join(path, "transport"), choices=("raw", "openai", "aiohttp"))
                 if "transport" in data else d.transport)
    tokenizer = string(data["tokenizer"], source, join(path, "tokenizer")) if data.get("tokenizer") else None
    rate = data.get("request_rate", "inf")
    request_rate = (float("inf") if rate in ("inf", float("inf"))
                    else float_in(rate, source, join(path, "request_rate"), 1e-6, MAX_REQUEST_RATE,
                                  what="a rate ('inf' or requests/s)"))
    headers = env_mapping(data["headers"], source, join(path, "headers")) if data.get("headers") else {}
    for key, val in headers.items():
        if key.lower() in _OWN_HEADERS or not key or any(c in key for c in ":\r\n ") or any(c in val for c in "\r\n"):
            raise ConfigError(source, join(join(path, "headers"), key), f"{show(key)} cannot be sent as given (the "
                              f"client sets {', '.join(_OWN_HEADERS)} itself; no line breaks)")
    extra_body = dict(mapping(data["extra_body"], source, join(path, "extra_body"))) if data.get("extra_body") else {}
    ca_file = string(data["ca_file"], source, join(path, "ca_file")) if data.get("ca_file") else None
    if ca_file is not None and not Path(ca_file).expanduser().is_file():
        raise ConfigError(source, join(path, "ca_file"), f"{show(ca_file)} is not a file (a PEM file of CA "
                          "certificates)")
    proxy = string(data["proxy"], source, join(path, "proxy")) if "proxy" in data else d.proxy
    if proxy not in ("env", "none") and not proxy.startswith("http://"):
        raise ConfigError(source, join(path, "proxy"), f"expected 'env', 'none' or http://HOST:PORT, got {show(proxy)}")
    return LoadDefaults(
        burstiness=float_in(data["burstiness"], source, join(path, "burstiness"), 1e-3, 1e3)
        if "burstiness" in data else d.burstiness,
        headers=headers, extra_body=extra_body, ca_file=str(Path(ca_file).expanduser()) if ca_file else None,
        proxy=proxy, connect_timeout_s=float_in(data["connect_timeout_s"], source, join(path, "connect_timeout_s"),
                                                0.1, MAX_TIMEOUT_S) if "connect_timeout_s" in data
        else d.connect_timeout_s,
        input_len=count("input_len", d.input_len, 1, MAX_TOKENS),
        output_len=count("output_len", d.output_len, 1, MAX_TOKENS),
        num_prompts=count("num_prompts", d.num_prompts, 1, MAX_PROMPTS),
        warmup=count("warmup", d.warmup, 0, MAX_PROMPTS), seed=count("seed", d.seed, 0, 2**63 - 1),
        endpoint=endpoint, client_processes=count("client_processes", d.client_processes, 0, 4096),
        transport=transport, tokenizer=tokenizer, request_rate=request_rate,
    )
