"""vLLM's sleep mode, for two arms that share a pair but do not fit on it together.

Why: a P2P on/off campaign that restarts vLLM for every measurement spends most of its
time starting servers. When both arms' servers fit on the pair they simply stay up
(memory split); when they do not, the idle arm sleeps: ``POST /sleep?level=1`` offloads
its weights to host memory and drops its KV cache, ``POST /wake_up`` brings it back, and
the process, its NCCL communicators and its transport stay what they were at start.

vLLM serves these endpoints only with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``
(the campaign sets both, see :func:`pytest_p2p.campaign.backends.resident_config`); the
stand-in serves them too. Each call is checked through ``GET /is_sleeping``, so a server
that ignored the request is an error here, not a silently wrong window.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..errors import ServerError
from .logs import pair_key
from .ready import http_call

if TYPE_CHECKING:
    from .server import RunningServer

SLEEP_TIMEOUT_S = 300.0  # offloading a large model's weights to host memory takes a while


def _call(srv: RunningServer, method: str, path: str) -> bytes:
    where = f"server for arm {srv.arm} on {pair_key(srv.pair)}"
    try:
        status, body = http_call(method, srv.base_url + path, srv.api_key, None, SLEEP_TIMEOUT_S)
    except OSError as exc:
        raise ServerError(f"{where}: {method} {path} failed: {exc}; log {srv.log_path}") from None
    if status != 200:
        hint = (" (vLLM serves it only with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1)"
                if status == 404 else "")
        raise ServerError(f"{where}: {method} {path} answered HTTP {status}{hint}: "
                          f"{body[:200].decode(errors='replace')}; log {srv.log_path}")
    return body


def is_sleeping(srv: RunningServer) -> bool:
    body = _call(srv, "GET", "/is_sleeping")
    try:
        got = json.loads(body or b"{}")
    except ValueError:
        got = None
    if not isinstance(got, dict) or not isinstance(got.get("is_sleeping"), bool):
        raise ServerError(f"server for arm {srv.arm} on {pair_key(srv.pair)}: GET /is_sleeping answered "
                          f"{body[:200]!r}, not {{\"is_sleeping\": true|false}}")
    return bool(got["is_sleeping"])


def _expect(srv: RunningServer, asleep: bool, what: str) -> None:
    if is_sleeping(srv) is not asleep:
        raise ServerError(f"server for arm {srv.arm} on {pair_key(srv.pair)}: {what} returned, but /is_sleeping "
                          f"says {not asleep}; log {srv.log_path}")


def put_to_sleep(srv: RunningServer, level: int = 1) -> None:
    """Level 1: weights to host memory, KV cache dropped (the GPU memory is free for the other arm)."""
    _call(srv, "POST", f"/sleep?level={level}")
    _expect(srv, True, "POST /sleep")


def wake_up(srv: RunningServer) -> None:
    _call(srv, "POST", "/wake_up")
    _expect(srv, False, "POST /wake_up")
