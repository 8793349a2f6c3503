"""The NCCL all-reduce probe: launch one worker per GPU of a pair under an arm's environment.

The launcher owns everything that can be tested without a GPU: the environment (only
through :func:`pytest_p2p.envs.subprocess_env`), process control (each rank in its own
process group, killed as a group on timeout, failure or Ctrl-C so that no NCCL rank
is left spinning on a GPU), the NCCL log that feeds the transport proof, and the
bandwidth arithmetic, which follows nccl-tests (decimal GB/s; all-reduce bus bandwidth
= algbw x 2(n-1)/n, the traffic each link carries in a ring).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import heartbeat, signals
from ..children import die_with_parent
from ..envs import subprocess_env
from ..errors import ProbeError
from ..jsontypes import JSONObject
from ..util import atomic_write_json, atomic_write_text, format_size
from ._jsonneed import need_dict, need_list, to_float, to_int
from .arms import Arm
from .config import ProbeConfig
from .trials import SetAside, TrialRecord

if TYPE_CHECKING:
    from ._worker_types import AllReduceSpec
    from .transport_model import TransportProof

SCHEMA = 1
WORKER_MODULE = "pytest_p2p.probes._allreduce_worker"
CHECK_SIZES = (4096, 64 * 1024**2)  # LL protocol at 4 KiB, Simple at 64 MiB


def algbw_gbs(nbytes: int, time_us: float) -> float:
    """nccl-tests' algorithm bandwidth: bytes / time, decimal GB/s."""
    return nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


def busbw_factor(op: str, nranks: int) -> float:
    """nccl-tests' bus-bandwidth factor (``doc/PERFORMANCE.md``)."""
    if op == "all_reduce":
        return 2 * (nranks - 1) / nranks
    if op in ("all_gather", "reduce_scatter"):
        return (nranks - 1) / nranks
    return 1.0


@dataclass
class Row:
    """One size. ``time_us`` is the median of the kept trials (a recording made before trials: its one value).

    The trial fields are empty for such a recording; the checks then judge it by the old point
    rule and say so, because one measurement has no spread to put a bound on.
    """

    bytes: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    trials_us: tuple[float, ...] = ()  # the kept trials, each the ranks' mean time per all-reduce
    warmup_us: tuple[float, ...] = ()  # the warm-up trials, set aside
    set_aside: tuple[SetAside, ...] = ()  # every trial left out, with its cause (cold, warm-up, host-bound)
    settled: bool | None = None  # did two consecutive warm-up trials agree (None: no trials recorded)
    nranks: int = 2

    @classmethod
    def from_time(cls, nbytes: int, time_us: float, nranks: int) -> Row:
        alg = algbw_gbs(nbytes, time_us)
        return cls(nbytes, time_us, alg, alg * busbw_factor("all_reduce", nranks), nranks=nranks)

    @classmethod
    def from_trials(cls, nbytes: int, record: TrialRecord, nranks: int) -> Row:
        row = cls.from_time(nbytes, record.median, nranks)
        return replace(row, trials_us=record.kept, warmup_us=record.warmup, set_aside=record.set_aside,
                       settled=record.settled)

    def busbw_trials(self) -> list[float]:
        """Bus bandwidth of each kept trial (GB/s)."""
        factor = busbw_factor("all_reduce", self.nranks)
        return [algbw_gbs(self.bytes, t) * factor for t in self.trials_us]

    def to_dict(self) -> JSONObject:
        """The recorded row: the four numbers of old recordings, and the trial fields when there are trials."""
        d: JSONObject = {"bytes": self.bytes, "time_us": self.time_us, "algbw_gbs": self.algbw_gbs,
                         "busbw_gbs": self.busbw_gbs, "size": format_size(self.bytes)}
        if self.trials_us:
            d.update({"trials_us": list(self.trials_us), "warmup_us": list(self.warmup_us),
                      "set_aside": [a.to_dict("time_us") for a in self.set_aside], "settled": self.settled})
        return d

    @classmethod
    def from_recorded(cls, r: Mapping[str, object], nranks: int) -> Row:
        """A recorded row (``TypeError``/``KeyError``/``ValueError`` for a wrong shape; the caller names the file)."""
        row = cls(to_int(r["bytes"]), to_float(r["time_us"]), to_float(r["algbw_gbs"]), to_float(r["busbw_gbs"]),
                  nranks=nranks)
        return _with_trials(row, r)


