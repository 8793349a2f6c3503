"""Behaviour pinned where the evidence stage and the rig file lost their ``Any`` (issue 15).

Values that used to be ``Any`` are ``object`` now, narrowed where read; these tests hold the
narrowing to the old runtime behaviour: what was accepted still is, with the same values,
and what raised still raises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_p2p.errors import ConfigError, SnapshotError
from pytest_p2p.evidence import live, nvml
from pytest_p2p.evidence.expect import Expectations
from pytest_p2p.evidence.resolve import Selector
from pytest_p2p.evidence.snapshot import bundled_demo, envelope, evidence_from_envelope, load_snapshot
from pytest_p2p.validate import integer, number, sequence, size

SNAPS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"


def demo_envelope() -> dict:
    return json.loads(bundled_demo().read_text(encoding="utf-8"))


def test_envelope_round_trip_is_exact():
    ev = load_snapshot(bundled_demo())
    again = evidence_from_envelope(envelope(ev), "again")
    assert again == ev


def test_a_null_uuid_and_a_missing_mig_mode_read_back_as_before():
    data = demo_envelope()
    gpu = data["evidence"]["gpus"][0]
    gpu["uuid"] = None
    gpu.pop("mig_mode", None)
    ev = evidence_from_envelope(data, "hand-written")
    assert ev.gpus[0].uuid is None and ev.gpus[0].mig_mode is None


def test_a_bool_index_and_a_reversed_pair_are_still_refused():
    data = demo_envelope()
    data["evidence"]["gpus"][0]["index"] = True
    with pytest.raises(SnapshotError, match=r"evidence.gpus\[0\].index: expected an integer, got True"):
        evidence_from_envelope(data, "s")
    data = demo_envelope()
    pair = data["evidence"]["pairs"][0]
    pair["a"], pair["b"] = pair["b"], pair["a"]
    with pytest.raises(SnapshotError, match=r"expected each pair once with a < b, got a=1, b=0"):
        evidence_from_envelope(data, "s")


@dataclass
class PlainRig:
    """Not ``pytest_p2p.plugin.rig.Rig``: resolution reads a rig only through the RigSpec protocol."""

    name: str = "plain"
    source: str = "<plain>"
    gpus: list[Selector] | None = None
    pairs: str | list[tuple[Selector, Selector]] = "all"
    expect: Expectations = field(default_factory=Expectations)
    gpu_expect: dict[Selector, Expectations] = field(default_factory=dict)
    pair_expect: dict[tuple[Selector, Selector], Expectations] = field(default_factory=dict)
    auto: bool = False


def test_resolve_takes_any_rig_spec_and_rig_re_exports_it():
    from pytest_p2p.evidence.resolve import resolve
    from pytest_p2p.plugin import rig

    assert rig.resolve is resolve
    ev = load_snapshot(SNAPS / "5060ti-2x-gen3x4.snapshot.json")
    got = resolve(PlainRig(expect=Expectations(topology="PHB")), ev, use_env=False)
    assert got.rig_name == "plain" and got.pairs and all(e.topology == "PHB" for e in got.pair_expect.values())


def test_raw_nvml_codes_convert_as_int_did():
    assert live._code(6) == 6 and live._code("3") == 3 and live._code(2.9) == 2
    with pytest.raises(TypeError):
        live._code(object())
    assert live._count(None) is None and live._count(7) == 7


def test_nvml_get_passes_arguments_and_hides_failures():
    assert nvml.nvml_get(int, "12", base=16) == 18
    assert nvml.nvml_get(int, "zz") is None
    with pytest.raises(AttributeError):
        nvml.struct_field(object(), "busId")


def test_validators_accept_and_refuse_what_they_did():
    assert integer(3, "r", "p", 1, 6) == 3
    for bad in (True, 2.0, "3", 7):
        with pytest.raises(ConfigError):
            integer(bad, "r", "p", 1, 6)
    assert number(2, "r", "p", 0) == 2.0 and number(0.5, "r", "p") == 0.5
    for bad in (math.nan, 1 << 1001, False, -1):
        with pytest.raises(ConfigError):
            number(bad, "r", "p", 0)
    assert sequence((1, "a"), "r", "p") == [1, "a"]
    assert size("8KiB", "r", "p") == 8192
    for bad in ([8], 1.5, -1):
        with pytest.raises(ConfigError):
            size(bad, "r", "p")
