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
4. aggregate each scenario, compute the paired uplift, mark the run, tell subscribers.

A rep is a measurement only if its server stayed alive and the same process through the
window and at least one request completed; otherwise its data is set aside
(``run_<k>.try<n>.failed.json``), the cause recorded, and the rep re-run on a fresh server
(up to ``campaign.rep_retries`` times). Every rep is written the moment it is measured
(atomically), so an interruption — Ctrl-C, SIGTERM, SIGHUP — loses at most the rep in
flight; ``run.json`` then says ``interrupted`` and lists what is missing.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from .. import signals
from ..errors import CampaignError, P2PError, RepFailed
from ..lease import GpuLease
from ..results.write import RunWriter, create_run_dir
from ..util import atomic_write_json
from . import adaptive
from .aggregate import not_measured
from .backends import Backend, ModelBackend, ProbeBackend
from .config import CampaignConfig
from .energy import energy_metrics, window_energy
from .envinfo import run_meta, sysctl_text, write_env
from .finish import write_final
from .gpu import call_with_timeout, expected_links, wait_vram_free
from .outcome import CampaignOutcome
from .progress import Progress
from .result import CampaignResult, RepAttempt
from .schedule import Slot, build_schedule, describe
from .telemetry import Row, Sampler, _Reader, assess, make_reader

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from ..probes.arms import Arm
    from ..stats import SpreadSeen, StartPrior

__all__ = ["CampaignError", "CampaignResult", "CampaignRunner", "ModelBackend", "ProbeBackend", "sysctl_text"]

H = TypeVar("H")
Json = dict[str, object]
Pending = set[tuple[str, str, int]]


