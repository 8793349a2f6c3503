"""The rig file's probe section: sizes, decode sizes, thresholds, uplift, and its errors."""

from __future__ import annotations

import pytest

from pytest_p2p.errors import ConfigError
from pytest_p2p.probes.arms import parse_arms
from pytest_p2p.probes.config import DEFAULT_DECODE_SIZES, ProbeConfig, parse_probe

KiB, MiB = 1024, 1024**2


def test_defaults_cover_4b_to_256mib_and_decode_sizes():
    cfg = parse_probe(None, "rig.yaml", "probe")
    assert cfg == ProbeConfig()
    assert cfg.sizes[0] == 4 and cfg.sizes[-1] == 256 * MiB
    assert {4, 16, 64, 256, 1 * KiB, 64 * MiB, 128 * MiB, 128 * KiB} <= set(cfg.sizes)
    assert set(DEFAULT_DECODE_SIZES) <= set(cfg.sizes)
    assert cfg.sizes == tuple(sorted(set(cfg.sizes)))
    # uncaptured launches behind a gate by default: NCCL's per-op graph nodes cost up to +39 % at 8 KiB
    assert cfg.graph is False and cfg.uplift_sizes == DEFAULT_DECODE_SIZES
    assert (cfg.trials, cfg.alpha) == (10, 0.01)
    assert (cfg.uplift.faster, cfg.uplift.slower, cfg.uplift.min) == ("p2p_on", "p2p_off", 0.05)


def test_decode_sizes_derived_from_model_shape():
    cfg = parse_probe({"decode": {"hidden": 5120, "tp": 2, "batches": [1, 8, 64], "dtype_bytes": 2}}, "r", "probe")
    assert cfg.decode_sizes == (5120, 40960, 327680)  # batch x hidden/tp x 2 bytes
    assert set(cfg.decode_sizes) <= set(cfg.sizes)


def test_explicit_sizes_and_decode_sizes_merge():
    cfg = parse_probe({"sizes": ["8KiB", "1MiB"], "decode_sizes": [4096, "16K"]}, "r", "probe")
    assert cfg.sizes == (4096, 8 * KiB, 16 * KiB, MiB)
    assert cfg.decode_sizes == (4096, 16 * KiB)


def test_thresholds_and_per_arm_overrides():
    cfg = parse_probe({"thresholds": {"busbw_min_gbs": {"128MiB": 200}, "latency_max_us": {"8KiB": 20},
                                      "per_arm": {"p2p_off": {"busbw_min_gbs": {"128MiB": 20}}}}}, "r", "probe")
    assert cfg.thresholds_for("p2p_on").busbw_min_gbs == {128 * MiB: 200.0}
    off = cfg.thresholds_for("p2p_off")
    assert off.busbw_min_gbs == {128 * MiB: 20.0} and off.latency_max_us == {8 * KiB: 20.0}


def test_uplift_and_arms_selection():
    cfg = parse_probe({"uplift": {"faster": "ipc", "slower": "p2p_off", "at": ["8KiB"], "min": "10%"},
                       "arms": ["p2p_on", "ipc"]}, "r", "probe")
    assert cfg.uplift_sizes == (8 * KiB,) and cfg.uplift.min == pytest.approx(0.10)
    arms = parse_arms(["ipc"], "r", "arms")
    assert cfg.select_arms(arms) == ["p2p_on", "ipc"]
    assert ProbeConfig().select_arms(arms) == ["p2p_on", "p2p_off", "ipc"]
    with pytest.raises(ConfigError, match="'ipc' is not defined"):
        cfg.select_arms(parse_arms(None, "r", "arms"))


def test_trials_and_alpha_are_read():
    cfg = parse_probe({"trials": 25, "alpha": 0.05}, "rig.yaml", "probe")
    assert (cfg.trials, cfg.alpha) == (25, 0.05)


@pytest.mark.parametrize(("value", "path", "fragment"), [
    ({"sizes": [6]}, "probe.sizes[0]", "multiple of 4"),
    ({"sizes": ["lots"]}, "probe.sizes[0]", "size like"),
    ({"sizes": []}, "probe.sizes", "at least one"),
    ({"iters": 0}, "probe.iters", "integer 1..100000"),
    ({"graph": "yes"}, "probe.graph", "true or false"),
    ({"decode": {"hidden": 4096}}, "probe.decode", "batches"),
    ({"decode": {"hidden": 1, "batches": [1]}, "decode_sizes": [4]}, "probe.decode", "not both"),
    ({"thresholds": {"busbw_min": {}}}, "probe.thresholds.busbw_min", "did you mean 'busbw_min_gbs'"),
    ({"thresholds": {"latency_max_us": {"8KiB": "fast"}}}, "probe.thresholds.latency_max_us.8KiB", "number"),
    ({"uplift": {"faster": "p2p_on", "slower": "p2p_on"}}, "probe.uplift", "same arm"),
    ({"uplift": {"min": "lots"}}, "probe.uplift.min", "percentage"),
    ({"timeout": 5}, "probe.timeout", "timeout_s"),
    ({"trials": 1}, "probe.trials", "2..1000"),
    ({"alpha": 0.5}, "probe.alpha", "0.0005"),
])
def test_errors_name_the_field(value, path, fragment):
    with pytest.raises(ConfigError) as info:
        parse_probe(value, "rig.yaml", "probe")
    assert info.value.path == path
    assert fragment in str(info.value)
