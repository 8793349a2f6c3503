"""Schema v3 (issue 24): the store keeps where each value ran, and earlier nights become a start-spread prior.

* a v2 store migrates in place: every row stays, starts and design read NULL;
* a resident run round-trips each value's server start, its rep and the run's design (SQLite and
  PostgreSQL), through export/import too, and an export of v2 still imports;
* ``store_blocks.start_blocks`` pairs arm A and arm B by rep, groups them by start, and skips other
  designs, unfinished and abandoned runs, the other ``simulated`` flag and runs without starts;
* the pytest glue, with a store configured, reads the blocks of a stand-in campaign saved earlier and
  hands ``start_priors`` to the campaign (``stats.nested.start_prior`` stubbed in one test: its minimum of
  nights is its business, not the glue's; the last test runs the real one).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from store_pg import PgServer, pg_fixture, store_target_fixture  # noqa: F401 - fixtures
from synthetic_runs import write_run

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.plugin.session import demo_path
from pytest_p2p.results.write import RunDir
from pytest_p2p.verdict import store_postgres
from pytest_p2p.verdict.store import SCHEMA_VERSION, Store, _v1, _v2
from pytest_p2p.verdict.store_blocks import BlockQuery, elsewhere, start_blocks
from pytest_p2p.verdict.store_design import design_key

CAMPAIGN = {"residency": "resident", "starts": 2, "windows": 2, "window_s": 15.0, "prompts_per_concurrency": 8}
METRIC = "output_throughput"
DESIGN = design_key("model", CAMPAIGN, METRIC, "higher")
IDENT = "0000:09:00.0+0000:0A:00.0"  # synthetic_runs.BUS, as fingerprint.pair_ident writes them


def resident_run(root: Path, run_id: str, on: dict[int, tuple[int, float]], off: dict[int, tuple[int, float]],
                 *, campaign: dict[str, Any] | None = None, status: str = "complete", simulated: bool = False,
                 excluded: dict[str, list[int]] | None = None, started_at: str = "2026-11-20T10:00:00Z",
                 driver: str = "595.71.05", rig_digest: str | None = None, rig_file_digest: str | None = None,
                 gpu_names: tuple[str | None, ...] | None = None) -> Path:
    """A resident campaign at c16: ``{rep: (start, output_throughput)}`` per arm, written by the one writer;
    ``gpu_names`` replaces the pair GPUs' names in run.json (None: that GPU's name left out)."""
    path = write_run(root, run_id, points=("c16",), started_at=started_at, driver=driver)
    rd = RunDir(path)
    if gpu_names is not None:
        pair = json.loads((path / "run.json").read_text())["pair"]
        for g, name in zip(pair["gpus"], gpu_names, strict=True):
            g.pop("name", None)
            if name is not None:
                g["name"] = name
        rd.write_run_meta({"pair": pair})
    for arm, reps in (("p2p_on", on), ("p2p_off", off)):
        for k, (start, value) in reps.items():
            rd.write_rep(arm, "c16", k, {METRIC: value, "mean_ttft_ms": 40.0 + k,
                                         "meta": {"start": start, "window": k, "residency": "resident"}})
        skip = set((excluded or {}).get(arm, []))
        values = [v for k, (_, v) in sorted(reps.items()) if k not in skip]
        rd.write_aggregate(arm, "c16", {"metrics": {METRIC: {"mean": sum(values) / len(values), "n": len(values),
                                                             "values": values}},
                                        "flags": {"excluded_reps": sorted(skip)}})
    rd.write_run_meta({"status": status, "simulated": simulated, "campaign": campaign or CAMPAIGN,
                       "uplift": {"metric": METRIC, "direction": "higher"},
                       **({"rig_digest": rig_digest} if rig_digest else {}),
                       **({"rig_file_digest": rig_file_digest} if rig_file_digest else {})})
    return path


def night(values_on: list[float], values_off: list[float], windows: int = 2) -> tuple[dict[int, tuple[int, float]],
                                                                                       dict[int, tuple[int, float]]]:
    """Reps 1..n, ``windows`` per start."""
    on = {k + 1: (k // windows + 1, v) for k, v in enumerate(values_on)}
    off = {k + 1: (k // windows + 1, v) for k, v in enumerate(values_off)}
    return on, off


def query(**kw: Any) -> BlockQuery:
    base: dict[str, Any] = {"rig": "demo-rig", "pair_ident": IDENT, "kind": "model", "point": "c16",
                            "arm_a": "p2p_on", "arm_b": "p2p_off", "metric": METRIC, "design": DESIGN,
                            "simulated": False}
    return BlockQuery(**{**base, **kw})


# -- migration ---------------------------------------------------------------------------------

V2_RUN = ("old", "demo-rig", "gpu1-gpu2", IDENT, "model", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", 0,
          "complete", None, "{}")
V2_RESULTS = [("old", arm, "c16", METRIC, 3, 1.0, 0.1, 1.0, "[1.0, 1.1, 0.9]") for arm in ("p2p_on", "p2p_off")]


def test_a_v2_sqlite_store_migrates_in_place_keeping_every_row(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    con = sqlite3.connect(db)
    _v1(con)
    _v2(con)
    con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)", V2_RUN)
    con.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?)", V2_RESULTS)
    con.execute("INSERT INTO baselines VALUES ('accepted', 'old', '2026-01-01T00:00:02Z', 'first')")
    con.execute("PRAGMA application_id = 1345474609")
    con.execute("PRAGMA user_version = 2")
    con.commit()
    con.close()
    with Store(db) as st:
        assert st.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        (rec,) = st.runs()
        assert (rec.run_id, rec.baselines, rec.design) == ("old", ("accepted",), None)
        rows = st.metrics("old")
        assert [(r.arm, r.values, r.starts, r.reps) for r in rows] == [
            ("p2p_off", [1.0, 1.1, 0.9], None, None), ("p2p_on", [1.0, 1.1, 0.9], None, None)]
        assert st.baseline_entries() == [("accepted", "old", "2026-01-01T00:00:02Z", "first")]
        assert start_blocks(st, query(design=DESIGN)) == []  # no starts: skipped, not an error
        st.save_run_dir(resident_run(tmp_path, "new", *night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])))
        assert st.metrics("new", arm="p2p_on")[0].starts == [1, 1, 2, 2]


def test_a_v2_postgres_store_migrates_in_place_keeping_every_row(pg: PgServer, tmp_path: Path) -> None:
    import psycopg

    url = pg.create_database()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE p2p_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.execute("INSERT INTO p2p_meta VALUES ('application', 'pytest-p2p'), ('schema_version', '2')")
        for step in (1, 2):
            for sql in store_postgres._steps(step):
                con.execute(sql)
        con.execute("INSERT INTO runs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", V2_RUN)
        for row in V2_RESULTS:
            con.execute("INSERT INTO results VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)", row)
    with Store(url) as st:
        (rec,) = st.runs()
        assert (rec.run_id, rec.design) == ("old", None)
        assert [(r.values, r.starts) for r in st.metrics("old")] == [([1.0, 1.1, 0.9], None)] * 2
        st.save_run_dir(resident_run(tmp_path, "new", *night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])))
        assert st.metrics("new", arm="p2p_off")[0].reps == [1, 2, 3, 4]
    with psycopg.connect(url, autocommit=True) as con:
        assert con.execute("SELECT value FROM p2p_meta WHERE key = 'schema_version'").fetchone() == ("3",)


# -- round trip ----------------------------------------------------------------------------------

def test_a_resident_run_round_trips_its_starts_and_design(tmp_path: Path, store_target: str) -> None:
    on, off = night([10.0, 11.0, 12.0, 13.0, 14.0, 15.0], [9.0, 9.5, 10.0, 10.5, 11.0, 11.5])
    run = resident_run(tmp_path, "r1", on, off, excluded={"p2p_on": [3]})
    with Store(store_target) as st:
        st.save_run_dir(run)
        (rec,) = st.runs()
        assert rec.design == DESIGN
        assert json.loads(str(rec.design)) == {"residency": "resident", "windows": 2, "window_s": 15.0,
                                               "prompts_per_concurrency": None, "metric": METRIC,
                                               "direction": "higher"}
        got = {r.arm: r for r in st.metrics("r1", point="c16") if r.metric == METRIC}
        assert (got["p2p_on"].values, got["p2p_on"].starts, got["p2p_on"].reps) == (
            [10.0, 11.0, 13.0, 14.0, 15.0], [1, 1, 2, 3, 3], [1, 2, 4, 5, 6])
        assert (got["p2p_off"].starts, got["p2p_off"].reps) == ([1, 1, 2, 2, 3, 3], [1, 2, 3, 4, 5, 6])
        exported = st.export()
    target2 = str(tmp_path / "copy.db")
    with Store(target2) as st2:
        assert st2.import_data(json.loads(json.dumps(exported))) == (1, 0, 0)
        assert st2.runs()[0].design == DESIGN
        assert st2.metrics("r1", arm="p2p_on", point="c16")[0].reps == [1, 2, 4, 5, 6]


def test_an_export_of_schema_v2_still_imports_with_no_starts(tmp_path: Path, store_target: str) -> None:
    with Store(tmp_path / "src.db") as st:
        st.save_run_dir(resident_run(tmp_path, "r1", *night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])))
        data: dict[str, Any] = json.loads(json.dumps(st.export()))
    data["schema_version"] = 2
    for run in data["runs"]:
        del run["design"]
        for m in run["metrics"]:
            del m["starts"], m["reps"]
    with Store(store_target) as st:
        assert st.import_data(data) == (1, 0, 0)
        assert st.runs()[0].design is None
        assert {r.starts for r in st.metrics("r1")} == {None}


def test_an_export_whose_starts_do_not_fit_its_values_is_refused(tmp_path: Path) -> None:
    from pytest_p2p.errors import StoreError

    with Store(tmp_path / "src.db") as st:
        st.save_run_dir(resident_run(tmp_path, "r1", *night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])))
        data: dict[str, Any] = json.loads(json.dumps(st.export()))
    row = next(m for m in data["runs"][0]["metrics"] if m["starts"] is not None)
    row["starts"] = row["starts"][:-1]
    with Store(tmp_path / "dst.db") as st, pytest.raises(StoreError, match=r"metrics\[\d+\]\.starts: 3 entries"):
        st.import_data(data, source="edited.json")


# -- the reader ------------------------------------------------------------------------------------

def test_the_reader_pairs_by_rep_groups_by_start_and_skips_what_does_not_compare(tmp_path: Path,
                                                                                 store_target: str) -> None:
    good1 = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    good2 = night([20.0, 21.0, 22.0, 23.0, 24.0, 25.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0])
    runs = [
        resident_run(tmp_path, "n1", *good1, started_at="2026-11-20T10:00:00Z"),
        # rep 2 of p2p_on excluded (throttled): that window pair goes from both arms, the others keep their reps
        resident_run(tmp_path, "n2", *good2, excluded={"p2p_on": [2]}, started_at="2026-11-21T10:00:00Z"),
        resident_run(tmp_path, "other-design", *good1, campaign={**CAMPAIGN, "windows": 3},
                     started_at="2026-11-22T10:00:00Z"),
        resident_run(tmp_path, "abandoned", *good1, status="abandoned", started_at="2026-11-23T10:00:00Z"),
        resident_run(tmp_path, "failed", *good1, status="failed", started_at="2026-11-23T11:00:00Z"),
        resident_run(tmp_path, "simulated", *good1, simulated=True, started_at="2026-11-24T10:00:00Z"),
        write_run(tmp_path, "restart", points=("c16",), started_at="2026-11-25T10:00:00Z"),  # no starts at all
    ]
    RunDir(runs[-1]).write_run_meta({"campaign": CAMPAIGN, "uplift": {"metric": METRIC, "direction": "higher"}})
    with Store(store_target) as st:
        for r in runs:
            st.save_run_dir(r)
        nights = start_blocks(st, query())
        assert nights == [
            [[(10.0, 9.0), (11.0, 9.5)], [(12.0, 10.0), (13.0, 10.5)]],
            [[(20.0, 18.0)], [(22.0, 20.0), (23.0, 21.0)], [(24.0, 22.0), (25.0, 23.0)]],
        ]
        assert start_blocks(st, query(), limit=1) == nights[1:]  # the newest first
        assert start_blocks(st, query(), exclude="n2") == nights[:1]
        assert start_blocks(st, query(simulated=True)) == [[[(10.0, 9.0), (11.0, 9.5)], [(12.0, 10.0), (13.0, 10.5)]]]
        assert len(start_blocks(st, query(design=design_key("model", {**CAMPAIGN, "windows": 3}, METRIC,
                                                                      "higher")))) == 1
        assert start_blocks(st, query(arm_a="p2p_off", arm_b="p2p_on"))[0][0] == [(9.0, 10.0), (9.5, 11.0)]
        assert start_blocks(st, query(point="c8")) == []
        assert start_blocks(st, query(pair_ident="other")) == []
        assert start_blocks(st, query(driver="595.71.05")) == nights  # tonight's driver: both nights lent
        assert start_blocks(st, query(driver="600.10.01")) == []  # a driver update starts a new history
        # the plan's view of another design (other windows of the rig): the 3-pairs design's one night, of 2-pair
        # starts as saved, and none for a design whose windows are prompts
        other = elsewhere(st, query())
        assert other is not None and (other.nights, other.what) == (1, "1 night of 2 pairs of 15 s windows")
        prompts = design_key("model", {**CAMPAIGN, "window_s": None}, METRIC, "higher")
        assert prompts is not None and elsewhere(st, query(design=prompts)) is None


def test_a_window_that_measured_nothing_is_left_out_not_the_night(tmp_path: Path) -> None:
    """0 tok/s (every request failed, the rep kept) has no log ratio: the prior and the plan were lost to a
    StatsError for one such window; now that window pair is left out and the night still counts."""
    on, off = night([10.0, 0.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    with Store(str(tmp_path / "h.db")) as st:
        st.save_run_dir(resident_run(tmp_path, "n1", on, off))
        assert start_blocks(st, query()) == [[[(10.0, 9.0)], [(12.0, 10.0), (13.0, 10.5)]]]


def test_only_nights_of_tonights_driver_and_rig_file_are_lent(tmp_path: Path) -> None:
    same = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    runs = [resident_run(tmp_path, "old-driver", *same, driver="580.1", rig_digest="d1",
                         started_at="2026-11-20T10:00:00Z"),
            resident_run(tmp_path, "other-rig-file", *same, driver="590.2", rig_digest="d0",
                         started_at="2026-11-21T10:00:00Z"),
            resident_run(tmp_path, "same", *same, driver="590.2", rig_digest="d1", started_at="2026-11-22T10:00:00Z")]
    with Store(str(tmp_path / "h.db")) as st:
        for r in runs:
            st.save_run_dir(r)
        assert len(start_blocks(st, query())) == 3  # nothing known of tonight: every night of the design
        assert len(start_blocks(st, query(driver="590.2"))) == 2
        assert len(start_blocks(st, query(driver="590.2", rig_digest="d1"))) == 1
        assert len(start_blocks(st, query(rig_digest="d1"))) == 2


def test_a_night_saved_before_content_digests_is_lent_while_the_file_is_unchanged(tmp_path: Path) -> None:
    """Runs used to name their rig file by its bytes; they name it by what it says now (a comment edit is no new
    rig file). A chain of nights saved before goes on while tonight's file has those bytes, and only then."""
    before = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    since = night([20.0, 21.0, 22.0, 23.0], [9.0, 9.5, 10.0, 10.5])
    runs = [resident_run(tmp_path, "saved-before", *before, rig_digest="bytes1", started_at="2026-11-20T10:00:00Z"),
            resident_run(tmp_path, "saved-since", *since, rig_digest="says1", rig_file_digest="bytes2",
                         started_at="2026-11-21T10:00:00Z")]

    def lent(**kw: Any) -> list[float]:  # each lent night's first p2p_on value: 10 saved before, 20 since
        return [blocks[0][0][0] for blocks in start_blocks(st, query(**kw))]

    with Store(str(tmp_path / "h.db")) as st:
        for r in runs:
            st.save_run_dir(r)
        assert lent(rig_digest="says1", rig_file_digest="bytes1") == [10.0, 20.0]  # the file of then, a comment moved
        assert lent(rig_digest="says1", rig_file_digest="bytes3") == [20.0]  # another file than then, saying the same
        assert lent(rig_digest="says2", rig_file_digest="bytes2") == []  # the file says another thing


