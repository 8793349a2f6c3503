"""Pin the narrowing that replaced ``Any`` in the campaign and serve configs, telemetry/energy, the uplift
rule and the load generator's split (issue 15): the same values, defaults and errors as before."""

from __future__ import annotations

import pytest

from pytest_p2p.campaign.config import CampaignConfig, parse_campaign
from pytest_p2p.campaign.energy import energy_metrics, window_energy
from pytest_p2p.errors import ConfigError
from pytest_p2p.serve.config import parse_server
from pytest_p2p.stats.summary import paired_uplift, summarize
from pytest_p2p.stats.uplift_rule import UpliftRule, judge


def test_campaign_null_keeps_the_default_only_where_the_key_allows_it() -> None:
    nullable = ("input_len", "output_len", "max_reps", "scenario_timeout_s", "request_timeout_s", "max_time_s",
                "uplift_metric", "uplift_direction", "min_uplift")
    cfg = parse_campaign({k: None for k in nullable}, "rig.yaml")
    default = CampaignConfig()
    for key in nullable:
        if key != "min_uplift":
            assert getattr(cfg, key) == getattr(default, key), key
    assert cfg.min_uplift_raw is None and cfg.explicit == frozenset(nullable)
    for key in ("reps", "seed", "cooldown_s", "telemetry_hz", "smoke", "schedule", "kind", "arms"):
        with pytest.raises(ConfigError, match=key):
            parse_campaign({key: None}, "rig.yaml")


def test_campaign_keys_are_checked_in_the_old_order() -> None:
    bad = {"uplift_rule": "nope", "telemetry_hz": 99, "reps": 0, "sizes": [], "kind": "x"}
    for key in ("kind", "sizes", "reps", "telemetry_hz", "uplift_rule"):
        with pytest.raises(ConfigError, match=f"campaign.{key}"):
            parse_campaign(bad, "rig.yaml")
        del bad[key]
    cfg = parse_campaign({"concurrency": 4, "min_uplift": "7%", "input_len": 16}, "rig.yaml")
    assert cfg.concurrency == (4,) and cfg.min_uplift_raw == "7%" and cfg.input_len == 16
    assert cfg.uplift_rule_for("model").default == pytest.approx(0.07)


def test_server_command_string_or_list_and_scalar_args() -> None:
    s = parse_server({"model": "m", "command": "python -m x", "args": {"max-model-len": 2048, "enforce-eager": True,
                                                                        "skip": False, "list": [1, "a"]}}, "rig.yaml")
    assert s.command == ("python", "-m", "x")
    assert s.argv(host="h", port=1)[1:] == ["-m", "x", "m", "--max-model-len", "2048", "--enforce-eager", "--list",
                                            "1", "a", "--host", "h", "--port", "1"]
    assert parse_server({"command": ["vllm", 7]}, "rig.yaml").command == ("vllm", "7")
    with pytest.raises(ConfigError, match=r"server.args.x: expected a scalar or list"):
        parse_server({"args": {"x": {"a": 1}}}, "rig.yaml")


def test_judge_reads_ratios_as_float_did() -> None:
    rule = UpliftRule(default=0.05)
    kw = {"metric": "m", "faster_arm": "a", "slower_arm": "b"}
    assert judge({}, "c1", rule, **kw).outcome == "inconclusive"
    assert judge({"ratios": None}, "c1", rule, **kw).n == 0
    assert judge({"ratios": ["1.2", 1.25, 1.3]}, "c1", rule, **kw).n == 3
    with pytest.raises(TypeError, match="not 'NoneType'"):
        judge({"ratios": [1.2, None]}, "c1", rule, **kw)
    with pytest.raises(TypeError, match="not iterable"):
        judge({"ratios": 5}, "c1", rule, **kw)


def test_energy_reads_cells_as_before() -> None:
    def row(t: float, mj: int | None, w: float | None = 100.0, idx: object = 0) -> dict[str, object]:
        return {"wall_epoch": t, "index": idx, "power.draw": w, "energy_mj": mj, "simulated": ""}

    # rows out of order are sorted by time; a row without an int index is left out
    e = window_energy([row(0.0, 1000)], [row(2.0, 3000)], [row(2.0, None), row(0.0, None), row(1.0, None, idx="0")],
                      output_tokens=4)
    assert e["joules"] == {"0": 2.0} and e["window_s"] == 2.0 and e["tokens_per_joule"] == 2.0
    # a missing counter at one end: sampled power is integrated instead
    e = window_energy([row(0.0, None)], [row(2.0, 3000)], [row(0.0, None), row(2.0, None, 300.0)])
    assert e["joules"] == {"0": 400.0}
    assert energy_metrics({"avg_watts": 3, "tokens_per_joule": "2", "joules_per_token": None}) == {"avg_watts": 3.0}


def test_stats_typed_results_keep_their_keys() -> None:
    assert summarize([]) == {"mean": None, "std": None, "median": None, "ci95": None, "n": 0, "values": []}
    assert set(summarize([1.0, 2.0])) == {"mean", "std", "median", "ci95", "n", "values"}
    assert set(paired_uplift([1.0], [None])) == {"estimate", "ci95", "n", "ratios", "kind"}


def test_loadgen_still_exports_every_name_others_import() -> None:
    from pytest_p2p.serve import loadclients, loadgen

    for name in ("run_load", "run_load_async", "generate_load", "make_spec", "LoadSpec", "process_cap",
                 "free_cores", "ClientPlanner", "PLANNER"):
        assert hasattr(loadgen, name), name
    assert loadgen.process_cap is loadclients.process_cap and loadgen.free_cores is loadclients.free_cores
    assert loadgen.PLANNER is loadclients.PLANNER
    assert loadgen.process_cap(64, cores=2.0) == 1 and loadgen.process_cap(64, cores=16.0) == 8
