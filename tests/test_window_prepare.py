"""A window's clock holds its load only: its prompts are made before it starts, once per window pair.

Why: making 557 prompts of 128 tokens took 0.3 s of the 0.6 s a window spent outside its load (stand-in with a
7B tokenizer; 0.64 s a window on 2x H200): counted as measured load while the GPUs idled, and its energy in the
window's tokens per joule.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import SlotBackend, run_campaign
from test_loadgen import _launch

from pytest_p2p.serve import loadgen
from pytest_p2p.serve.loadgen import generate_load, make_spec, prepare
from pytest_p2p.serve.server import RunningServer


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with _launch(tmp_path_factory.mktemp("prep")) as s:  # type: ignore[attr-defined]
        yield s


def test_a_prepared_run_and_its_pair_s_other_arm_find_their_prompts_made(srv: RunningServer,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    real = loadgen.token_prompts

    def counting(tok: Any, n: int, input_len: Any, seed: int, **kw: Any) -> list[str]:
        made.append(seed)
        return real(tok, n, input_len, seed, **kw)

    monkeypatch.setattr(loadgen, "token_prompts", counting)
    spec = make_spec(concurrency=2, num_prompts=6, input_len=8, output_len=2, warmup=0, seed=424242)
    prepare(srv.base_url, srv.api_key, srv.model, spec)
    assert made == [424242]
    for _ in range(2):  # the window, then the other arm's window of the pair: the same prompts, made once
        res = generate_load(srv.base_url, srv.api_key, srv.model, spec)
        assert res.completed == 6
    assert made == [424242]
    generate_load(srv.base_url, srv.api_key, srv.model, make_spec(**{**spec.__dict__, "seed": 424243}))
    assert made == [424242, 424243]  # another window: its own prompts


def test_only_the_last_few_runs_prompts_are_kept(srv: RunningServer) -> None:
    for seed in range(900, 900 + loadgen.PROMPT_RUNS_KEPT + 3):
        prepare(srv.base_url, srv.api_key, srv.model,
                make_spec(concurrency=1, num_prompts=2, input_len=4, output_len=1, seed=seed))
    assert len(loadgen._PROMPTS) == loadgen.PROMPT_RUNS_KEPT
    assert {k[3] for k in loadgen._PROMPTS} == set(range(900 + 3, 900 + loadgen.PROMPT_RUNS_KEPT + 3))


class _SlowToPrepare(SlotBackend):
    """A window whose preparation takes 0.4 s and whose load takes none."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def prepare(self, handle: Any, point: str, rep: int) -> None:
        self.order.append(f"prepare {handle[0]} {rep}")
        time.sleep(0.4)

    def measure(self, handle: tuple[str, int, int], point: str, rep: int) -> dict[str, Any]:
        self.order.append(f"measure {handle[0]} {rep}")
        v = 110.0 if handle[0] == "p2p_on" else 100.0
        return {"output_throughput": v, "completed": 4, "failed": 0, "total_output_tokens": 40}


def test_the_window_s_clock_starts_after_its_preparation(tmp_path: Path) -> None:
    backend = _SlowToPrepare()
    res = run_campaign(tmp_path, backend, "prep", reps=2)
    assert res.status == "complete", res.errors
    reps = [d for by_rep in res.rep_data.values() for d in by_rep.values()]
    assert len(reps) == 4
    assert all(d["meta"]["window_s"] < 0.3 for d in reps), [d["meta"]["window_s"] for d in reps]
    assert backend.order[:2] == ["prepare p2p_on 1", "measure p2p_on 1"]
