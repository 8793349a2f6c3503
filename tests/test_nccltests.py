"""nccl-tests all_reduce_perf parser: text tables of several nccl-tests versions and the -J JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.errors import ProbeError
from pytest_p2p.probes.nccltests import parse_all_reduce_perf

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def test_text_table_2_17():
    res = parse_all_reduce_perf(read("synth_nccl-tests-2.17_all_reduce_perf.txt"), "t.txt")
    assert res.format == "text" and res.program == "all_reduce_perf"
    assert res.nccl_tests_version == "2.17.1" and res.nccl_version == "2.28.9"
    assert [d["bus_id"] for d in res.devices] == ["0000:06:00", "0000:07:00"]
    assert len(res.rows) == 10
    first, last = res.rows[0], res.rows[-1]
    assert (first.size_bytes, first.count, first.type, first.redop, first.root) == (8, 2, "float", "sum", -1)
    assert last.oop.to_dict() == {"time_us": 1160.2, "algbw": 231.37, "busbw": 231.37, "wrong": 0}
    assert last.ip.busbw == 231.63 and last.line == 21
    assert res.avg_busbw == pytest.approx(73.1201) and res.out_of_bounds == 0 and res.wrong == 0
    assert res.max_busbw == 231.63
    json.dumps(res.to_dict())


def test_old_text_table_without_root_has_error_column():
    res = parse_all_reduce_perf(read("synth_nccl-tests-2.11_all_reduce_perf_old.txt"))
    assert all(r.root is None for r in res.rows)
    assert res.rows[0].oop.error == 0.0 and res.rows[0].oop.wrong is None
    assert res.rows[-1].ip.error is None  # N/A
    assert res.devices[0]["device"] == 1 and res.devices[0]["bus_id"] == "0x0a"
    assert res.avg_busbw == pytest.approx(5.17333)


def test_per_iteration_columns_cputime_and_timestamp():
    res = parse_all_reduce_perf(read("synth_nccl-tests-2.19_all_reduce_perf_per_iter.txt"))
    assert res.time_kind == "cputime" and res.nccl_version == "2.30.7"
    row = res.rows[1]
    assert row.oop.wrong == 2 and row.ip.wrong == 0 and res.wrong == 2
    assert row.ip.busbw == 69.79  # the in-place half starts after the out-of-place per-iteration columns
    assert row.oop.per_iter == {"i_min_us": 29.9, "i_max_us": 31.0, "i_p99_us": 31.0, "i_cv_pct": 0.9}


def test_json_output():
    res = parse_all_reduce_perf(read("synth_nccl-tests-2.19_all_reduce_perf.json"), "out.json")
    assert res.format == "json" and res.program == "all_reduce_perf" and res.nccl_version == "2.28.9"
    assert len(res.rows) == 3 and res.rows[0].root == -1
    assert res.rows[1].ip.wrong is None  # "nwrong": null
    assert res.rows[2].ip.busbw is None  # "nan"
    assert res.rows[2].oop.busbw == pytest.approx(2.713706)
    assert res.avg_busbw == pytest.approx(0.913102) and res.out_of_bounds == 0
    assert len(res.devices) == 2
    json.dumps(res.to_dict(), allow_nan=False)


def test_in_place_only_rows():
    text = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n"
            "        1024           256     float     sum      -1" + " " * 36 + "5.1    0.20    0.20      0\n"
            "# Avg bus bandwidth    : 0.2 \n")
    row = parse_all_reduce_perf(text).rows[0]
    assert row.oop is None and row.ip.time_us == 5.1


@pytest.mark.parametrize("cut", [-3, -5])
def test_truncated_text_is_an_error(cut):
    lines = read("synth_nccl-tests-2.17_all_reduce_perf.txt").splitlines()
    with pytest.raises(ProbeError, match="truncated"):
        parse_all_reduce_perf("\n".join(lines[:cut]), "cut.txt")


def test_truncated_row_is_an_error():
    lines = read("synth_nccl-tests-2.17_all_reduce_perf.txt").splitlines()
    lines[14] = lines[14][:60]
    with pytest.raises(ProbeError, match=r"cut.txt: line 15: truncated all_reduce_perf row"):
        parse_all_reduce_perf("\n".join(lines), "cut.txt")


def test_truncated_json_and_other_text():
    text = read("synth_nccl-tests-2.19_all_reduce_perf.json")
    with pytest.raises(ProbeError, match="unterminated"):
        parse_all_reduce_perf(text[: len(text) // 2], "half.json")
    with pytest.raises(ProbeError, match="no 'results' list"):
        parse_all_reduce_perf('{"version": 1}', "x.json")
    with pytest.raises(ProbeError, match="no 'results' list"):
        parse_all_reduce_perf('{"results": 5}', "x.json")  # was a TypeError traceback
    with pytest.raises(ProbeError, match="no all_reduce_perf result rows"):
        parse_all_reduce_perf("hello\n", "x.txt")
    with pytest.raises(ProbeError, match=r"results\[0\]: malformed"):
        parse_all_reduce_perf('{"results": [{"size": "x"}]}', "x.json")