@dataclass
class AllReduceResult:
    """One (pair, arm) run. ``proof`` is re-parsed from the log, also when replayed."""

    pair: tuple[int, int]
    arm: str
    rows: list[Row]
    correct: bool
    checks: list[JSONObject]
    log_path: Path | None
    proof: TransportProof | None = None
    meta: JSONObject = field(default_factory=dict)
    nccl_tests: JSONObject | None = None  # run_nccl_tests' summary, or {"error": ...}

    @property
    def pair_key(self) -> str:
        return f"gpu{self.pair[0]}-gpu{self.pair[1]}"

    def row(self, nbytes: int) -> Row | None:
        for r in self.rows:
            if r.bytes == nbytes:
                return r
        return None

    def to_dict(self) -> JSONObject:
        return {
            "schema": SCHEMA,
            "probe": "allreduce",
            "pair": list(self.pair),
            "arm": self.arm,
            "rows": [r.to_dict() for r in self.rows],
            "correct": self.correct,
            "checks": self.checks,
            "log": self.log_path.name if self.log_path else None,
            "transport": self.proof.transport if self.proof is not None else None,
            "meta": self.meta,
            "nccl_tests": self.nccl_tests,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object], log_path: Path | None, source: str) -> AllReduceResult:
        """Read a result written by :meth:`to_dict` (a replay); errors name ``source``."""
        try:
            if d.get("schema") != SCHEMA or d.get("probe") != "allreduce":
                raise ValueError(f"not an all-reduce probe result of schema {SCHEMA}")
            pair_ids = need_list(d["pair"], "pair")
            pair = (to_int(pair_ids[0]), to_int(pair_ids[1]))
            meta = dict(need_dict(d.get("meta", {}), "meta"))
            nranks = to_int(meta.get("world_size") or 2)
            rows = [Row.from_recorded(r, nranks) for r in _objects(d["rows"], "rows")]
            nccl_tests = d.get("nccl_tests")
            return cls(pair, str(d["arm"]), rows, bool(d["correct"]), _objects(d.get("checks", []), "checks"),
                       log_path, None, meta,
                       None if nccl_tests is None else need_dict(nccl_tests, "nccl_tests"))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ProbeError(f"{source}: unreadable all-reduce probe result ({type(exc).__name__}: {exc})") from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def last_line(paths: Sequence[Path]) -> str:
    """The last non-empty line of the newest-written log, to say where a hang or crash stopped."""
    best: tuple[float, str] = (-1.0, "(no log output)")
    for p in paths:
        try:
            lines = [ln for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if lines and mtime >= best[0]:
            best = (mtime, f"{p.name}: {lines[-1].strip()}")
    return best[1]


PROBE_TAG = "[p2p-probe] "  # the workers' progress lines (``_allreduce_worker.say``)


def last_probe_line(paths: Sequence[Path]) -> str:
    """What a probe's ranks say they are doing: the last ``[p2p-probe]`` line of the logs, for the heartbeat.

    Why the log: the workers already write one line per step (init, each size, each check), so the
    heartbeat says "rank 0: size 65536 B ..." without a second channel from the ranks. Where NCCL's
    own output has buried that line (its init is many INFO lines), the log's last line says more
    than nothing ("starting the ranks" only while no rank has written anything).
    """
    fallback = ""
    for p in paths:  # rank 0 first: it speaks for the pair
        try:
            with open(p, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 65536))  # the tail: a log of NCCL INFO lines grows large
                tail = fh.read().decode(errors="replace")
        except OSError:
            continue
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        said = [ln[ln.index(PROBE_TAG) + len(PROBE_TAG):] for ln in lines if PROBE_TAG in ln]
        if said:
            return said[-1]
        if lines and not fallback:
            fallback = f"{p.name}: {lines[-1]}"
    return fallback or "starting the ranks"