@dataclass
class CampaignRunner(Generic[H]):
    """Runs one campaign for one pair. Construct with everything explicit (tests do), or via ``wiring.from_session``."""

    pair: tuple[int, int]
    config: CampaignConfig
    kind: str
    arms: Mapping[str, Arm]
    backend: Backend[H]
    results_root: Path
    rig_name: str
    rig_digest: str = ""
    rig_file_digest: str = ""  # the rig file's bytes (runs saved before content digests were named by it)
    evidence: Evidence | None = None
    snapshot: Mapping[str, object] | None = None
    simulated: bool = False
    live: bool = False
    run_id: str | None = None
    lease: GpuLease = field(default_factory=GpuLease)
    progress: Progress | None = None
    reader_factory: Callable[[Sequence[int]], _Reader] | None = None
    sleep: Callable[[float], None] = time.sleep
    on_finished: Callable[[CampaignOutcome], None] | None = None  # the pytest hook, or a test's callback
    #: per point, the spread of a start mean learned from earlier nights (resident arms; filled from the store)
    start_priors: Mapping[str, StartPrior] = field(default_factory=dict)
    #: per point, what the store held of earlier nights of this design and the spreads they measured (the plan
    #: line sizes the campaign with them, and says ``1 earlier night (2 df)`` where no prior is borrowed); empty
    #: where no store is configured
    prior_history: Mapping[str, SpreadSeen] = field(default_factory=dict)
    _attempts: dict[tuple[str, int], int] = field(default_factory=dict, init=False, repr=False)

    @property
    def pair_key(self) -> str:
        return f"gpu{self.pair[0]}-gpu{self.pair[1]}"

    def _reader(self) -> _Reader:
        if self.reader_factory is not None:
            return self.reader_factory(list(self.pair))
        return make_reader(list(self.pair), simulated=not self.live, link=expected_links(self.evidence, self.pair))

    def _schedule_text(self, slots: list[Slot]) -> str:
        """The run order for ``run.json``: the slots, or for resident arms the windows' ABBA inside each start."""
        cfg = self.config
        mode = cfg.resident_mode(self.kind)
        if mode is None:
            return describe(slots)
        a, b = cfg.arms[0], cfg.arms[1]
        return (f"{mode}: {cfg.starts} start(s) of every arm's server; in each, per point, "
                f"{cfg.windows_text(cfg.points(self.kind))} window "
                f"pair(s) alternating {a} {b} | {b} {a} (the first arm alternating between starts)")

    def _check_plan(self) -> list[str]:
        missing = [a for a in self.config.arms if a not in self.arms]
        if missing:
            raise CampaignError(f"campaign.arms names {', '.join(missing)}, which the rig does not define "
                                f"(defined: {', '.join(self.arms)})")
        if len(self.config.arms) < 2:
            raise CampaignError(f"a campaign compares arms: campaign.arms needs at least two, got "
                                f"{list(self.config.arms)}")
        return self.config.points(self.kind)

    # ------------------------------------------------------------------ the campaign

    def run(self) -> CampaignResult:
        """The whole campaign; SIGTERM/SIGHUP inside it unwind like Ctrl-C (servers torn down, run.json told).

        A model campaign keeps its load generator's client processes for its whole length
        (:func:`~pytest_p2p.serve.loadclients.client_pool`): spawned per window, two of them took ~0.5 s of each
        c64 window's clock on 2x H200 (a Python start each), 64 windows a night."""
        with signals.terminate_as_interrupt():
            if self.kind != "model":
                return self._run()
            from ..serve.loadclients import client_pool

            with client_pool():
                return self._run()

    def _run(self) -> CampaignResult:
        started = time.monotonic()
        points = self._check_plan()
        cfg = self.config
        slots = build_schedule(list(cfg.arms), cfg.reps, cfg.schedule, cfg.seed)
        rd = create_run_dir(self.results_root, self.rig_name, self.pair_key, self.kind, self.run_id)
        result = CampaignResult(run_dir=rd.path, pair=self.pair, pair_key=self.pair_key, kind=self.kind,
                                arms=list(cfg.arms), points=points, reps=cfg.reps, simulated=self.simulated,
                                status="running", config=cfg,
                                expect_transport={a: self.arms[a].expect_transport for a in cfg.arms})
        if isinstance(self.backend, ProbeBackend):
            self.backend.out_root = rd.path / "probe_runs"  # raw probe output: per arm and rep
        resident = cfg.resident_mode(self.kind) is not None
        pending: Pending = (cfg.window_keys(points, range(1, cfg.starts + 1))
                            if resident else {(s.arm, p, s.rep) for s in slots for p in points})
        status = "running"
        try:
            meta = run_meta(self.rig_name, self.rig_digest, self.kind, self.pair, self.evidence, self.arms, cfg,
                            points, self._schedule_text(slots), self.simulated, self.backend.describe(),
                            file_digest=self.rig_file_digest)
            rd.write_run_meta(meta)
            write_env(rd, self.snapshot, dict(meta["versions"]) if isinstance(meta["versions"], dict) else {})
            for arm in cfg.arms:
                for point in points:
                    rd.write_scenario(arm, point, {"env": dict(self.arms[arm].env),
                                                   "expect_transport": self.arms[arm].expect_transport,
                                                   "server": self.backend.describe(), "simulated": self.simulated})
            # the runner owns the design, so it sets the count of windows (or slots) the line counts down: the
            # glue's count of arm x point x reps undercounted a resident campaign (16 of 60 windows on 2x H100,
            # 2026-11-26: "scenario 16/16 ... ETA 0:00" through its last two starts, 11 minutes)
            total = (cfg.starts * cfg.window_pairs(points) * len(cfg.arms) if resident
                     else len(slots) * len(points))
            if self.progress is None:
                self.progress = Progress(label=self.pair_key, total=total)
            self.progress.total = total
            self.progress.pace = None
            if isinstance(self.backend, ModelBackend):
                for hint in (self.backend.graph_capture_note(), self.backend.start_method_note()):
                    if hint is not None:
                        result.notes.append(hint)
            if resident:
                from . import blocks

                self.progress.pace = blocks.pace(self, points)  # type: ignore[arg-type]
                line = blocks.plan_line(self, points)  # type: ignore[arg-type]
                self.progress.show(f"[p2p] {self.pair_key}: {line}")
                result.notes.append(line)
                blocks.run_blocks(self, rd, result, points, pending, started)  # type: ignore[arg-type]
                status = "complete" if not pending and not result.errors else "failed"
                return result
            if cfg.smoke and self.kind == "model":
                for arm in cfg.arms:
                    with self.progress.waiting(f"{arm} smoke", 0, cfg.reps, "starting server"), \
                            self.lease.hold(self.pair, f"{self.pair_key} smoke {arm}"):
                        self.backend.smoke(self.arms[arm], rd.path / "env" / f"smoke_{arm}.log")
            for i, slot in enumerate(slots):
                if i > 0 and cfg.cooldown_s > 0:
                    self.sleep(cfg.cooldown_s)
                signals.checkpoint()
                self._run_with_retries(rd, result, slot.arm, slot.rep, points, pending)
            self._rerun_screened(rd, result, points, pending)
            self._add_pairs(rd, result, points, pending, started)
            status = "complete" if not pending and not result.errors else "failed"
        except BaseException as exc:
            if signals.interrupted_by(exc):
                # also when the KeyboardInterrupt surfaced wrapped: a signal landing inside a class
                # body being imported comes out as "RuntimeError: Error calling __set_name__"
                status = "interrupted"
                sig = signals.received()
                if sig is not None:
                    result.notes.append(f"interrupted by signal {sig} (treated like Ctrl-C)")
                raise
            status = "failed"
            result.errors.append(str(exc) if isinstance(exc, P2PError) else f"{type(exc).__name__}: {exc}")
            raise
        finally:
            result.status = status
            result.missing = sorted(f"{a}-{p} rep {r}" for a, p, r in pending)
            self._finish(rd, result, points)
        return result

    def _run_with_retries(self, rd: RunWriter, result: CampaignResult, arm: str, rep: int, points: list[str],
                          pending: Pending) -> None:
        """One slot; a rep that is not a measurement is set aside and re-run on a fresh server."""
        for attempt in range(1, self.config.rep_retries + 2):
            self._attempts[(arm, rep)] = self._attempts.get((arm, rep), 0) + 1
            try:
                self._run_slot(rd, result, arm, rep, [p for p in points if (arm, p, rep) in pending], pending)
                return
            except RepFailed as exc:
                if attempt > self.config.rep_retries:
                    result.errors.append(f"{arm} rep {rep}: not measured after {attempt} attempt(s): {exc}")
                    return
                result.notes.append(f"{arm} rep {rep} attempt {attempt} set aside and re-run: "
                                    f"{str(exc).splitlines()[0]}")
                if self.config.cooldown_s > 0:
                    self.sleep(self.config.cooldown_s)
            except OSError:
                raise  # disk full, read-only: nothing more can be recorded; the campaign stops here
            except P2PError as exc:
                result.errors.append(f"{arm} rep {rep}: {exc}")
                return

    # ------------------------------------------------------------------ robust and adaptive reps (issue 9)

    def _arm_reps(self, result: CampaignResult, point: str) -> tuple[dict[int, Json], dict[int, Json]]:
        b = self.config.arm_b or self.config.arm_a
        return result.rep_data.get((self.config.arm_a, point), {}), result.rep_data.get((b, point), {})

    def _run_block(self, rd: RunWriter, result: CampaignResult, rep: int, points: list[str],
                   pending: Pending) -> None:
        """Both arms' slots of block ``rep``, in the schedule's order for that block (ABBA alternates)."""
        cfg = self.config
        for slot in build_schedule(list(cfg.arms), rep, cfg.schedule, cfg.seed):
            if slot.rep == rep:
                pending.update((slot.arm, p, rep) for p in points)
                if cfg.cooldown_s > 0:
                    self.sleep(cfg.cooldown_s)
                signals.checkpoint()
                self._run_with_retries(rd, result, slot.arm, rep, points, pending)

    def _rerun_screened(self, rd: RunWriter, result: CampaignResult, points: list[str], pending: Pending) -> None:
        """Re-run, once, each pair the screen flags (telemetry or an outlying value); the old files are kept aside."""
        cfg = self.config
        if cfg.arm_b is None or pending or result.errors:
            return
        why = adaptive.screen_campaign(result.rep_data, cfg, self.kind, list(range(1, result.reps + 1)), points)
        for k, reason in sorted(why.items()):
            for arm in cfg.arms:
                old = {p: d for p in points if (d := result.rep_data.get((arm, p), {}).pop(k, None)) is not None}
                self._set_aside(rd, result, arm, k, points, old, f"screened: {reason}", kind="screened")
            result.notes.append(f"rep {k} screened and re-run: {reason}")
            self._run_block(rd, result, k, points, pending)

    def _add_pairs(self, rd: RunWriter, result: CampaignResult, points: list[str], pending: Pending,
                   started: float) -> None:
        """While an uplift decision is inconclusive, add pairs up to ``max_reps``/``max_time_s`` (alpha per look).

        One error budget per campaign, as the resident campaign's (``blocks``): each point is decided at the rule's
        alpha split over the points, spent over the looks. At the rule's alpha each, 4 points of a restart
        campaign at a true 0 % failed 2.3-4.5 % of campaigns; split, 0.7-1.05 % (``benchmarks/verdict_family.py``)."""
        cfg = self.config
        if cfg.arm_b is None or pending or result.errors:
            return
        rule = cfg.uplift_rule_for(self.kind)
        alpha = rule.family_alpha(len(points))
        budget = adaptive.TimeBudget(cfg.max_time_s, started, "pair")
        budget.took(started, time.monotonic(), size=max(1, result.reps))  # a planned pair's share until one is added
        while True:
            reps = list(range(1, result.reps + 1))
            decisions = {p: adaptive.decide(*self._arm_reps(result, p), cfg, self.kind, reps, rule.threshold(p),
                                            alpha) for p in points}
            # decided, but not known to the precision the rig asks (the estimate's interval at the point's alpha)
            halves = adaptive.estimate_halfwidths({p: self._arm_reps(result, p) for p in points}, cfg, self.kind,
                                                  reps, alpha, {})
            wide = adaptive.too_wide(halves, cfg.precision)
            more = adaptive.should_add(decisions, cfg, result.reps, alpha) or bool(
                wide and result.reps < max(cfg.reps, cfg.max_reps or cfg.reps))
            stopped = None
            if more and (refused := budget.refuses(time.monotonic())) is not None:
                stopped = refused
            elif not more and (wide or any(not d.decided for d in decisions.values())):
                stopped = (f"max_reps={cfg.max_reps} reached" if cfg.max_reps and cfg.max_reps > cfg.reps
                           else "fixed design (campaign.max_reps not set)")
            if not more or stopped is not None:
                result.decisions = {p: {**adaptive.decision_json(d, stopped=stopped),
                                        **adaptive.precision_json(halves.get(p), cfg.precision, alpha)}
                                    for p, d in decisions.items()}
                if wide:
                    result.notes.append(f"precision not reached at {result.reps} pair(s) ({stopped}): "
                                        + adaptive.wide_text(wide, cfg.precision, alpha))
                return
            result.reps += 1
            why = ("uplift inconclusive" if any(not d.decided for d in decisions.values())
                   else adaptive.wide_text(wide, cfg.precision, alpha))
            result.notes.append(f"{why} at {result.reps - 1} pair(s): adding pair {result.reps}")
            began = time.monotonic()
            self._run_block(rd, result, result.reps, points, pending)
            budget.took(began, time.monotonic())
            if pending or result.errors:
                return

    def _set_aside(self, rd: RunWriter, result: CampaignResult, arm: str, rep: int, points: list[str],
                   data: Mapping[str, Json], cause: str, kind: str = "failed") -> None:
        attempt = self._attempts.get((arm, rep), 1)
        files = rd.set_aside(arm, rep, f"try{attempt}.{kind}", points, data, {"set_aside": kind, "cause": cause})
        result.set_aside.append(RepAttempt(arm, rep, attempt, tuple(points), cause, kind, files))
        with contextlib.suppress(OSError, P2PError):
            rd.write_run_meta({"rep_failures": [a.to_dict() for a in result.set_aside]})

    def _run_slot(self, rd: RunWriter, result: CampaignResult, arm_name: str, rep: int, points: list[str],
                  pending: Pending) -> None:
        assert self.progress is not None  # set by run()
        attempt = self._attempts.get((arm_name, rep), 1)
        if not points:
            return
        arm = self.arms[arm_name]
        cfg = self.config
        log_path = rd.server_log_path(arm_name, points[0], rep)
        with self.lease.hold(self.pair, f"{self.pair_key} {arm_name} rep {rep}"):
            with self.progress.waiting(f"{arm_name}-{points[0]}", rep, cfg.reps, "waiting for free VRAM"):
                vram_note = wait_vram_free(self.pair, cfg.vram_free_mib, cfg.vram_free_timeout_s, live=self.live)
            reader = self._reader()
            try:
                idle_rows = self._idle_rows(reader)
                with self.progress.waiting(f"{arm_name}-{points[0]}", rep, cfg.reps, "starting server" if attempt == 1
                                           else f"starting a fresh server (attempt {attempt})") as beat, \
                        self.backend.slot(arm, rep, log_path) as handle:
                    beat.stop()  # the server is up: the heartbeat covered its start only
                    for point in points:
                        signals.checkpoint()
                        self.progress.update(f"{arm_name}-{point}", rep, cfg.reps)
                        try:
                            data = self._measure_point(rd, handle, reader, arm_name, point, rep, idle_rows)
                        except RepFailed as exc:
                            if result.proofs.get(arm_name) is None:  # the dead server's log still shows its NCCL
                                with contextlib.suppress(P2PError, OSError):
                                    self._record_proof(rd, result, handle, arm, list(cfg.points(self.kind)))
                            raw = {point: exc.data} if exc.data is not None else {}
                            self._set_aside(rd, result, arm_name, rep, [point], raw, str(exc))
                            raise
                        data["meta"] = {**_json(data.get("meta")), "vram": vram_note, "attempt": attempt}
                        rd.write_rep(arm_name, point, rep, data)
                        result.rep_data.setdefault((arm_name, point), {})[rep] = data
                        pending.discard((arm_name, point, rep))
                        self.progress.step()
                    if result.proofs.get(arm_name) is None:
                        # after the load, so the log holds every NCCL connection the server made
                        self._record_proof(rd, result, handle, arm, list(cfg.points(self.kind)))
            finally:
                reader.close()
        for point in points[1:]:  # the server served every point of the slot: its log belongs to each
            with contextlib.suppress(OSError):
                if log_path.is_file():
                    shutil.copyfile(log_path, rd.server_log_path(arm_name, point, rep))

    def _idle_rows(self, reader: _Reader) -> list[Row]:
        """The pair's idle telemetry before a server starts (the baseline energy is measured against)."""
        idle = Sampler(reader, self.config.telemetry_hz).start()
        if self.config.idle_baseline_s > 0:
            self.sleep(self.config.idle_baseline_s)
        idle.stop()
        return list(idle.rows)

    def _record_proof(self, rd: RunWriter, result: CampaignResult, handle: H, arm: Arm, points: list[str]) -> None:
        proof, att = self.backend.proof(handle, arm)
        result.proofs[arm.name] = proof
        result.attestations[arm.name] = att
        for point in points:
            if proof is not None:
                rd.write_proof(arm.name, point, proof)
            if att is not None:
                atomic_write_json(rd.scenario_dir(arm.name, point) / "attestation.json", att)

    def _warm(self, handle: H, arm: str, point: str, rep: int) -> None:
        """``handle``'s warm-up at ``point`` (excluded from every measurement); a server that died during it is a
        :class:`RepFailed` with its cause, as in a window."""
        what = f"scenario {arm}-{point} rep {rep} on {self.pair_key} warm-up"
        try:
            call_with_timeout(lambda: self.backend.warm(handle, point), self.config.scenario_timeout_s, what,
                              abandon=lambda: self.backend.death(handle))
        except Exception:  # a dying server can make the load generator fail in any way
            cause = self.backend.death(handle)
            if cause is not None:
                raise RepFailed(cause) from None
            raise

    def _measure_point(self, rd: RunWriter, handle: H, reader: _Reader, arm: str, point: str, rep: int,
                       idle_rows: list[Row], *, warm: bool = True) -> Json:
        cfg = self.config
        what = f"scenario {arm}-{point} rep {rep} on {self.pair_key}"
        reader.set_load(0.0)
        sampler = Sampler(reader, cfg.telemetry_hz).start()

        def dead() -> str | None:
            return self.backend.death(handle)

        try:
            deadline = time.monotonic() + cfg.scenario_timeout_s
            try:
                if warm:  # resident arms warm up once per start and point, not before every window
                    self._warm(handle, arm, point, rep)
                # what is not load (the prompts) before the clock: the window's time and energy are its load's
                call_with_timeout(lambda: self.backend.prepare(handle, point, rep), cfg.scenario_timeout_s,
                                  what + " preparation", abandon=dead)
                reader.set_load(1.0)
                sampler.mark("start")
                started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                left = max(1.0, deadline - time.monotonic())
                metrics = call_with_timeout(lambda: self.backend.measure(handle, point, rep), left, what,
                                            abandon=dead)
                sampler.mark("end")
                signals.checkpoint()  # an interrupt lost in a destructor must not let this rep count
            except Exception:  # a dying server can make the load generator fail in any way
                cause = dead()
                if cause is not None:  # the server's death explains the failure: a re-run can fix it
                    raise RepFailed(cause) from None
                raise
        finally:
            sampler.stop()
            sampler.write_csv(rd.telemetry_path(arm, point, rep))
        cause = dead()  # died after the window closed: the window may have measured a dying server
        if cause is None:  # no request completed, or a saturated load client: set aside and re-run
            cause = not_measured(metrics, self.kind)
        if cause is not None:
            raise RepFailed(cause, dict(metrics))
        window = sampler.window()
        flags = assess(window, expected_links(self.evidence, self.pair) if self.evidence is not None else {})
        tokens = metrics.get("total_output_tokens") if self.kind == "model" else None
        energy = window_energy(sampler.mark_rows.get("start", []), sampler.mark_rows.get("end", []), window,
                               output_tokens=int(tokens) if isinstance(tokens, (int, float)) else None,
                               idle_rows=idle_rows)
        data: Json = dict(metrics)
        if self.kind == "model":
            data.update(energy_metrics(energy))
        data["energy"] = energy
        data["flags"] = {**flags.to_dict(), "telemetry_errors": sampler.errors[:5]}
        data["meta"] = {"arm": arm, "point": point, "rep": rep, "started_at": started,
                        "window_s": sampler.marks["end"] - sampler.marks["start"], "simulated": self.simulated}
        return data

    # ------------------------------------------------------------------ the end

    def _finish(self, rd: RunWriter, result: CampaignResult, points: list[str]) -> None:
        """Aggregates, uplift, the final run.json (:func:`.finish.write_final`), then tell the subscribers."""
        write_final(rd, result, points, self.config, self.kind, self.evidence, self.start_priors)
        if self.progress is not None:
            self.progress.finish(f"[p2p] {self.pair_key}: campaign {result.status} -> {rd.path}")
        if self.on_finished is not None:
            try:
                self.on_finished(CampaignOutcome(run_dir=rd.path, pair_key=self.pair_key, status=result.status,
                                                 simulated=result.simulated, errors=tuple(result.errors)))
            except P2PError as exc:  # a subscriber (report rendering) failed: the measurement stands
                result.notes.append(f"a campaign subscriber failed: {exc}")


def _json(value: object) -> Json:
    return dict(value) if isinstance(value, dict) else {}
