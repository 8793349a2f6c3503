"""Which pytest-xdist process this is, asked in one place: a worker, the controller, or neither.

xdist marks a worker by giving its config a ``workerinput`` dict (what the controller handed
it) and a ``workeroutput`` dict (the channel back); its own ``is_xdist_worker`` reads the same
attribute. The plugin asked ``hasattr(config, "workerinput")`` in a dozen places, each a chance to
ask differently; these helpers are the one reading. On the controller, a ``WorkerController``
node carries the same two dicts for each worker (``workeroutput`` only once the worker finished:
one that died has none). Stage-free: pytest only for types, xdist never imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def is_worker(config: pytest.Config) -> bool:
    """This process is an xdist worker (it follows its controller's decisions)."""
    return hasattr(config, "workerinput")


def is_controller(config: pytest.Config) -> bool:
    """This process hands tests to xdist workers (``-n``): xdist registers ``dsession`` only here."""
    return config.pluginmanager.hasplugin("dsession")


def worker_input(config: pytest.Config) -> Mapping[str, object]:
    """What the controller handed this worker; empty outside a worker."""
    got = getattr(config, "workerinput", None)
    return got if isinstance(got, dict) else {}


def worker_slot(config: pytest.Config) -> tuple[int, int] | None:
    """This worker's number and the number of workers (``gw1`` of 4: ``(1, 4)``); ``None`` outside a worker or
    where xdist named it otherwise."""
    got = worker_input(config)
    wid, count = str(got.get("workerid", "")), got.get("workercount")
    if not wid.startswith("gw") or not wid[2:].isdigit() or not isinstance(count, int):
        return None
    return int(wid[2:]), count


def worker_output(config: pytest.Config) -> dict[str, object] | None:
    """This worker's channel back to the controller; ``None`` outside a worker."""
    got = getattr(config, "workeroutput", None)
    return got if isinstance(got, dict) else None


def node_output(node: object) -> Mapping[str, object]:
    """On the controller: what a finished worker sent back (empty for a worker that died first)."""
    got = getattr(node, "workeroutput", None)
    return got if isinstance(got, dict) else {}


def node_worker_id(node: object, default: str = "worker") -> str:
    """On the controller: the worker's id (``gw0``), ``default`` when xdist gave none."""
    got = getattr(node, "workerinput", None)
    return str(got.get("workerid", default)) if isinstance(got, dict) else default
