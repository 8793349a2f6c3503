"""The JSON narrowing helpers every reader uses: wrong shapes read as absent, never as a wrong number."""

from __future__ import annotations

import math

from pytest_p2p.jsontypes import as_dict, as_dicts, as_float, as_floats, as_int, as_list, dig


def test_numbers_are_finite_and_never_bools() -> None:
    assert as_float(3) == 3.0 and as_float(2.5) == 2.5
    assert as_float(True) is None and as_float("3") is None and as_float(None) is None
    assert as_float(math.nan) is None and as_float(math.inf) is None
    assert as_int(4.0) == 4 and as_int(4.5) is None and as_int(False) is None and as_int(7) == 7
    assert as_floats([1, "x", 2.5, None, True, math.nan]) == [1.0, 2.5]


def test_containers_of_the_wrong_shape_read_as_empty() -> None:
    assert as_dict({"a": 1}) == {"a": 1} and as_dict([1]) == {} and as_dict({1: "a"}) == {}
    assert as_list((1, 2)) == [] and as_list([1]) == [1]
    assert as_dicts([{"a": 1}, 3, {}, "x"]) == [{"a": 1}, {}]


def test_dig_walks_objects_and_stops_at_anything_else() -> None:
    doc = {"env": {"versions": {"driver": "580.1"}}, "list": [1]}
    assert dig(doc, "env", "versions", "driver") == "580.1"
    assert dig(doc, "env", "missing", "driver") is None
    assert dig(doc, "list", "0") is None and dig(None, "a") is None
