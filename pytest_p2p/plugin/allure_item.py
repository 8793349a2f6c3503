"""What Allure shows for one p2p check: names, labels, parameters, attachments, status, history.

allure-pytest derives ``fullName`` (and from it ``historyId`` and ``testCaseId``) from the
node id, which moves with pytest's rootdir: ``checks.test_evidence#test_topology`` in one
run and ``pytest_p2p.checks.test_evidence#test_topology`` in the next, so history and
trends never form. :func:`stable_identity` derives them from the imported module's name,
the function and the parametrisation id instead, which no start directory or path option
changes. Everything else here is presentation: epic = stage, feature = check, story =
arm/pair/point, severity, a readable title and parameters, and evidence attached to every
check (each file once per session).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_p2p.jsontypes import JSONObject, as_dict, as_dicts
from pytest_p2p.results.layout import AGGREGATE, PROOF

if TYPE_CHECKING:
    from pytest_p2p.report.allure_attach import AllureAPI

_STAGE_OF_MODULE = {"test_evidence": "evidence", "test_probes": "probes", "test_campaign": "campaign",
                    "test_baseline": "verdict"}
_CRITICAL = {"test_transport", "test_uplift", "test_no_regression", "test_peer_access", "test_campaign_complete"}
_MINOR = {"test_benchmark_p2p_copy_small", "test_benchmark_decode_allreduce", "test_rig_selection"}


@dataclass(frozen=True)
class Identity:
    full_name: str
    history_id: str
    test_case_id: str


def _md5(*parts: str) -> str:
    h = hashlib.md5(usedforsecurity=False)
    for p in parts:
        h.update(p.encode("utf-8"))
    return h.hexdigest()


def stable_identity(item: pytest.Item) -> Identity:
    """fullName ``<module>[.<Class>]#<function>`` from the module's import name; history from the param id."""
    module = getattr(getattr(item, "module", None), "__name__", None) or item.nodeid.split("::", 1)[0]
    cls = getattr(getattr(item, "cls", None), "__qualname__", None)
    func = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    full = f"{module}{'.' + cls if cls else ''}#{func}"
    callspec = getattr(item, "callspec", None)
    param_id = str(getattr(callspec, "id", "") or "")
    return Identity(full_name=full, history_id=_md5(full, param_id), test_case_id=_md5(full))