def test_a_night_on_the_same_bytes_adopts_the_saved_before_nights(tmp_path: Path, store_target: str) -> None:
    """Saving a night whose rig file has the bytes of nights saved before content digests gives those nights
    tonight's digest of what the file says: the chain then outlives a later comment edit. Another rig's runs, and
    runs of other bytes, are left as they were."""
    same = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    old = resident_run(tmp_path, "saved-before", *same, rig_digest="bytes1", started_at="2026-11-20T10:00:00Z")
    other = resident_run(tmp_path, "other-bytes", *same, rig_digest="bytes9", started_at="2026-11-21T10:00:00Z")
    new = resident_run(tmp_path, "tonight", *same, rig_digest="says1", rig_file_digest="bytes1",
                       started_at="2026-11-22T10:00:00Z")
    with Store(store_target) as st:
        st.save_run_dir(old)
        st.save_run_dir(other)
        st.save_run_dir(new)
        fps = {r.run_id: r.fingerprint for r in st.runs()}
        assert (fps["saved-before"]["rig_digest"], fps["saved-before"]["rig_file_digest"]) == ("says1", "bytes1")
        assert (fps["other-bytes"]["rig_digest"], fps["other-bytes"].get("rig_file_digest")) == ("bytes9", None)
        # a comment edited since: the file's bytes moved, what it says did not; both nights are still lent
        assert len(start_blocks(st, query(rig_digest="says1", rig_file_digest="bytes2"))) == 2


