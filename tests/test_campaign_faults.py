"""Faults through the real campaign path (issue 11): a server that dies mid-campaign, a server that
answers nothing, SIGTERM/SIGHUP during a campaign, a full disk. The server is the SIMULATED stand-in
launched by ``serve.server.launch`` exactly as vLLM would be; faults come from its fault modes."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from childsignals import default_signals

from pytest_p2p.campaign.backends import ModelBackend
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.campaign.runner import CampaignRunner
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server

ROOT = Path(__file__).resolve().parents[1]
DEMO_SNAPSHOT = ROOT / "pytest_p2p" / "demo" / "h200x2-nvlink.snapshot.json"

# Launches the stand-in like vLLM; with FAULT_ONCE_MARKER set, the fault applies to the first launch only
# (the marker file records it), so a re-run on a fresh server can succeed. Its pid goes to PIDS_FILE.
WRAPPER = r'''
import os, sys
marker, pids = os.environ.get("FAULT_ONCE_MARKER"), os.environ.get("PIDS_FILE")
if pids:
    with open(pids, "a") as fh:
        fh.write(f"{os.getpid()}\n")
if marker:
    if os.path.exists(marker):
        os.environ.pop("PYTEST_P2P_STANDIN_FAULT", None)
    else:
        open(marker, "w").close()
os.execv(sys.executable, [sys.executable, "-m", "pytest_p2p.serve.standin", *sys.argv[1:]])
'''


def _server(tmp_path: Path, env: dict[str, str]) -> Any:
    wrapper = tmp_path / "standin_wrapper.py"
    wrapper.write_text(WRAPPER)
    return parse_server({"command": [sys.executable, str(wrapper)], "model": "fault-model",
                         "args": {"tensor-parallel-size": 2},
                         "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": "1",
                                 "PYTEST_P2P_STANDIN_JITTER": "0", "PIDS_FILE": str(tmp_path / "pids"), **env},
                         "startup_timeout_s": 60, "request_timeout_s": 10,
                         "load": {"input_len": 8, "output_len": 4, "warmup": 0}}, "fault-rig.yaml")


def _runner(tmp_path: Path, env: dict[str, str], **cfg: Any) -> CampaignRunner[Any]:
    from pytest_p2p.evidence.snapshot import load_snapshot

    base: dict[str, Any] = {"kind": "model", "concurrency": [1], "reps": 2, "smoke": False, "warmup": 0,
                            "prompts_per_concurrency": 2, "cooldown_s": 0, "idle_baseline_s": 0, "telemetry_hz": 10,
                            "min_uplift": "-90%", "residency": "restart"}
    base.update(cfg)
    config = parse_campaign(base, "fault-rig.yaml")
    backend = ModelBackend(server=_server(tmp_path, env), campaign=config, pair=(0, 1), rig_env={})
    return CampaignRunner(pair=(0, 1), config=config, kind="model", arms=PRESETS, backend=backend,
                          results_root=tmp_path / "results", rig_name="faults", evidence=load_snapshot(DEMO_SNAPSHOT),
                          simulated=True, lease=GpuLease(tmp_path / "locks"))


def _signal_after_first_rep(proc: subprocess.Popen[bytes], results: Path, sig: signal.Signals, *,
                            start_s: float, end_s: float) -> str:
    """Send ``sig`` once p2p_on's first rep is on disk; the process's whole output after it ends."""
    try:
        deadline = time.monotonic() + start_s
        while not list(results.glob("*/scenarios/p2p_on-c1/run_1.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        os.kill(proc.pid, sig)
        return proc.communicate(timeout=end_s)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_server_dying_mid_rep_is_set_aside_and_rerun_on_a_fresh_server(tmp_path: Path) -> None:
    # request 1 is the launcher's readiness completion; the 3rd request (2nd of the timed window) kills it
    res = _runner(tmp_path, {"PYTEST_P2P_STANDIN_FAULT": "die-after=2",
                             "FAULT_ONCE_MARKER": str(tmp_path / "died-once")}).run()
    assert res.status == "complete" and res.errors == [] and res.missing == []
    (failure,) = res.set_aside
    assert (failure.arm, failure.rep, failure.attempt, failure.kind) == ("p2p_on", 1, 1, "failed")
    assert "died: exit code 70" in failure.cause and "die-after=2" in failure.cause  # exit code and log tail
    scen = res.run_dir / "scenarios" / "p2p_on-c1"
    raw = json.loads((scen / "run_1.try1.failed.json").read_text())
    assert raw["cause"] == failure.cause and raw["set_aside"] == "failed"  # kept, but never aggregated
    assert raw["completed"] == 1 and raw["failed"] == 1  # the request counts, not overwritten by the cause
    assert (scen / "server_run1.try1.failed.log").is_file()
    assert json.loads((scen / "run_1.json").read_text())["meta"]["attempt"] == 2
    thr = res.aggregate("p2p_on", "c1")["metrics"]["output_throughput"]  # type: ignore[index]
    assert thr["n"] == 2 and min(thr["values"]) > 0
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["status"] == "complete" and meta["rep_failures"][0]["cause"] == failure.cause
    assert any("set aside and re-run" in n for n in meta["notes"])
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 5 and not any(_alive(p) for p in pids)  # 4 slots + 1 re-run, all reaped


def test_server_that_always_dies_fails_the_campaign_and_stores_no_measurement(tmp_path: Path) -> None:
    res = _runner(tmp_path, {"PYTEST_P2P_STANDIN_FAULT": "die-after=1"}, reps=1, rep_retries=1).run()
    assert res.status == "failed"
    assert sorted(res.missing) == ["p2p_off-c1 rep 1", "p2p_on-c1 rep 1"]
    assert len(res.errors) == 2 and all("not measured after 2 attempt(s)" in e and "died" in e for e in res.errors)
    assert res.aggregates == {} and res.uplift["c1"]["n"] == 0
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["status"] == "failed" and len(meta["errors"]) == 2 and len(meta["rep_failures"]) == 4
    assert res.proofs["p2p_off"]["transport"] == "SHM"  # read from a dead server's log: NCCL had set up
    assert not list((res.run_dir / "scenarios" / "p2p_on-c1").glob("run_1.json"))


def test_rep_with_no_completed_request_is_never_a_measurement(tmp_path: Path) -> None:
    # every timed request gets HTTP 500 (the readiness completion, request 1, still passes)
    res = _runner(tmp_path, {"PYTEST_P2P_STANDIN_FAULT": "http-500", "PYTEST_P2P_STANDIN_FAULT_AFTER": "1"},
                  reps=1, rep_retries=0).run()
    assert res.status == "failed" and res.aggregates == {}
    assert all("no request completed (2 failed" in e for e in res.errors), res.errors
    scen = res.run_dir / "scenarios" / "p2p_off-c1"
    assert json.loads((scen / "run_1.try1.failed.json").read_text())["completed"] == 0


SIGNAL_SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from test_campaign_faults import _runner
    _runner(Path({tmp!r}), {{"PYTEST_P2P_STANDIN_TTFT_MS": "300"}}, reps=3).run()
''')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_interrupt_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    script = tmp_path / "campaign.py"
    script.write_text(SIGNAL_SCRIPT.format(tests=str(Path(__file__).parent), tmp=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=default_signals)
    out = _signal_after_first_rep(proc, tmp_path / "results", sig, start_s=90, end_s=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in out and sig.name in out
    (run_dir,) = (tmp_path / "results").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted" and "p2p_off-c1 rep 3" in meta["missing"]
    assert "p2p_on-c1 rep 1" not in meta["missing"]
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids and not any(_alive(p) for p in pids), "a stand-in outlived the interrupted campaign"


def test_disk_full_while_writing_a_rep_fails_the_campaign_and_keeps_earlier_reps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_p2p.util as util

    real = util.os.replace
    writes = {"reps": 0}

    def replace(src: Any, dst: Any) -> None:
        name = Path(dst).name
        if name.startswith("run_") and name.endswith(".json") and ".try" not in name:
            writes["reps"] += 1
            if writes["reps"] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(util.os, "replace", replace)
    runner = _runner(tmp_path, {}, reps=2)
    with pytest.raises(OSError, match=r"run_2\.json.*No space left on device") as info:
        runner.run()
    assert info.value.errno == errno.ENOSPC
    (run_dir,) = (tmp_path / "results").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "failed" and any("No space left" in e for e in meta["errors"])
    assert meta["missing"] == ["p2p_off-c1 rep 2", "p2p_on-c1 rep 2"]
    for arm in ("p2p_on", "p2p_off"):
        assert json.loads((run_dir / "scenarios" / f"{arm}-c1" / "run_1.json").read_text())["completed"] == 2


PYTEST_RIG = """
rig: sigterm-rig
description: SIMULATED rig for the SIGTERM test (stand-in server)
pairs: [[0, 1]]
server:
  command: [{python}, {wrapper}]
  model: sig-model
  simulated: true
  args: {{tensor-parallel-size: 2}}
  env: {{PYTEST_P2P_STANDIN_TTFT_MS: "300", PYTEST_P2P_STANDIN_TPOT_MS: "1", PIDS_FILE: {pids}}}
  startup_timeout_s: 60
  request_timeout_s: 30
  load: {{input_len: 8, output_len: 4, warmup: 0}}
