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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict

from ..errors import ConfigError
from ..jsontypes import JSONObject
from ..schema import flag, key, key_factory, load, real, whole, word

# names, not 'from .. import validate as v': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would escape 'except P2PError'
from ..validate import env_mapping, float_in, join, mapping, sequence, show, string

STANDIN_MODULE = "pytest_p2p.serve.standin"
#: headers the load client sets itself (a rig's value would make the request malformed)
_OWN_HEADERS = ("host", "content-length", "transfer-encoding", "x-request-id")
#: upper bounds of the section's numbers: far beyond any real use, small enough to never hang or overflow
MAX_TIMEOUT_S = 7 * 86400.0
MAX_TOKENS = 1_000_000
MAX_PROMPTS = 10_000_000
MAX_REQUEST_RATE = 1e6  # requests/s: one client machine sends far fewer; 'inf' is the closed loop
# Flags the launcher owns: a rig that sets them would fight the per-run values.
_RESERVED = ("host", "port", "api-key")


def _command(value: object, source: str, path: str) -> tuple[str, ...]:
    words: Sequence[object]
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(source, path, f"cannot split {show(value)}: {exc}") from None
    else:
        words = sequence(value, source, path)
    if not words:
        raise ConfigError(source, path, "expected a non-empty command")
    return tuple(string(w, source, join(path, i)) if not isinstance(w, (int, float)) else str(w)
                 for i, w in enumerate(words))


def _args(value: object, source: str, path: str) -> dict[str, object]:
    args = dict(mapping(value, source, path))
    for name, val in args.items():
        where = join(path, name)
        if name.lstrip("-") in _RESERVED or name.lstrip("-") == "served-model-name":
            raise ConfigError(source, where, "is set by the launcher (per-run host, free port, API key, "
                                             "served_model_name key); remove it")
        if isinstance(val, Mapping):
            raise ConfigError(source, where, f"expected a scalar or list, got {show(val)}")
    return args


def _request_rate(value: object, source: str, path: str) -> float:
    if value in ("inf", float("inf")):
        return float("inf")
    return float_in(value, source, path, 1e-6, MAX_REQUEST_RATE, what="a rate ('inf' or requests/s)")


def _headers(value: object, source: str, path: str) -> dict[str, str]:
    headers = env_mapping(value, source, path)
    for name, val in headers.items():
        if name.lower() in _OWN_HEADERS or not name or any(c in name for c in ":\r\n ") or \
                any(c in val for c in "\r\n"):
            raise ConfigError(source, join(path, name), f"{show(name)} cannot be sent as given (the client sets "
                                                        f"{', '.join(_OWN_HEADERS)} itself; no line breaks)")
    return headers


def _ca_file(value: object, source: str, path: str) -> str:
    ca_file = string(value, source, path)
    if not Path(ca_file).expanduser().is_file():
        raise ConfigError(source, path, f"{show(ca_file)} is not a file (a PEM file of CA certificates)")
    return str(Path(ca_file).expanduser())


