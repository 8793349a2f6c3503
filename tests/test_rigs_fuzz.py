"""Fuzzing the rig loader and the snapshot loader, seeded from the real files.

Each loader may succeed or raise the project's own error (ConfigError / SnapshotError), nothing
else, and a loaded rig resolved against a loaded snapshot likewise. Mutations start from the
shipped rig files and snapshots: text edits (the typo, the truncated file) and structural
edits (a subtree replaced by a hostile value: huge or non-finite numbers, deep nesting, wrong
types). CI runs a modest number of examples; ``P2P_FUZZ_EXAMPLES=10000`` runs the full fuzz.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_p2p.errors import ConfigError, SnapshotError
from pytest_p2p.evidence.snapshot import evidence_from_envelope, parse_json
from pytest_p2p.plugin.rig import parse_rig, resolve
from pytest_p2p.validate import yaml_document

ROOT = Path(__file__).resolve().parent.parent
RIG_TEXTS = [p.read_text() for p in sorted((ROOT / "fixtures" / "rigs").glob("*.yaml"))] + \
    [(ROOT / "pytest_p2p" / "demo" / "rig.yaml").read_text()]
SNAP_TEXTS = [p.read_text() for p in sorted((ROOT / "fixtures" / "snapshots").glob("*.snapshot.json"))[:6]]
EXAMPLES = int(os.environ.get("P2P_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

hostile_scalars = st.one_of(
    st.integers(), st.integers(min_value=10 ** 30, max_value=10 ** 60), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=30), st.sampled_from(["1e8", "1e308", "inf", "x4", "Gen4", "-1", "",
                                                                     "0000:0A:00.0", "GPU-", "MIG-1", "1-2", "all"]))
values = st.recursive(hostile_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=12), st.integers(0, 3)), inner,
                                                 max_size=4)), max_leaves=12)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, val in obj.items():
            out += _paths(val, (*prefix, k))
    elif isinstance(obj, list):
        for i, val in enumerate(obj[:6]):
            out += _paths(val, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    obj = copy.deepcopy(obj)
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = new
    return obj


@st.composite
def mutated_structure(draw: st.DrawFn, texts: list[str], loads: Any) -> Any:
    base = loads(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(base)
        path = draw(st.sampled_from(paths))
        base = _replace(base, path, draw(values))
    return base


CHUNKS = ["&a ", "*a", "[", "{", ":", "-", "\n", "  ", "9" * 50, "!!python/object:os.system", "1e400", "NaN", "\x00",
          "'", '"', "null", "true", "}", "]"]


@st.composite
def mutated_text(draw: st.DrawFn, texts: list[str]) -> str:
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        chunk = draw(st.sampled_from(CHUNKS) | st.text(max_size=8))
        if op == "insert":
            text = text[:pos] + chunk + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(chunk):]
        elif op == "replace":
            text = text[:pos] + chunk + text[pos + len(chunk):]
        else:
            text = text[:pos]
    return text


CRASH_LOG = os.environ.get("P2P_FUZZ_LOG")  # count crashes instead of stopping at the first (the 10 000 run)


def _guard(fn: Any) -> Any:
    """Run one example; with P2P_FUZZ_LOG set, an unexpected exception is logged and counted, not raised."""
    def run(*args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - anything but the project's errors is the finding
            if not CRASH_LOG:
                raise
            with open(CRASH_LOG, "a", encoding="utf-8") as log:
                log.write(f"{fn.__name__}\t{type(exc).__name__}\t{str(exc)[:200]!r}\n")

    run.__name__ = fn.__name__
    return run


def _evidence():
    return evidence_from_envelope(json.loads(SNAP_TEXTS[0]), "seed")


@FUZZ
@given(mutated_text(RIG_TEXTS))
def test_rig_text_fuzz(text):
    _guard(_test_rig_text_fuzz)(text)


def _test_rig_text_fuzz(text):
    try:
        rig = parse_rig(yaml_document(text, "fuzz.yaml"), source="fuzz.yaml", text=text)
    except ConfigError:
        return
    with contextlib.suppress(ConfigError):
        resolve(rig, _evidence(), use_env=False)


@FUZZ
@given(mutated_structure(RIG_TEXTS, yaml.safe_load))
def test_rig_structure_fuzz(data):
    _guard(_test_rig_structure_fuzz)(data)


def _test_rig_structure_fuzz(data):
    try:
        rig = parse_rig(data, source="fuzz.yaml")
    except ConfigError:
        return
    with contextlib.suppress(ConfigError):
        resolve(rig, _evidence(), use_env=False)


@FUZZ
@given(mutated_text(SNAP_TEXTS))
def test_snapshot_text_fuzz(text):
    _guard(_test_snapshot_text_fuzz)(text)


def _test_snapshot_text_fuzz(text):
    with contextlib.suppress(SnapshotError):
        evidence_from_envelope(parse_json(text, "fuzz.json"), "fuzz.json")


@FUZZ
@given(mutated_structure(SNAP_TEXTS, json.loads))
def test_snapshot_structure_fuzz(data):
    _guard(_test_snapshot_structure_fuzz)(data)


def _test_snapshot_structure_fuzz(data):
    try:
        ev = evidence_from_envelope(data, "fuzz.json")
    except SnapshotError:
        return
    from pytest_p2p.plugin.rig import auto_rig

    with contextlib.suppress(ConfigError):
        resolve(auto_rig(), ev, use_env=False)

