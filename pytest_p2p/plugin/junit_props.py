"""The numbers of a p2p run as JUnit properties, valid under pytest's default ``xunit2`` family.

``record_property`` writes ``<properties>`` inside ``<testcase>``, which the xunit2 schema
forbids, hence pytest's ``PytestWarning: record_property is incompatible with junit_family
'xunit2'``. xunit2 allows properties on the ``<testsuite>`` only (what
``record_testsuite_property`` writes). So:

* checks put their numbers in ``item.user_properties`` as ``("p2p.<name>", value)``, the
  plain pytest API that travels with the report (also from xdist workers);
* :func:`move_to_suite` runs before the junitxml plugin sees a report: under xunit2 it moves
  those entries to suite properties named ``<test id> p2p.<name>``; under xunit1/legacy it
  leaves them on the testcase, where that schema allows them;
* a finished campaign adds its uplift per point, throughput per arm and point and the
  uplift verdict as suite properties (:func:`campaign_properties`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from pytest_p2p.jsontypes import as_dict
from pytest_p2p.report.summary_types import Summary, stat_at

if TYPE_CHECKING:
    from _pytest.junitxml import LogXML

PREFIX = "p2p."


def _xml(config: pytest.Config) -> LogXML | None:
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def add_suite_property(config: pytest.Config, name: str, value: object) -> bool:
    xml = _xml(config)
    if xml is None:
        return False
    if (name, str(value)) not in [(n, v) for n, v in xml.global_properties]:
        xml.add_global_property(name, str(value))
    return True


def move_to_suite(config: pytest.Config, report: pytest.TestReport) -> None:
    xml = _xml(config)
    if xml is None or xml.family in ("xunit1", "legacy"):
        return
    # ours: "p2p.<number>" from this module and "p2p_*" from the checks (e.g. p2p_probe_source)
    ours = [(n, v) for n, v in report.user_properties if isinstance(n, str) and n.startswith("p2p")]
    if not ours:
        return
    report.user_properties = [(n, v) for n, v in report.user_properties if (n, v) not in ours]
    test_id = report.nodeid.rsplit("::", 1)[-1]
    for name, value in ours:
        add_suite_property(config, f"{test_id} {name}", value)


def item_numbers(item: pytest.Item) -> Iterator[tuple[str, object]]:
    """Numbers of a probe check: all-reduce busbw (largest size) and latency (smallest), copy GB/s."""
    funcargs = getattr(item, "funcargs", {}) or {}
    result = funcargs.get("p2p_allreduce")
    rows = list(getattr(result, "rows", []) or [])
    if rows:
        big = max(rows, key=lambda r: getattr(r, "bytes", 0))
        small = min(rows, key=lambda r: getattr(r, "bytes", 0))
        yield f"{PREFIX}busbw_gbs", round(float(getattr(big, "busbw_gbs", 0.0)), 3)
        yield f"{PREFIX}latency_us", round(float(getattr(small, "time_us", 0.0)), 3)
        proof = getattr(result, "proof", None)
        if proof is not None and getattr(proof, "transport", None):
            yield f"{PREFIX}transport", str(proof.transport)
    copy = funcargs.get("p2p_copy")
    if copy is not None and hasattr(copy, "unidir_gbs"):
        try:
            yield f"{PREFIX}copy_peer_gbs", round(float(copy.unidir_gbs("peer")), 3)
            yield f"{PREFIX}copy_host_staged_gbs", round(float(copy.unidir_gbs("host_staged")), 3)
        except (KeyError, ValueError, TypeError):
            return


def campaign_properties(summary: Summary) -> Iterator[tuple[str, str]]:
    """``p2p.<pair>.<point>.uplift`` = ``+9.0%``, ``...verdict`` = pass/fail, ``...<arm>.output_throughput``."""
    pair = str(as_dict(summary.get("pair")).get("key") or "run")
    kind = summary.get("kind")
    for u in summary.get("uplift") or []:
        base = f"{PREFIX}{pair}.{u.get('point')}"
        est = u.get("estimate")
        if est is not None:
            yield f"{base}.uplift", f"{float(est) * 100:+.2f}%"
        passed = u.get("passed")
        yield f"{base}.verdict", {True: "pass", False: "fail", None: "inconclusive"}[passed]
    metric = "time_us" if kind == "probe" else "output_throughput"
    for sc in summary.get("scenarios") or []:
        mean = (stat_at(sc, "metrics", metric) or {}).get("mean")
        if mean is not None:
            yield f"{PREFIX}{pair}.{sc['point']}.{sc['arm']}.{metric}", f"{float(mean):.4g}"
        bw_mean = (stat_at(sc, "metrics", "busbw_gbs") or {}).get("mean")
        if bw_mean is not None:
            yield f"{PREFIX}{pair}.{sc['point']}.{sc['arm']}.busbw_gbs", f"{float(bw_mean):.4g}"
    if summary.get("simulated"):
        yield f"{PREFIX}{pair}.simulated", "true"