H100 = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
H200 = ("NVIDIA H200", "NVIDIA H200")


def test_a_night_on_other_gpu_models_in_the_same_slots_is_not_lent(tmp_path: Path) -> None:
    """Same rig, bus ids, driver and rig file; the slots held H100s that night and hold H200s tonight."""
    same = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    with Store(str(tmp_path / "h.db")) as st:
        st.save_run_dir(resident_run(tmp_path, "h100", *same, rig_digest="d1", gpu_names=H100))
        lent = start_blocks(st, query(driver="595.71.05", rig_digest="d1", gpu_models=H100))
        assert lent == [[[(10.0, 9.0), (11.0, 9.5)], [(12.0, 10.0), (13.0, 10.5)]]]
        assert start_blocks(st, query(driver="595.71.05", rig_digest="d1", gpu_models=H200)) == []
        # one slot changed model: a multiset of names, not a set
        assert start_blocks(st, query(gpu_models=("NVIDIA H100 80GB HBM3", "NVIDIA H200"))) == []
        assert start_blocks(st, query(gpu_models=None)) == lent  # tonight's models unknown: lent as before


def test_gpu_models_compare_as_a_multiset_and_unknown_names_still_lend(tmp_path: Path) -> None:
    same = night([10.0, 11.0, 12.0, 13.0], [9.0, 9.5, 10.0, 10.5])
    mixed = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
    with Store(str(tmp_path / "h.db")) as st:
        st.save_run_dir(resident_run(tmp_path, "mixed", *same, gpu_names=mixed, started_at="2026-11-20T10:00:00Z"))
        st.save_run_dir(resident_run(tmp_path, "no-names", *same, gpu_names=(None, None),
                                     started_at="2026-11-21T10:00:00Z"))
        st.save_run_dir(resident_run(tmp_path, "one-name", *same, gpu_names=("NVIDIA H100 80GB HBM3", None),
                                     started_at="2026-11-22T10:00:00Z"))
        # the pair in the other order: the same models (the ident sorts by bus id too)
        assert len(start_blocks(st, query(gpu_models=mixed[::-1]))) == 3
        assert len(start_blocks(st, query(gpu_models=H200))) == 2  # the nights without names stay lent
        assert len(start_blocks(st, query(gpu_models=None))) == 3


