"""The server we measure is the one we started: port owners, impostors, death, one-GPU NVML."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p.errors import ServerError
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.procs import port_owners
from pytest_p2p.serve.server import GpuUse, RunningServer, check_port_free, gpu_usage, prove_identity


class _Open(http.server.BaseHTTPRequestHandler):
    """An unauthenticated OpenAI look-alike: 200 to everything, whatever the key."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b'{"object": "list", "data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Open)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def ours() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _srv(port: int, proc: subprocess.Popen[bytes], tmp_path: Path) -> RunningServer:
    log = tmp_path / "server.log"
    log.write_text("INFO started\n")
    cfg = parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "m"}, "rig.yaml")
    return RunningServer(base_url=f"http://127.0.0.1:{port}", api_key="secret", model="m", log_path=log,
                         pid=proc.pid, simulated=True, arm="p2p_on", pair=(0, 1), argv=[], token="t" * 32,
                         config=cfg, process=proc)


def test_port_owner_is_found(impostor: int) -> None:
    owners = port_owners(impostor)
    assert owners is None or owners == [os.getpid()]  # None: a /proc that does not list sockets


def test_impostor_on_the_port_is_named(impostor: int, ours: subprocess.Popen[bytes], tmp_path: Path) -> None:
    srv = _srv(impostor, ours, tmp_path)
    with pytest.raises(ServerError, match="an impostor answers on port .*not the server we started") as exc:
        prove_identity(srv)
    if port_owners(impostor):
        assert f"pid {os.getpid()} (" in str(exc.value)
    with pytest.raises(ServerError, match=f"already in use by pid {os.getpid()} "):
        check_port_free("127.0.0.1", impostor)


def test_death_reports_takeover_silence_and_exit(impostor: int, ours: subprocess.Popen[bytes],
                                                 tmp_path: Path) -> None:
    srv = _srv(impostor, ours, tmp_path)
    if port_owners(impostor):
        dead = srv.death()
        assert dead is not None and f"lost port {impostor} to pid {os.getpid()}" in dead.reason
        assert dead.exit_code is None and dead.pid == ours.pid
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    quiet = _srv(free, ours, tmp_path)
    if port_owners(free) == []:
        dead = quiet.death()
        assert dead is not None and dead.reason == f"no longer listens on port {free}"
    ours.send_signal(signal.SIGKILL)
    ours.wait()
    dead = quiet.death()
    assert dead is not None and dead.reason == "exited" and dead.signal == "SIGKILL" and dead.exit_code == -9
    assert "killed by signal SIGKILL" in dead.cause and "INFO started" in dead.log_tail
    assert "(pid" in dead.message() and "exited with code -9 (SIGKILL)" in dead.message()


def _one_gpu_pynvml() -> types.ModuleType:
    class NVMLError(Exception):
        pass

    def handle(i: int) -> int:
        if i != 0:
            raise NVMLError("InvalidArgument")
        return 0

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 << 30, used=600 << 20)  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=77)]  # type: ignore[attr-defined]
    return m


def test_gpu_usage_on_a_one_gpu_machine_skips_the_missing_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10: a pair's second index on a one-GPU machine was NVMLError_InvalidArgument."""
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", _one_gpu_pynvml())
    assert gpu_usage((0, 1)) == [GpuUse(0, 600.0, [77])]


def test_gpu_usage_without_nvml_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_P2P_NVML", "off")
    assert gpu_usage((0, 1)) is None


def test_a_chosen_port_taken_before_the_check_is_replaced_a_named_one_is_not(monkeypatch):
    """A free port we chose was taken by an NCCL rank's bootstrap socket before the demo's start 4 could use it
    (4x H100, probes beside the suite): the campaign failed. A port we chose is replaced; the rig's own is not."""
    from pytest_p2p.serve import ready, server

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        busy = taken.getsockname()[1]
        offered = iter([busy, busy])
        monkeypatch.setattr(server, "free_port", lambda host: next(offered, 0) or ready.free_port(host))
        got = server._port("127.0.0.1", None)
        assert got != busy
        with pytest.raises(ServerError, match=f"port {busy} on 127.0.0.1 is already in use"):
            server._port("127.0.0.1", busy)
    finally:
        taken.close()