campaign:
  kind: model
  concurrency: [1]
  reps: 3
  smoke: false
  warmup: 0
  prompts_per_concurrency: 2
  cooldown_s: 0
  idle_baseline_s: 0
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_to_pytest_during_a_campaign_exits_like_a_cancelled_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    """The campaign path under pytest: rc 128+signal, run.json interrupted with the missing reps, no orphan."""
    wrapper = tmp_path / "standin_wrapper.py"
    wrapper.write_text(WRAPPER)
    rig = tmp_path / "rig.yaml"
    rig.write_text(PYTEST_RIG.format(python=json.dumps(sys.executable), wrapper=json.dumps(str(wrapper)),
                                     pids=json.dumps(str(tmp_path / "pids"))))
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_CAMPAIGN", "PYTEST_P2P_REPS",
                "PYTEST_P2P_ARMS", "PYTEST_P2P_RESULTS", "PYTEST_P2P_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))
    results = tmp_path / "res"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs",
                             "pytest_p2p.checks.test_campaign", "--p2p-rig", str(rig), "--p2p-snapshot",
                             str(DEMO_SNAPSHOT), "--p2p-results", str(results)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=default_signals)
    out = _signal_after_first_rep(proc, results, sig, start_s=120, end_s=90)
    assert proc.returncode == 128 + sig, out[-3000:]
    assert "INTERNALERROR" not in out, out[-3000:]
    (run_dir,) = [d for d in results.iterdir() if d.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted" and "p2p_off-c1 rep 3" in meta["missing"], out[-3000:]
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids and not any(_alive(p) for p in pids), "a stand-in outlived the cancelled pytest"


@pytest.mark.parametrize(("err", "hint"), [(errno.ENOSPC, "the file system is full"),
                                            (errno.EROFS, "the file system is read-only"),
                                            (errno.EACCES, "no permission to write there")])
def test_atomic_write_failure_is_one_paragraph_naming_the_file_and_keeps_the_old_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, hint: str) -> None:
    import pytest_p2p.util as util
    from pytest_p2p.errors import P2PError, WriteError

    target = tmp_path / "run.json"
    util.atomic_write_json(target, {"status": "running"})

    def fail(src: Any, dst: Any) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(util.os, "replace", fail)
    with pytest.raises(WriteError) as info:
        util.atomic_write_json(target, {"status": "complete"})
    msg = str(info.value)
    assert isinstance(info.value, P2PError) and isinstance(info.value, OSError) and info.value.errno == err
    assert msg.startswith(f"cannot write {target}: {os.strerror(err)}; {hint}") and "\n" not in msg
    assert json.loads(target.read_text()) == {"status": "running"}  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left behind