def test_the_design_says_what_makes_start_means_comparable() -> None:
    assert design_key("model", CAMPAIGN, METRIC, "higher") == design_key(
        "model", {**CAMPAIGN, "starts": 6, "window_s": 15}, METRIC, "higher")  # more starts, 15 == 15.0
    assert design_key("model", {**CAMPAIGN, "starts_at_once": 1}, METRIC, "higher") == DESIGN  # as before the key
    for change in ({"windows": 4}, {"window_s": 30.0}, {"residency": "sleep"}, {"starts_at_once": 2}):
        assert design_key("model", {**CAMPAIGN, **change}, METRIC, "higher") != DESIGN
    by_prompts = {**CAMPAIGN, "window_s": None}
    assert design_key("model", by_prompts, METRIC, "higher") != design_key(
        "model", {**by_prompts, "prompts_per_concurrency": 4}, METRIC, "higher")
    assert design_key("model", CAMPAIGN, "mean_ttft_ms", "lower") != DESIGN
    assert design_key("probe", CAMPAIGN, "time_us", "lower") is None


ROOT = Path(__file__).parent.parent
COMMITTED_RIG = ROOT / "fixtures/rigs/nvlink-pair-vllm-7b.yaml"
#: the committed rig's chain on 2x H200 after night 3 (thirteenth, fifteenth, seventeenth sessions)
CHAIN_DB = ROOT / "benchmarks/results/history-h200-7b-committed-8x2x6.5-night3-seventeenth-2026-11-28.db"
CHAIN_DB_4 = ROOT / "benchmarks/results/history-h200-7b-committed-8x2x6.5-night4-nineteenth-2026-11-28.db"


