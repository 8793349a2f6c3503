"""What a launch overlaps: its servers' warm-ups, one another; its prompts, its servers' start (issue 24).

Why: on 2x H200 (2026-11-27) a night of 8 starts spent ~5 s a start warming the arms' servers one after the
other and ~2 s making prompts between windows, beside 65 s of windows: time a nightly slot pays for nothing
measured. Warm-ups are excluded from every measurement, so they may share the pair, except the one that sizes
the point's windows (it must measure one server alone); prompts need only the CPUs, which a launch leaves free.

Through the real path: resident stand-in servers started by ``serve.server.launch``, the campaign runner.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.errors import ServerError
from pytest_p2p.serve import loadgen
from pytest_p2p.serve.workload import STANDIN_TOKENIZER, discover_tokenizer


def test_a_start_s_servers_warm_up_at_once_after_the_calibrating_warm_up_ran_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each later start's two warm-ups at a point must be in flight together: each waits at a barrier of two,
    which breaks (and fails the campaign) when they run one after the other. A point's first warm-up sizes
    its windows (``window_s``) and must have the pair to itself."""
    real = loadgen.generate_load
    lock = threading.Lock()
    together = threading.Barrier(2, timeout=60)
    servers: list[str] = []  # in the order their first warm-up came
    in_flight: list[str] = []
    alone: list[tuple[int, str]] = []  # (concurrency, what else was warming) for start 1's warm-ups

    def spy(base_url: str, api_key: str, model: str, spec: Any, *args: Any) -> Any:
        if not spec.reshard:  # a window (the warm-up alone may re-run on more client processes)
            return real(base_url, api_key, model, spec, *args)
        with lock:
            if base_url not in servers:
                servers.append(base_url)
            first_start = servers.index(base_url) < 2
            others = ",".join(in_flight)
            in_flight.append(base_url)
        try:
            if first_start:
                alone.append((spec.concurrency, others))
            else:
                together.wait()  # BrokenBarrierError unless the start's other server warms up now too
            return real(base_url, api_key, model, spec, *args)
        finally:
            with lock:
                in_flight.remove(base_url)

    monkeypatch.setattr(loadgen, "generate_load", spy)
    res = _runner(tmp_path, window_s=0.2, starts=3).run()
    assert res.status == "complete", res.errors
    assert len(servers) >= 6  # 3 starts x 2 arms
    assert sorted(c for c, _ in alone) == [1, 1, 2, 2]  # start 1: each server once per point ...
    assert all(others == "" for _, others in alone), alone  # ... with nothing else warming beside it


def test_without_a_time_budget_the_first_start_warms_its_servers_at_once_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = loadgen.generate_load
    together = threading.Barrier(2, timeout=60)

    def spy(base_url: str, api_key: str, model: str, spec: Any, *args: Any) -> Any:
        if spec.reshard:
            together.wait()
        return real(base_url, api_key, model, spec, *args)

    monkeypatch.setattr(loadgen, "generate_load", spy)
    res = _runner(tmp_path, starts=2).run()  # windows of so many prompts: nothing to calibrate
    assert res.status == "complete", res.errors


def test_sleep_mode_warms_each_server_when_it_is_awake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = loadgen.generate_load
    in_flight = [0]
    peak = [0]
    lock = threading.Lock()

    def spy(base_url: str, api_key: str, model: str, spec: Any, *args: Any) -> Any:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            return real(base_url, api_key, model, spec, *args)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(loadgen, "generate_load", spy)
    res = _runner(tmp_path, residency="sleep", starts=2).run()
    assert res.status == "complete", res.errors
    assert peak[0] == 1  # the idle arm's server sleeps: it cannot be warmed beside the awake one


def test_a_launch_s_prompts_are_made_while_its_servers_start(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """From the second launch on (the tokenizer is known then), every warm-up's and window's prompts were made
    by the launch's own thread, before any of them ran, each once."""
    real = loadgen.token_prompts
    made: list[tuple[int, str]] = []  # (seed, thread)

    def spy(tok: Any, n: int, input_len: Any, seed: int, **kw: Any) -> list[str]:
        made.append((seed, threading.current_thread().name))
        return real(tok, n, input_len, seed, **kw)

    monkeypatch.setattr(loadgen, "token_prompts", spy)
    monkeypatch.setattr(loadgen, "_PROMPTS", type(loadgen._PROMPTS)())  # none left from another test
    res = _runner(tmp_path, starts=3).run()
    assert res.status == "complete", res.errors
    seeds = [s for s, _ in made]
    assert len(seeds) == len(set(seeds)), made  # no run's prompts made twice
    ahead = {s for s, name in made if name == "p2p-prompts-ahead"}
    # starts 2 and 3, each window's first sending (a window measured again, after the screen, draws fresh prompts)
    later = {d["seed"] for by_rep in res.rep_data.values() for k, d in by_rep.items()
             if k > 2 and d["seed"] % 1_000_000 < 100_000}
    assert later and later <= ahead, (sorted(later - ahead), made)
    first = {d["seed"] for by_rep in res.rep_data.values() for k, d in by_rep.items() if k <= 2}
    assert not first & ahead  # the first launch asked its server for the tokenizer: its windows made their own


def test_a_kept_tokenizer_is_asked_strictly(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"  # discard port: nobody answers
    assert discover_tokenizer(url, "k", "m", timeout_s=2) == STANDIN_TOKENIZER  # one run: its requests fail
    with pytest.raises(ServerError, match=r"127\.0\.0\.1:9/v1/models: cannot ask which tokenizer 'm'"):
        discover_tokenizer(url, "k", "m", timeout_s=2, strict=True)
