"""Snapshots: round trip, and bad files give one clear error naming file and field."""

from __future__ import annotations

import json

import pytest

from pytest_p2p.errors import SnapshotError
from pytest_p2p.evidence.snapshot import VERSION, load_snapshot, save_snapshot


def test_round_trip(snapshot_h200, tmp_path):
    ev = load_snapshot(snapshot_h200)
    out = save_snapshot(ev, tmp_path / "s.json")
    again = load_snapshot(out)
    assert again.to_dict() | {"origin": ""} == ev.to_dict() | {"origin": ""}
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def _write(tmp_path, data) -> str:
    f = tmp_path / "s.json"
    f.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(f)


def test_future_version_says_upgrade(snapshot_h200, tmp_path):
    data = json.loads(snapshot_h200.read_text())
    data["version"] = VERSION + 1
    with pytest.raises(SnapshotError, match=r"version 2 is newer .* upgrade pytest-p2p"):
        load_snapshot(_write(tmp_path, data))


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d.update(schema="other"), "not a pytest-p2p snapshot"),
    (lambda d: d["evidence"]["gpus"][0].pop("bus_id"), "evidence.gpus[0].bus_id: missing"),
    (lambda d: d["evidence"]["gpus"][1]["pcie"]["idle"].update(gen="5"), "evidence.gpus[1].pcie.idle.gen: expected"),
    (lambda d: d["evidence"]["pairs"][0].update(b=7), "evidence.pairs[0].b: GPU 7 is not among"),
    (lambda d: d["evidence"]["gpus"][0]["nvlinks"][3].update(active="yes"), "nvlinks[3].active"),
    (lambda d: d["evidence"].update(extra=1), "unknown field(s) ['extra']"),
    (lambda d: d["evidence"]["gpus"][1].update(index=0), "evidence.gpus[1].index: GPU 0 appears twice"),
    (lambda d: d["evidence"]["pairs"][0].update(a=1, b=0), "evidence.pairs[0]: expected each pair once with a < b"),
    (lambda d: d["evidence"]["pairs"].append(dict(d["evidence"]["pairs"][0])), "evidence.pairs[1]: expected each"),
])
def test_bad_fields_are_named(snapshot_h200, tmp_path, mutate, fragment):
    data = json.loads(snapshot_h200.read_text())
    mutate(data)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(_write(tmp_path, data), origin="--p2p-snapshot")
    assert fragment in str(info.value)
    assert "(from --p2p-snapshot)" in str(info.value)


def test_not_json_names_line(tmp_path):
    with pytest.raises(SnapshotError, match=r"not valid JSON: line 2, column"):
        load_snapshot(_write(tmp_path, '{"schema":\n  nope}'))


def test_missing_file(tmp_path):
    with pytest.raises(SnapshotError, match="no such snapshot file"):
        load_snapshot(tmp_path / "none.json")