def _night_4_query() -> BlockQuery:
    """What night 4 of the chain asks the store at c16 (vary ``point`` with dataclasses.replace): the committed
    rig's name, design and digests, the pair's bus ids, the nights' driver and GPU models."""
    from pytest_p2p.plugin.rig import load_rig

    rig = load_rig(COMMITTED_RIG)
    cfg = rig.campaign
    design = design_key("model", cfg.to_dict(), cfg.metric("model"), cfg.direction("model"))
    assert design is not None
    return BlockQuery(rig=rig.name, pair_ident="0000:00:06.0+0000:00:07.0", kind="model", point="c16",
                      arm_a="p2p_on", arm_b="p2p_off", metric=cfg.metric("model"), design=design, simulated=False,
                      driver="580.159.04", rig_digest=rig.digest, rig_file_digest=rig.file_digest,
                      gpu_models=("NVIDIA H200", "NVIDIA H200"))


def test_the_chain_after_night_3_lends_night_4_the_documented_start_spread() -> None:
    """The committed 7B rig's chain on 2x H200 (thirteenth, fifteenth, seventeenth sessions): the store after
    night 3, kept in benchmarks/results, read as night 4 would read it (the committed rig's design and digest,
    the nights' driver and GPU models), lends the start spread docs/performance.md quotes, and the planner's
    arithmetic puts 8 starts at the half-widths quoted there."""
    from pytest_p2p.stats.nested import expected_halfwidth, start_prior

    tonight = _night_4_query()
    got = {}
    with Store(str(CHAIN_DB), create=False) as store:
        for point in ("c16", "c64"):
            nights = start_blocks(store, dataclasses.replace(tonight, point=point))
            assert [len(n) for n in nights] == [8, 8, 8], point
            prior = start_prior(nights)
            assert prior is not None and (prior.nights, prior.df, prior.windows, prior.moderated) == (3, 21.0, 2, False)
            got[point] = prior
        # the same store read as a night on another GPU model in the same slots lends nothing
        other = dataclasses.replace(tonight, point="c64", gpu_models=("NVIDIA H100 80GB HBM3",) * 2)
        assert start_blocks(store, other) == []
    assert round(got["c16"].var ** 0.5 * 100, 2) == 0.96 and round(got["c64"].var ** 0.5 * 100, 2) == 2.09
    half = {p: {a: expected_halfwidth(got[p].var ** 0.5, 0.0, 8, 2, a, prior_df=21, alternating=True)
                for a in (0.01, 0.004)} for p in got}
    assert [round(half[p][a] * 100, 2) for p in ("c16", "c64") for a in (0.01, 0.004)] == [0.83, 0.96, 1.81, 2.10]