def _proxy(value: object, source: str, path: str) -> str:
    proxy = string(value, source, path)
    if proxy not in ("env", "none") and not proxy.startswith("http://"):
        raise ConfigError(source, path, f"expected 'env', 'none' or http://HOST:PORT, got {show(proxy)}")
    return proxy


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

    input_len: int = key(128, whole(1, MAX_TOKENS))
    output_len: int = key(128, whole(1, MAX_TOKENS))
    num_prompts: int = key(64, whole(1, MAX_PROMPTS))
    warmup: int = key(2, whole(0, MAX_PROMPTS))
    seed: int = key(0, whole(0, 2**63 - 1))
    endpoint: str = key("completions", word("completions", "chat"))
    # 0: automatic (loadclients.ClientPlanner); n: shard over n client processes
    client_processes: int = key(0, whole(0, 4096))
    transport: str = key("raw", word("raw", "openai", "aiohttp"))  # serve/transport.py
    # None: the model directory (vLLM) or the stand-in's words
    tokenizer: str | None = key(None, lambda v, s, p: string(v, s, p) if v else None,
                                  accepts="a directory or name; null: the model's")
    # requests/s (Poisson); inf: closed loop
    request_rate: float = key(float("inf"), _request_rate, accepts="`inf` or requests/s 1e-06 .. 1e+06")
    burstiness: float = key(1.0, real(1e-3, 1e3))  # gamma shape of the arrival gaps, as vllm bench serve's
    # bench's --random-range-ratio: each request's lengths drawn in L * (1 -+ r) (serve/workload.request_lengths)
    range_ratio: float = key(0.0, real(0.0, 0.99))
    # a user-supplied endpoint (serve/transport.py ClientOptions; docs/metrics.md)
    headers: Mapping[str, str] = key_factory(dict, lambda v, s, p: _headers(v, s, p) if v else {},
                                               accepts="a mapping of header lines")
    # merged into every request, as bench's --extra-body
    extra_body: Mapping[str, object] = key_factory(dict, lambda v, s, p: dict(mapping(v, s, p)) if v else {},
                                                   accepts="a mapping")
    ca_file: str | None = key(None, lambda v, s, p: _ca_file(v, s, p) if v else None,
                                accepts="a PEM file")
    proxy: str = key("env", _proxy, accepts="`env` \\| `none` \\| `http://HOST:PORT`")  # env | none | http://HOST:PORT
    connect_timeout_s: float = key(10.0, real(0.1, MAX_TIMEOUT_S))

    def client_options(self) -> ClientKeywords:
        """The load generator's keywords for these keys (``make_spec(**load.client_options())``)."""
        return {"burstiness": self.burstiness, "headers": tuple(self.headers.items()),
                "extra_body": dict(self.extra_body), "ca_file": self.ca_file, "proxy": self.proxy,
                "connect_timeout_s": self.connect_timeout_s}


@dataclass(frozen=True)
class ServerConfig:
    command: tuple[str, ...] = key(("vllm", "serve"), _command, accepts="an argv prefix (a list or one string)")
    model: str = key("", word())
    served_model_name: str | None = key(None, word(), null=True)
    # scalars or lists, as the rig file wrote them
    args: Mapping[str, object] = key_factory(dict, _args, accepts="`{flag: value}`")
    flags: tuple[str, ...] = key((), lambda v, s, p: tuple(string(f, s, join(p, i))
                                                           for i, f in enumerate(sequence(v or [], s, p))),
                                 accepts="a list of flags")
    env: Mapping[str, str] = key_factory(dict, env_mapping, accepts="`{VAR: value}`")
    startup_timeout_s: float = key(900.0, real(0.001, MAX_TIMEOUT_S))
    request_timeout_s: float = key(300.0, real(0.001, MAX_TIMEOUT_S))
    teardown_timeout_s: float = key(60.0, real(0.001, MAX_TIMEOUT_S))
    idle_memory_tolerance_mib: int = key(1024, whole(0, 1 << 30))
    simulated: bool = key(False, flag)  # left out: whether the command runs the stand-in
    # auto: each server of a launch pinned to whole cores of its own (serve.cores.server_blocks)
    cpus: str = key("none", word("none", "auto"))
    load: LoadDefaults = key(LoadDefaults(), lambda v, s, p: parse_load(v, s, p), accepts="see `server.load`")

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
        for name, value in self.args.items():
            out.extend(_arg(name, value))
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
            # only where set: the records of runs before the key (and of rigs without it) stay as they were
            **({"cpus": self.cpus} if self.cpus != "none" else {}),
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
    cfg, body = load(ServerConfig, value, source, path)
    return cfg if "simulated" in body else replace(cfg, simulated=is_standin(cfg.command))


def parse_load(value: object, source: str, path: str) -> LoadDefaults:
    return load(LoadDefaults, value, source, path)[0]
