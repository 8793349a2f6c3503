"""The evidence and probe phases say what they wait on (issue 26: the line stood still for 27 s).

Time is a fake clock that moves one second each time it is read, so "a probe that takes 30 s"
is 30 readings, whatever this box's speed; a fake rank or load process blocks until the
heartbeat has said "... 30 s" (it is released by the sink, not by a timer). No sleeps in the
test, no timing thresholds.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p import heartbeat
from pytest_p2p.heartbeat import Heartbeat, TerminalSink


class FakeClock:
    """Moves ``step`` seconds at each reading."""

    def __init__(self, step: float = 1.0) -> None:
        self.now, self.step = 0.0, step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.now += self.step
            return self.now


class ListSink:
    """Records what a heartbeat shows; sets ``release`` once a line says ``... <at> s`` or later."""

    def __init__(self, release: Path | None = None, at: int = 30) -> None:
        self.shown: list[str] = []
        self.beats: list[str] = []
        self.ends: list[tuple[str, int]] = []
        self.release, self.at = release, at

    def _seen(self, text: str) -> None:
        seconds = int(text.rsplit(" ... ", 1)[1].split(" s")[0])
        if self.release is not None and seconds >= self.at and not self.release.exists():
            self.release.write_text("go")

    def show(self, text: str) -> None:
        self.shown.append(text)
        self._seen(text)

    def beat(self, text: str) -> None:
        self.beats.append(text)

    def end(self, text: str, beats: int) -> None:
        self.ends.append((text, beats))


@contextlib.contextmanager
def installed(hb: Heartbeat) -> Iterator[Heartbeat]:
    uninstall = heartbeat.install(hb)
    try:
        yield hb
    finally:
        uninstall()


def test_a_30_s_phase_beats_every_10_s_and_says_when_it_ended() -> None:
    sink = ListSink()
    clock = FakeClock(step=0.0)
    hb = Heartbeat(sink, clock=clock, ticker_s=None)
    with hb.phase("probe all-reduce p2p_on gpu0-gpu1", "NCCL init"):
        for _ in range(30):
            clock.now += 1.0
            hb.tick()
    assert sink.beats == [f"[p2p] probe all-reduce p2p_on gpu0-gpu1: NCCL init ... {s} s" for s in (10, 20, 30)]
    assert sink.shown[0].endswith("NCCL init ... 2 s") and len(sink.shown) == 29  # a terminal's live counter
    assert sink.ends == [("[p2p] probe all-reduce p2p_on gpu0-gpu1: done in 30 s", 3)]


def test_a_short_phase_shows_nothing() -> None:
    sink = ListSink()
    clock = FakeClock(step=0.0)
    hb = Heartbeat(sink, clock=clock, ticker_s=None)
    with hb.phase("evidence: reading the GPUs through NVML"):
        clock.now += 1.5
        hb.tick()
        hb.step("GPU 1 of 8")
    assert (sink.shown, sink.beats, sink.ends) == ([], [], [])


def test_nothing_installed_costs_nothing_and_says_nothing() -> None:
    assert heartbeat.current() is None
    with heartbeat.phase("probe x"):
        heartbeat.step("y")
        heartbeat.tick()


FAKE_RANK = r'''
import json, os, sys, time
spec = json.load(open(sys.argv[1]))
rank = int(os.environ["RANK"])
print(f"[p2p-probe] rank {rank}: init torch fake", flush=True)
print(f"[p2p-probe] rank {rank}: NCCL init", flush=True)
release = os.path.join(os.path.dirname(spec["out"]), "release")
while not os.path.exists(release):  # held until the heartbeat has said "... 30 s"
    time.sleep(0.01)
print(f"[p2p-probe] rank {rank}: done", flush=True)
if rank == 0:
    json.dump({"rows": [{"bytes": 4, "time_us": 10.0}], "checks": [{"bytes": 4, "graph": False, "wrong": 0}],
               "world_size": 2, "graph": False, "iters": 1, "warmup": 0, "graph_launches": 1}, open(spec["out"], "w"))
'''


def test_a_probe_that_takes_30_s_says_what_it_waits_on(tmp_path: Path) -> None:
    """Through the real launcher: the beat names the probe, its pair and arm, and the ranks' last word."""
    from pytest_p2p.probes.allreduce import run_allreduce
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.probes.config import ProbeConfig

    worker = tmp_path / "rank.py"
    worker.write_text(FAKE_RANK)
    sink = ListSink(release=tmp_path / "out" / "release")
    with installed(Heartbeat(sink, clock=FakeClock(), ticker_s=None)):  # ticked by the launcher's poll loop
        res = run_allreduce((0, 1), PRESETS["p2p_on"], ProbeConfig(sizes=(4,), timeout_s=120), None,
                            tmp_path / "out", worker=[sys.executable, str(worker)])
    assert res.rows[0].time_us == 10.0
    waiting = "[p2p] probe all-reduce p2p_on gpu0-gpu1: last said: rank 0: NCCL init ... "
    assert any(b.startswith(waiting) for b in sink.beats), sink.beats
    assert any(s == f"{waiting}30 s" for s in sink.shown), sink.shown[-3:]
    assert sink.ends and sink.ends[0][0].startswith("[p2p] probe all-reduce p2p_on gpu0-gpu1: done in ")