def kill_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the process group of ``proc`` (it leads its own session), then SIGKILL what is left."""
    if proc.poll() is not None:
        _kill_pg(proc.pid, signal.SIGKILL)  # reap stragglers the leader may have left
        return
    _kill_pg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    _kill_pg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def _kill_pg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_ranks(
    commands: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    logs: Sequence[Path],
    timeout_s: float,
    what: str,
) -> None:
    """Run one process per rank; each in its own session with stdout+stderr to its log.

    Each rank also gets SIGTERM from the kernel if pytest dies, SIGKILL included
    (:func:`pytest_p2p.children.die_with_parent`; armed when called from pytest's main
    thread, where the probe checks run): a hung NCCL rank must not outlive the run.

    Returns when all exit 0. A timeout, a failing rank (the others are then killed: they
    would wait for it forever) or KeyboardInterrupt kills every group and raises
    :class:`ProbeError` naming ``what`` and the last log line.
    """
    procs: list[subprocess.Popen[bytes]] = []
    handles = []
    try:
        for cmd, env, log in zip(commands, envs, logs, strict=True):
            log.parent.mkdir(parents=True, exist_ok=True)
            fh = open(log, "wb")  # noqa: SIM115 - closed in finally
            handles.append(fh)
            with signals.held():  # an interrupt inside Popen would lose a rank that the finally must kill
                procs.append(subprocess.Popen(list(cmd), env=dict(env), stdout=fh, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True,
                                              preexec_fn=die_with_parent()))
        deadline = time.monotonic() + timeout_s
        heartbeat.step(lambda: f"last said: {last_probe_line(logs)}")  # read only when the line is drawn
        while True:
            heartbeat.tick()
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                raise ProbeError(f"{what}: rank {i} exited with status {code}; its last log line: "
                                 f"{last_line([logs[i]])} (logs: {', '.join(str(p) for p in logs)})")
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                raise ProbeError(f"{what}: timed out after {timeout_s:g} s (a hung NCCL rank?); process groups "
                                 f"killed; last log line: {last_line(logs)}")
            time.sleep(0.05)
    finally:  # success, failure, timeout or Ctrl-C: no rank's process group outlives this call
        for p in procs:
            kill_group(p)
        for fh in handles:
            fh.close()


def run_allreduce(
    pair: tuple[int, int],
    arm: Arm,
    cfg: ProbeConfig,
    rig_env: Mapping[str, str] | None,
    out_dir: str | os.PathLike[str],
    python: str = sys.executable,
    worker: Sequence[str] | None = None,
) -> AllReduceResult:
    """Run the all-reduce probe for one pair and arm; write ``allreduce.json``, ``nccl.log``, ``transport_proof.json``.

    ``worker`` replaces ``[python, "-m", WORKER_MODULE]`` (tests use a fake worker).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    what = f"all-reduce probe, arm {arm.name}, pair gpu{pair[0]}-gpu{pair[1]}"
    spec_path, raw_path = out / "allreduce_spec.json", out / "allreduce_raw.json"
    if raw_path.exists():
        raw_path.unlink()
    check_sizes = [s for s in CHECK_SIZES if s <= max(cfg.sizes)] or [min(cfg.sizes)]
    spec: AllReduceSpec = {
        "sizes": list(cfg.sizes), "check_sizes": check_sizes, "iters": cfg.iters, "warmup": cfg.warmup,
        "graph": cfg.graph, "direct": cfg.direct, "graph_launches": cfg.graph_launches, "out": str(raw_path),
        "trials": cfg.trials,
    }
    atomic_write_json(spec_path, spec)
    port = free_port()
    base = subprocess_env(pair, rig_env, arm.env)
    envs, logs = [], []
    for rank in range(2):
        env = dict(base)
        env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"})
        envs.append(env)
        logs.append(out / f"rank{rank}.log")
    cmd = [*(worker or [python, "-m", WORKER_MODULE]), str(spec_path)]
    try:
        with heartbeat.phase(f"probe all-reduce {arm.name} gpu{pair[0]}-gpu{pair[1]}"):
            run_ranks([cmd, cmd], envs, logs, cfg.timeout_s, what)
    finally:
        log_path = merge_logs(logs, out / "nccl.log")
    try:
        raw = json.loads(raw_path.read_text())
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{what}: the workers exited without a readable result {raw_path} ({exc}); "
                         f"last log line: {last_line(logs)}") from None
    result = result_from_raw(pair, arm, raw, log_path, str(raw_path))
    result.meta["env"] = {k: base[k] for k in sorted(base) if k.startswith(("NCCL_", "CUDA_", "TORCH_NCCL"))}
    result.meta["arm"] = arm.to_dict()
    result.proof = proof_from_log(log_path)
    write_result(result, out)
    return result


