"""Pytest integration of the evidence stage (registered for a p2p run only): header, GPU/pair parametrisation.

Test functions that ask for ``p2p_gpu`` are parametrised by the rig's GPUs (ids ``gpu1``),
those that ask for ``p2p_pair`` by its pairs (ids ``gpu1-gpu2``); the built-in checks in
``pytest_p2p/checks/`` use these, and so can a rig owner's own tests.
"""

from __future__ import annotations

import pytest

from .. import heartbeat
from ..errors import P2PError
from ..evidence.model import Evidence
from .session import P2PSession, get_session
from .xdist_roles import is_worker


def session_or_usage_error(config: pytest.Config) -> P2PSession:
    """The session, with a bad rig/snapshot/environment turned into one readable usage error."""
    try:
        session = get_session(config)
        _ = session.evidence
        _ = session.resolved
    except P2PError as exc:
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None
    return session


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """This module is registered only for a p2p run (the gate): a bad rig is a usage error before collection."""
    hb = heartbeat.for_terminal(config.pluginmanager.getplugin,  # the evidence and probe phases' heartbeat
                                verbosity=int(config.getoption("verbose", 0) or 0), worker=is_worker(config))
    if hb is not None:
        config.add_cleanup(heartbeat.install(hb))
    if not is_worker(config):
        session_or_usage_error(config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    s = session_or_usage_error(config)
    ev = s.evidence
    lines = [f"p2p rig: {s.rig.name} ({s.rig.source})", f"p2p evidence: {s.label}"]
    driver = f"driver {ev.driver_version or '?'}, CUDA driver {ev.cuda_driver_version or '?'}"
    lines.append(f"p2p versions: {driver}")
    for idx in s.gpus:
        g = ev.gpu(idx)
        nv = f", {len(g.active_nvlinks)}/{len(g.nvlinks)} NVLinks" if g.nvlinks else ""
        lines.append(f"p2p   gpu{idx}: {g.name} {g.bus_id} PCIe max {g.pcie.max.label()}{nv}")
    pairs = ", ".join(f"gpu{a}-gpu{b} ({ev.pair(a, b).topology or '?'})" for a, b in s.pairs) or "none"
    lines.append(f"p2p pairs: {pairs}")
    for note in ev.notes:
        lines.append(f"p2p note: {note}")
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wants_gpu = "p2p_gpu" in metafunc.fixturenames
    wants_pair = "p2p_pair" in metafunc.fixturenames
    if not (wants_gpu or wants_pair):
        return
    s = session_or_usage_error(metafunc.config)
    if wants_pair:
        metafunc.parametrize("p2p_pair", s.pairs, ids=[f"gpu{a}-gpu{b}" for a, b in s.pairs], scope="session")
    if wants_gpu:
        metafunc.parametrize("p2p_gpu", s.gpus, ids=[f"gpu{i}" for i in s.gpus], scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Error-counter checks run last, so "not growing across the session" covers the whole session.

    A machine with no pair (one GPU, MIG, no P2P-capable pair) or no GPU leaves ``p2p_pair`` /
    ``p2p_gpu`` with an empty parameter set, which pytest skips saying only "got empty parameter
    set"; those checks get the rig's own reason instead, first among their skip marks.
    """
    _explain_empty_parametrisation(config, items)
    last = [it for it in items if getattr(it, "originalname", "") == "test_error_counters"]
    if last:
        items[:] = [it for it in items if getattr(it, "originalname", "") != "test_error_counters"] + last


@pytest.fixture(scope="session")
def p2p_session(pytestconfig: pytest.Config) -> P2PSession:
    """The rig, the evidence and the pairs of this pytest session."""
    return session_or_usage_error(pytestconfig)


@pytest.fixture(scope="session")
def p2p_evidence(p2p_session: P2PSession) -> Evidence:
    """Evidence with PCIe read under load and CUDA peer access (live machines run the load once)."""
    return p2p_session.evidence_under_load()


def _explain_empty_parametrisation(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons: dict[str, str] = {}
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None) or {}
        for name in ("p2p_pair", "p2p_gpu"):
            if name not in params or isinstance(params[name], (tuple, int)):
                continue
            if name not in reasons:
                reasons[name] = _empty_reason(config, name)
            item.add_marker(pytest.mark.skip(reason=reasons[name]), append=False)
            break


def _empty_reason(config: pytest.Config, name: str) -> str:
    try:
        s = session_or_usage_error(config)
        why = s.resolved.no_pairs_reason if name == "p2p_pair" else None
    except pytest.UsageError as exc:
        return f"no GPU to check: {exc}"
    if why:
        return why
    return "no GPU pair to check on this machine" if name == "p2p_pair" else "no GPU to check on this machine"