def test_a_slow_cuda_init_of_the_pcie_load_is_named(tmp_path: Path) -> None:
    """The load process blocks the reader (no poll loop): the phase's ticker thread keeps the beat."""
    from pytest_p2p.evidence.live import read_under_load
    from pytest_p2p.evidence.snapshot import bundled_demo, load_snapshot

    release = tmp_path / "release"
    slow = tmp_path / "python"
    slow.write_text(f"#!/bin/sh\nwhile [ ! -e {release} ]; do sleep 0.01; done\necho 'no CUDA here' >&2\nexit 3\n")
    slow.chmod(0o755)
    ev = load_snapshot(bundled_demo())
    sink = ListSink(release=release)
    with installed(Heartbeat(sink, clock=FakeClock(), ticker_s=0.001)):
        read_under_load(ev, python=str(slow))
    assert any(b.startswith("[p2p] evidence: PCIe links under a CUDA load: starting the load process (CUDA init) ... ")
               for b in sink.beats), sink.beats
    assert "p2p-heartbeat" not in {t.name for t in threading.enumerate()}  # the ticker ended with its phase
    assert all(g.pcie.load_method and "no CUDA here" in g.pcie.load_method for g in ev.gpus)


class _Terminal:
    def __init__(self, isatty: bool) -> None:
        self.isatty = isatty
        self.ops: list[tuple[str, str]] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.ops.append(("line", line))

    def rewrite(self, line: str, **markup: bool) -> None:
        self.ops.append(("rewrite", line))


def _thirty_seconds(term: _Terminal) -> None:
    clock = FakeClock(step=0.0)
    hb = Heartbeat(TerminalSink({"terminalreporter": term}.get), clock=clock, ticker_s=None)
    with hb.phase("probe P2P copy gpu0-gpu1"):
        for _ in range(30):
            clock.now += 1.0
            hb.tick()


def test_on_a_terminal_one_line_is_rewritten_then_closed() -> None:
    term = _Terminal(isatty=True)
    _thirty_seconds(term)
    assert term.ops[0] == ("line", "")  # off pytest's "test_x.py " prefix first
    assert [op for op, _ in term.ops[1:-2]] == ["rewrite"] * (len(term.ops) - 3)
    assert term.ops[-2:] == [("rewrite", "[p2p] probe P2P copy gpu0-gpu1: done in 30 s"), ("line", "")]


def test_off_a_terminal_a_line_per_beat_and_one_at_the_end() -> None:
    term = _Terminal(isatty=False)
    _thirty_seconds(term)
    assert term.ops == [("line", f"[p2p] probe P2P copy gpu0-gpu1 ... {s} s") for s in (10, 20, 30)] + [
        ("line", "[p2p] probe P2P copy gpu0-gpu1: done in 30 s")]


@pytest.mark.parametrize(("verbosity", "worker", "shown"), [
    (0, False, True), (-1, False, True),  # -q keeps pytest's own progress, and this line
    (-2, False, False),  # -qq
    (0, True, False),  # an xdist worker: the controller owns the terminal
])
def test_shown_where_pytest_shows_its_progress(verbosity: int, worker: bool, shown: bool) -> None:
    hb = heartbeat.for_terminal({"terminalreporter": _Terminal(True)}.get, verbosity=verbosity, worker=worker)
    assert (hb is not None) == shown


def test_without_a_terminal_reporter_nothing_is_written() -> None:
    """``-p no:terminal``: the sink finds no reporter and stays silent (no error either)."""
    clock = FakeClock(step=0.0)
    hb = Heartbeat(TerminalSink({}.get), clock=clock, ticker_s=None)
    with hb.phase("probe x"):
        clock.now += 30
        hb.tick()


CONFTEST = """
import pytest
from pytest_p2p import heartbeat

@pytest.fixture
def slow_probe():
    hb = heartbeat.current()
    if hb is None:
        return "none"
    now = [0.0]
    hb.clock, hb.ticker_s = (lambda: now[0]), None
    with heartbeat.phase("probe all-reduce p2p_on gpu0-gpu1", "NCCL init"):
        for _ in range(30):
            now[0] += 1.0
            heartbeat.tick()
    return "ran"
"""


@pytest.mark.parametrize("args", [(), ("-qq",), ("-p", "no:terminal")])
def test_a_p2p_run_shows_the_heartbeat_through_capture(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    """The glue installs it for a p2p run; it reaches the terminal from a fixture without ``-s``."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_hb="def test_it(slow_probe):\n    assert slow_probe\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "pytest_p2p.plugin.active", *args)
    assert result.ret == 0, result.stdout.str()[-2000:]
    out = result.stdout.str()
    beat = "[p2p] probe all-reduce p2p_on gpu0-gpu1: NCCL init ... 30 s"
    assert (beat in out) == (not args), out[-2000:]


def test_the_ranks_last_word_even_under_nccls_output(tmp_path: Path) -> None:
    from pytest_p2p.probes.allreduce import last_probe_line

    rank0, rank1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    assert last_probe_line([rank0, rank1]) == "starting the ranks"
    rank1.write_text("[p2p-probe] rank 1: init torch fake\n")
    rank0.write_text("[p2p-probe] rank 0: init torch fake\nhost:1:2 [0] NCCL INFO Bootstrap\n"
                     "[p2p-probe] rank 0: size 65536 B time 12.00 us\nhost:1:2 [0] NCCL INFO more\n")
    assert last_probe_line([rank0, rank1]) == "rank 0: size 65536 B time 12.00 us"  # rank 0 speaks for the pair
    rank0.write_text("[p2p-probe] rank 0: init torch fake\n" + "host:1:2 [0] NCCL INFO Channel 00 via P2P\n" * 4000)
    assert last_probe_line([rank0, rank1]) == "rank 1: init torch fake"  # buried in rank 0: the next rank's word
