"""Shared test configuration: pytester for plugin behaviour, paths to recorded data, a hermetic NVML.

The suite must pass on a machine with GPUs (nightly CI runs there) as on one without, so
it never reads the real driver unless asked: ``PYTEST_P2P_NVML=off`` is set in
``os.environ`` at import (before any test, so pytester and subprocess children inherit
it) and makes evidence/nvml.py act exactly as "no driver". A test that needs a
particular topology installs a fake pynvml and unsets the variable with monkeypatch.
``P2P_TEST_REAL_GPU=1`` lifts the switch and runs the tests marked ``gpu``, which
otherwise skip saying how to run them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# pytester's in-process runs take the modules first imported inside them back out of sys.modules
# when they end. numpy's C core cannot be imported twice in one process, so a later test of that
# xdist worker that plots failed with "cannot load module more than once per process" (found by
# running the suite with -n 3: test_report_junit, then test_report_trend). Imported here, it stays.
with contextlib.suppress(ImportError):
    import numpy  # noqa: F401
# matplotlib the same way: a plot made after such a run mixed the fresh module's classes with the old
# ones ("Single argument to subplot must be a three-digit integer, not GridSpec(1, 2)[0:1, 0:1]": found with
# -n 2 -k "report or summary or render or resident or verdict", test_report_trend and test_report_seed).
with contextlib.suppress(ImportError):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

REAL_GPU_ENV = "P2P_TEST_REAL_GPU"
REAL_GPU = os.environ.get(REAL_GPU_ENV) == "1"
if not REAL_GPU:
    os.environ["PYTEST_P2P_NVML"] = "off"
# GPU leases of this test process (and the runs it starts) in a directory of its own: with the host-wide
# default, an evidence test of one xdist worker waited 30 s for a lease that another worker's demo campaign
# held, then read its links without a load (README test command under two CPU hogs). Tests of the lease
# itself name their own directory.
os.environ["PYTEST_P2P_LOCK_DIR"] = tempfile.mkdtemp(prefix="pytest-p2p-test-locks-")
# The servers' API-key secret (serve/server.py key_file) likewise: the suite never writes the user's cache.
os.environ["PYTEST_P2P_KEY_FILE"] = os.path.join(tempfile.mkdtemp(prefix="pytest-p2p-test-key-"), "server-key")
# The benchmarks write their results under $OUT when it is set (the device machines' result folder); a test
# that runs one must not write there (2026-11-27, the suite on 1x H200: a run of arrivals_vs_bench.py under
# test left its JSON among the device call's results).
os.environ.pop("OUT", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REAL_GPU:
        return
    skip = pytest.mark.skip(reason=f"marked gpu: uses the real GPUs and driver only when asked; "
                                   f"run with {REAL_GPU_ENV}=1 (the suite otherwise sets PYTEST_P2P_NVML=off)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def snapshot_5060ti() -> Path:
    return FIXTURES / "snapshots" / "5060ti-2x-gen3x4.snapshot.json"


@pytest.fixture
def snapshot_h200() -> Path:
    return FIXTURES / "snapshots" / "h200x2-nvlink.snapshot.json"


@pytest.fixture
def rig_5060ti() -> Path:
    return FIXTURES / "rigs" / "5060ti-budget.yaml"


@pytest.fixture
def rig_h200() -> Path:
    return FIXTURES / "rigs" / "h200x2-nvlink.yaml"


@contextlib.contextmanager
def _loopback_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with server, client:
        yield server, client


@pytest.fixture
def loopback_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(server side, client side) of one loopback TCP connection."""
    with _loopback_pair() as pair:
        yield pair


@pytest.fixture
def kernel_rx_stamps() -> Iterator[bool]:
    """Linux's TCP receive stamps switched on, and kept on, for the test; False where the kernel gives none.

    The kernel enables stamping for the first socket that asks through a deferred work item,
    so on a quiet host the first segments of a fresh run may arrive unstamped (serve/stamped.py
    dates those reads by the loop). A test that asserts kernel stamps must not race that.
    """
    if not sys.platform.startswith("linux"):
        yield False
        return
    from pytest_p2p.serve.stamped import SO_TIMESTAMPNS

    with _loopback_pair() as (server, client):
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        stamped = False
        for _ in range(100):
            server.sendall(b"w")
            _, ancillary, _, _ = client.recvmsg(16, socket.CMSG_SPACE(16))
            if ancillary:
                stamped = True
                break
            time.sleep(0.05)
        yield stamped
