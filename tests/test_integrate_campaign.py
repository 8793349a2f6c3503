"""Integration requests for the campaign: a rep whose load client saturated is set aside and re-run (never
feeds a verdict), and a rep with no completed request names its top failure reasons, not every request's error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from campaign_fakes import SlotBackend, run_campaign

from pytest_p2p.campaign.aggregate import failure_reasons, is_measurement, not_measured
from pytest_p2p.campaign.config import parse_campaign

SATURATION = "a client process was busy 99% of the window (limit 90%)"


class SaturatingBackend(SlotBackend):
    """p2p_on rep 1's first attempt comes back from a saturated load client (and looks 40 % slower)."""

    def __init__(self, failing: bool = False) -> None:
        super().__init__()
        self.failing = failing

    def measure(self, handle: tuple[str, int, int], point: str, rep: int) -> dict[str, Any]:
        arm, rep, attempt = handle
        if self.failing:
            errs = ["HTTP 500: boom"] * 30 + [f"timeout after {i} s" for i in range(30)]
            return {"output_throughput": 0.0, "completed": 0, "failed": 60, "errors": errs,
                    "error_summary": [{"error": "HTTP 500: boom", "count": 30},
                                      {"error": "timeout after 0 s", "count": 1}]}
        saturated = arm == "p2p_on" and rep == 1 and attempt == 1
        value = 66.0 if saturated else (110.0 if arm == "p2p_on" else 100.0) + rep * 0.1
        return {"output_throughput": value, "completed": 4, "failed": 0, "total_output_tokens": 40,
                "client_saturated": saturated, "client_saturation": SATURATION if saturated else ""}


def _run(tmp_path: Path, backend: SaturatingBackend, **cfg: Any) -> Any:
    return run_campaign(tmp_path, backend, "integrate", **cfg)


def test_saturated_load_client_rep_is_set_aside_and_re_run(tmp_path: Path) -> None:
    backend = SaturatingBackend()
    res = _run(tmp_path, backend)
    assert res.status == "complete" and res.errors == []
    assert backend.slots.count(("p2p_on", 1)) == 2  # re-run on a fresh server
    aside = [a for a in res.set_aside if a.arm == "p2p_on" and a.rep == 1]
    assert len(aside) == 1 and aside[0].cause == f"load client saturated: {SATURATION}"
    thr = res.aggregate("p2p_on", "c1")["metrics"]["output_throughput"]
    assert 66.0 not in thr["values"] and thr["n"] == 3
    scen = res.run_dir / "scenarios" / "p2p_on-c1"
    kept = json.loads((scen / "run_1.try1.failed.json").read_text())
    assert kept["client_saturated"] is True and kept["cause"] == f"load client saturated: {SATURATION}"
    assert json.loads((scen / "run_1.json").read_text())["client_saturated"] is False


def test_saturated_rep_is_never_a_measurement() -> None:
    ok = {"completed": 4, "client_saturated": False}
    assert is_measurement(ok, "model") and not_measured(ok, "model") is None
    bad = {"completed": 4, "client_saturated": True, "client_saturation": SATURATION}
    assert not is_measurement(bad, "model") and not_measured(bad, "model") == f"load client saturated: {SATURATION}"
    assert is_measurement(bad, "probe")  # probes have no load client


def test_no_completed_request_names_the_top_reasons_not_every_error(tmp_path: Path) -> None:
    res = _run(tmp_path, SaturatingBackend(failing=True), reps=1, rep_retries=0)
    assert res.status == "failed" and res.aggregates == {}
    for e in res.errors:
        assert "no request completed (60 failed; 30x HTTP 500: boom; 1x timeout after 0 s)" in e, e
        assert "timeout after 29 s" not in e  # the per-request list is not printed


def test_failure_reasons_counts_an_older_result_without_error_summary() -> None:
    assert failure_reasons({"errors": ["a", "b", "a", ""]}) == "2x a; 1x b"
    assert failure_reasons({"errors": [f"e{i}" for i in range(20)]}).count("x e") == 10
    assert failure_reasons({}) == ""


# ---------------------------------------------------------------- ModelBackend: death and load options


class _FakeServer:
    """What ModelBackend reads of serve's RunningServer; ``death()`` answers what the test sets."""

    def __init__(self, process: Any, log_path: Path) -> None:
        self.process, self.log_path = process, log_path
        self.base_url, self.api_key, self.model, self.tokenizer_id = "http://127.0.0.1:9", "k", "m", "/models/m"
        self.answer: Any = None
        self.calls = 0

    def death(self) -> Any:
        self.calls += 1
        return self.answer


