"""Request lengths within a range (``server.load.range_ratio``, bench's ``--random-range-ratio``).

Why a test file of its own: the ranges are what keeps a closed loop's waves from forming (serve/workload.py,
``request_lengths``), and they must never cost the pairing: both arms of a window pair ask the same lengths.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p.errors import ConfigError
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import make_spec, run_load
from pytest_p2p.serve.metrics import RequestRecord
from pytest_p2p.serve.server import RunningServer, launch
from pytest_p2p.serve.workload import WordTokenizer, request_lengths, token_prompts


def test_no_range_gives_every_request_the_asked_lengths() -> None:
    assert request_lengths(5, 128, 64, 0.0, seed=3) == [(128, 64)] * 5


def test_lengths_fill_bench_s_range_and_repeat_for_one_seed() -> None:
    lens = request_lengths(4000, 128, 128, 0.5, seed=11)
    ins, outs = [i for i, _ in lens], [o for _, o in lens]
    assert min(ins) == 64 and max(ins) == 192 and min(outs) == 64 and max(outs) == 192  # floor/ceil, inclusive
    assert abs(sum(outs) / len(outs) - 128) < 3  # uniform: the mean work is the fixed length's
    assert ins != outs  # two draws, not one length for both
    assert lens == request_lengths(4000, 128, 128, 0.5, seed=11)  # the same for both arms of a pair
    assert lens != request_lengths(4000, 128, 128, 0.5, seed=12)


def test_a_short_output_never_ranges_below_one_token() -> None:
    assert min(o for _, o in request_lengths(500, 4, 2, 0.9, seed=0)) == 1
    assert min(i for i, _ in request_lengths(500, 1, 2, 0.9, seed=0)) == 1


@pytest.mark.parametrize("bad", [1.0, -0.1, math.nan])
def test_a_ratio_outside_zero_to_one_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="range_ratio"):
        request_lengths(3, 8, 8, bad, seed=0)
    with pytest.raises(ValueError, match="range_ratio"):
        make_spec(concurrency=1, num_prompts=1, input_len=1, output_len=1, range_ratio=bad).check()


def test_prompts_take_each_request_s_own_length() -> None:
    tok = WordTokenizer()
    lens = [3, 17, 9, 1]
    prompts = token_prompts(tok, 4, lens, seed=2)
    assert [len(tok.encode(p)) for p in prompts] == lens
    with pytest.raises(ValueError, match="input lengths"):
        token_prompts(tok, 4, [3, 4], seed=2)


def test_fixed_lengths_draw_the_prompts_they_always_drew() -> None:
    """A rig without a range must keep its prompts (and so its baselines' work) byte for byte."""
    tok = WordTokenizer()
    assert token_prompts(tok, 6, 12, seed=5) == token_prompts(tok, 6, [12] * 6, seed=5)


def test_the_range_is_a_checked_rig_key_named_in_its_error() -> None:
    base = {"command": ["vllm", "serve"], "model": "m"}
    assert parse_server({**base, "load": {"range_ratio": 0.5}}, "rig.yaml").load.range_ratio == 0.5
    assert parse_server(base, "rig.yaml").load.range_ratio == 0.0
    with pytest.raises(ConfigError,
                       match=r"rig\.yaml: server\.load\.range_ratio: expected a number 0\.\.0\.99, got 1\.5"):
        parse_server({**base, "load": {"range_ratio": 1.5}}, "rig.yaml")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    c = parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "tiny",
                      "args": {"ttft-ms": 1, "tpot-ms": 0.2, "jitter": 0}, "startup_timeout_s": 20,
                      "teardown_timeout_s": 2}, "rig.yaml")
    with launch(c, PRESETS["p2p_on"], (0, 1), None, tmp_path_factory.mktemp("rr") / "server.log") as s:
        yield s


def test_the_server_is_asked_each_request_s_lengths_and_the_result_says_so(srv: RunningServer) -> None:
    records: list[RequestRecord] = []
    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=4, num_prompts=24, input_len=10, output_len=8,
                 warmup=2, seed=9, range_ratio=0.5, records_out=records)
    want = request_lengths(26, 10, 8, 0.5, seed=9)[2:]  # the warm-up takes the first two
    assert r["completed"] == 24 and r["range_ratio"] == 0.5
    assert r["output_lens"] == [o for _, o in want]  # the server's usage: it was asked these
    assert r["input_lens"] == [i for i, _ in want] and r["server_input_tokens"] == sum(i for i, _ in want)
    assert len(set(r["output_lens"])) > 3
    fixed = run_load(srv.base_url, srv.api_key, srv.model, concurrency=4, num_prompts=6, input_len=10, output_len=8,
                     warmup=0, seed=9)
    assert fixed["output_lens"] == [8] * 6 and fixed["range_ratio"] == 0.0


def test_a_campaign_asks_both_arms_of_a_window_pair_the_same_ranged_lengths(tmp_path: Path) -> None:
    import dataclasses
    import json

    from test_campaign_faults import _server

    from pytest_p2p.campaign.backends import ModelBackend
    from pytest_p2p.campaign.config import parse_campaign
    from pytest_p2p.campaign.runner import CampaignRunner
    from pytest_p2p.lease import GpuLease

    server = _server(tmp_path, {})
    server = dataclasses.replace(server, load=dataclasses.replace(server.load, range_ratio=0.5, output_len=8))
    config = parse_campaign({"kind": "model", "concurrency": [2], "starts": 2, "windows": 2, "window_s": None,
                             "smoke": False, "warmup": 0, "prompts_per_concurrency": 6, "cooldown_s": 0,
                             "idle_baseline_s": 0, "telemetry_hz": 10, "min_uplift": "0%"}, "ranged-rig.yaml")
    backend = ModelBackend(server=server, campaign=config, pair=(0, 1), rig_env={})
    res = CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS, backend=backend,
                         results_root=tmp_path / "results", rig_name="ranged", simulated=True,
                         lease=GpuLease(tmp_path / "locks")).run()
    assert res.status == "complete", res.errors

    def reps(arm: str) -> dict[tuple[int, int], list[int]]:
        out = {}
        for p in (res.run_dir / "scenarios" / f"{arm}-c2").glob("run_*.json"):
            rep = json.loads(p.read_text())
            out[(rep["meta"]["start"], rep["meta"]["window"])] = rep["output_lens"]
        return out

    on, off = reps("p2p_on"), reps("p2p_off")
    assert on.keys() == off.keys() and len(on) == 4
    assert all(on[k] == off[k] for k in on)  # the pair's work is equal, request by request
    # every window asks the same lengths (its prompts are its own): windows differ by the server, not the draw
    assert len({tuple(v) for v in on.values()}) == 1 and len({n for v in on.values() for n in v}) > 3
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["server"]["load"]["range_ratio"] == 0.5


def test_the_campaign_records_a_range_in_its_load_shape_and_only_then() -> None:
    from pytest_p2p.campaign.backends import ModelBackend
    from pytest_p2p.campaign.config import parse_campaign

    def shape(load: dict[str, object]) -> dict[str, object]:
        server = parse_server({"command": ["vllm", "serve"], "model": "m", "load": load}, "rig.yaml")
        backend = ModelBackend(server=server, campaign=parse_campaign({"kind": "model"}, "rig.yaml"), pair=(0, 1),
                               rig_env={})
        return dict(backend.load_shape())

    assert "range_ratio" not in shape({})  # fixed lengths: the shape older baselines were saved with
    assert shape({"range_ratio": 0.25})["range_ratio"] == 0.25