def test_the_store_after_night_4_lends_night_5_four_nights_and_moderates_c16() -> None:
    """The store night 4 left (nineteenth session, kept in benchmarks/results), read as night 5 will read it: c64
    lends 4 nights on 28 df (2.00 %), with which 8 starts expect 1.71 % of the ratio at 98 %; c16's nights now
    disagree (night 4's c16 start means spread 1.5 % against the others' ~0.9 %), so the moderated fit lends its
    spread on fewer df than 4 x 7 (docs/gpu-runs.md)."""
    from pytest_p2p.stats.nested import expected_halfwidth, start_prior

    tonight = _night_4_query()
    with Store(str(CHAIN_DB_4), create=False) as store:
        got = {p: start_prior(start_blocks(store, dataclasses.replace(tonight, point=p))) for p in ("c16", "c64")}
    c16, c64 = got["c16"], got["c64"]
    assert c16 is not None and c64 is not None
    assert (c64.nights, c64.df, c64.moderated, round(c64.var ** 0.5 * 100, 2)) == (4, 28.0, False, 2.0)
    assert (c16.nights, c16.moderated, round(c16.var ** 0.5 * 100, 2)) == (4, True, 1.07) and 4 < c16.df < 28
    half = expected_halfwidth(c64.var ** 0.5, 0.0, 8, 2, 0.01, prior_df=c64.df, alternating=True)
    assert round(half * 100, 2) == 1.71


def test_night_4_s_plan_line_leads_with_the_borrowed_precision(tmp_path: Path) -> None:
    """The plan line night 4 prints with what the kept store lends (the committed rig's campaign section, the
    chain's priors): its points' expected half-widths at the campaign's own first look (99.2 %), not the ~3.3 %
    of its own starts that night 4 led with on 2x H200 (eighteenth session)."""
    from test_campaign_resident import _runner

    from pytest_p2p.campaign.blocks import plan_line
    from pytest_p2p.stats.nested import start_prior

    q = _night_4_query()
    runner: Any = _runner(tmp_path, **yaml.safe_load(COMMITTED_RIG.read_text())["campaign"])
    with Store(str(CHAIN_DB), create=False) as store:
        for point in ("c16", "c64"):
            got = start_prior(start_blocks(store, dataclasses.replace(q, point=point)))
            assert got is not None
            runner.start_priors[point] = got
    line = plan_line(runner, ["c16", "c64"])
    assert ("expected 99.2 % CI half-width ~1.0 % (c16), ~2.1 % (c64) of the ratio with the start spread of earlier "
            "nights (unless tonight's starts spread more: the guard), ~") in line, line
    assert "; c64: +-2 % would take 9 starts x 2 window pairs" in line, line
    # judged at the alpha 9 starts' first look would spend with max_starts 10 kept, not the 99 % it said
    assert "c64: +-2 % would take 9 starts x 2 window pairs x 2 points ~ " in line
    assert line.split("; c64: ")[1].split("expected ")[1].startswith("99.1 % CI half-width 1.9 %"), line


def _twentieth_design(window_s: object = None, windows: object = None) -> str:
    """The committed rig's design with its windows changed (the twentieth session's night: 5 s at c16, 8.5 s at
    c64)."""
    section = yaml.safe_load(COMMITTED_RIG.read_text())["campaign"]
    section["window_s"] = {"default": 6.5, 16: 5, 64: 8.5} if window_s is None else window_s
    if windows is not None:
        section["windows"] = windows
    cfg = parse_campaign(section, "rig.yaml")
    design = design_key("model", cfg.to_dict(), cfg.metric("model"), cfg.direction("model"))
    assert design is not None
    return design


