"""Server lifecycle: launch vLLM (or the stand-in) for one arm on one pair, prove it ready, tear it down.

Why each step:

* **Own process session** (``start_new_session``): teardown can signal the whole tree
  (API server, EngineCore, workers) with one ``killpg``.
* **Env marker** ``PYTEST_P2P_SERVER_TOKEN=<uuid>`` in the server's environment: vLLM
  workers inherit it, so a process that left the session or was re-parented after the
  API server died (vLLM issue #55510: a SIGKILLed API server orphans EngineCore/Worker,
  which keep the GPU memory) is still found by reading ``/proc/<pid>/environ``.
* **Ready** means what a client needs: ``/health`` 200, ``/v1/models`` lists the model,
  and one real completion returns a token. A port that answers is not yet a server.
* **Teardown**: SIGTERM the group, wait, SIGKILL the group and every marked process,
  then check ``/proc`` for survivors and NVML for compute processes / memory left on the
  pair. A leftover is a :class:`ServerError` naming its pid: the next arm on that pair
  would otherwise be measured against a half-occupied GPU.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..envs import subprocess_env
from ..errors import ServerError
from .config import ServerConfig
from .procs import TOKEN_ENV, cmdline, find_leftovers, has_token, kill_tree, port_owners, session_of

if TYPE_CHECKING:
    from .attest import Attestation

#: vLLM reads its API key from this variable, so the per-launch secret never appears in argv
API_KEY_ENV = "VLLM_API_KEY"
__all__ = ["API_KEY_ENV", "TOKEN_ENV", "RunningServer", "ServerDeath", "find_leftovers", "kill_tree", "launch",
           "likely_cause", "tail", "teardown"]
_LIVE: dict[int, tuple[int, str]] = {}  # leader pid -> (session id, token): killed at interpreter exit


class ArmLike(Protocol):
    """What launch needs of ``probes.arms.Arm`` (read-only, so frozen dataclasses fit)."""

    @property
    def name(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    def vllm_flags(self) -> list[str]: ...


# ----------------------------------------------------------------------------- causes

_CAUSES: tuple[tuple[str, str], ...] = (
    (r"out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory|"
     r"No available memory for the cache blocks",
     "out of GPU memory (lower --gpu-memory-utilization or --max-model-len, or free the GPUs)"),
    (r"address already in use|Errno 98", "port in use (another server on the port)"),
    (r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|NCCL WARN",
     "NCCL error (see the NCCL INFO/WARN lines above; check the arm's NCCL_* env and the GPU pair)"),
    (r"does not appear to have a file named|Repository Not Found|HFValidationError|"
     r"not a valid model|No such file or directory.*(config\.json|model)|Invalid repository ID|"
     r"We couldn't connect to 'https://huggingface.co'|LocalEntryNotFoundError",
     "missing model (check server.model: a local directory, or set HF_HUB_OFFLINE=0)"),
    (r"No module named", "missing Python module (is vLLM installed for this interpreter?)"),
    (r"No CUDA GPUs are available|CUDA driver initialization failed|no CUDA-capable device",
     "no GPU visible (CUDA_VISIBLE_DEVICES / driver)"),
    (r"unrecognized arguments|error: argument|invalid choice", "bad command-line arguments for this server"),
)


def likely_cause(log_text: str, returncode: int | None = None) -> str:
    """The most likely reason a server failed, from its log (last match wins: the final error)."""
    best: tuple[int, str] | None = None
    for pattern, cause in _CAUSES:
        for m in re.finditer(pattern, log_text, re.IGNORECASE):
            if best is None or m.start() > best[0]:
                best = (m.start(), cause)
    if best:
        return best[1]
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}" + (" (the kernel OOM killer?)" if returncode == -9 else "")
    return "unknown (read the log)"


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


# ----------------------------------------------------------------------------- processes


@atexit.register
def _kill_all_at_exit() -> None:
    """Last resort after Ctrl-C twice or an internal error: no server outlives the test session."""
    for sid, token in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            kill_tree(sid, token, grace_s=2.0)


# ----------------------------------------------------------------------------- NVML


@dataclass
class GpuUse:
    index: int
    used_mib: float
    pids: list[int]


def gpu_usage(indices: Sequence[int]) -> list[GpuUse] | None:
    """Memory used and compute pids per GPU (through evidence/nvml.py); None when NVML cannot be used.

    An index this machine does not have (a pair's second GPU on a one-GPU machine) is left
    out: no process of ours can be on it, and it must not turn teardown into an NVML error.
    """
    from ..errors import EvidenceError
    from ..evidence.nvml import nvml_session

    try:
        with nvml_session() as nv:
            n = nv.count()
            out = []
            for i in indices:
                if not 0 <= int(i) < n:
                    continue
                g = nv.gpu(int(i))
                mem = g.memory()
                if mem is not None:
                    out.append(GpuUse(int(i), float(mem.used_mib), g.running_pids() or []))
            return out
    except EvidenceError:
        return None


# ----------------------------------------------------------------------------- running server


@dataclass(frozen=True)
class ServerDeath:
    """Why a server we started is no longer the server we measure (exited, or its port is someone else's)."""

    arm: str
    pair: str
    pid: int
    reason: str  # "exited", "port taken over", "not listening"
    exit_code: int | None
    signal: str | None
    cause: str
    log_path: str
    log_tail: str

    def message(self) -> str:
        how = (f"exited with code {self.exit_code}" + (f" ({self.signal})" if self.signal else "")
               if self.reason == "exited" else self.reason)
        return (f"server for arm {self.arm} on {self.pair} (pid {self.pid}) {how} while in use; likely cause: "
                f"{self.cause}; log {self.log_path}:\n{self.log_tail}")


@dataclass
class RunningServer:
    """A server proven ready; what fixtures, the load generator and the attestation need."""

    base_url: str
    api_key: str
    model: str
    log_path: Path
    pid: int
    simulated: bool
    arm: str
    pair: tuple[int, ...]
    argv: list[str]
    token: str
    config: ServerConfig
    process: subprocess.Popen[bytes] = field(repr=False)
    ready_s: float = 0.0
    idle: list[GpuUse] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    @property
    def tokenizer_id(self) -> str:
        """What the load generator tokenizes prompts with: the model directory, or the stand-in's words."""
        from .workload import STANDIN_TOKENIZER

        return STANDIN_TOKENIZER if self.simulated else self.config.model

    def alive(self) -> bool:
        """True while the process we started runs (:meth:`death` also checks who holds the port)."""
        return self.process.poll() is None

    def ours(self, pid: int) -> bool:
        """Whether ``pid`` is this server's leader or one of its processes (same session or env marker)."""
        return pid == self.pid or session_of(pid) == self.pid or has_token(pid, self.token)

    def death(self) -> ServerDeath | None:
        """``None`` while the server we started runs and still owns its port; else what happened.

        The campaign asks this between and after reps: a rep measured against a dead,
        restarted or replaced server is not a measurement.
        """
        code = self.process.poll()
        reason = "exited" if code is not None else ""
        if not reason:
            owners = port_owners(self.port)
            if owners == []:
                reason = f"no longer listens on port {self.port}"
            elif owners and not all(self.ours(p) for p in owners):
                strangers = [p for p in owners if not self.ours(p)]
                reason = (f"lost port {self.port} to pid {strangers[0]} ({cmdline(strangers[0])}), "
                          "which is not a process of this server")
        if not reason:
            return None
        text = tail(self.log_path, 200)
        sig = None
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                sig = signal.Signals(-code).name
        return ServerDeath(arm=self.arm, pair=pair_key(self.pair), pid=self.pid, reason=reason, exit_code=code,
                           signal=sig, cause=likely_cause(text, code), log_path=str(self.log_path),
                           log_tail=tail(self.log_path))

    def check_alive(self) -> None:
        """:class:`ServerError` with the :class:`ServerDeath` message when :meth:`death` finds one."""
        dead = self.death()
        if dead is not None:
            raise ServerError(dead.message())

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def attestation(self) -> Attestation:
        """What the log proves about NCCL / all-reduce (parsed by ``serve.attest``)."""
        from .attest import parse_server_log

        return parse_server_log(self.log_text(), str(self.log_path))

    def to_dict(self) -> dict[str, object]:
        return {"base_url": self.base_url, "model": self.model, "log_path": str(self.log_path), "pid": self.pid,
                "simulated": self.simulated, "arm": self.arm, "pair": list(self.pair),
                "argv": [a if a != self.api_key else "<api-key>" for a in self.argv],
                "ready_s": self.ready_s, "notes": list(self.notes)}


def pair_key(pair: Sequence[int]) -> str:
    return "-".join(f"gpu{i}" for i in pair)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, api_key: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, bytes]:
    """Tiny stdlib HTTP client for readiness probes (keeps the launcher free of heavy imports)."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _wait_ready(srv: RunningServer, deadline: float, request_timeout_s: float) -> None:
    where = f"server for arm {srv.arm} on {pair_key(srv.pair)}"
    stage = "waiting for /health"
    last = ""
    while True:
        code = srv.process.poll()
        if code is not None:
            text = tail(srv.log_path, 400)
            raise ServerError(
                f"{where} exited with code {code} before it was ready ({stage}); "
                f"likely cause: {likely_cause(text, code)}; command: {' '.join(srv.argv)}; "
                f"log {srv.log_path}, last lines:\n{tail(srv.log_path)}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            text = tail(srv.log_path, 400)
            raise ServerError(
                f"{where} was not ready within the startup timeout (stage: {stage}; last answer: "
                f"{last or 'none'}); likely cause: {likely_cause(text)}; raise server.startup_timeout_s "
                f"if the model is just slow to load; log {srv.log_path}, last lines:\n{tail(srv.log_path)}")
        try:
            t = min(1.0 if srv.simulated else 3.0, max(0.2, remaining))
            status, body = _http("GET", srv.base_url + "/health", srv.api_key, None, t)
            if status != 200:
                last = f"/health -> HTTP {status}"
                raise ConnectionError(last)
            stage = "waiting for /v1/models"
            status, body = _http("GET", srv.base_url + "/v1/models", srv.api_key, None, t)
            ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])] if status == 200 else []
            if srv.model not in ids:
                last = f"/v1/models -> HTTP {status}, models {ids}"
                if status == 200:
                    raise ServerError(f"{where} serves {ids}, not the configured model {srv.model!r}; "
                                      "check server.model / served_model_name")
                raise ConnectionError(last)
            stage = "waiting for a first completion"
            status, body = _http("POST", srv.base_url + "/v1/completions", srv.api_key,
                                 {"model": srv.model, "prompt": "Hello", "max_tokens": 1, "temperature": 0.0},
                                 min(request_timeout_s, max(1.0, remaining)))
            if status == 200 and json.loads(body).get("choices"):
                prove_identity(srv)
                return
            last = f"completion -> HTTP {status}: {body[:200].decode(errors='replace')}"
            if status >= 400:
                raise ServerError(f"{where} answers /health and /v1/models but its first completion failed: "
                                  f"{last}; log {srv.log_path}, last lines:\n{tail(srv.log_path)}")
        except ServerError:
            raise
        except (OSError, ValueError, AttributeError, http.client.HTTPException) as exc:
            # refused, reset, timeout, half-written JSON, JSON of another shape (not a vLLM
            # answer: something else on the port?): not ready yet, the timeout message says what came.
            # Our own ConnectionError carries the answer as set above; anything else replaces it, so
            # "last answer" is the latest one, not a "connection refused" from the first second.
            last = str(exc) if type(exc) is ConnectionError else f"{type(exc).__name__}: {exc}"
        time.sleep(0.1 if srv.simulated else 1.0)


def prove_identity(srv: RunningServer) -> None:
    """The server that answered is the one we started: our process owns the port, or it holds our secret.

    An unauthenticated server already listening on the port answers /health, /v1/models and
    a completion like ours would; its pid is not ours, and it does not refuse a wrong key.
    The owner from /proc decides when /proc can tell; otherwise the key check does.
    """
    where = f"port {srv.port} for arm {srv.arm} on {pair_key(srv.pair)}"
    owners = port_owners(srv.port)
    strangers = [p for p in owners or [] if not srv.ours(p)]
    status = 0
    if not strangers:
        status, _ = _http("GET", srv.base_url + "/v1/models", "p2p-wrong-" + secrets.token_hex(8), None, 5.0)
    if strangers or (not owners and status != 401):
        who = (f"pid {strangers[0]} ({cmdline(strangers[0])}) is listening there" if strangers
               else f"a process that answers a wrong API key with HTTP {status} is listening there")
        raise ServerError(f"an impostor answers on {where}: {who}, not the server we started (pid {srv.pid}); "
                          f"stop it or pick another port; our server's log {srv.log_path}:\n{tail(srv.log_path)}")
    if not owners:
        srv.notes.append(f"port {srv.port}: /proc does not say which pid listens; identity proven by the API key")
    elif status != 401:
        srv.notes.append(f"the server does not enforce its API key (a wrong key got HTTP {status}); "
                         f"does it read ${API_KEY_ENV}?")


def check_port_free(host: str, port: int) -> None:
    """:class:`ServerError` naming the process (pid, command) that already listens on ``port``."""
    owners = port_owners(port)
    if owners:
        raise ServerError(f"port {port} on {host} is already in use by pid {owners[0]} ({cmdline(owners[0])}); "
                          "a server started there would fail with 'address in use' and that process would be "
                          "measured instead; stop it or leave the port unset (a free one is chosen)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ServerError(f"port {port} on {host} cannot be bound ({exc.strerror or exc}): another process "
                              "(not visible to us) holds it; stop it or leave the port unset") from None


@contextlib.contextmanager
def launch(config: ServerConfig, arm: ArmLike, pair: Sequence[int], rig_env: Mapping[str, str] | None,
           log_path: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int | None = None,
           extra_env: Mapping[str, str] | None = None,
           startup_timeout_s: float | None = None) -> Iterator[RunningServer]:
    """Start the server for ``arm`` on ``pair``, yield it once ready, always tear it down.

    Teardown runs on success, failure and Ctrl-C; it raises :class:`ServerError` if a
    process of this server survives or the pair's GPUs still hold its memory.
    """
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    pair = tuple(int(g) for g in pair)
    token = uuid.uuid4().hex
    api_key = "p2p-" + secrets.token_urlsafe(18)
    port = port or free_port(host)
    check_port_free(host, port)
    arm_vllm_env = arm.vllm_env() if hasattr(arm, "vllm_env") else None  # e.g. symmetric-memory all-reduce
    # the secret travels in the environment (readable only by us and root), never in argv (/proc/PID/cmdline)
    env = subprocess_env(pair, rig_env, config.env, arm.env, arm_vllm_env, extra_env,
                         {TOKEN_ENV: token, API_KEY_ENV: api_key})
    argv = config.argv(list(arm.vllm_flags()), host=host, port=port)
    idle = gpu_usage(pair)
    with open(log, "ab") as fh:
        fh.write(f"# pytest-p2p: launching arm {arm.name} on {pair_key(pair)} (API key in ${API_KEY_ENV}): "
                 f"{' '.join(argv)}\n".encode())
        fh.flush()
        try:
            proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise ServerError(f"cannot start the server for arm {arm.name} on {pair_key(pair)}: {argv[0]!r}: "
                              f"{exc.strerror or exc}; check server.command in the rig file") from None
    _LIVE[proc.pid] = (proc.pid, token)
    srv = RunningServer(base_url=f"http://{host}:{port}", api_key=api_key, model=config.model_name or "",
                        log_path=log, pid=proc.pid, simulated=config.simulated, arm=arm.name, pair=pair,
                        argv=argv, token=token, config=config, process=proc, idle=idle)
    if not srv.model:
        srv.model = _served_name_from_argv(argv)
    t0 = time.monotonic()
    try:
        _wait_ready(srv, t0 + (startup_timeout_s or config.startup_timeout_s), config.request_timeout_s)
        srv.ready_s = time.monotonic() - t0
        yield srv
    finally:
        teardown(srv)


def _served_name_from_argv(argv: Sequence[str]) -> str:
    for i, a in enumerate(argv[:-1]):
        if a == "--served-model-name":
            return argv[i + 1]
    return ""


def teardown(srv: RunningServer) -> None:
    """Stop the server and prove nothing of it is left (processes, then GPU memory)."""
    cfg = srv.config
    left = kill_tree(srv.pid, srv.token, grace_s=cfg.teardown_timeout_s, proc=srv.process)
    _LIVE.pop(srv.pid, None)
    with open(srv.log_path, "ab") as fh:
        fh.write(f"# pytest-p2p: teardown of arm {srv.arm}: exit code {srv.process.returncode}, "
                 f"leftover pids {left or 'none'}\n".encode())
    if left:
        raise ServerError(f"teardown of the server for arm {srv.arm} on {pair_key(srv.pair)} left processes "
                          f"alive after SIGKILL: pids {', '.join(map(str, left))}; kill them before the next "
                          f"run (they may hold GPU memory); log {srv.log_path}")
    check_gpus_released(srv)


def check_gpus_released(srv: RunningServer, wait_s: float = 20.0) -> None:
    """NVML: no compute process on the pair and memory back near its idle level (within tolerance)."""
    if srv.idle is None:
        srv.notes.append("NVML not available: GPU release check skipped"
                         + (" (stand-in on CPU)" if srv.simulated else ""))
        return
    tol = srv.config.idle_memory_tolerance_mib
    idle = {g.index: g for g in srv.idle}
    deadline = time.monotonic() + wait_s
    problems: list[str] = []
    while True:
        now = gpu_usage(srv.pair)
        if now is None:
            srv.notes.append("NVML became unavailable during teardown: GPU release check skipped")
            return
        problems = []
        for g in now:
            base = idle.get(g.index)
            new_pids = [p for p in g.pids if base is None or p not in base.pids]
            if new_pids:
                problems.append(f"gpu{g.index} still runs compute pids {new_pids}")
            if base is not None and g.used_mib > base.used_mib + tol:
                problems.append(f"gpu{g.index} uses {g.used_mib:.0f} MiB, idle was {base.used_mib:.0f} MiB "
                                f"(tolerance {tol} MiB)")
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if problems:
        raise ServerError(f"teardown of the server for arm {srv.arm} on {pair_key(srv.pair)} did not release "
                          f"the GPUs: {'; '.join(problems)} (orphaned vLLM EngineCore/Worker? see vLLM "
                          f"issue #55510; find them with nvidia-smi and kill them); log {srv.log_path}")