def test_liveness_names_exit_code_signal_and_a_replaced_process(tmp_path: Path) -> None:
    from pytest_p2p.campaign.liveness import Identity, death_cause, describe_exit, start_ticks

    class Proc:
        def __init__(self, pid: int, code: int | None) -> None:
            self.pid, self.code = pid, code

        def poll(self) -> int | None:
            return self.code

    me = os.getpid()
    born = Identity.of(Proc(me, None))
    assert born.start == start_ticks(me) and born.start is not None
    assert death_cause(Proc(me, None), born) is None  # alive and the same process
    replaced = death_cause(Proc(me, None), Identity(me, born.start - 1))
    assert replaced is not None and "changed under us" in replaced and "restarted or replaced" in replaced
    log = tmp_path / "server.log"
    log.write_text("INFO starting\nERROR torch.OutOfMemoryError: CUDA out of memory\n")
    killed = death_cause(Proc(me, -9), born, log)
    assert killed is not None and "killed by SIGKILL (9)" in killed and "out of GPU memory" in killed
    assert "CUDA out of memory" in killed  # the log tail is in the cause
    assert describe_exit(3) == "exit code 3" and describe_exit(-15) == "killed by SIGTERM (15)"


def test_any_load_error_of_a_dead_server_is_a_failed_rep_not_a_traceback(tmp_path: Path) -> None:
    """A dying server can make the load generator raise anything (ValueError on a cut stream): its rep is re-run."""
    import contextlib

    from pytest_p2p.campaign.config import parse_campaign

    class DyingOnce:
        kind = "model"

        def __init__(self) -> None:
            self.attempts = 0

        @contextlib.contextmanager
        def slot(self, arm: Any, rep: int, log: Path) -> Any:
            self.attempts += 1
            log.write_text("fake\n")
            yield {"arm": arm.name, "dead": self.attempts == 1}

        def smoke(self, arm: Any, log: Path) -> None:
            return None

        def warm(self, handle: Any, point: str) -> None:
            return None

        def prepare(self, handle: Any, point: str, rep: int) -> None:
            return None

        def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]:
            if handle["dead"]:
                raise ValueError("invalid literal for int() with base 10: 'many'")
            v = 110.0 if handle["arm"] == "p2p_on" else 100.0
            return {"output_throughput": v, "completed": 2, "failed": 0}

        def death(self, handle: Any) -> str | None:
            return "the server (pid 1) died: killed by SIGKILL (9)" if handle["dead"] else None

        def proof(self, handle: Any, arm: Any) -> tuple[None, None]:
            return None, None

        def describe(self) -> None:
            return None

    cfg = parse_campaign({"concurrency": [1], "reps": 1, "smoke": False, "cooldown_s": 0, "idle_baseline_s": 0,
                          "telemetry_hz": 10, "residency": "restart"}, "fake-rig.yaml")
    res = CampaignRunner(pair=(0, 1), config=cfg, kind="model", arms=PRESETS, backend=DyingOnce(),
                         results_root=tmp_path / "results", rig_name="fake", simulated=True,
                         lease=GpuLease(tmp_path / "locks")).run()
    assert res.status == "complete" and res.errors == []
    (failure,) = res.set_aside
    assert failure.cause == "the server (pid 1) died: killed by SIGKILL (9)" and failure.arm == "p2p_on"


