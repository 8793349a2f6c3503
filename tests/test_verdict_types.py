"""The verdict stage's JSON narrowing (issue 15): typed shapes out, wrong shapes named or tolerated as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import write_run

from pytest_p2p.checks.test_campaign import _messages, _requests_failed
from pytest_p2p.errors import ResultsError, StoreError
from pytest_p2p.results.read import run_record
from pytest_p2p.verdict.compare import IMPROVEMENT, REGRESSION, compare_links
from pytest_p2p.verdict.fingerprint import Fingerprint, build_fingerprint, pair_ident
from pytest_p2p.verdict.store import Store
from pytest_p2p.verdict.store_seed import SeedFingerprint, seed_record
from pytest_p2p.verdict.store_transfer import StoreExport

SEED_DIR = Path(__file__).parent.parent / "fixtures" / "seed_results" / \
    "2026-06-16_5060ti-16gb_2cards_gen3-x4_p2p-sweep-c1-2-4-8"


def test_fingerprint_has_exactly_its_typed_keys(tmp_path):
    fp = build_fingerprint(write_run(tmp_path, "r1", throttled={"p2p_on-c8": [2]}))
    assert set(fp) == Fingerprint.__required_keys__
    assert fp["run_id"] == "r1" and fp["rig"] == "demo-rig" and fp["kind"] == "model"
    link = fp["links"]["0000:09:00.0"]
    assert link["loaded"] == "Gen4 x4" and link["loaded_gen"] == 4 and link["index"] == 1
    assert fp["pair_facts"] == {"topology": "PHB", "nvlinks_between": 0, "p2p_read": "OK", "p2p_write": "OK"}


def test_seed_fingerprint_has_the_same_keys_and_its_source():
    _, fp, _ = seed_record(SEED_DIR)
    assert set(fp) == SeedFingerprint.__required_keys__ == Fingerprint.__required_keys__ | {"source"}


def test_a_gpu_that_is_not_an_object_is_a_results_error(tmp_path):
    run = write_run(tmp_path, "r1")
    doc = json.loads((run / "run.json").read_text())
    doc["pair"]["gpus"][1] = "0000:0A:00.0"
    (run / "run.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="pair.gpus must list the pair's two GPUs"):
        run_record(run)
    with pytest.raises(ResultsError, match="pair.gpus must list the pair's GPUs as objects"):
        pair_ident(doc)
    with pytest.raises(ResultsError, match="is not a PCI bus id"):
        pair_ident({"run_id": "x", "pair": {"gpus": [{"bus_id": 9}]}})
    assert pair_ident({"pair": {"gpus": [{"bus_id": None, "uuid": "GPU-1"}]}}) == "GPU-1"


def test_link_facts_that_are_not_numbers_are_not_judged():
    base = {"links": {"b": {"index": 0, "loaded_gen": 4, "max_gen": "4", "nvlinks_active": None}}}
    cur = {"links": {"b": {"index": 0, "loaded_gen": 3, "max_gen": "5", "nvlinks_active": 2, "max_width": 16}}}
    assert compare_links(base, cur) == [("b.loaded_gen", REGRESSION, "GPU 0 (b) loaded gen 4 -> 3")]
    cur["links"]["b"]["loaded_gen"] = 5
    assert compare_links(base, cur)[0][1] == IMPROVEMENT
    assert compare_links({"links": "none"}, cur) == [] and compare_links({}, {"links": None}) == []


def test_store_rows_read_back_typed_and_a_damaged_row_is_named(tmp_path):
    with Store(tmp_path / "h.db") as st:
        st.accept(st.save_run_dir(write_run(tmp_path, "r1")), "accepted", note="first")
        rec = st.run("r1")
        assert (rec.run_id, rec.rig, rec.kind, rec.baselines) == ("r1", "demo-rig", "model", ("accepted",))
        assert rec.fingerprint["run_id"] == "r1"
        rows = st.metrics("r1")
        assert rows and all(isinstance(r.n, int) and all(isinstance(v, float) for v in r.values) for r in rows)
        assert st.baseline_names() == [("accepted", 1)]
        assert st.baseline_entries()[0][3] == "first"
        exported: StoreExport = st.export()
        assert exported["acceptances"][0]["name"] == "accepted" and exported["runs"][0]["run_id"] == "r1"
        st.db.execute("UPDATE results SET n = 'three'")
        with pytest.raises(StoreError, match="results.n holds 'three', not an integer"):
            st.metrics("r1")


def test_campaign_check_helpers_never_read_a_wrong_shape_as_fine():
    assert _messages(["a", "b"]) == ["a", "b"] and _messages("oops") == ["oops"]
    assert not _requests_failed({"failed": 0, "completed": 10})
    assert not _requests_failed({"completed": 10})
    assert _requests_failed({"failed": 2, "completed": 10})
    assert _requests_failed({"failed": 0, "completed": 0})
    assert _requests_failed({"failed": "2", "completed": 10})
