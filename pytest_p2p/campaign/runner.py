"""The campaign runner: arms x points x reps for one GPU pair, into one results directory.

Order of work (the seed's pipeline, made unattended):

1. write ``run.json`` (status ``running``), ``env/`` (snapshot, versions, kernel cmdline);
2. **smoke** (model): each arm's server starts and answers one tiny request, so a broken
   arm fails in a minute, not after an hour of the other arm;
3. **timed slots** in schedule order (:mod:`.schedule`): for each slot, under the GPU
   lease, wait for free VRAM, record the idle power baseline, start the arm's server
   (or probe processes), then for each point: warm-up requests (excluded), the timed
   window with telemetry marks, the rep file; the server is reused across the points of
   its slot because its NCCL environment cannot change anyway; cooldown between slots;
4. aggregate each scenario, judge the uplift, mark the run ``complete``, render the report.

Every rep is written the moment it is measured (atomically), so an interruption loses
at most the rep in flight; ``run.json`` then says ``interrupted`` and lists what is missing.

The server/probe work is behind a small *backend* interface, so the bookkeeping here is
tested on CPU with a fake backend, and the real ones (vLLM or stand-in through
``serve.server.launch``; NCCL all-reduce through ``probes.allreduce.run_allreduce``)
stay thin.
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from ..errors import P2PError
from ..lease import GpuLease
from ..util import atomic_write_json
from .config import CampaignConfig
from .energy import energy_metrics, window_energy
from .progress import Progress
from .schedule import build_schedule, describe
from .stats import CI_KIND, STD_KIND, UPLIFT_KIND, paired_uplift, summarize
from .telemetry import Sampler, _Reader, assess, make_reader

Link = Mapping[int, tuple[int | None, int | None]]


class CampaignError(P2PError):
    """A campaign could not run (bad plan, a scenario over its time limit, a server that never came up)."""


# --------------------------------------------------------------------------- backends


class Backend(Protocol):
    """What the runner needs from "a server" or "a probe"; see :class:`ModelBackend`, :class:`ProbeBackend`."""

    kind: str

    def smoke(self, arm: Any, log_path: Path) -> None: ...

    def slot(self, arm: Any, rep: int, log_path: Path) -> contextlib.AbstractContextManager[Any]: ...

    def warm(self, handle: Any, point: str) -> None: ...

    def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]: ...

    def proof(self, handle: Any, arm: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]: ...

    def describe(self) -> dict[str, Any] | None: ...


def concurrency_of(point: str) -> int:
    return int(point[1:])


@dataclass
class ModelBackend:
    """A server per arm and slot (vLLM or the stand-in, through the serve stage's ``launch``)."""

    server: Any  # serve.config.ServerConfig
    campaign: CampaignConfig
    pair: tuple[int, int]
    rig_env: Mapping[str, str]
    kind: str = "model"

    def _load_kw(self) -> dict[str, Any]:
        load = getattr(self.server, "load", None)
        return {
            "input_len": self.campaign.input_len or getattr(load, "input_len", 128),
            "output_len": self.campaign.output_len or getattr(load, "output_len", 128),
            "seed": getattr(load, "seed", self.campaign.seed),
            "request_timeout_s": self.campaign.request_timeout_s or getattr(self.server, "request_timeout_s", 300.0),
            "endpoint": getattr(load, "endpoint", "completions"),
        }

    @contextlib.contextmanager
    def slot(self, arm: Any, rep: int, log_path: Path) -> Iterator[Any]:
        from ..serve.server import launch

        with launch(self.server, arm, self.pair, self.rig_env, log_path) as srv:
            yield srv

    def smoke(self, arm: Any, log_path: Path) -> None:
        from ..serve.loadgen import run_load

        with self.slot(arm, 0, log_path) as srv:
            kw = self._load_kw()
            kw.update(output_len=min(4, kw["output_len"]), input_len=min(16, kw["input_len"]))
            res = run_load(srv.base_url, srv.api_key, srv.model, concurrency=1, num_prompts=1, warmup=0, **kw)
            if not res.get("completed"):
                raise CampaignError(f"smoke test of arm {arm.name}: the server answered no request "
                                    f"(failed={res.get('failed')}); server log: {log_path}")

    def warm(self, handle: Any, point: str) -> None:
        if self.campaign.warmup <= 0:
            return
        from ..serve.loadgen import run_load

        c = concurrency_of(point)
        run_load(handle.base_url, handle.api_key, handle.model, concurrency=c,
                 num_prompts=max(self.campaign.warmup, c), warmup=0, **self._load_kw())

    def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]:
        from ..serve.loadgen import run_load

        c = concurrency_of(point)
        return dict(run_load(handle.base_url, handle.api_key, handle.model, concurrency=c,
                             num_prompts=c * self.campaign.prompts_per_concurrency, warmup=0, **self._load_kw()))

    def proof(self, handle: Any, arm: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(transport proof dict, attestation dict with ``problems``) from the server log."""
        att = handle.attestation()  # serve.attest.Attestation
        d = att.to_dict()
        d["problems"] = list(att.problems(arm.expect_transport))
        return att.transport.to_dict(), d

    def describe(self) -> dict[str, Any] | None:
        s = self.server
        return {"command": list(getattr(s, "command", ())), "model": getattr(s, "model", None),
                "args": dict(getattr(s, "args", {}) or {}), "flags": list(getattr(s, "flags", ()) or ()),
                "simulated": bool(getattr(s, "simulated", False))}


@dataclass
class ProbeBackend:
    """The NCCL all-reduce probe (no model): one probe run per arm and slot covers every size."""

    probe: Any  # probes.config.ProbeConfig
    campaign: CampaignConfig
    pair: tuple[int, int]
    rig_env: Mapping[str, str]
    out_root: Path
    kind: str = "probe"
    worker: Sequence[str] | None = None  # replaces the torch worker command (tests use a fake one)

    def smoke(self, arm: Any, log_path: Path) -> None:
        return None  # a probe run is its own smoke test: it fails fast with the last log line

    @contextlib.contextmanager
    def slot(self, arm: Any, rep: int, log_path: Path) -> Iterator[Any]:
        # Lazy: the probe runs inside the first point's timed window, so that rep's telemetry
        # (and its throttle/downtrain flags) covers the all-reduces; later points read its rows.
        yield {"arm": arm, "rep": rep, "log_path": log_path, "result": None}

    def _result(self, handle: dict[str, Any]) -> Any:
        if handle["result"] is None:
            from ..probes.allreduce import run_allreduce

            arm, rep = handle["arm"], handle["rep"]
            cfg = dataclasses.replace(self.probe, sizes=tuple(self.campaign.sizes), nccl_tests=False)
            out = self.out_root / f"{arm.name}_run{rep}"
            result = run_allreduce(self.pair, arm, cfg, self.rig_env, out, worker=self.worker)
            with contextlib.suppress(OSError):
                if result.log_path is not None:
                    shutil.copyfile(result.log_path, handle["log_path"])
            handle["result"] = result
        return handle["result"]

    def warm(self, handle: Any, point: str) -> None:
        return None

    def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]:
        from ..util import parse_size

        result = self._result(handle)
        row = result.row(parse_size(point[1:]))
        if row is None:
            raise CampaignError(f"probe result of arm {result.arm} has no row for {point}")
        return {"time_us": row.time_us, "busbw_gbs": row.busbw_gbs, "algbw_gbs": row.algbw_gbs,
                "bytes": row.bytes, "correct": bool(result.correct)}

    def proof(self, handle: Any, arm: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        result = self._result(handle)
        return (result.proof.to_dict() if result.proof is not None else None), None

    def describe(self) -> dict[str, Any] | None:
        return None


# --------------------------------------------------------------------------- result


@dataclass
class CampaignResult:
    """What the checks assert on; everything is also on disk under ``run_dir``."""

    run_dir: Path
    pair: tuple[int, int]
    pair_key: str
    kind: str
    arms: list[str]
    points: list[str]
    reps: int
    simulated: bool
    status: str
    aggregates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    rep_data: dict[tuple[str, str], dict[int, dict[str, Any]]] = field(default_factory=dict)
    proofs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    attestations: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    expect_transport: dict[str, str] = field(default_factory=dict)
    uplift: dict[str, dict[str, Any]] = field(default_factory=dict)  # point -> paired_uplift + labels
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: CampaignConfig | None = None

    def aggregate(self, arm: str, point: str) -> dict[str, Any] | None:
        return self.aggregates.get((arm, point))

    def flags(self, arm: str, point: str) -> dict[str, list[int]]:
        agg = self.aggregates.get((arm, point)) or {}
        return agg.get("flags") or {"throttled_reps": [], "downtrained_reps": []}

    def uplift_verdict(self, point: str) -> Any:
        """The threshold rule applied at ``point`` (raises ``TooFewRepsError`` when it cannot be)."""
        from ..verdict.thresholds import judge

        if self.config is None or self.config.arm_b is None:
            raise CampaignError("an uplift needs two arms in campaign.arms")
        up = self.uplift.get(point) or {"n": 0, "estimate": None, "ci95": None}
        return judge(up, point, self.config.uplift_rule_for(self.kind), metric=self.config.metric(self.kind),
                     faster_arm=self.config.arm_a, slower_arm=self.config.arm_b)


# --------------------------------------------------------------------------- helpers


def _versions(evidence: Any, proof: Mapping[str, Any] | None) -> dict[str, Any]:
    from importlib import metadata

    def ver(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    git = None
    with contextlib.suppress(Exception):
        import subprocess

        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        git = out.stdout.strip() or None if out.returncode == 0 else None
    return {
        "driver": getattr(evidence, "driver_version", None),
        "cuda_driver": getattr(evidence, "cuda_driver_version", None),
        "nccl": (proof or {}).get("nccl_version"),
        "torch": ver("torch"), "vllm": ver("vllm"), "plugin": ver("pytest-p2p"),
        "python": platform.python_version(), "kernel": platform.release(), "git_commit": git,
    }


def expected_links(evidence: Any, gpus: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
    """The link each GPU should reach under load: the evidence's loaded reading, else its max."""
    out: dict[int, tuple[int | None, int | None]] = {}
    for g in gpus:
        try:
            ge = evidence.gpu(g)
        except (KeyError, AttributeError):
            continue
        reading = ge.pcie.loaded or ge.pcie.max
        out[g] = (reading.gen, reading.width)
    return out


def wait_vram_free(gpus: Sequence[int], limit_mib: int, timeout_s: float, *, live: bool) -> str:
    """Wait until every GPU of the pair uses at most ``limit_mib`` (a previous server's memory is back)."""
    if not live:
        return "skipped: no live NVML (simulated run)"
    import pynvml

    pynvml.nvmlInit()
    try:
        handles = {g: pynvml.nvmlDeviceGetHandleByIndex(g) for g in gpus}
        start = time.monotonic()
        while True:
            used = {g: pynvml.nvmlDeviceGetMemoryInfo(h).used // (1024 * 1024) for g, h in handles.items()}
            busy = {g: u for g, u in used.items() if u > limit_mib}
            if not busy:
                return f"free after {time.monotonic() - start:.1f} s ({used} MiB used)"
            if time.monotonic() - start > timeout_s:
                detail = ", ".join(f"GPU {g}: {u} MiB" for g, u in busy.items())
                raise CampaignError(f"VRAM not free after {timeout_s:.0f} s ({detail} used, limit {limit_mib} MiB): "
                                    "another process holds the GPU, or a previous server left one behind")
            time.sleep(1.0)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def call_with_timeout(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run ``fn`` in a thread; past ``timeout_s`` raise (the slot's teardown then kills the server)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="p2p-scenario", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise CampaignError(f"{what} exceeded its scenario timeout of {timeout_s:.0f} s "
                            "(campaign.scenario_timeout_s)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


# --------------------------------------------------------------------------- runner


@dataclass
class CampaignRunner:
    """Runs one campaign for one pair. Construct with everything explicit (tests do), or via :func:`from_session`."""

    pair: tuple[int, int]
    config: CampaignConfig
    kind: str
    arms: Mapping[str, Any]  # name -> probes.arms.Arm
    backend: Backend
    results_root: Path
    rig_name: str
    rig_digest: str = ""
    evidence: Any = None
    snapshot: Mapping[str, Any] | None = None
    simulated: bool = False
    live: bool = False
    run_id: str | None = None
    lease: GpuLease = field(default_factory=GpuLease)
    progress: Progress | None = None
    reader_factory: Callable[[Sequence[int]], _Reader] | None = None
    sleep: Callable[[float], None] = time.sleep
    render_plots: bool = True

    @property
    def pair_key(self) -> str:
        return f"gpu{self.pair[0]}-gpu{self.pair[1]}"

    def _reader(self) -> _Reader:
        if self.reader_factory is not None:
            return self.reader_factory(list(self.pair))
        return make_reader(list(self.pair), simulated=not self.live,
                           link=expected_links(self.evidence, self.pair))

    def _check_plan(self) -> list[str]:
        missing = [a for a in self.config.arms if a not in self.arms]
        if missing:
            raise CampaignError(f"campaign.arms names {', '.join(missing)}, which the rig does not define "
                                f"(defined: {', '.join(self.arms)})")
        if len(self.config.arms) < 2:
            raise CampaignError(f"a campaign compares arms: campaign.arms needs at least two, got "
                                f"{list(self.config.arms)}")
        return self.config.points(self.kind)

    def _run_meta(self, points: list[str], schedule: str) -> dict[str, Any]:
        gpus = []
        for g in self.pair:
            ge = None
            with contextlib.suppress(KeyError, AttributeError):
                ge = self.evidence.gpu(g)
            gpus.append({"index": g, "bus_id": getattr(ge, "bus_id", None), "uuid": getattr(ge, "uuid", None),
                         "name": getattr(ge, "name", None)})
        arms = {}
        for name in self.config.arms:
            arm = self.arms[name]
            arms[name] = {"env": dict(arm.env), "expect_transport": arm.expect_transport,
                          "custom_all_reduce": getattr(arm, "custom_all_reduce", None)}
        return {
            "rig": self.rig_name, "rig_digest": self.rig_digest, "kind": self.kind,
            "pair": {"key": self.pair_key, "gpus": gpus}, "arms": arms, "points": points,
            "reps": self.config.reps, "schedule": schedule, "schedule_mode": self.config.schedule,
            "simulated": self.simulated, "status": "running", "missing": [],
            "server": self.backend.describe(),
            "campaign": self.config.to_dict(),
            "uplift": {"metric": self.config.metric(self.kind), "direction": self.config.direction(self.kind),
                       "rule": self.config.uplift_rule_for(self.kind).to_dict(),
                       "exclude_throttled": self.config.exclude_throttled,
                       "faster_arm": self.config.arm_a, "slower_arm": self.config.arm_b},
            "statistics": {"std": STD_KIND, "ci95": CI_KIND, "uplift": UPLIFT_KIND},
            "versions": _versions(self.evidence, None),
        }

    def run(self) -> CampaignResult:
        from ..report.results import ResultsDir

        points = self._check_plan()
        slots = build_schedule(list(self.config.arms), self.config.reps, self.config.schedule, self.config.seed)
        rd = ResultsDir.create(self.results_root, self.rig_name, self.pair_key, self.kind, run_id=self.run_id)
        result = CampaignResult(run_dir=rd.path, pair=self.pair, pair_key=self.pair_key, kind=self.kind,
                                arms=list(self.config.arms), points=points, reps=self.config.reps,
                                simulated=self.simulated, status="running", config=self.config,
                                expect_transport={a: self.arms[a].expect_transport for a in self.config.arms})
        if isinstance(self.backend, ProbeBackend):
            self.backend.out_root = rd.path / "probe_runs"  # raw probe output: per arm and rep
        meta = self._run_meta(points, describe(slots))
        rd.write_run_meta(meta)
        self._write_env(rd, meta["versions"])
        for arm in self.config.arms:
            for point in points:
                rd.write_scenario(arm, point, {"env": dict(self.arms[arm].env),
                                               "expect_transport": self.arms[arm].expect_transport,
                                               "server": self.backend.describe(), "simulated": self.simulated})
        if self.progress is None:
            self.progress = Progress(label=self.pair_key, total=len(slots) * len(points))
        pending = {(s.arm, p, s.rep) for s in slots for p in points}
        status = "running"
        try:
            if self.config.smoke and self.kind == "model":
                for arm in self.config.arms:
                    self.progress.update(f"{arm} smoke", 0, self.config.reps, "starting server")
                    log = rd.path / "env" / f"smoke_{arm}.log"
                    with self.lease.hold(self.pair, f"{self.pair_key} smoke {arm}"):
                        self.backend.smoke(self.arms[arm], log)
            for i, slot in enumerate(slots):
                if i > 0 and self.config.cooldown_s > 0:
                    self.sleep(self.config.cooldown_s)
                try:
                    self._run_slot(rd, result, slot.arm, slot.rep, points, pending)
                except P2PError as exc:
                    result.errors.append(f"{slot.arm} rep {slot.rep}: {exc}")
            status = "complete" if not pending and not result.errors else "failed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException as exc:
            status = "failed"
            result.errors.append(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            result.status = status
            result.missing = sorted(f"{a}-{p} rep {r}" for a, p, r in pending)
            self._finish(rd, result, points)
        return result

    def _write_env(self, rd: Any, versions: Mapping[str, Any]) -> None:
        if self.snapshot is not None:
            rd.write_env("snapshot.json", dict(self.snapshot))
            _write_doctor(rd, self.snapshot)
        with contextlib.suppress(OSError):
            rd.write_env("kernel_cmdline.txt", Path("/proc/cmdline").read_text())
        rd.write_env("sysctl.txt", sysctl_text())
        rd.write_env("versions.json", dict(versions))

    def _run_slot(self, rd: Any, result: CampaignResult, arm_name: str, rep: int, points: list[str],
                  pending: set[tuple[str, str, int]]) -> None:
        assert self.progress is not None  # set by run()
        arm = self.arms[arm_name]
        cfg = self.config
        what = f"{self.pair_key} {arm_name} rep {rep}"
        log_path = rd.server_log_path(arm_name, points[0], rep)
        with self.lease.hold(self.pair, what):
            self.progress.update(f"{arm_name}-{points[0]}", rep, cfg.reps, "waiting for free VRAM")
            vram_note = wait_vram_free(self.pair, cfg.vram_free_mib, cfg.vram_free_timeout_s, live=self.live)
            reader = self._reader()
            try:
                idle = Sampler(reader, cfg.telemetry_hz).start()
                if cfg.idle_baseline_s > 0:
                    self.sleep(cfg.idle_baseline_s)
                idle.stop()
                idle_rows = list(idle.rows)
                self.progress.update(f"{arm_name}-{points[0]}", rep, cfg.reps, "starting")
                with self.backend.slot(arm, rep, log_path) as handle:
                    for point in points:
                        self.progress.update(f"{arm_name}-{point}", rep, cfg.reps)
                        data = self._measure_point(rd, handle, reader, arm_name, point, rep, idle_rows)
                        data["meta"]["vram"] = vram_note
                        rd.write_rep(arm_name, point, rep, data)
                        result.rep_data.setdefault((arm_name, point), {})[rep] = data
                        pending.discard((arm_name, point, rep))
                        self.progress.step()
                    if result.proofs.get(arm_name) is None:
                        # after the load, so the log holds every NCCL connection the server made
                        proof, att = self.backend.proof(handle, arm)
                        result.proofs[arm_name] = proof
                        result.attestations[arm_name] = att
                        for point in points:
                            if proof is not None:
                                rd.write_proof(arm_name, point, proof)
                            if att is not None:
                                atomic_write_json(rd.scenario_dir(arm_name, point) / "attestation.json", att)
            finally:
                reader.close()
        for point in points[1:]:  # the server served every point of the slot: its log belongs to each
            with contextlib.suppress(OSError):
                if log_path.is_file():
                    shutil.copyfile(log_path, rd.server_log_path(arm_name, point, rep))

    def _measure_point(self, rd: Any, handle: Any, reader: _Reader, arm: str, point: str, rep: int,
                       idle_rows: list[dict[str, Any]]) -> dict[str, Any]:
        cfg = self.config
        what = f"scenario {arm}-{point} rep {rep} on {self.pair_key}"
        if hasattr(reader, "load"):
            reader.load = 0.0  # type: ignore[attr-defined]
        sampler = Sampler(reader, cfg.telemetry_hz).start()
        try:
            deadline = time.monotonic() + cfg.scenario_timeout_s
            call_with_timeout(lambda: self.backend.warm(handle, point), cfg.scenario_timeout_s, what + " warm-up")
            if hasattr(reader, "load"):
                reader.load = 1.0  # type: ignore[attr-defined]
            sampler.mark("start")
            started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
            left = max(1.0, deadline - time.monotonic())
            metrics = call_with_timeout(lambda: self.backend.measure(handle, point, rep), left, what)
            sampler.mark("end")
        finally:
            sampler.stop()
            sampler.write_csv(rd.telemetry_path(arm, point, rep))
        window = sampler.window()
        flags = assess(window, expected_links(self.evidence, self.pair) if self.evidence is not None else {})
        energy = window_energy(sampler.mark_rows.get("start", []), sampler.mark_rows.get("end", []), window,
                               output_tokens=metrics.get("total_output_tokens") if self.kind == "model" else None,
                               idle_rows=idle_rows)
        data: dict[str, Any] = dict(metrics)
        if self.kind == "model":
            data.update(energy_metrics(energy))
        data["energy"] = energy
        data["flags"] = {**flags.to_dict(), "telemetry_errors": sampler.errors[:5]}
        data["meta"] = {"arm": arm, "point": point, "rep": rep, "started_at": started,
                        "window_s": sampler.marks["end"] - sampler.marks["start"], "simulated": self.simulated}
        return data

    def _excluded(self, data: Mapping[str, Any]) -> bool:
        f = data.get("flags") or {}
        return self.config.exclude_throttled and bool(f.get("throttled") or f.get("downtrained"))

    def _finish(self, rd: Any, result: CampaignResult, points: list[str]) -> None:
        """Aggregates, uplift and the final run.json — also after an interruption (with what exists)."""
        for arm in self.config.arms:
            for point in points:
                reps = result.rep_data.get((arm, point), {})
                if not reps:
                    continue
                agg = self._aggregate(reps)
                result.aggregates[(arm, point)] = {"arm": arm, "point": point, **agg}
                rd.write_aggregate(arm, point, agg)
        higher = self.config.direction(self.kind) == "higher"
        metric = self.config.metric(self.kind)
        a, b = self.config.arm_a, self.config.arm_b
        if b is not None:
            for point in points:
                ra, rb = result.rep_data.get((a, point), {}), result.rep_data.get((b, point), {})
                av: list[float | None] = []
                bv: list[float | None] = []
                for k in range(1, self.config.reps + 1):
                    da, db = ra.get(k), rb.get(k)
                    ok = (da is not None and db is not None and not self._excluded(da) and not self._excluded(db)
                          and isinstance(da.get(metric), (int, float)) and isinstance(db.get(metric), (int, float)))
                    av.append(float(da[metric]) if ok else None)  # type: ignore[index]
                    bv.append(float(db[metric]) if ok else None)  # type: ignore[index]
                try:
                    up = paired_uplift(av, bv, higher_is_better=higher)
                except ValueError as exc:
                    up = {"estimate": None, "ci95": None, "n": 0, "error": str(exc)}
                result.uplift[point] = {**up, "metric": metric, "faster_arm": a, "slower_arm": b}
        if result.simulated:
            result.notes.append("SIMULATED: stand-in server and/or simulated telemetry; not a measurement")
        nccl = next((p.get("nccl_version") for p in result.proofs.values() if p), None)
        versions = _versions(self.evidence, {"nccl_version": nccl})
        rd.write_run_meta({
            "status": result.status, "missing": result.missing, "errors": result.errors,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "versions": versions,
            "transport": {arm: (p or {}).get("transport") for arm, p in result.proofs.items()},
        })
        if self.progress is not None:
            self.progress.finish(f"[p2p] {self.pair_key}: campaign {result.status} -> {rd.path}")
        try:
            from ..report.render import render_report

            render_report(rd.path, plots=self.render_plots)
        except P2PError as exc:
            result.notes.append(f"report not rendered: {exc}")
        except ImportError as exc:  # report stage absent in a partial install
            result.notes.append(f"report not rendered: {exc}")

    def _aggregate(self, reps: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        kept = {k: d for k, d in reps.items() if not self._excluded(d)}
        names: list[str] = []
        for d in kept.values():
            for key, val in d.items():
                if isinstance(val, (int, float)) and not isinstance(val, bool) and key not in names:
                    names.append(key)
        metrics = {n: summarize([float(d[n]) for _, d in sorted(kept.items())
                                 if isinstance(d.get(n), (int, float)) and not isinstance(d.get(n), bool)])
                   for n in names}
        energy: dict[str, Any] = {}
        for key in ("tokens_per_joule", "joules_per_token", "avg_watts", "total_joules", "idle_total_watts"):
            vals = [float(e[key]) for _, d in sorted(kept.items())
                    if isinstance(e := d.get("energy"), dict) and isinstance(e.get(key), (int, float))]
            if vals:
                energy[key] = summarize(vals)
        methods = sorted({str(d["energy"].get("method")) for d in reps.values() if isinstance(d.get("energy"), dict)})
        energy["method"] = ", ".join(methods) if methods else None
        energy["simulated"] = any(bool((d.get("energy") or {}).get("simulated")) for d in reps.values())
        flags = {
            "throttled_reps": sorted(k for k, d in reps.items() if (d.get("flags") or {}).get("throttled")),
            "downtrained_reps": sorted(k for k, d in reps.items() if (d.get("flags") or {}).get("downtrained")),
            "excluded_reps": sorted(set(reps) - set(kept)),
        }
        return {"metrics": metrics, "energy": energy, "flags": flags}


# --------------------------------------------------------------------------- from a pytest session


def from_session(session: Any, pair: tuple[int, int], config: CampaignConfig, kind: str, *,
                 run_id: str | None = None, progress: Progress | None = None,
                 lease: GpuLease | None = None) -> CampaignRunner:
    """Wire a runner from the lead's ``P2PSession`` (rig, evidence, results root)."""
    rig = session.rig
    rig_env = dict(getattr(rig, "env", {}) or {})
    if kind == "model":
        backend: Backend = ModelBackend(server=rig.server, campaign=config, pair=pair, rig_env=rig_env)
    else:
        backend = ProbeBackend(probe=rig.probe, campaign=config, pair=pair, rig_env=rig_env,
                               out_root=Path(session.results_root))  # re-pointed into the run dir by run()
    snapshot = None
    with contextlib.suppress(Exception):
        snapshot = session.snapshot_dict()
    return CampaignRunner(
        pair=pair, config=config, kind=kind, arms=rig.arms, backend=backend,
        results_root=Path(session.results_root), rig_name=rig.name, rig_digest=getattr(rig, "digest", ""),
        evidence=session.evidence, snapshot=snapshot, simulated=bool(session.simulated),
        live=bool(session.live), run_id=run_id, lease=lease or GpuLease(), progress=progress,
    )


# Kernel settings that move P2P and serving numbers (the seed report recorded these).
SYSCTLS = ("kernel.numa_balancing", "vm.zone_reclaim_mode", "vm.nr_hugepages", "kernel.yama.ptrace_scope",
           "vm.overcommit_memory", "kernel.sched_autogroup_enabled")


def sysctl_text(root: Path = Path("/proc/sys")) -> str:
    """``name = value`` lines like ``sysctl`` prints, ``unavailable`` where this host has no such key."""
    lines = []
    for name in SYSCTLS:
        try:
            value = (root / name.replace(".", "/")).read_text().strip()
        except OSError:
            value = "unavailable"
        lines.append(f"{name} = {value}")
    return "\n".join(lines) + "\n"


def _write_doctor(rd: Any, envelope: Mapping[str, Any]) -> None:
    """``doctor.json`` (as ``python -m pytest_p2p doctor --json`` prints it) and the human table."""
    from ..errors import SnapshotError
    from ..evidence.doctor import doctor_table
    from ..evidence.snapshot import evidence_from_envelope

    try:
        ev = evidence_from_envelope(dict(envelope), "campaign snapshot")
    except SnapshotError as exc:
        rd.write_env("doctor.txt", f"evidence could not be read back: {exc}\n")
        return
    rd.write_env("doctor.json", {"evidence": ev.to_dict()})
    rd.write_env("doctor.txt", doctor_table(ev) + "\n")