def test_campaign_writer_output_reads_back_through_the_report_reader(tmp_path: Path) -> None:
    """The results directory is the contract: what results.write writes, results.read reads."""
    from pytest_p2p.results.read import RunReader
    from pytest_p2p.results.write import RunDir

    rd = RunDir.create(tmp_path, "rig x", "gpu0-gpu1", "model")
    rd.write_rep("p2p_on", "c8", 1, {"output_throughput": 1.5})
    rd.write_aggregate("p2p_on", "c8", {"metrics": {}})
    rd.write_env("versions.json", {"nccl": "2.28.9"})
    rd.write_run_meta({"status": "complete"})
    back = RunReader.open(rd.path)
    assert rd.path.name.endswith("_rig-x_gpu0-gpu1")
    assert list(back.scenarios()) == [("p2p_on", "c8")] and back.reps("p2p_on", "c8") == {1: {"output_throughput": 1.5}}
    assert back.read_run_meta()["status"] == "complete" and back.read_scenario_file("p2p_on", "c8", "aggregate.json")
    assert not (rd.path / ".p2p-space-reserve").exists()  # released once the run is final


def test_interrupt_traceback_entries_without_a_line_are_left_out() -> None:
    """pytest's interrupt repr raises TypeError on a frame whose tb_lineno is None (a signal at a line-less
    instruction): such entries are filtered before it renders, so the session still ends as interrupted."""
    from pytest_p2p.signals import has_line

    class NoLine:
        @property
        def lineno(self) -> int:
            raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'")

    class Line:
        lineno = 41

    assert has_line(Line()) and not has_line(NoLine())
    try:
        raise KeyboardInterrupt("SIGHUP received")
    except KeyboardInterrupt:
        excinfo = pytest.ExceptionInfo.from_current()
    kept = excinfo.traceback.filter(has_line)
    assert len(kept) == len(excinfo.traceback)  # real entries with lines are all kept