def _backend(load: dict[str, Any]) -> Any:
    import sys

    from pytest_p2p.campaign.backends import ModelBackend
    from pytest_p2p.serve.config import parse_server

    server = parse_server({"command": [sys.executable, "-c", "pass"], "model": "m", "load": load}, "integrate-rig.yaml")
    return ModelBackend(server=server, campaign=parse_campaign({"concurrency": [1]}, "integrate-rig.yaml"),
                        pair=(0, 1), rig_env={})


def test_model_backend_death_uses_the_serve_port_check_rate_limited(tmp_path: Path) -> None:
    import subprocess
    import sys

    from pytest_p2p.campaign.backends import ServerSlot
    from pytest_p2p.campaign.liveness import Identity
    from pytest_p2p.serve.server import ServerDeath

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        srv = _FakeServer(proc, tmp_path / "server.log")
        slot = ServerSlot(srv, Identity.of(proc))  # type: ignore[arg-type]
        backend = _backend({})
        assert backend.death(slot) is None and srv.calls == 1
        srv.answer = ServerDeath(arm="p2p_on", pair="0-1", pid=proc.pid, reason="lost port 9 to pid 4242 (vllm)",
                                 exit_code=None, signal=None, cause="unknown", log_path=str(srv.log_path), log_tail="")
        assert backend.death(slot) is None and srv.calls == 1  # within PORT_CHECK_S: no /proc walk
        slot.port_checked = float("-inf")
        cause = backend.death(slot)
        assert cause is not None and "lost port 9 to pid 4242" in cause and srv.calls == 2
        proc.kill()
        proc.wait()
        cause = backend.death(slot)  # an exited leader is seen at once, with liveness's wording
        assert cause is not None and "died" in cause and srv.calls == 2
    finally:
        proc.kill()
        proc.wait()


def test_model_backend_load_passes_transport_tokenizer_and_client_processes(tmp_path: Path,
                                                                           monkeypatch: Any) -> None:
    import pytest_p2p.serve.loadgen as loadgen
    from pytest_p2p.campaign.backends import ServerSlot
    from pytest_p2p.campaign.liveness import Identity

    seen: list[dict[str, Any]] = []

    class _Done:
        @staticmethod
        def to_dict() -> dict[str, Any]:
            return {"completed": 1}

    def fake_generate_load(base_url: str, api_key: str, model: str, spec: Any, planner: Any = None) -> _Done:
        seen.append(dict(spec.__dict__))
        return _Done()

    import pytest_p2p.serve.workload as workload

    asked: list[str] = []

    def fake_discover(base_url: str, api_key: str, model: str, *, strict: bool = False) -> str:
        asked.append(model)
        assert strict  # a failed question must not put the stand-in's words into a night's prompts
        return "/served/root"

    monkeypatch.setattr(loadgen, "generate_load", fake_generate_load)
    monkeypatch.setattr(workload, "discover_tokenizer", fake_discover)
    srv = _FakeServer(None, tmp_path / "log")
    slot = ServerSlot(srv, Identity(1, None))  # type: ignore[arg-type]
    asking = _backend({"transport": "aiohttp", "client_processes": 3})
    asking.measure(slot, "c2", 1)
    asking.measure(slot, "c2", 2)
    assert len(asked) == 1  # the server is asked once a campaign, not inside every window's clock
    seen.pop()
    _backend({"tokenizer": "/tok/dir"}).measure(slot, "c2", 1)
    assert len(asked) == 1  # the rig's tokenizer: nobody asked
    assert (seen[0]["transport"], seen[0]["tokenizer"], seen[0]["client_processes"]) == ("aiohttp", "/served/root", 3)
    assert (seen[1]["transport"], seen[1]["tokenizer"], seen[1]["client_processes"]) == ("raw", "/tok/dir", 0)
    # a measured rep is one run in its telemetry window; the warm-up, before the window, may be re-run on more
    # client processes so the planner knows the count before the rep
    backend = _backend({})
    backend.warm(slot, "c2")
    backend.measure(slot, "c2", 1)
    assert [kw["reshard"] for kw in seen] == [False, False, True, False]
    assert seen[2]["num_prompts"] == max(backend.campaign.warmup, 2) and seen[3]["num_prompts"] > 0
