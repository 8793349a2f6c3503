"""The SIMULATED stand-in server: protocol, NCCL lines per arm, latency model inputs, fault modes at startup."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p.serve import standin

KEY = "test-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = _free_port()
    log = tmp / f"standin-{port}.log"
    out = open(log, "wb")  # noqa: SIM115 - the child writes to it for its whole life
    proc = subprocess.Popen([sys.executable, "-m", "pytest_p2p.serve.standin", "serve", "tiny", "--port", str(port),
                             "--api-key", KEY, "--ttft-ms", "1", "--tpot-ms", "0.5", *args],
                            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port, log
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"stand-in did not start: {log.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    tmp = tmp_path_factory.mktemp("standin")
    proc, port, _ = _start(tmp, "--timestamp-log", str(tmp / "ts.log"))
    yield port, tmp
    proc.terminate()
    proc.wait(10)


def _req(port: int, method: str, path: str, body: dict | None = None, key: str | None = KEY) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = c.getresponse()
    return r.status, r.read()


def _events(raw: bytes) -> list[str]:
    return [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]


def test_health_models_auth_metrics(server: tuple[int, Path]) -> None:
    port, _ = server
    assert _req(port, "GET", "/health", key=None)[0] == 200
    assert _req(port, "GET", "/v1/models", key=None)[0] == 401
    assert _req(port, "GET", "/v1/models", key="wrong")[0] == 401
    status, body = _req(port, "GET", "/v1/models")
    data = json.loads(body)["data"]
    assert status == 200 and data[0]["id"] == "tiny" and "SIMULATED" in data[0]["owned_by"]
    status, body = _req(port, "GET", "/metrics", key=None)
    assert status == 200 and b"SIMULATED" in body and b"vllm:generation_tokens_total" in body
    assert _req(port, "POST", "/v1/completions", {"model": "other", "prompt": "x"})[0] == 404


def test_completion_stream_usage_and_done(server: tuple[int, Path]) -> None:
    port, tmp = server
    status, raw = _req(port, "POST", "/v1/completions", {
        "model": "tiny", "prompt": "one two three four", "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}})
    events = _events(raw)
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == 5 and tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
        "prompt_tokens": 4, "total_tokens": 9, "completion_tokens": 5}
    lines = (tmp / "ts.log").read_text().splitlines()
    assert len([ln for ln in lines if ln.split()[1:2] and ln.split()[0] == lines[-1].split()[0]]) == 5


def test_continuous_usage_and_chat(server: tuple[int, Path]) -> None:
    port, _ = server
    _, raw = _req(port, "POST", "/v1/completions", {
        "model": "tiny", "prompt": "a b", "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    counts = [json.loads(e)["usage"]["completion_tokens"] for e in _events(raw)[:-1]]
    assert counts == [1, 2, 3, 3]
    _, raw = _req(port, "POST", "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2,
        "stream": True})
    first = json.loads(_events(raw)[0])["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"]
    status, body = _req(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x y", "max_tokens": 2})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2


def test_bad_requests_get_a_400_and_the_connection_survives(server: tuple[int, Path]) -> None:
    port, _ = server
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    for body in ([1, 2], {"model": "tiny", "prompt": "x", "max_tokens": "many"}, {"model": "tiny", "max_tokens": -3}):
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)  # one keep-alive connection
        r = c.getresponse()
        assert (r.status, json.loads(r.read())["object"]) == (400, "error")  # was a dropped connection


@pytest.mark.parametrize(("env", "transport"), [
    ({}, "P2P/CUMEM"),
    ({"NCCL_P2P_DISABLE": "1"}, "SHM/direct/direct"),
    ({"NCCL_CUMEM_ENABLE": "0"}, "P2P/IPC"),
    ({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, "NET/Socket"),
])
def test_transport_for_env(env: dict[str, str], transport: str) -> None:
    assert standin.transport_for_env(env) == transport


def test_nccl_lines_real_format(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    standin.print_nccl_lines(2, "SHM/direct/direct", custom_ar=True)
    out = capsys.readouterr().out
    assert re.search(r"^\S+:\d+:\d+ \[0\] NCCL INFO NCCL version 2\.28\.9\+cuda13\.0$", out, re.M)
    assert re.search(r"NCCL INFO Channel 00 : 0\[0\] -> 1\[1\] via SHM/direct/direct$", out, re.M)
    assert "NCCL_P2P_DISABLE set by environment to 1\n" in out
    assert "vLLM is using nccl==2.28.9" in out
    assert "Using ['PYNCCL'] all-reduce backends" in out  # no custom AR without P2P
    standin.print_nccl_lines(2, "P2P/CUMEM", custom_ar=True)
    out = capsys.readouterr().out
    assert re.search(r"Channel 03/0 : 1\[1\] -> 0\[0\] via P2P/CUMEM$", out, re.M)
    assert "Using ['CUSTOM', 'PYNCCL'] all-reduce backends" in out


def test_output_parses_as_attestation(capsys: pytest.CaptureFixture[str]) -> None:
    attest = pytest.importorskip("pytest_p2p.probes.vllm_log")
    standin.print_nccl_lines(2, "SHM/direct/direct", custom_ar=False)
    att = attest.parse_server_log(capsys.readouterr().out, "standin")
    assert "SHM" in json.dumps(att.to_dict())


def test_banner_and_latency_model_in_log(server: tuple[int, Path], tmp_path: Path) -> None:
    proc, _, log = _start(tmp_path, "--tensor-parallel-size", "2", "--max-num-seqs", "32",
                          env={"NCCL_P2P_DISABLE": "1", "PYTEST_P2P_STANDIN_SLOWDOWN": "1.10"})
    proc.terminate()
    proc.wait(10)
    text = log.read_text()
    assert text.startswith(standin.BANNER)
    assert "transport=SHM/direct/direct factor=1.221" in text  # 1.10 link slowdown x 1.11 P2P-off penalty
    assert "'--max-num-seqs', '32'" in text  # unknown vLLM flags are accepted and shown
    from pytest_p2p.probes.vllm_log import parse_server_log

    att = parse_server_log(text, str(log)).to_dict()
    assert att["vllm_version"] == "SIMULATED" and att["tensor_parallel_size"] == 2
    assert att["disable_custom_all_reduce"] is False


@pytest.mark.parametrize(("kind", "message"), [
    ("oom", "CUDA out of memory"), ("nccl", "NCCL error"), ("model", "config.json"),
    ("port", "address already in use")])
def test_fail_start(kind: str, message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pytest_p2p.serve.standin", "m", "--fault", f"fail-start={kind}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and message in r.stdout and "SIMULATED" in r.stdout


def test_unknown_fault_and_busy_port() -> None:
    r = subprocess.run([sys.executable, "-m", "pytest_p2p.serve.standin", "m", "--fault", "explode"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown --fault" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "pytest_p2p.serve.standin", "m", "--port", str(port)],
                           capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "address already in use" in r.stdout


def _stream(port: int, rid: str, tokens: int, out: dict[str, int], close_after: int | None = None) -> None:
    """One streamed completion; ``close_after``: hang up after that many bytes (a client gone mid-stream)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "a b", "max_tokens": tokens,
                                                         "stream": True}),
              headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}", "x-request-id": rid})
    r = c.getresponse()
    raw = r.read(close_after) if close_after else r.read()
    c.close()
    out[rid] = len(_events(raw)) - (0 if close_after else 1)