def test_an_interrupt_that_surfaces_wrapped_still_marks_the_run_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM landing while a dataclass is defined during an import surfaces as ``RuntimeError: Error
    calling __set_name__`` (Python 3.11): seen once in CI, the run was recorded ``failed``, not ``interrupted``."""
    from pytest_p2p import signals

    assert not signals.interrupted_by(RuntimeError("plain"))
    try:
        try:
            raise KeyboardInterrupt("SIGTERM received")
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'ranks'") from ki
    except RuntimeError as exc:
        wrapped = exc
    assert signals.interrupted_by(wrapped)

    runner = _runner(tmp_path, {})

    def cancelled(*_: object) -> None:
        raise wrapped

    monkeypatch.setattr(runner, "_run_with_retries", cancelled)
    with pytest.raises(RuntimeError):
        runner.run()
    (run_dir,) = (tmp_path / "results").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted", meta["status"]
    assert "p2p_on-c1 rep 1" in meta["missing"]


class ReadOnlyAfterFirstRep:
    """The results disk turns read-only once the first rep file is on disk (issue 30 item 1).

    Every later write under ``root`` fails with EROFS: atomic writes (``mkstemp``) and the server
    log's appends (``open`` in serve/server.py), as a remounted file system would.
    """

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import builtins
        import tempfile

        import pytest_p2p.serve.server as server_mod
        import pytest_p2p.util as util

        self.root, self.ro = root, False
        real_replace, real_mkstemp, real_open = util.os.replace, tempfile.mkstemp, builtins.open

        def under(path: object) -> bool:
            return str(path).startswith(str(self.root))

        def refuse(path: object) -> None:
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        def replace(src: Any, dst: Any) -> None:
            real_replace(src, dst)
            if Path(dst).name == "run_1.json":
                self.ro = True

        def mkstemp(*args: Any, **kwargs: Any) -> Any:
            if self.ro and under(kwargs.get("dir", "")):
                refuse(kwargs.get("dir"))
            return real_mkstemp(*args, **kwargs)

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if self.ro and under(file) and any(c in mode for c in "wax+"):
                refuse(file)
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(util.os, "replace", replace)
        monkeypatch.setattr(util.tempfile, "mkstemp", mkstemp)
        monkeypatch.setattr(server_mod, "open", open_, raising=False)


def test_results_disk_turning_read_only_mid_campaign_is_one_paragraph_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_p2p.errors import WriteError

    disk = ReadOnlyAfterFirstRep(tmp_path / "results", monkeypatch)
    runner = _runner(tmp_path, {}, reps=2)
    with pytest.raises(OSError) as info:  # before the fix: a bare OSError out of teardown's log append
        runner.run()
    assert disk.ro
    err = info.value
    assert isinstance(err, WriteError) and err.errno == errno.EROFS, repr(err)
    msg = str(err)
    assert "\n" not in msg and "server_run1.log" in msg and "the file system is read-only" in msg, msg
    (run_dir,) = (tmp_path / "results").iterdir()
    (rep,) = run_dir.glob("scenarios/*-c1/run_1.json")  # what was measured before the disk turned: intact
    assert json.loads(rep.read_text())["completed"] == 2
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 1 and not any(_alive(p) for p in pids)  # torn down and checked despite the disk