def readable(value: object) -> str:
    """A parameter as a person reads it: ``gpu0-gpu1``, ``p2p_on``, ``p2p_on-c8`` (not a dataclass repr)."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"gpu{value[0]}-gpu{value[1]}"
    pair, arm = getattr(value, "pair", None), getattr(value, "arm", None)
    if pair is not None and arm is not None:  # ProbeCase(pair, arm)
        return f"{readable(pair)} {readable(arm)}"
    point = getattr(value, "point", None)
    if isinstance(arm, str) and isinstance(point, str):
        return f"{arm}-{point}"
    for attr in ("key", "name"):
        v = getattr(value, attr, None)
        if isinstance(v, str):
            return v
    return str(value)


def stage_of(item: pytest.Item) -> str:
    mod = getattr(getattr(item, "module", None), "__name__", "") or ""
    return _STAGE_OF_MODULE.get(mod.rsplit(".", 1)[-1], "p2p")


def severity_of(item: pytest.Item) -> str:
    func = getattr(item, "originalname", None) or item.name
    return "critical" if func in _CRITICAL else "minor" if func in _MINOR else "normal"


#: check names that more than one check module defines (the probe's transport and the campaign's)
_SHARED_NAMES = frozenset({"test_transport", "test_uplift"})


def title_of(item: pytest.Item, found: Mapping[str, str]) -> str:
    """``transport (probes) — gpu0-gpu1 · p2p_on``: unique per test, as Allure lists titles.

    Why every parameter: ``pcie link`` showed twice (one per GPU), ``benchmark decode allreduce``
    four times (one per size), and the probe's and the campaign's ``transport`` once each for the
    same pair and arm (issue 26). The pair, arm and point come first, then every other parameter
    value the test id carries, then the stage for a name two check modules share.
    """
    name = getattr(item, "originalname", None) or item.name
    func = name.removeprefix("test_").replace("_", " ")
    if name in _SHARED_NAMES:
        func += f" ({stage_of(item)})"
    parts = [v for k in ("pair", "arm", "point") if (v := found.get(k))]
    for value in readable_params(item).values():
        if not any(value in p or p in value for p in parts):
            parts.append(value)
    return f"{func} — {' · '.join(parts)}" if parts else func


def readable_params(item: pytest.Item) -> dict[str, str]:
    callspec = getattr(item, "callspec", None)
    params = dict(getattr(callspec, "params", {}) or {})
    return {name: readable(v) for name, v in params.items()}


def multiline_message(message: str) -> str:
    """A verdict joined with `` | `` (17 metrics on one line) as one metric per line."""
    if message.count(" | ") < 2:
        return message
    head, _, rest = message.partition(": ")
    parts = (rest if rest else message).split(" | ")
    lead = f"{head}:\n" if rest else ""
    return lead + "\n".join(f"  - {p.strip()}" for p in parts)


def _attach_bytes(allure: AllureAPI, data: bytes | str, name: str, kind: str) -> None:
    allure.attach(data, name=name, attachment_type=getattr(allure.attachment_type, kind))


def attach_probe(allure: AllureAPI, result: object, attached: set[str]) -> None:
    """NCCL evidence lines and the probe table of an all-reduce result (each once per session)."""
    key = f"probe:{getattr(result, 'pair_key', '')}:{getattr(result, 'arm', '')}"
    proof = getattr(result, "proof", None)
    lines: list[str] = []
    if proof is not None and hasattr(proof, "to_dict"):
        claims = proof.to_dict().get("claims") or {}
        for name, claim in claims.items():
            if isinstance(claim, dict) and claim.get("lines"):
                lines.append(f"# {name} = {claim.get('value')} ({claim.get('count')} lines)")
                lines += [f"{n}: {t}" for n, t in claim["lines"][:4]]
    _attach_bytes(allure, "\n".join(lines) or "no NCCL INFO lines in this probe's log",
                  f"NCCL evidence {getattr(result, 'arm', '')}", "TEXT")
    if key in attached:
        return
    attached.add(key)
    rows = getattr(result, "rows", []) or []
    table = ["size | time (µs) | algbw (GB/s) | busbw (GB/s)"] + [
        f"{getattr(r, 'size', getattr(r, 'bytes', '?'))} | {getattr(r, 'time_us', 0):.2f} | "
        f"{getattr(r, 'algbw_gbs', 0):.2f} | {getattr(r, 'busbw_gbs', 0):.2f}" for r in rows]
    _attach_bytes(allure, "\n".join(table), f"all-reduce table {getattr(result, 'arm', '')}", "TEXT")


def attach_copy(allure: AllureAPI, result: object) -> None:
    if hasattr(result, "to_dict"):
        _attach_bytes(allure, json.dumps(result.to_dict(), indent=2, default=str), "P2P copy probe", "JSON")


def attach_evidence(allure: AllureAPI, evidence: object, found: Mapping[str, str]) -> None:
    """The snapshot excerpt a check judged: its pair or GPU (not the whole snapshot)."""
    if evidence is None or not hasattr(evidence, "to_dict"):
        return
    d = as_dict(evidence.to_dict())
    excerpt: JSONObject = {k: d.get(k) for k in ("source", "origin", "recorded_at", "host", "driver_version",
                                                     "cuda_driver_version", "simulated")}
    pair = found.get("pair")
    if pair:
        excerpt["pair"] = [p for p in as_dicts(d.get("pairs"))
                           if p.get("key") == pair or f"gpu{p.get('a')}-gpu{p.get('b')}" == pair]
    excerpt["gpus"] = d.get("gpus")
    _attach_bytes(allure, json.dumps(excerpt, indent=2, default=str), "evidence (snapshot excerpt)", "JSON")


def attach_campaign(allure: AllureAPI, run_dir: Path, found: Mapping[str, str], attached: set[str]) -> None:
    """Scenario files for a scenario check, proofs for an arm, summary (HTML) and plots once per run."""
    from pytest_p2p.report.allure_attach import attach_file
    from pytest_p2p.report.allure_meta import markdown_to_html

    arm, point = found.get("arm"), found.get("point")
    scen = run_dir / "scenarios"
    if arm and point:
        d = scen / f"{arm}-{point}"
        for f in (d / PROOF, d / AGGREGATE):
            attach_file(f, f"{arm}-{point}/{f.name}")
        for f in sorted(d.glob("telemetry_run*.csv")):
            if str(f) not in attached:  # a CSV is large: once per session, on its first check
                attached.add(str(f))
                attach_file(f, f"{arm}-{point}/{f.name}")
    elif arm:
        for proof in sorted(scen.glob(f"{arm}-*/{PROOF}")):
            attach_file(proof, f"{proof.parent.name}/{proof.name}")
    summary_md = run_dir / "summary.md"
    if summary_md.is_file():
        _attach_bytes(allure, markdown_to_html(summary_md.read_text(encoding="utf-8")), "summary", "HTML")
    plots = run_dir / "plots"
    if point and not arm:
        attach_file(plots / "uplift.png", "plots/uplift.png")
    elif str(plots) not in attached:
        attached.add(str(plots))
        for png in sorted(plots.glob("*.png")):
            attach_file(png, f"plots/{png.name}")
