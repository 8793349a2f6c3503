"""What a launch overlaps, and what it must not: its prompts are made while its servers start; its servers'
warm-ups run one after the other, before its first window (issue 24).

Why: on 2x H200 (2026-11-27) a window pair's prompts took 0.3-0.6 s to make, between windows, while a launch
leaves the CPUs free for 17-20 s. Warm-ups made at once, tried the next night, crawled: two servers under load on
one pair at once each made a tenth of their output.

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


def _watch_load(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, str, str]], list[int]]:
    """Spy on every run of load: ``(kind, server, point)`` in the order they began (``warm``: a warm-up, which
    alone may re-run on more client processes), and the most runs in flight at once."""
    real = loadgen.generate_load
    lock = threading.Lock()
    runs: list[tuple[str, str, str]] = []
    in_flight = [0]
    peak = [0]

    def spy(base_url: str, api_key: str, model: str, spec: Any, *args: Any, **kw: Any) -> Any:
        with lock:
            runs.append(("warm" if spec.reshard else "window", base_url, f"c{spec.concurrency}"))
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            return real(base_url, api_key, model, spec, *args, **kw)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(loadgen, "generate_load", spy)
    return runs, peak


@pytest.mark.parametrize("window_s", [0.2, None])
def test_a_start_s_servers_warm_up_one_after_the_other_before_its_first_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window_s: float | None) -> None:
    """Never two servers under load at once, warm-ups included: two 7B servers warming up together on 2x H200
    made 340-470 tok/s each instead of ~5000 (2026-11-27). And every server of a start is warm at a point before
    the start's first window there (the first windows then wait for servers started ahead, not the warm-ups)."""
    runs, peak = _watch_load(monkeypatch)
    res = _runner(tmp_path, window_s=window_s, starts=3).run()
    assert res.status == "complete", res.errors
    assert peak[0] == 1
    servers = list(dict.fromkeys(url for _, url, _ in runs))
    assert len(servers) >= 6  # 3 starts x 2 arms
    # a start the screen ran again, or a launch set aside and made again, has servers of its own; one set aside
    # before its windows at a point has warm-ups there and no window (a loaded 32-core GPU machine, 2026-11-28)
    made_again = any(" re-run" in n for n in res.notes)
    for a, b in zip(servers[::2], servers[1::2], strict=True):  # the two servers of one start
        for point in ("c1", "c2"):
            mine = [(kind, url) for kind, url, p in runs if url in (a, b) and p == point]
            first_window = next((i for i, (kind, _) in enumerate(mine) if kind == "window"), None)
            if first_window is None:
                assert made_again, (point, mine, res.notes)
                continue
            assert {url for kind, url in mine[:first_window] if kind == "warm"} == {a, b}, (mine, res.notes)


@pytest.mark.parametrize("window_s", [0.2, None])
def test_the_windows_wait_for_the_servers_started_ahead_after_the_warm_ups_but_a_calibrating_one_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window_s: float | None) -> None:
    """A launch's first windows wait until the next launch's servers, started ahead, are held; the warm-ups before
    them need not (nothing of them is measured) and so run beside those servers' Python start-up. But the
    warm-up that sizes the windows (the first launch's, with ``window_s``) measures a rate, undisturbed."""
    from test_start_ahead import STANDIN, _ahead_runner

    from pytest_p2p.campaign import blocks

    events: list[str] = []
    real_settle = blocks._Ahead.settle

    def settle(self: Any, result: Any) -> None:
        events.append("settle" if self.held else "settle (none held)")
        real_settle(self, result)

    runs, _ = _watch_load(monkeypatch)
    seen = [0]
    real = loadgen.generate_load

    def spy(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        events.extend(f"{kind} {point}" for kind, _, point in runs[seen[0]:])
        seen[0] = len(runs)
        return out

    monkeypatch.setattr(blocks._Ahead, "settle", settle)
    monkeypatch.setattr(loadgen, "generate_load", spy)
    res = _ahead_runner(tmp_path, STANDIN, window_s=window_s, starts=2).run()
    assert res.status == "complete", res.errors
    first_window = events.index("window c1")
    launch_1 = events[:first_window]
    assert launch_1.count("warm c1") == 2 and launch_1[-1].startswith("settle"), launch_1
    if window_s is not None:  # the calibrating warm-up after a settle, the other one before the next
        assert launch_1[:2] == ["settle", "warm c1"] and launch_1[2:] == ["warm c1", "settle"], launch_1
    else:
        assert launch_1 == ["warm c1", "warm c1", "settle"], launch_1


def test_sleep_mode_warms_each_server_when_it_is_awake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, peak = _watch_load(monkeypatch)
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
    # the first launch asked its server for the tokenizer: its windows made their own. Not a retry of it: on a
    # loaded GPU machine (14 workers, twenty-first session) its first attempt failed before its c2 windows, and the
    # second, the tokenizer known by then, made them ahead, as it should
    first = {d["seed"] for by_rep in res.rep_data.values() for k, d in by_rep.items()
             if k <= 2 and d["meta"]["attempt"] == 1}
    assert not first & ahead


def test_a_kept_tokenizer_is_asked_strictly(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"  # discard port: nobody answers
    assert discover_tokenizer(url, "k", "m", timeout_s=2) == STANDIN_TOKENIZER  # one run: its requests fail
    with pytest.raises(ServerError, match=r"127\.0\.0\.1:9/v1/models: cannot ask which tokenizer 'm'"):
        discover_tokenizer(url, "k", "m", timeout_s=2, strict=True)