def test_lockstep_streams_share_one_step_clock(tmp_path: Path) -> None:
    """With --lockstep, a stream that started mid-step gets its tokens in the same bursts as the others.

    Per-stream timers with 30 % jitter drift apart within a few tokens; a shared step
    clock keeps every stream's k-th send within the same loop pass. A stream whose client
    hangs up mid-way must not stop the clock for the rest. Judged on the step number the
    stand-in logs with each send, not on how close two send times are (a loaded box may
    preempt the stand-in inside one burst or delay a step: neither changes a step number).
    """
    import threading

    log = tmp_path / "ts.log"
    proc, port, _ = _start(tmp_path, "--tpot-ms", "25", "--jitter", "0.3", "--lockstep", "--timestamp-log", str(log))
    try:
        got: dict[str, int] = {}
        runs = [threading.Thread(target=_stream, args=(port, "a", 40, got)),
                threading.Thread(target=_stream, args=(port, "gone", 12, got, 300)),
                threading.Thread(target=_stream, args=(port, "b", 8, got))]
        for i, t in enumerate(runs):
            t.start()
            time.sleep(0.04 if i == 1 else 0.0)  # b starts mid-step, 40 ms after a
        for t in runs:
            t.join(60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert got["a"] == 40 and got["b"] == 8
    sends: dict[str, list[tuple[float, int]]] = {}
    for line in log.read_text().splitlines():
        rid, _, t, step = line.split()
        sends.setdefault(rid, []).append((float(t), int(step)))
    assert len(sends["a"]) == 40 and len(sends["b"]) == 8
    assert "gone" not in sends  # its stream ended early: it logs nothing, and a and b went on
    a_steps, b_steps = [s for _, s in sends["a"]], [s for _, s in sends["b"]]
    # one token a step, none skipped, for each stream
    assert a_steps == list(range(a_steps[0], a_steps[0] + 40)) and b_steps == list(range(b_steps[0], b_steps[0] + 8))
    assert set(b_steps) <= set(a_steps), (a_steps, b_steps)  # each of b's tokens went out with one of a's
    # one clock for both: in the order they went out (one process, one perf_counter), steps never go back
    in_order = [s for _, s in sorted(sends["a"] + sends["b"])]
    assert in_order == sorted(in_order), in_order