def test_a_new_design_is_planned_on_the_chain_s_nights_scaled_to_its_windows(tmp_path: Path) -> None:
    """The twentieth night changed the window lengths per point, and its plan line fell back to the H100 figures
    with four nights of the same rig in the store. Those nights now size the plan: the start spread as they
    measured it, the window pair's scaled by sqrt(6.5 s / tonight's length) (c64 3.29 % -> 2.88 % at 8.5 s; that
    night read 3.05 %). Nothing is lent to the decision: tonight's design still has no night of its own."""
    from test_campaign_resident import _runner

    from pytest_p2p.campaign.blocks import plan_line
    from pytest_p2p.stats.nested import SpreadSeen, spread_seen

    q4 = _night_4_query()
    # another rig file (its windows changed): tonight's digests are not the chain's
    tonight = dataclasses.replace(q4, design=_twentieth_design(), rig_digest="sha256:tonight",
                                  rig_file_digest="sha256:tonight-file")
    seen: dict[str, SpreadSeen] = {}
    with Store(str(CHAIN_DB_4), create=False) as store:
        for point, length in (("c16", 5.0), ("c64", 8.5)):
            q = dataclasses.replace(tonight, point=point)
            assert start_blocks(store, q) == []  # no night of tonight's design: no prior, no spreads of its own
            got = elsewhere(store, q)
            chain = spread_seen(start_blocks(store, dataclasses.replace(q4, point=point)))
            assert got is not None and chain.window_sd is not None
            assert (got.nights, got.start_sd) == (4, chain.start_sd)
            assert got.window_sd == pytest.approx(chain.window_sd * (6.5 / length) ** 0.5, rel=1e-12)
            assert got.what == f"4 nights of 2 pairs of 6.5 s windows, scaled to {length:g} s"
            seen[point] = SpreadSeen(0, 0, elsewhere=got)
        assert round(seen["c64"].elsewhere.window_sd * 100, 2) == 2.88  # type: ignore[union-attr]
        # the same nights read for another GPU model in the same slots, or tonight's own design: nothing
        assert elsewhere(store, dataclasses.replace(tonight, point="c64", gpu_models=("NVIDIA H100",) * 2)) is None
        assert elsewhere(store, dataclasses.replace(q4, point="c64")) is None
        # more c64 pairs of the same length: the pairs' spread as measured (a count does not scale it)
        counts = elsewhere(store, dataclasses.replace(tonight, point="c64", design=_twentieth_design(6.5, {
            "default": 2, 64: 3})))
        assert counts is not None and counts.what == "4 nights of 2 pairs of 6.5 s windows"
    section = yaml.safe_load(COMMITTED_RIG.read_text())["campaign"]
    section["window_s"] = {"default": 6.5, 16: 5, 64: 8.5}
    runner: Any = _runner(tmp_path, **section)
    runner.prior_history = seen
    line = plan_line(runner, ["c16", "c64"])
    assert ("if window pairs vary by 2.9 % and starts by 0.0 % (measured here on 4 nights of 2 pairs of 6.5 s "
            "windows, scaled to 8.5 s, of another design)") in line, line
    runner.prior_history = {"c16": seen["c16"]}  # a point with nothing: the H100 figures, as before
    assert "(H100 figures)" in plan_line(runner, ["c16", "c64"])


# -- the glue --------------------------------------------------------------------------------------

RECORD_ONLY = '''
import json, os

import pytest_p2p.campaign.wiring as wiring

_from_session = wiring.from_session


def from_session(*args, start_priors=None, **kw):
    with open(os.environ["PRIORS_OUT"], "a") as fh:
        fh.write(json.dumps({k: vars(v) for k, v in (start_priors or {}).items()}) + "\\n")
    return _from_session(*args, start_priors=start_priors, **kw)


wiring.from_session = from_session
'''


CONFTEST = '''
import pytest_p2p.stats.nested as nested
from pytest_p2p.stats.nested import StartPrior


def start_prior(past, *, higher_is_better=True):
    """What the glue handed over, made into a prior whatever the real minimum of nights is."""
    return StartPrior(var=0.0001, df=6.0 * len(past), nights=len(past), windows=len(past[0][0]))


nested.start_prior = start_prior
''' + RECORD_ONLY


@pytest.fixture
def demo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_DB", "PYTEST_P2P_RESULTS",
                "PYTEST_P2P_STANDIN_SLOWDOWN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))
    priors = tmp_path / "priors.jsonl"
    monkeypatch.setenv("PRIORS_OUT", str(priors))
    rig = yaml.safe_load(demo_path("rig.yaml").read_text())
    rig["campaign"].update({"concurrency": [1], "starts": 2, "windows": 2, "smoke": False})
    rig["arms"] = {"p2p_on": "p2p_on", "p2p_off": "p2p_off"}
    rig.pop("probe", None)
    rig_file = tmp_path / "rig.yaml"
    rig_file.write_text(yaml.safe_dump(rig))
    pytester.makeconftest(CONFTEST)

    def run(*extra: str) -> tuple[pytest.RunResult, list[dict[str, Any]]]:
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", "pytest_p2p.checks.test_campaign",
                                          "-rfs", f"--p2p-rig={rig_file}", f"--p2p-results={tmp_path / 'res'}",
                                          *extra, timeout=240)
        lines = priors.read_text().splitlines() if priors.exists() else []
        priors.unlink(missing_ok=True)
        return r, [json.loads(x) for x in lines]

    return run, tmp_path


def test_the_glue_offers_the_second_campaign_a_prior_from_the_first(demo: Any) -> None:
    run, tmp_path = demo
    db = tmp_path / "history.db"
    first, offered = run("--p2p-save-baseline", f"--p2p-db={db}")
    assert first.ret == 0, first.stdout.str()[-2000:]
    assert offered == [{}]  # the first night: no store yet, no prior, no warning
    assert "start-spread prior" not in first.stdout.str()
    with Store(db) as st:
        (rec,) = st.runs()
        assert rec.simulated and rec.status == "complete" and rec.design is not None
        assert json.loads(rec.design)["windows"] == 2
        on = next(r for r in st.metrics(rec.run_id, arm="p2p_on", point="c1") if r.metric == METRIC)
        assert on.starts is not None and sorted(set(on.starts)) == [1, 2] and len(on.starts) == len(on.values)

    second, offered = run("--p2p-save-baseline", f"--p2p-db={db}")
    assert second.ret == 0, second.stdout.str()[-2000:]
    assert [{p: {k: v[k] for k in ("df", "nights", "windows")} for p, v in o.items()} for o in offered] == [
        {"c1": {"df": 6.0, "nights": 1, "windows": 2}}]
    with Store(db) as st:  # run.json says the prior was offered
        dirs = [Path(str(r.source_dir)) for r in st.runs()]
    got = [json.loads((d / "run.json").read_text())["decisions"]["c1"].get("start_prior") for d in dirs]
    assert got[0] == {"status": "none"} and got[1] is not None and got[1]["status"] != "none", got

    no_store, offered = run()  # no store configured: nothing read, nothing offered
    assert no_store.ret == 0 and offered == [{}]

    db.write_bytes(b"not a database" * 100)  # a store that cannot be read: one warning, the campaign runs
    broken, offered = run(f"--p2p-db={db}")
    out = broken.stdout.str()
    assert offered == [{}]
    assert f"no start-spread prior from the baseline store {db}" in out and "not an SQLite file" in out


