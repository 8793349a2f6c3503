"""What the runner drives: a server per arm and slot (model) or the NCCL all-reduce probe.

A model campaign may also keep every arm's server up for one *start* (:meth:`ModelBackend.resident`):
the arms' servers share the pair, with the GPU memory split between them (``resident``) or
with the idle arm asleep (``sleep``, vLLM's sleep mode), and the runner alternates short
measurement windows between them (:mod:`.blocks`).

The server/probe work is behind this small interface so the runner's bookkeeping is
tested on CPU with a fake backend, while the real ones (vLLM or the stand-in through
``serve.server.launch``; NCCL all-reduce through ``probes.allreduce.run_allreduce``)
stay thin. A backend also answers :meth:`Backend.death`: whether the process it measures
died or was replaced (see :mod:`.liveness`), so a dead server's rep is never stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..errors import CampaignError, RepFailed, ServerError
from ..serve.cores import cpu_list
from .config import CampaignConfig
from .liveness import Identity, death_cause

if TYPE_CHECKING:
    from ..probes.allreduce import AllReduceResult
    from ..probes.arms import Arm
    from ..probes.config import ProbeConfig
    from ..serve.config import ServerConfig
    from ..serve.hold import Held
    from ..serve.loadclients import CountPlanner, HeldPlanner
    from ..serve.loadspec import LoadSpec
    from ..serve.server import RunningServer

H = TypeVar("H")
Json = dict[str, object]


class Backend(Protocol[H]):
    """What the runner needs from "a server" or "a probe"; ``H`` is the handle a slot yields."""

    kind: str

    def smoke(self, arm: Arm, log_path: Path) -> None: ...

    def slot(self, arm: Arm, rep: int, log_path: Path) -> contextlib.AbstractContextManager[H]: ...

    def warm(self, handle: H, point: str) -> None: ...

    def prepare(self, handle: H, point: str, rep: int) -> None:
        """The work of window ``rep`` at ``point`` that is not load (its prompts), done before its clock starts."""

    def measure(self, handle: H, point: str, rep: int) -> Json: ...

    def death(self, handle: H) -> str | None: ...

    def proof(self, handle: H, arm: Arm) -> tuple[Json | None, Json | None]: ...

    def describe(self) -> Json | None: ...


def concurrency_of(point: str) -> int:
    return int(point[1:])


def prompt_seed(point: str, rep: int, again: int = 0) -> int:
    """Seed offset of the prompts of window ``rep`` at ``point`` (rep 0: the point's warm-up), sent for the
    ``again``-th time before on the same server (a window measured again). Both arms of a window pair get the
    same seed (equal work); no two windows a server serves share one.

    Why: a server's prefix cache keeps the prompts it served, and a window that sends them again is served
    partly from it (prefills skipped), which favours the arm whose prefill costs more (P2P off: a prefill's
    all-reduce goes through host memory). Prompts are drawn one after another from the seed, so windows with
    one seed share their first prompts. Until 2026-11-27 window k at c16 and window k at c64 of one server
    both used ``seed + k`` (so the c64 window's first 168 of 588 prompts had been served at c16, on 2x H100),
    every point's warm-up ``seed + 0``, and a window measured again resent the prompts of the one it replaced.
    """
    return concurrency_of(point) * 1_000_000 + again * 100_000 + rep


PORT_CHECK_S = 2.0  # the port-ownership check walks /proc/*/fd: at most this often while a window runs


@dataclass
class ServerSlot:
    """A running server and who it was when the slot began (to notice a death or a restart)."""

    server: RunningServer
    born: Identity
    port_checked: float = float("-inf")  # monotonic time of the last port-ownership check
    served: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)  # (point, rep) -> windows sent


def _held_planner() -> HeldPlanner:
    """The windows' planner over the load generator's (imported when a backend is made, not when this module is)."""
    from ..serve import loadgen
    from ..serve.loadclients import HeldPlanner

    return HeldPlanner(loadgen.PLANNER)


@dataclass
class ModelBackend:
    """A server per arm and slot (vLLM or the stand-in, through the serve stage's ``launch``)."""

    server: ServerConfig
    campaign: CampaignConfig
    pair: tuple[int, int]
    rig_env: Mapping[str, str]
    kind: str = "model"
    awake: str | None = None  # sleep mode: the arm whose server is awake ("*": all, resident mode)
    window_prompts: dict[str, int] = dataclasses.field(default_factory=dict)  # point -> prompts of one window
    learned_kv: tuple[int, str] | None = None  # the KV cache bytes of parallel starts, and where they came from
    kv_unknown: str = ""  # why they could not be learned (starts stay sequential)
    last_start: Json = dataclasses.field(default_factory=dict)  # how the last start launched (StartPlan.record)
    start_log: list[Json] = dataclasses.field(default_factory=list)  # every start's record (run.json server_starts)
    tokenizer_id: str | None = None  # the tokenizer the campaign's prompts are made with (:meth:`_tokenizer`)
    # the windows' client processes: held from a launch's first window at a point to the next launch (:meth:`measure`)
    window_planner: HeldPlanner = dataclasses.field(default_factory=_held_planner)

    def _lens(self) -> tuple[int, int]:
        load = self.server.load
        return self.campaign.input_len or load.input_len, self.campaign.output_len or load.output_len

    @contextlib.contextmanager
    def slot(self, arm: Arm, rep: int, log_path: Path) -> Iterator[ServerSlot]:
        from ..serve.server import launch

        self.window_planner.release()  # a start of its own (the restart design): its count may change
        with launch(self.server, arm, self.pair, self.rig_env, log_path) as srv:
            yield ServerSlot(srv, Identity.of(srv.process))

    def start_ahead(self, arms: Sequence[Arm], log_paths: Sequence[Path], mode: str,
                    taken_ports: Sequence[int] = ()) -> list[Held] | None:
        """The servers of the next launch, started now and held before their GPU work (``serve.hold``).

        ``None`` where the next launch cannot be made this way: ``campaign.start_ahead`` off, sleep mode (each
        server sleeps before the next one starts), or a start that is not parallel (a sequential start sizes the
        KV cache by profiling, one server at a time). The arms, logs and order are those :meth:`resident` is then
        given with ``ahead=``."""
        from ..serve.server import spawn_ahead

        if not self.starts_ahead(mode):
            return None
        plan = self.start_plan(mode)
        if not plan.parallel:
            return None
        config, extra_env = self._launch_config(plan, len(arms), mode)
        return spawn_ahead(config, arms, self.pair, self.rig_env, list(log_paths), extra_env=extra_env,
                           taken_ports=taken_ports)

    def starts_ahead(self, mode: str | None) -> bool:
        """Whether this campaign starts launches ahead at all (``campaign.start_ahead``, resident arms); a launch
        is then started ahead when its start is parallel (:meth:`start_ahead`, and the planner's estimate)."""
        return mode == "resident" and self.campaign.start_ahead

    @contextlib.contextmanager
    def resident(self, arms: Sequence[Arm], log_paths: Sequence[Path], mode: str,
                 labels: Sequence[str] | None = None, ahead: Sequence[Held] | None = None,
                 taken_ports: Sequence[int] = ()) -> Iterator[dict[str, ServerSlot]]:
        """A server per entry of ``arms`` up at once for one launch; torn down together, at once.

        ``arms`` names an arm once per server: once each for one start, ``k`` times each for ``k`` starts made at
        once (``campaign.starts_at_once``). The slots are keyed by ``labels`` (default: the arm names, which must
        then be distinct), the server logs given in the same order.

        ``resident``: each server gets ``1/len(arms)`` of the rig's ``gpu-memory-utilization``
        (vLLM's default 0.9 when the rig sets none), so all fit and none waits for memory.
        ``sleep``: each server keeps the rig's share, starts with ``--enable-sleep-mode`` and
        is put to sleep before the next one starts; :meth:`activate` wakes the arm to measure.
        ``ahead``: the servers :meth:`start_ahead` started for this launch (same arms and order), continued
        instead of started; ``taken_ports``: those of servers started ahead for a later launch (not bound yet).

        The servers start in parallel or one after the other (:meth:`start_plan`); how, in how long and
        with which KV cache size is :attr:`last_start` (set before the slots are yielded).
        """
        from ..serve.server import continue_all, launch, launch_all, launch_cpus

        names = list(labels) if labels is not None else [a.name for a in arms]
        if len(names) != len(arms) or len(set(names)) != len(names) or len(log_paths) != len(arms):
            raise CampaignError(f"resident: {len(arms)} servers need as many distinct labels and logs, got "
                                f"{names} and {len(log_paths)} log(s)")
        plan = self.start_plan(mode)
        config, extra_env = self._launch_config(plan, len(arms), mode)
        self.window_planner.release()  # a new launch: its windows may run on what the last one's taught
        t0 = time.monotonic()
        slots: dict[str, ServerSlot] = {}
        with contextlib.ExitStack() as stack:
            if ahead is not None:
                try:
                    servers = stack.enter_context(continue_all(ahead))
                except ServerError as exc:
                    raise RepFailed(f"start made ahead: {exc}") from None
                slots = {name: ServerSlot(srv, Identity.of(srv.process)) for name, srv in zip(names, servers,
                                                                                                strict=True)}
            elif plan.parallel:
                try:
                    servers = stack.enter_context(launch_all(config, arms, self.pair, self.rig_env, list(log_paths),
                                                             extra_env=extra_env, taken_ports=taken_ports))
                except ServerError as exc:
                    if "out of GPU memory" in str(exc):
                        raise  # residency auto goes on in sleep mode (blocks._fall_back_to_sleep)
                    # two vLLM starts at once can race (an init port, a compile cache): the start is set
                    # aside and run again, as a start whose server died is
                    raise RepFailed(f"parallel start: {exc}") from None
                slots = {name: ServerSlot(srv, Identity.of(srv.process)) for name, srv in zip(names, servers,
                                                                                                strict=True)}
            else:
                for name, arm, log, cpus in zip(names, arms, log_paths, launch_cpus(config, len(arms)), strict=True):
                    srv = stack.enter_context(launch(config, arm, self.pair, self.rig_env, log,
                                                     extra_env=extra_env, cpus=cpus))
                    slots[name] = ServerSlot(srv, Identity.of(srv.process))
                    if mode == "sleep":
                        from ..serve.sleep import put_to_sleep

                        put_to_sleep(srv)
            self.last_start = plan.record(slots, t0, time.monotonic())
            if ahead is not None:
                self.last_start["ahead"] = {name: h.as_json(t0) for name, h in zip(names, ahead, strict=True)}
            if not plan.parallel and plan.learn:
                self.last_start.update(self._learn_kv(slots))
            self.awake = None if mode == "sleep" else "*"
            yield slots

    def _launch_config(self, plan: StartPlan, n_servers: int, mode: str) -> tuple[ServerConfig, dict[str, str]]:
        """The server section and env of each of a launch's ``n_servers``: its memory share, and the learned KV
        cache size where a parallel start uses it."""
        config, extra_env = resident_config(self.server, n_servers, mode)
        if plan.parallel and plan.learned:
            config = dataclasses.replace(config, args={**config.args, KV_BYTES[0]: plan.kv_bytes})
        return config, extra_env

    def start_plan(self, mode: str) -> StartPlan:
        """How the next start launches its servers (``campaign.start_mode``), and the KV cache size they share.

        Why the size: vLLM 0.24 sizes its KV cache by profiling and attributes every change of the GPU's free
        memory during the profile to itself (``gpu_worker.determine_available_memory``); two servers profiling
        at once on one pair get wrong, unequal or negative caches, or an assertion. ``--kv-cache-memory-bytes``
        skips the sizing, so a parallel start needs it, the same for every arm: the rig's, or learned from a
        first start made sequentially (the smallest ``Available KV cache memory`` of its servers, less 5 %).
        """
        wanted = self.campaign.start_mode
        rig_kv, key = rig_kv_bytes(self.server)
        rig: tuple[object | None, str | None] = (rig_kv, f"rig (server.args.{key})") if rig_kv is not None \
            else (None, None)
        if mode == "sleep":
            return StartPlan(False, *rig, why="sleep mode: each server sleeps before the next one starts")
        if wanted == "sequential":
            return StartPlan(False, *rig, why="campaign.start_mode sequential")
        if rig_kv is not None:
            return StartPlan(True, *rig, why=f"campaign.start_mode {wanted}: the rig sets the KV cache size")
        if self.learned_kv is not None:
            return StartPlan(True, *self.learned_kv, why=f"campaign.start_mode {wanted}", learned=True)
        if self.kv_unknown:
            return StartPlan(False, None, None, why=f"campaign.start_mode {wanted}, but {self.kv_unknown}")
        return StartPlan(False, None, None, learn=True,
                         why=f"campaign.start_mode {wanted}: this start learns the KV cache size that parallel "
                             "starts need (--kv-cache-memory-bytes)")

    def _learn_kv(self, slots: Mapping[str, ServerSlot]) -> Json:
        """The KV cache size of parallel starts from this sequential start's logs (see :meth:`start_plan`)."""
        from ..serve.logs import GIB, kv_cache_gib

        found: dict[str, list[float]] = {}
        for arm, slot in slots.items():
            try:
                found[arm] = kv_cache_gib(slot.server.log_text())
            except OSError:
                found[arm] = []
        missing = [arm for arm, got in found.items() if not got]
        if missing:
            self.kv_unknown = (f"the server log of {', '.join(missing)} has no 'Available KV cache memory' line "
                               "(set server.args.kv-cache-memory-bytes to start in parallel)")
            return {"kv_cache_gib": found, "kv_note": self.kv_unknown}
        low = min(min(got) for got in found.values())
        if low <= 0:
            self.kv_unknown = f"a server reported {low} GiB of KV cache (its profiling went wrong)"
            return {"kv_cache_gib": found, "kv_note": self.kv_unknown}
        n = math.floor(low * GIB * KV_MARGIN)
        self.learned_kv = (n, f"learned: {KV_MARGIN:g} x the smallest 'Available KV cache memory' ({low:g} GiB) "
                              f"of {', '.join(found)}")
        return {"kv_cache_gib": found, "kv_learned_bytes": n}

    def activate(self, slots: Mapping[str, ServerSlot], arm: str) -> None:
        """Sleep mode: put the awake arm to sleep and wake ``arm`` (outside any timed window); else nothing."""
        if self.awake == "*" or self.awake == arm:
            return
        from ..serve.sleep import put_to_sleep, wake_up

        if self.awake is not None:
            put_to_sleep(slots[self.awake].server)
        wake_up(slots[arm].server)
        self.awake = arm

    def _tokenizer(self, handle: ServerSlot) -> str:
        """The tokenizer every warm-up and window of the campaign makes its prompts with: the rig's
        (``server.load.tokenizer``), else the one the first server asked names, kept.

        Why kept: asked per run, each window asked its server (``GET /v1/models``) inside its clock; and a
        launch's prompts are made while its servers start (:meth:`prompts_ahead`), when no server can be
        asked. Every server of a campaign serves the rig's one model. Asked strictly: a server that cannot say
        is an error of that warm-up or window, never the stand-in's words kept for the night."""
        if self.server.load.tokenizer:
            return self.server.load.tokenizer
        if self.tokenizer_id is None:
            from ..serve.workload import discover_tokenizer

            srv = handle.server
            self.tokenizer_id = discover_tokenizer(srv.base_url, srv.api_key, srv.model, strict=True)
        return self.tokenizer_id

    def _spec(self, concurrency: int, num_prompts: int, *, input_len: int | None = None,
              output_len: int | None = None, reshard: bool = False, seed_offset: int = 0,
              tokenizer: str | None = None) -> LoadSpec:
        from ..serve.loadgen import make_spec

        load = self.server.load
        inp, out = self._lens()
        return make_spec(concurrency=concurrency, num_prompts=num_prompts,
                         warmup=0, input_len=input_len or inp, output_len=output_len or out,
                         seed=load.seed + seed_offset, range_ratio=load.range_ratio,
                         # every window asks the same lengths (only its prompts are new): a window's
                         # throughput then varies with the server, not with its draw of lengths
                         lengths_seed=load.seed,
                         request_timeout_s=self.campaign.request_timeout_s or self.server.request_timeout_s,
                         endpoint=load.endpoint, transport=load.transport,
                         tokenizer=tokenizer or load.tokenizer,  # None: the loadgen asks the server
                         client_processes=load.client_processes, **load.client_options(),
                         # a measured rep's telemetry window must hold one run: a late rep is kept (flagged)
                         # and the next launch gets more client processes (window_planner); the warm-up,
                         # before the window, may re-run
                         reshard=reshard)

    def _load(self, slot: ServerSlot, concurrency: int, num_prompts: int, *, input_len: int | None = None,
              output_len: int | None = None, reshard: bool = False, seed_offset: int = 0,
              tokenizer: str | None = None, planner: CountPlanner | None = None) -> Json:
        from ..serve.loadgen import generate_load

        srv = slot.server
        spec = self._spec(concurrency, num_prompts, input_len=input_len, output_len=output_len, reshard=reshard,
                          seed_offset=seed_offset, tokenizer=tokenizer)
        return dict(generate_load(srv.base_url, srv.api_key, srv.model, spec, planner=planner).to_dict())

    def smoke(self, arm: Arm, log_path: Path) -> None:
        with self.slot(arm, 0, log_path) as slot:
            inp, out = self._lens()
            res = self._load(slot, 1, 1, output_len=min(4, out), input_len=min(16, inp))
            if not res.get("completed"):
                cause = self.death(slot)
                raise CampaignError(f"smoke test of arm {arm.name}: the server answered no request "
                                    f"(failed={res.get('failed')}){'; ' + cause if cause else ''}; "
                                    f"server log: {log_path}")

    def warm(self, handle: ServerSlot, point: str) -> None:
        if self.campaign.warmup <= 0:
            return
        c = concurrency_of(point)
        res = self._load(handle, c, self._warm_prompts(c), reshard=True,  # outside the window: find the count
                         seed_offset=self._seed(handle, point, 0), tokenizer=self._tokenizer(handle))
        window_s = self.campaign.window_s_for(point)
        if window_s is not None and point not in self.window_prompts:
            self.window_prompts[point] = window_prompts(res, c, window_s)

    def _warm_prompts(self, concurrency: int) -> int:
        return max(self.campaign.warmup, concurrency)

    def calibrated(self, point: str) -> bool:
        """Whether a window's prompt count at ``point`` is known: a time budget is sized by the point's first
        warm-up (:func:`window_prompts`), the first launch's."""
        return self.campaign.window_s_for(point) is None or point in self.window_prompts

    def prompts_ahead(self, reps: Mapping[str, Sequence[int]]) -> threading.Thread | None:
        """Make, in a thread, the prompts of a launch's warm-ups and of its windows ``reps[point]`` at each point
        (each for its first sending), while the launch's servers start; ``None`` where the tokenizer is not known yet
        (the night's first launch asks its first server).

        Why: a window pair's prompts took 0.3-0.6 s to make on 2x H200 (``token_prompts`` redraws until the
        re-encoding is exact), before its clock but in the night's wall time, 8 pairs a start; a launch spends
        17-20 s with its servers on the GPUs and the CPUs free. A count still to be calibrated (the first
        launch's) is left to the window; a prompt run evicted or not made in time is made by its window, so
        this only ever saves time."""
        tok = self.server.load.tokenizer or self.tokenizer_id
        if tok is None:
            return None
        specs = []
        for point, ks in reps.items():
            c = concurrency_of(point)
            if self.campaign.warmup > 0:
                specs.append(self._spec(c, self._warm_prompts(c), seed_offset=prompt_seed(point, 0), tokenizer=tok))
            if self.calibrated(point):
                n = self._window(point)[1]
                specs.extend(self._spec(c, n, seed_offset=prompt_seed(point, k), tokenizer=tok) for k in ks)

        def make() -> None:
            from ..serve.loadgen import make_prompts

            for spec in specs:
                try:
                    make_prompts(spec)
                except Exception:  # noqa: BLE001 - the run makes its own prompts, and says what is wrong then
                    return

        thread = threading.Thread(target=make, name="p2p-prompts-ahead", daemon=True)
        thread.start()
        return thread

    def _window(self, point: str) -> tuple[int, int]:
        """A window's concurrency and prompts at ``point``: the count the first warm-up calibrated for the point's
        ``campaign.window_s``, else ``prompts_per_concurrency`` x the concurrency."""
        c = concurrency_of(point)
        return c, self.window_prompts.get(point, c * self.campaign.prompts_per_concurrency)

    def prepare(self, handle: ServerSlot, point: str, rep: int) -> None:
        """The window's prompts, made before its clock starts (:func:`..serve.loadgen.prepare`): the same ones
        :meth:`measure` sends next (its seed read, not counted)."""
        from ..serve.loadgen import prepare

        c, n = self._window(point)
        again = handle.served.get((point, rep), 0)
        srv = handle.server
        prepare(srv.base_url, srv.api_key, srv.model,
                self._spec(c, n, seed_offset=prompt_seed(point, rep, again), tokenizer=self._tokenizer(handle)),
                planner=self.window_planner)

    def measure(self, handle: ServerSlot, point: str, rep: int) -> Json:
        """One timed window. Windows with a time budget (``campaign.window_s``) send the prompt count the
        first warm-up at this point calibrated, the same for every arm and window (equal work per window);
        each window draws prompts its server has not served (:func:`prompt_seed`), the same for both arms of a
        window pair, so a prefix cache cannot favour one window over another. The client processes are
        :attr:`window_planner`'s: the count a launch's first window at this point ran on, for every window and arm
        of the launch (a late window raises it for the next launch)."""
        from ..serve.prefix import prefix_counts

        c, n = self._window(point)
        srv = handle.server
        before = prefix_counts(srv.base_url, srv.api_key)  # outside the load's own timing
        res = self._load(handle, c, n, seed_offset=self._seed(handle, point, rep), tokenizer=self._tokenizer(handle),
                         planner=self.window_planner)
        after = prefix_counts(srv.base_url, srv.api_key) if before is not None else None
        got = after.since(before) if after is not None and before is not None else None
        if got is not None:  # the server's word that the window's prompts were new to it (serve.prefix)
            res["prefix_cache"] = {"queried_tokens": got[0], "hit_rate": got[1]}
        return res

    @staticmethod
    def _seed(handle: ServerSlot, point: str, rep: int) -> int:
        again = handle.served.get((point, rep), 0)
        handle.served[(point, rep)] = again + 1
        return prompt_seed(point, rep, again)

    def death(self, handle: ServerSlot) -> str | None:
        """The leader exited or was replaced (cheap, every call); else the serve stage's check that it still
        owns its port (vLLM listens with SO_REUSEPORT, so a second server can take requests meant for ours).

        The port check reads every process's fds, so while a timed window polls this it runs at most every
        :data:`PORT_CHECK_S` seconds: its CPU would otherwise compete with the load client.
        """
        srv = handle.server
        cause = death_cause(srv.process, handle.born, srv.log_path)
        if cause is not None or time.monotonic() - handle.port_checked < PORT_CHECK_S:
            return cause
        dead = srv.death()
        handle.port_checked = time.monotonic()
        return dead.message() if dead is not None else None

    def proof(self, handle: ServerSlot, arm: Arm) -> tuple[Json | None, Json | None]:
        """(transport proof dict, attestation dict with ``problems``) from the server log."""
        att = handle.server.attestation()
        d: Json = dict(att.to_dict())
        d["problems"] = list(att.problems(arm.expect_transport))
        return dict(att.transport.to_dict()), d

    def describe(self) -> Json | None:
        s = self.server
        return {"command": list(s.command), "model": s.model, "args": dict(s.args or {}),
                "flags": list(s.flags or ()), "simulated": bool(s.simulated), "load": self.load_shape()}

    def graph_capture_note(self) -> str | None:
        """A hint when vLLM will capture CUDA graphs for batches the campaign never runs.

        vLLM captures a graph per batch size up to ``min(2 x max-num-seqs, 512)`` (51 sizes at its default), at
        every start; a closed loop of concurrency C never holds more than C requests, so ``max-num-seqs`` at the
        campaign's top concurrency captures fewer graphs without changing what is measured. Capture took
        10-12 s of a 7B start alone and about 60 s with 8 servers starting at once (2x H200, 2026-11-26: read
        from the servers' logs by ``serve.start_phases``). ``None`` for the stand-in, a rig that sets
        ``max-num-seqs`` or runs without CUDA graphs (``enforce-eager``), or a top concurrency of 256 or more.
        """
        s = self.server
        args = {str(k).lstrip("-").replace("_", "-"): v for k, v in (s.args or {}).items()}
        flags = {str(f).lstrip("-").replace("_", "-") for f in (s.flags or ())}
        top = max(self.campaign.concurrency, default=0)
        if s.simulated or "max-num-seqs" in args or "enforce-eager" in flags or args.get("enforce-eager") is True \
                or not 0 < top < 256:
            return None
        return (f"vLLM captures CUDA graphs for batch sizes up to min(2 x max-num-seqs, 512) at every start (512 "
                f"at its default); this campaign's top concurrency is {top}, and a closed loop of {top} never "
                f"batches more: server.args max-num-seqs: {top} would capture up to {2 * top} and shorten every "
                "start (docs/campaign-design.md, where a start's time goes)")

    def worker_method(self) -> str | None:
        """The ``VLLM_WORKER_MULTIPROC_METHOD`` the rig gives its servers (``server.env`` over the rig's ``env``,
        as the launcher applies them), or ``None`` where neither sets it."""
        return self.server.env.get(WORKER_METHOD_ENV) or self.rig_env.get(WORKER_METHOD_ENV) or None

    def forks_workers(self) -> bool:
        """Whether the servers' engine core and workers are forked (:meth:`worker_method` ``fork``): they inherit
        the API server's imports, so a start costs about 40 s less (:meth:`start_method_note`)."""
        return not self.server.simulated and self.worker_method() == "fork"

    def start_method_note(self) -> str | None:
        """A hint when vLLM's CLI will *spawn* its engine core and its workers, each importing vLLM again.

        vLLM's CLI sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` unless the variable is set (0.24:
        ``entrypoints/serve/utils/api_utils``, logged at debug level only), so every start imports vLLM three
        times, one process after the other: 67 s of a 92 s start of the 7B rig on 2x H200 (2026-11-27, seventh
        session, ``benchmarks/start_phases_gpu.py``), 24 s with ``fork``. With fork (and ``max-num-seqs: 64``)
        that night's launches started ahead took 19-32 s instead of 46-90 s, and the night 14.1 min instead of
        18.0, 64 % of it under load. vLLM falls back to spawn by itself, and says so, where CUDA is already
        initialised in the parent. ``None`` for the stand-in, a command that is not vLLM's, or a rig that sets
        the variable either way.
        """
        s = self.server
        if s.simulated or self.worker_method() is not None or not any("vllm" in str(c).lower() for c in s.command):
            return None
        return ("vLLM's CLI starts its engine core and workers with spawn unless VLLM_WORKER_MULTIPROC_METHOD is "
                "set, so every start imports vLLM three times, one process after the other (67 s of a 92 s start "
                "on 2x H200); server.env VLLM_WORKER_MULTIPROC_METHOD: fork lets them inherit the API server's "
                "imports (docs/campaign-design.md, where a start's time goes)")

    def load_shape(self) -> Json:
        """What each request asks of the server: a window's throughput is a number about this shape only.

        Why in run.json: a results directory said which server ran but not what it was asked (the rig's
        ``server.load`` and the campaign's lengths), so a baseline of 128/128-token requests could be
        judged against a night of 1024/128 as a 60 % "regression". Client-side keys (processes, transport,
        timeouts, headers, seed) are left out: they change how the load is sent, not the work.
        """
        load = self.server.load
        inp, out = self._lens()
        rate = load.request_rate
        shape: Json = {"input_len": inp, "output_len": out, "endpoint": load.endpoint,
                       "request_rate": "inf" if rate == float("inf") else rate, "burstiness": load.burstiness,
                       "extra_body": dict(load.extra_body)}
        if load.range_ratio:  # fixed lengths keep the shape they always had: their baselines stay comparable
            shape["range_ratio"] = load.range_ratio
        return shape


#: how vLLM starts its engine core and workers (``fork`` | ``spawn``); its CLI sets spawn unless this is set
WORKER_METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
KV_BYTES = ("kv-cache-memory-bytes", "kv_cache_memory_bytes")
KV_MARGIN = 0.95  # of the learned size: the logged GiB is rounded, and a start's free memory varies a little


def rig_kv_bytes(server: ServerConfig) -> tuple[object | None, str]:
    """The rig's ``--kv-cache-memory-bytes`` as written (vLLM also reads ``20G``), and under which key."""
    args = server.args or {}
    key = next((k for k in KV_BYTES if k in args), KV_BYTES[0])
    value = args.get(key)
    return (None if value is None or value is False else value), key


@dataclass(frozen=True)
class StartPlan:
    """How one start launches its arms' servers (:meth:`ModelBackend.start_plan`)."""

    parallel: bool
    kv_bytes: object | None  # what every server gets as --kv-cache-memory-bytes (None: vLLM profiles)
    kv_source: str | None  # the rig, or learned from which start's logs
    why: str
    learned: bool = False  # kv_bytes is the learned size (added to the servers' args here)
    learn: bool = False  # a sequential start that learns the size from its logs

    def record(self, slots: Mapping[str, ServerSlot], t0: float, ready: float) -> Json:
        """What run.json and the rep files say about this start: mode, launch to all ready, KV size and source,
        and when each server was spawned and proven ready (seconds after the start began)."""
        return {"start_mode": "parallel" if self.parallel else "sequential", "start_s": round(ready - t0, 3),
                "why": self.why, "kv_cache_memory_bytes": self.kv_bytes, "kv_source": self.kv_source,
                "servers": {arm: {"spawned_s": round(s.server.spawned_at - t0, 3),
                                  "ready_s": round(s.server.spawned_at + s.server.ready_s - t0, 3),
                                  "phases": None if (ph := s.server.start_phases()) is None else ph.as_json(),
                                  **({"cpus": cpu_list(s.server.cpus)} if s.server.cpus else {})}
                            for arm, s in slots.items()}}


MEMORY_UTILIZATION = ("gpu-memory-utilization", "gpu_memory_utilization")
VLLM_DEFAULT_UTILIZATION = 0.9


def resident_config(server: ServerConfig, n_arms: int, mode: str) -> tuple[ServerConfig, dict[str, str]]:
    """The server section for one of ``n_arms`` servers sharing a pair, and the env it needs.

    Resident: the rig's memory share divided among the arms (a server that asks for more than is
    free fails to start in vLLM). Sleep: the rig's share, ``--enable-sleep-mode`` and
    ``VLLM_SERVER_DEV_MODE=1`` (vLLM serves ``/sleep`` and ``/wake_up`` only in dev mode).
    """
    args = dict(server.args or {})
    key = next((k for k in MEMORY_UTILIZATION if k in args), MEMORY_UTILIZATION[0])
    share = args.get(key, VLLM_DEFAULT_UTILIZATION)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < float(share) <= 1:
        raise CampaignError(f"server.args.{key}: expected a fraction in (0, 1], got {share!r}")
    if mode == "sleep":
        flags = tuple(server.flags or ())
        if "enable-sleep-mode" not in flags and "--enable-sleep-mode" not in flags:
            flags += ("enable-sleep-mode",)
        return dataclasses.replace(server, flags=flags), {"VLLM_SERVER_DEV_MODE": "1"}
    args[key] = round(float(share) / n_arms, 3)
    return dataclasses.replace(server, args=args), {}


def window_prompts(warm: Mapping[str, object], concurrency: int, window_s: float) -> int:
    """Prompts for one window of about ``window_s`` seconds, from a warm-up's request throughput; at least
    two rounds of the concurrency (a window shorter than that measures ramp-up and drain, not steady state)."""
    rate = warm.get("request_throughput")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
        return 2 * concurrency
    return max(2 * concurrency, int(round(float(rate) * window_s)))


@dataclass
class ProbeSlot:
    """One probe run per arm and slot; run lazily inside the first point's timed window."""

    arm: Arm
    rep: int
    log_path: Path
    result: AllReduceResult | None = None


@dataclass
class ProbeBackend:
    """The NCCL all-reduce probe (no model): one probe run per arm and slot covers every size."""

    probe: ProbeConfig
    campaign: CampaignConfig
    pair: tuple[int, int]
    rig_env: Mapping[str, str]
    out_root: Path
    kind: str = "probe"
    worker: Sequence[str] | None = None  # replaces the torch worker command (tests use a fake one)

    def smoke(self, arm: Arm, log_path: Path) -> None:
        return None  # a probe run is its own smoke test: it fails fast with the last log line

    @contextlib.contextmanager
    def slot(self, arm: Arm, rep: int, log_path: Path) -> Iterator[ProbeSlot]:
        # Lazy: the probe runs inside the first point's timed window, so that rep's telemetry
        # (and its throttle/downtrain flags) covers the all-reduces; later points read its rows.
        yield ProbeSlot(arm, rep, log_path)

    def _result(self, handle: ProbeSlot) -> AllReduceResult:
        if handle.result is None:
            from ..probes.allreduce import run_allreduce

            cfg = dataclasses.replace(self.probe, sizes=tuple(self.campaign.sizes), nccl_tests=False)
            out = self.out_root / f"{handle.arm.name}_run{handle.rep}"
            result = run_allreduce(self.pair, handle.arm, cfg, self.rig_env, out, worker=self.worker)
            with contextlib.suppress(OSError):
                if result.log_path is not None:
                    shutil.copyfile(result.log_path, handle.log_path)
            handle.result = result
        return handle.result

    def warm(self, handle: ProbeSlot, point: str) -> None:
        return None

    def prepare(self, handle: ProbeSlot, point: str, rep: int) -> None:
        return None  # the probe ran in full when its slot opened; a window reads its row

    def measure(self, handle: ProbeSlot, point: str, rep: int) -> Json:
        from ..util import parse_size

        result = self._result(handle)
        row = result.row(parse_size(point[1:]))
        if row is None:
            raise CampaignError(f"probe result of arm {result.arm} has no row for {point}")
        return {"time_us": row.time_us, "busbw_gbs": row.busbw_gbs, "algbw_gbs": row.algbw_gbs,
                "bytes": row.bytes, "correct": bool(result.correct)}

    def death(self, handle: ProbeSlot) -> str | None:
        return None  # a probe's processes end with the probe; a crash is a ProbeError of the probe itself

    def proof(self, handle: ProbeSlot, arm: Arm) -> tuple[Json | None, Json | None]:
        result = self._result(handle)
        proof = result.proof
        return (dict(proof.to_dict()) if proof is not None else None), None

    def describe(self) -> Json | None:
        return None
