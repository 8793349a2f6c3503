"""Readiness: a port that answers is not yet a server, and a server that answers is not yet ours.

Why each step (see ``serve.server.launch``): ``/health`` 200, ``/v1/models`` lists the
model, one real completion returns a token -- then :func:`prove_identity`: the process
listening on the port is one we started (``/proc``), or, where ``/proc`` cannot tell,
the server refuses a wrong API key (an unauthenticated impostor that was listening on
the port first answers everything). Stdlib HTTP only, so the launcher imports nothing heavy.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import ServerError
from .logs import likely_cause, pair_key, tail
from .procs import cmdline, port_owners

if TYPE_CHECKING:
    from .running import RunningServer

#: vLLM reads its API key from this variable, so the per-launch secret never appears in argv
API_KEY_ENV = "VLLM_API_KEY"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_call(method: str, url: str, api_key: str, body: Mapping[str, object] | None,
              timeout: float) -> tuple[int, bytes]:
    """Tiny stdlib HTTP client for readiness probes and sleep mode (keeps the launcher free of heavy imports)."""
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


def wait_ready(srv: RunningServer, deadline: float, request_timeout_s: float) -> None:
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
            status, body = http_call("GET", srv.base_url + "/health", srv.api_key, None, t)
            if status != 200:
                last = f"/health -> HTTP {status}"
                raise ConnectionError(last)
            stage = "waiting for /v1/models"
            status, body = http_call("GET", srv.base_url + "/v1/models", srv.api_key, None, t)
            ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])] if status == 200 else []
            if srv.model not in ids:
                last = f"/v1/models -> HTTP {status}, models {ids}"
                if status == 200:
                    raise ServerError(f"{where} serves {ids}, not the configured model {srv.model!r}; "
                                      "check server.model / served_model_name")
                raise ConnectionError(last)
            stage = "waiting for a first completion"
            status, body = http_call("POST", srv.base_url + "/v1/completions", srv.api_key,
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
        status, _ = http_call("GET", srv.base_url + "/v1/models", "p2p-wrong-" + secrets.token_hex(8), None, 5.0)
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
