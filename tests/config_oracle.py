"""The recorded oracle of rig parsing: what the hand-written validators (before the declarative schema)
made of every bundled rig, every rig the test suite parses, and random ``campaign:`` sections.

Why recorded: the schema replaced ~1,700 lines of field-by-field validators, and "behaviour unchanged
for valid input" is only a claim until the old code's answers sit beside the new code's. The files
under ``tests/data/config_oracle/`` were written by ``python tests/config_oracle.py`` on main before
the schema landed (rig inputs captured from a full test-suite run); tests/test_config_schema.py
replays them. Configs are compared as a normal form (types named, tuples and sets kept apart from
lists, non-finite floats spelled), errors as their full message.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from collections.abc import Mapping
from pathlib import Path

from pytest_p2p.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "config_oracle"
SOURCE = "rig.yaml"

NormalForm = object


def normal(obj: object) -> NormalForm:
    """A JSON-able normal form of a parsed config that keeps every difference a caller could see."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__,
                **{f.name: normal(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, Mapping):
        items = [[normal(k), normal(v)] for k, v in obj.items()]
        return {"__map__": type(obj).__name__, "items": items}
    if isinstance(obj, tuple):
        return {"__tuple__": [normal(x) for x in obj]}
    if isinstance(obj, list):
        return [normal(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return {"__set__": sorted(json.dumps(normal(x), sort_keys=True) for x in obj)}
    return {"__repr__": repr(obj)}


def outcome(parse: object, *args: object) -> NormalForm:
    """``{"ok": normal form}`` or ``{"error": message}`` of ``parse(*args)``."""
    assert callable(parse)
    try:
        return {"ok": normal(parse(*args))}
    except ConfigError as exc:
        return {"error": str(exc)}


def rooted(got: NormalForm) -> NormalForm:
    """``got`` with this checkout's path spelled ``<root>`` (a rig's source is the path it was loaded from)."""
    return json.loads(json.dumps(got).replace(str(ROOT), "<root>"))


# ---------------------------------------------------------------------------------------- campaign sections
#: per key: values that are valid, invalid, null, of the wrong type and at the edges of the ranges
POOL: dict[str, list[object]] = {
    "kind": ["auto", "model", "probe", "bogus", 1, None, ""],
    "arms": [["p2p_on", "p2p_off"], ["p2p_on"], ["ipc", "socket"], [], ["a", "a"], "p2p_on", [1], None, [""]],
    "concurrency": [[1, 2], 4, [], [0], [1, 1], [4096], [4097], "8", [1.5], None, True, [8, 2]],
    "sizes": [["8KiB"], ["1MiB", 4096], [], ["0B"], ["17GiB"], "8KiB", None, [-1], ["16GiB"], ["8 KiB", "8KiB"]],
    "reps": [1, 2, 3, 4, 1000, 1001, 0, -1, 1e8, "3", None, True, 2.0],
    "schedule": ["interleaved", "abba", "random", "ABBA", None, 3],
    "seed": [0, 7, 2**32 - 1, 2**32, -1, None, "1", 1.0],
    "smoke": [True, False, None, "yes", 1],
    "warmup": [0, 4, 100_000, 100_001, -1, None, 2.5],
    "prompts_per_concurrency": [1, 8, 0, 100_001, None, "8"],
    "input_len": [None, 1, 128, 0, 1_000_001, "x", 1e3],
    "output_len": [None, 64, 1_000_000, 0, False],
    "cooldown_s": [0, 5, 2.5, 86_400, 86_401, -1, None, float("nan"), float("inf"), "5"],
    "idle_baseline_s": [0, 2, 1e9, None],
    "vram_free_timeout_s": [120, 0.5, -0.1, None],
    "vram_free_mib": [0, 2048, 10**7, 10**7 + 1, 1.5, None],
    "scenario_timeout_s": [None, 900, 0.001, 0.0, 604_800, 604_801, "900"],
    "telemetry_hz": [1, 2, 10, 0.5, 11, None, True],
    "exclude_throttled": [True, False, None, 0],
    "min_uplift": [None, "5%", 0.05, 8, {"default": "5%", 8: "8%"}, {"default": "5%", "s8KiB": "3%"},
                   {"c8": "2%"}, "five", {"default": "x"}, [1], {"bogus": "1%"}, {16: 0.1}],
    "uplift_rule": ["bounds", "point", "ci_lower", "mean", None, 1],
    "uplift_metric": [None, "output_throughput", "time_us", "mean_ttft_ms", "no_such_metric", "", 3],
    "uplift_direction": [None, "higher", "lower", "up", 1],
    "request_timeout_s": [None, 30, 0.0005, 86_400, 86_401, "x"],
    "rep_retries": [0, 2, 10, 11, -1, None],
    "max_reps": [None, 1, 3, 4, 8, 1000, 1001, 0, "8"],
    "max_time_s": [None, 60, 0.0001, 604_800, 1e9, True],
    "residency": ["auto", "resident", "sleep", "restart", "always", None],
    "starts": [1, 3, 100, 101, 0, None, 2.0],
    "windows": [1, 4, 1000, 1001, 0, None],
    "window_s": [None, 0.1, 15, 86_400, 0.05, 86_401, "15"],
    "max_starts": [None, 1, 3, 5, 100, 101, "x"],
    # added after the recording (issue 24, parallel starts): its cases were recorded with the schema, and every
    # config recorded before it got its default, start_mode auto (the old validators had no such key)
    "start_mode": ["auto", "parallel", "sequential", "fast", None, 1],
    # added after the recording too (issue 24, starts made at once), the same way: default 1 everywhere before
    "starts_at_once": [1, 2, 16, 17, 0, None, "2"],
    # and again (issue 24, starts made ahead): default false everywhere before
    "start_ahead": [True, False, None, "yes", 1],
    # and again (issue 24, the warm-up order of resident arms): default windows everywhere before
    "warmup_order": ["windows", "reverse", "sideways", None, 1],
    # and again (issue 24, a precision the estimate must reach): default null everywhere before
    "precision": ["2%", 0.02, "0.1%", None, "80%", "tight", True],
}


def campaign_sections(n: int, valid_alone: set[tuple[str, int]], seed: int = 25) -> list[dict[str, object]]:
    """Every pool value alone, then ``n`` random sections of 1-9 keys (deterministic); a value that is valid
    alone (``(key, index)`` in ``valid_alone``) is drawn 7 times as often, so most sections are valid."""
    out: list[dict[str, object]] = [{}]
    out += [{k: v} for k, vals in POOL.items() for v in vals]
    rng = random.Random(seed)
    keys = list(POOL)
    for _ in range(n):
        section: dict[str, object] = {}
        for k in rng.sample(keys, rng.randint(1, 9)):
            weights = [7 if (k, i) in valid_alone else 1 for i in range(len(POOL[k]))]
            section[k] = POOL[k][rng.choices(range(len(POOL[k])), weights)[0]]
        out.append(section)
    return out


def encode(value: object) -> object:
    """Pool values into JSON (int mapping keys and non-finite floats survive the round trip)."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if isinstance(value, Mapping):
        return {"__map__": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [encode(x) for x in value]
    return value


def decode(value: object) -> object:
    if isinstance(value, dict) and "__float__" in value:
        return float(str(value["__float__"]))
    if isinstance(value, dict) and "__map__" in value:
        pairs = value["__map__"]
        assert isinstance(pairs, list)
        return {decode(k): decode(v) for k, v in pairs}
    if isinstance(value, list):
        return [decode(x) for x in value]
    return value


def record() -> None:  # pragma: no cover - run by hand on the code whose answers are recorded
    from pytest_p2p.campaign.config import parse_campaign
    from pytest_p2p.plugin.rig import load_rig, parse_rig

    DATA.mkdir(parents=True, exist_ok=True)
    files = sorted((ROOT / "fixtures" / "rigs").glob("*.yaml")) + [ROOT / "pytest_p2p" / "demo" / "rig.yaml"]
    bundled = {str(p.relative_to(ROOT)): rooted(outcome(load_rig, p)) for p in files}
    (DATA / "bundled_rigs.json").write_text(json.dumps(bundled, indent=1, sort_keys=True) + "\n")
    captured: dict[str, list[object]] = {}
    for line_file in sorted(Path(sys.argv[1]).glob("*.jsonl")) if len(sys.argv) > 1 else []:
        for line in line_file.read_text().splitlines():
            data, source, name = json.loads(line)["args"]
            captured.setdefault(json.dumps([data, source, name], sort_keys=True), [data, source, name])
    base = outcome(parse_rig, {}, SOURCE, None, "rig")
    rigs = [{"input": [data, source, name], "outcome": compact(outcome(parse_rig, data, source, None, name), base)}
            for data, source, name in captured.values()]
    if rigs:
        (DATA / "suite_rigs.json").write_text(json.dumps({"base": base, "cases": rigs}, sort_keys=True) + "\n")
    valid = {(k, i) for k, vals in POOL.items() for i, v in enumerate(vals)
             if "ok" in outcome(parse_campaign, {k: v}, SOURCE, "campaign")}
    base = outcome(parse_campaign, None, SOURCE, "campaign")
    sections = [{"input": encode(s), "outcome": compact(outcome(parse_campaign, s, SOURCE, "campaign"), base)}
                for s in campaign_sections(1200, valid)]
    (DATA / "campaign_sections.json").write_text(json.dumps({"base": base, "cases": sections},
                                                            sort_keys=True) + "\n")


def compact(got: NormalForm, base: NormalForm) -> NormalForm:
    """An outcome as its difference from ``base`` (dicts of the same keys recursively; anything else whole), so
    the recorded files stay small; :func:`expand` is the inverse."""
    if isinstance(got, dict) and isinstance(base, dict) and got.keys() == base.keys():
        return {"__diff__": {k: compact(v, base[k]) for k, v in got.items() if v != base[k]}}
    return got


def expand(got: NormalForm, base: NormalForm) -> NormalForm:
    if isinstance(got, dict) and "__diff__" in got:
        assert isinstance(base, dict)
        changed = got["__diff__"]
        assert isinstance(changed, dict)
        return {k: expand(changed[k], v) if k in changed else v for k, v in base.items()}
    return got


if __name__ == "__main__":
    record()