def result_from_raw(pair: tuple[int, int], arm: Arm, raw: Mapping[str, object], log_path: Path | None,
                    source: str) -> AllReduceResult:
    """Turn the worker's times into rows (bandwidths computed here, where they are tested)."""
    try:
        n = to_int(raw["world_size"])
        rows = [_with_trials(Row.from_time(to_int(r["bytes"]), to_float(r["time_us"]), n), r)
                for r in _objects(raw["rows"], "rows")]
        checks = _objects(raw["checks"], "checks")
        correct = bool(checks) and all(to_int(c["wrong"]) == 0 for c in checks)
        meta: JSONObject = {k: raw.get(k) for k in ("world_size", "graph", "timing_method", "iters", "warmup",
                                                    "graph_launches", "torch_version", "nccl_version",
                                                    "device_names")}
        for k in ("trials", "gate", "ramp_s"):  # written by workers that time trials; absent before
            if k in raw:
                meta[k] = raw[k]
    except (KeyError, TypeError, ValueError) as exc:
        raise ProbeError(f"{source}: malformed worker result ({type(exc).__name__}: {exc})") from None
    try:
        total = to_int(raw.get("iters") or 0) * to_int(raw.get("graph_launches") or 0)
    except (TypeError, ValueError):  # only a label: a malformed count must not lose the measurement
        total = 0
    meta["timing"] = {
        "direct-events": "direct ncclAllReduce calls back to back (as nccl-tests' own loop), queued behind a gate "
                         "kernel and timed by CUDA events, per trial; mean over ranks",
        "direct-graph-events": f"CUDA graph of {raw.get('iters')} direct ncclAllReduce calls (as nccl-tests -G), "
                               "replays queued behind a gate kernel and timed by CUDA events, per trial; "
                               "mean over ranks",
        "graph-events": f"CUDA graph of {raw.get('iters')} torch all-reduces, replays queued behind a gate kernel "
                        "and timed by CUDA events, per trial; mean over ranks",
        "eager-events": "torch all-reduces back to back, queued behind a gate kernel and timed by CUDA events, "
                        "per trial; mean over ranks",
        "direct-graph": f"CUDA graph of {raw.get('iters')} direct ncclAllReduce calls x "
                        f"{raw.get('graph_launches')} replays (as nccl-tests -G), mean over ranks",
        "direct": f"{total} back-to-back direct ncclAllReduce calls on one stream (as nccl-tests), "
                  "mean over ranks",
        "graph": f"CUDA graph of {raw.get('iters')} torch all-reduces x {raw.get('graph_launches')} replays, "
                 "mean over ranks",
    }.get(str(raw.get("timing_method") or ("graph" if raw.get("graph") else "eager")),
          "eager torch loop (includes Python launch overhead), mean over ranks")
    return AllReduceResult(pair, arm.name, rows, correct, checks, log_path, None, meta)


def _with_trials(row: Row, r: Mapping[str, object]) -> Row:
    """``row`` with the trial fields of a recorded or raw row, when it has them (older ones do not)."""
    if "trials_us" not in r:
        return row
    kept = tuple(to_float(x) for x in need_list(r["trials_us"], "trials_us"))
    warm = tuple(to_float(x) for x in need_list(r.get("warmup_us", []), "warmup_us"))
    aside = tuple(SetAside(to_float(a["time_us"]), str(a["cause"]))
                  for a in (need_dict(x, "an item of set_aside") for x in need_list(r.get("set_aside", []),
                                                                                  "set_aside")))
    settled = r.get("settled")
    return replace(row, trials_us=kept, warmup_us=warm, set_aside=aside,
                   settled=None if settled is None else bool(settled))


def _objects(value: object, what: str) -> list[JSONObject]:
    """A JSON array of objects (``TypeError`` for another shape, read as a malformed result)."""
    return [need_dict(item, f"an item of {what}") for item in need_list(value, what)]


def merge_logs(logs: Sequence[Path], target: Path) -> Path:
    parts = []
    for p in logs:
        try:
            parts.append(p.read_text(errors="replace"))
        except OSError:
            continue
    atomic_write_text(target, "".join(t if t.endswith("\n") or not t else t + "\n" for t in parts))
    return target


def proof_from_log(log_path: Path) -> TransportProof:
    """The transport proof of a recorded NCCL log (an unreadable file is a ProbeError naming it)."""
    from .transport import parse_nccl_log

    try:
        text = log_path.read_text(errors="replace")
    except OSError as exc:
        raise ProbeError(f"{log_path}: cannot read the NCCL log ({exc.strerror or exc})") from None
    return parse_nccl_log(text, str(log_path))


def write_result(result: AllReduceResult, out: Path) -> None:
    atomic_write_json(out / "allreduce.json", result.to_dict())
    if result.proof is not None:
        atomic_write_json(out / "transport_proof.json", result.proof.to_dict())
