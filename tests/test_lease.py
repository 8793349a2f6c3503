from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from pytest_p2p.lease import GpuLease, LeaseTimeout


def _hold(lock_dir: str, gpus: list[int], seconds: float, log: str, tag: str) -> None:
    lease = GpuLease(Path(lock_dir), poll_s=0.01)
    with lease.hold(gpus, tag):
        with open(log, "a") as fh:
            fh.write(f"{tag} start {time.monotonic()}\n")
        time.sleep(seconds)
        with open(log, "a") as fh:
            fh.write(f"{tag} end {time.monotonic()}\n")


def _intervals(log: Path) -> dict[str, tuple[float, float]]:
    got: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        tag, _, t = line.split()
        got.setdefault(tag, []).append(float(t))
    return {k: (v[0], v[1]) for k, v in got.items()}


def test_overlapping_pairs_never_hold_a_gpu_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_hold, args=(str(tmp_path), g, 0.3, str(log), t))
             for g, t in (([0, 1], "p01"), ([1, 2], "p12"), ([2, 3], "p23"))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    iv = _intervals(log)
    # p01 and p12 share GPU 1, p12 and p23 share GPU 2: those never overlap.
    for a, b in (("p01", "p12"), ("p12", "p23")):
        assert iv[a][1] <= iv[b][0] or iv[b][1] <= iv[a][0], iv


def test_timeout_names_the_gpu_and_holder(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_hold, args=(str(tmp_path), [3], 1.5, str(tmp_path / "log"), "other"))
    p.start()
    try:
        deadline = time.monotonic() + 5
        while not (tmp_path / "log").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        lease = GpuLease(tmp_path, poll_s=0.01)
        with pytest.raises(LeaseTimeout, match=r"GPU 3 is still in use by pid \d+: other"), \
                lease.hold([3], "probe gpu3-gpu4", timeout_s=0.2):
            pass
        assert lease.held == []
    finally:
        p.join(5)


def test_lock_released_on_exit_and_reentrant_sequence(tmp_path: Path) -> None:
    lease = GpuLease(tmp_path)
    with lease.hold([1, 0], "x") as waited:
        assert lease.held == [0, 1] and waited >= 0
    assert lease.held == []
    with lease.hold([0], "y", timeout_s=0.1):
        pass


def test_unusable_lock_dir_is_a_clear_error(tmp_path: Path) -> None:
    from pytest_p2p.errors import P2PError

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    lease = GpuLease(blocker / "locks")
    with pytest.raises(P2PError, match="PYTEST_P2P_LOCK_DIR"), lease.hold([0, 1], "test"):
        pass
    assert lease.held == []


# --------------------------------------------------------------------------- multi-user safety (issue 11 item 6)


def test_planted_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    from pytest_p2p.errors import P2PError

    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    victim = tmp_path / "precious.txt"
    victim.write_text("do not overwrite\n")
    (locks / "gpu0.lock").symlink_to(victim)
    lease = GpuLease(locks)
    with pytest.raises(P2PError, match=r"gpu0.lock is a symbolic link; refusing"), lease.hold([0], "x"):
        pass
    assert victim.read_text() == "do not overwrite\n" and lease.held == []
    assert lease.holder(0) == "unknown"  # the holder note is not read through the link either


def test_symlinked_lock_directory_is_refused(tmp_path: Path) -> None:
    from pytest_p2p.errors import P2PError

    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "locks").symlink_to(real)
    with pytest.raises(P2PError, match="symbolic link"), GpuLease(tmp_path / "locks").hold([0], "x"):
        pass
    assert list(real.iterdir()) == []


def test_too_open_or_foreign_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pytest_p2p.errors import P2PError

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # what another user's pre-created /tmp directory could look like
    with pytest.raises(P2PError, match=r"others can write to it \(mode 0777\)"), GpuLease(shared).hold([0], "x"):
        pass
    assert list(shared.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 4242)  # the directory now "belongs to someone else"
    with pytest.raises(P2PError, match=rf"belongs to uid {me}, not to you"), GpuLease(mine).hold([0], "x"):
        pass


def test_new_lock_directory_is_private_and_lock_files_0600(tmp_path: Path) -> None:
    import stat

    locks = tmp_path / "a" / "locks"
    with GpuLease(locks).hold([2], "x"):
        pass
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    assert stat.S_IMODE((locks / "gpu2.lock").stat().st_mode) == 0o600


def test_hard_linked_lock_file_is_refused_not_truncated(tmp_path: Path) -> None:
    import os

    from pytest_p2p.errors import P2PError

    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.link(victim, locks / "gpu1.lock")
    with pytest.raises(P2PError, match="2 hard links"), GpuLease(locks).hold([1], "x"):
        pass
    assert victim.read_text() == "keep me\n"


def test_a_waiting_pair_keeps_no_gpu_from_a_free_pair(tmp_path: Path) -> None:
    """All or none: B waits for GPU 2 (A has it, e.g. another run's server) without keeping GPU 0, so C gets
    0-1 at once instead of waiting as long as A holds GPU 2."""
    import threading

    locks = tmp_path / "locks"
    a_holds, release = threading.Event(), threading.Event()

    def a() -> None:
        with GpuLease(lock_dir=locks).hold([2], "A"):
            a_holds.set()
            release.wait(30)

    def b() -> None:
        with GpuLease(lock_dir=locks, poll_s=0.01).hold([0, 2], "B", timeout_s=30):
            pass

    ta = threading.Thread(target=a)
    ta.start()
    assert a_holds.wait(30)
    tb = threading.Thread(target=b)
    tb.start()
    time.sleep(0.3)  # B is waiting for GPU 2 now (only the old behaviour needs it: B then held GPU 0)
    try:
        with GpuLease(lock_dir=locks).hold([0, 1], "C", timeout_s=10):
            pass
    finally:
        release.set()
        ta.join(30)
        tb.join(30)