def test_three_saved_nights_lend_the_fourth_a_real_prior(demo: Any, pytester: pytest.Pytester) -> None:
    """The whole path without a stub: stand-in nights saved into one store, ``stats.nested.start_prior``
    (3 nights x 2 df at least), the campaign's decision and run.json."""
    run, tmp_path = demo
    pytester.makeconftest(RECORD_ONLY)  # only records what the glue offers; the prior is the package's own
    rig_file = tmp_path / "rig.yaml"
    rig = yaml.safe_load(rig_file.read_text())
    rig["campaign"].update({"starts": 3, "max_starts": None})
    rig_file.write_text(yaml.safe_dump(rig))
    db = tmp_path / "history.db"
    offered, outs = [], []
    for night_no in range(4):
        r, got = run("--p2p-save-baseline", f"--p2p-db={db}")
        assert r.ret == 0, (night_no, r.stdout.str()[-2000:])
        offered.append(got)
        outs.append(r.stdout.lines)
    assert offered[:3] == [[{}], [{}], [{}]]  # fewer than 3 earlier nights, or 2 x 2 df: no prior yet
    said = [[ln for ln in o if "earlier nights of this design" in ln] for o in outs]
    assert said[0] == []  # the first night: no store yet
    assert ["1 earlier night (2 df); no start spread is borrowed before 3 nights and 4 df" in ln for ln in said[1]] == [
        True], said[1]
    assert ["2 earlier nights (4 df); no start spread" in ln for ln in said[2]] == [True], said[2]
    assert said[3] == []  # the fourth borrows one: the plan says what +-2 % takes with it instead
    # from the second night on, the plan is sized with the spreads the earlier nights measured on this pair
    plans = [[ln for ln in o if "plan: resident arms" in ln] for o in outs]
    assert ["(H100 figures)" in ln for ln in plans[0]] == [True], plans[0]
    for night_no in (1, 2, 3):
        assert [f"(measured on {night_no} earlier night{'s' if night_no > 1 else ''} here)" in ln
                for ln in plans[night_no]] == [True], plans[night_no]
    (fourth,) = offered[3]
    assert fourth["c1"]["nights"] == 3 and fourth["c1"]["windows"] == 2
    # 3 nights x (3 starts - 1) = 6 df pooled; nights that disagree lend fewer (the moderated fit's d0)
    assert fourth["c1"]["df"] == 6.0 if not fourth["c1"]["moderated"] else 0 < fourth["c1"]["df"] < 6.0
    with Store(db) as st:
        newest = max(st.runs(), key=lambda rec: str(rec.started_at))
    decision = json.loads((Path(str(newest.source_dir)) / "run.json").read_text())["decisions"]["c1"]
    assert decision["start_prior"]["status"] in ("used", "refused"), decision["start_prior"]
    assert decision["start_prior"]["nights"] == 3


def test_the_glue_plans_a_changed_design_on_the_nights_of_the_one_before(demo: Any) -> None:
    """Through the glue: a night of 0.3 s windows saved, then the rig's windows lengthened to 0.6 s (another rig
    file, another design). The second night's plan is sized on the first's spreads, scaled, and says so; its
    decision borrows nothing."""
    run, tmp_path = demo
    rig_file = tmp_path / "rig.yaml"
    rig = yaml.safe_load(rig_file.read_text())
    db = tmp_path / "history.db"
    plans = []
    for length in (0.3, 0.6):
        rig["campaign"].update({"window_s": length})
        rig_file.write_text(yaml.safe_dump(rig))
        r, offered = run("--p2p-save-baseline", f"--p2p-db={db}")
        assert r.ret == 0, r.stdout.str()[-2000:]
        assert offered == [{}]
        plans.append([ln for ln in r.stdout.lines if "plan: resident arms" in ln])
    assert ["(H100 figures)" in ln for ln in plans[0]] == [True], plans[0]
    assert ["(measured here on 1 night of 2 pairs of 0.3 s windows, scaled to 0.6 s, of another design)" in ln
            for ln in plans[1]] == [True], plans[1]
