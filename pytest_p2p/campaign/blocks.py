"""Arms that stay resident: windows alternate between the arms' servers inside one start of each.

Why: on a real 2x H200 pair a campaign that restarted vLLM for every rep spent over 80 %
of its 18 minutes starting servers (about 60 s each) to measure 10 s of load, and could
not decide (+-30 %). The NCCL environment is fixed when a server starts, so an arm cannot
be switched inside one server -- but both arms' servers can be up at once on the pair
(``residency: resident``, the GPU memory split between them) or take turns with vLLM's
sleep mode (``residency: sleep``). Then a *start* is one launch of every arm's server,
and inside it the campaign measures many short windows, alternating the arms:

* **ABBA over windows**: window pair ``w`` of start ``b`` runs A then B or B then A,
  alternating with ``w`` and with ``b``, so a drift that is linear over a start cancels in
  the paired ratios, as the restart design's ABBA over reps did.
* **The start is the unit of replication**: a server start has an effect of its own
  (where its processes landed, what its graphs captured), shared by all its windows.
  The uplift is judged on the start means (:func:`pytest_p2p.stats.decide_nested`,
  df = starts - 1): windows buy precision within a start, starts buy the right to
  generalise beyond it. A few starts per arm per campaign (``campaign.starts``), not
  one per rep.
* **Every window is still a measurement only when its server is the one we started**
  (checked before and after each window) and completed requests; a start whose server
  dies is set aside as a whole and run again on fresh servers (its windows shared the
  dead server's start effect). An outlying window pair is re-measured in place, on the
  same servers; an outlying start is set aside and re-run once.
* **Adaptive starts**: while an uplift is inconclusive, starts are added up to
  ``campaign.max_starts`` / ``max_time_s``, each look at its alpha-spending level; a launch
  is added only where it ends inside ``max_time_s`` at what the last launch took
  (:class:`adaptive.TimeBudget`).
* **One error budget per campaign**: each point's uplift is judged at ``alpha / points``
  (Bonferroni), so a wrong verdict anywhere in the campaign has probability at most the
  rule's alpha (1 %), per kind of wrong verdict; per point alone it would grow with the
  number of points (2.45 % for two, benchmarks/verdict_nested.py).

Reps keep their meaning for everything downstream (aggregates, reports, baselines): rep
``k`` of arm A and rep ``k`` of arm B are one window pair; ``meta.start``/``meta.window``
in each rep file say where it ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .. import signals
from ..errors import P2PError, RepFailed
from ..jsontypes import as_dict
from ..stats import SpreadSeen, StartPrior, StatsError, expected_halfwidth, plan_for, plan_with_prior
from ..stats.nested import MIN_PRIOR_DF, MIN_PRIOR_NIGHTS, plan_at_windows
from . import adaptive
from .backends import ModelBackend, ServerSlot
from .config import PerPoint
from .gpu import wait_vram_free
from .progress import Pace
from .schedule import order, rep_of, warm_order
from .telemetry import Row, _Reader

if TYPE_CHECKING:
    from ..lease import GpuLease
    from ..probes.arms import Arm
    from ..results.write import RunWriter
    from ..serve.hold import Held
    from .backends import Backend
    from .config import CampaignConfig
    from .progress import Progress
    from .result import CampaignResult

Json = dict[str, object]


class ResidentRunner(Protocol):
    """What the blocks take from ``runner.CampaignRunner``: only these members, so this module need not import it.

    Why a Protocol: the runner calls :func:`run_blocks` for resident arms, and blocks calls back into the
    runner's per-rep helpers; naming the class here made the two modules a cycle (issue 25).
    """

    config: CampaignConfig  # replaced when ``residency: auto`` falls back to sleep mode
    kind: str
    pair: tuple[int, int]
    arms: Mapping[str, Arm]
    backend: Backend[ServerSlot]
    live: bool
    lease: GpuLease
    progress: Progress | None
    sleep: Callable[[float], None]
    start_priors: Mapping[str, StartPrior]
    prior_history: Mapping[str, SpreadSeen]
    _attempts: dict[tuple[str, int], int]

    @property
    def pair_key(self) -> str: ...

    def _reader(self) -> _Reader: ...

    def _idle_rows(self, reader: _Reader) -> list[Row]: ...

    def _arm_reps(self, result: CampaignResult, point: str) -> tuple[dict[int, Json], dict[int, Json]]: ...

    def _set_aside(self, rd: RunWriter, result: CampaignResult, arm: str, rep: int, points: list[str],
                   data: Mapping[str, Json], cause: str, kind: str = "failed") -> None: ...

    def _record_proof(self, rd: RunWriter, result: CampaignResult, handle: ServerSlot, arm: Arm,
                      points: list[str]) -> None: ...

    def _warm(self, handle: ServerSlot, arm: str, point: str, rep: int) -> None: ...

    def _measure_point(self, rd: RunWriter, handle: ServerSlot, reader: _Reader, arm: str, point: str, rep: int,
                       idle_rows: list[Row], *, warm: bool = True) -> Json: ...


#: The spreads the planner assumes before a campaign has measured its own (log units), from H100 pairs with a
#: 7B-shape Llama at TP=2 (docs/gpu-runs.md): a window pair's uplift ratio varied within a start by 1.35-1.5 %
#: (c16) and 1.7-2.5 % (c64) at 10 s windows (4x H100, 2026-11-26 evening) and by 1.9-2.1 % at 8 s (2x H100,
#: that night); start means by 1.0-1.6 % beyond that in the evening, with another pair of the machine busy,
#: and by 0.6 % and 0.0 % that night on a machine of its own: 1.0 % pooled (8 df). The window figure is for
#: 10 s windows and scaled by sqrt(10 s / window_s) (a mean over a window whose noise is independent second to
#: second); the start figure does not shrink with anything a rig sets.
PLAN_WINDOW_SD = 0.02
PLAN_WINDOW_SD_AT_S = 10.0
PLAN_START_SD = 0.010
#: A window of ``window_s`` sends the prompts the first arm's warm-up sized for that time, the same to both arms:
#: the slower arm takes longer by the uplift, and every window drains its last requests. 60 windows of 8 s took
#: 618 s on 2x H100 (uplift +22 % and +55 %): 1.29x. The planner's times use this factor.
PLAN_WINDOW_OVERRUN = 1.3
PLAN_TARGET = 0.02  # the half-width a nightly verdict should reach (issue 24), where the rig sets no precision


def plan_line(runner: ResidentRunner, points: list[str]) -> str:
    """What the campaign is about to do, in one line, with the time it expects and the precision that buys
    (before any server starts), and what a +-2 % decision would take under the same assumptions."""
    cfg = runner.config
    mode = cfg.resident_mode(runner.kind)
    n_arms = len(cfg.arms)
    start_s = _server_start_s(runner)
    k = cfg.starts_at_once
    groups = [launches(b, cfg.starts, k) for b in range(1, cfg.starts + 1, k)]
    starts_s = sum(_start_estimate(runner, i, len(g)) for i, g in enumerate(groups, 1))
    # what one more launch costs: a later one (launch 3: started ahead where the campaign starts ahead at all; a
    # rig that learns its KV cache size starts ahead from launch 3 on, and its +-2 % plan priced every start at
    # launch 2's unheld 90 s: "10 starts ~ 29 min" for the 7B rig, 18 min at the later launches' 25 s)
    launch_s = _start_estimate(runner, 3, k)
    mean_s = cfg.window_s_mean(points)
    window_s = mean_s if mean_s is not None else 10.0
    window_took = _window_took(runner, points)
    gap = _launch_gap_s(runner)
    starts_s += len(groups) * gap
    servings = cfg.starts * len(points) * n_arms  # each start's servers at each point: a warm-up
    pairs = cfg.window_pairs(points)  # window pairs a start measures, over every point
    measured = cfg.starts * n_arms * pairs * window_took
    total = starts_s + measured + servings * _warm_s(runner)
    memory = ("GPU memory split between the arms' servers" if mode == "resident" and k == 1
              else f"GPU memory split among {n_arms * k} servers: {k} starts at once" if mode == "resident"
              else "the idle arm's server asleep (vLLM sleep mode)")
    more = (f", up to {cfg.max_starts} starts while undecided"
            + (f" or wider than +-{cfg.precision * 100:g} % (campaign.precision)" if cfg.precision else "")
            if cfg.max_starts and cfg.max_starts > cfg.starts else "")
    alpha = cfg.uplift_rule_for(runner.kind).family_alpha(len(points))
    size = (f"{cfg.starts} starts x window pairs {cfg.windows_text(points)}" if isinstance(cfg.windows, PerPoint)
            else f"{cfg.starts} starts x {cfg.windows} window pairs x {len(points)} point(s)")
    line = (f"plan: {mode} arms ({memory}): {size}, windows of {_window_text(cfg, points)}{more}; expected "
            f"{total / 60:.0f} min ({cfg.starts * n_arms} server starts of ~{start_s:.0f} s{_start_text(runner)}"
            + (f", {len(groups)} launches of ~{launch_s:.0f} s" if k > 1 else "") + ", "
            f"{100 * measured / total:.0f} % of it under measured load)")
    if cfg.starts < 2:
        return line + "; one start cannot decide (the start-to-start spread is unknown)"
    # what one more start costs: its share of a later launch and of the gap before it, and its warm-ups
    start_cost = (launch_s + gap) / k + len(points) * n_arms * _warm_s(runner)
    windows = {p: cfg.windows_for(p) for p in points}
    start_sd, window_sd, w_at, whose = _plan_spreads(runner.prior_history, windows, window_s)
    target = cfg.precision or PLAN_TARGET  # what the rig asks its intervals to reach, else issue 24's
    # a precision is held to the estimate at the point's whole alpha at every look (adaptive.estimate_halfwidth),
    # issue 24's +-2 % to the verdict's interval at its look's share (max_starts spends it over the looks)
    spent = None if cfg.precision else cfg.max_starts
    # the verdict's alpha at the planned starts: with starts to add while undecided (max_starts), the first look
    # spends only its share of the point's alpha (adaptive.start_plan). The committed 7B rig's verdict is a 99.2 %
    # interval, not the 99 % this line said until 2026-11-28 (fifteenth night: "~2.7 %" said, 2.6 % came at 99.2 %)
    look = adaptive.start_plan(cfg, alpha).alpha_at(cfg.starts) or alpha
    try:
        # the first arm alternates start by start: from 6 starts on the verdict fits its effect (one df less)
        half = expected_halfwidth(start_sd, window_sd, cfg.starts, w_at, look, alternating=True)
        if isinstance(cfg.windows, PerPoint):  # the rig's pairs per point kept: only the starts are searched
            best = plan_at_windows(start_sd, window_sd, w_at, target, alpha, start_cost, n_arms * pairs * window_took,
                                   MAX_PLAN_STARTS, points=len(points), alternating=True, spent_over=spent,
                                   windows_text=cfg.windows_text(points))
        else:
            best = plan_for(start_sd, window_sd, target, alpha, start_cost, n_arms * window_took,
                            MAX_PLAN_STARTS, points=len(points), alternating=True, spent_over=spent)
    except StatsError:
        return line
    # half-widths are of the on/off ratio (log scale): in uplift points they are (1 + uplift) times that, so a
    # +55 % uplift decided to +-2 % of its ratio is +-3.1 uplift points (2x H100, 2026-11-26)
    level = f"{(1 - 2 * look) * 100:.4g} % CI half-width"
    spreads = f"if window pairs vary by {window_sd * 100:.1f} % and starts by {start_sd * 100:.1f} % ({whose})"
    lent = _lent_halfwidths(runner.start_priors, windows, cfg.starts, look)
    if lent and len(lent) == len(points):
        # every point borrows: tonight expects the borrowed precision. Night 4 of the 7B rig's chain (2x H200,
        # 2026-11-28) led with "~3.3 %" and "+-2 % would take 14 starts", its own starts' figures, while the
        # points it was about to decide expected ~1.0 % and ~2.1 % with the chain's spread
        text = (f"; expected {level} {_per_point(lent)} of the ratio with the start spread of earlier nights "
                f"(unless tonight's starts spread more: the guard), ~{half * 100:.1f} % on tonight's starts alone "
                f"{spreads}")
    else:
        text = (f"; expected {level} ~{half * 100:.1f} % of the ratio {spreads}"
                + (f", {_per_point(lent)} with the start spread of earlier nights" if lent else "")
                + f"; +-{target * 100:g} % would take {best.describe()}")
    return (line + text
            + _prior_plan_text(runner.start_priors, windows, alpha, start_cost, n_arms * pairs * window_took,
                               spent, target)
            + _history_text(runner.prior_history, points, runner.start_priors))


def _lent_halfwidths(priors: Mapping[str, StartPrior], windows: Mapping[str, int], starts: int,
                     alpha: float) -> dict[str, float]:
    """Per point that borrows a start spread of this design (its window pairs per start), the half-width the
    planned starts are expected to reach with it: the spread of a start mean as earlier nights measured it,
    on their df and tonight's (:func:`expected_halfwidth` with ``prior_df``), the first arm fitted as tonight's
    decision fits it."""
    out: dict[str, float] = {}
    for p, w in windows.items():
        prior = priors.get(p)
        if prior is None or prior.windows != w:
            continue
        try:
            out[p] = expected_halfwidth(prior.var ** 0.5, 0.0, starts, w, alpha, prior_df=prior.df,
                                        alternating=True)
        except StatsError:
            continue
    return out


def _per_point(halves: Mapping[str, float]) -> str:
    """``~1.0 % (c16), ~2.1 % (c64)``."""
    return ", ".join(f"~{h * 100:.1f} % ({p})" for p, h in halves.items())


def pace(runner: ResidentRunner, points: list[str]) -> Pace:
    """The plan line's figures as the progress line's pace: a window (its share of a warm-up included), the first
    launch and a later one, and the launches of the plan; the campaign replaces them with what it measures."""
    cfg = runner.config
    # each server warms once a point and start: its share of a window is points / window pairs a start
    warm_share = _warm_s(runner) * len(points) / max(1, cfg.window_pairs(points))
    return Pace(window_s=_window_took(runner, points) + warm_share,
                launch_s=_start_estimate(runner, 2, cfg.starts_at_once),
                launches_ahead=len(range(1, cfg.starts + 1, cfg.starts_at_once)),
                first_launch_s=_start_estimate(runner, 1, cfg.starts_at_once))


def _window_took(runner: ResidentRunner, points: Sequence[str]) -> float:
    """Seconds one window is expected to take, on average over the windows of a start at ``points`` (each point
    weighed by its window pairs, so ``window_pairs(points)`` times this prices a start's windows): its time budget
    with the slower arm's overrun, else (a window of so many prompts) 10 s on a real server and 1 s on the
    stand-in, which answers a window's prompts in about that (the README's demo planned "expected 12 min" for a
    campaign of one minute until 2026-11-27)."""
    cfg = runner.config
    if cfg.window_s_mean(points) is None:
        return 1.0 if _stand_in(runner) else 10.0
    weighed = math.fsum(cfg.windows_for(p) * (cfg.window_s_for(p) or 0.0) for p in points)
    return weighed / cfg.window_pairs(points) * PLAN_WINDOW_OVERRUN


def _stand_in(runner: ResidentRunner) -> bool:
    """Whether the campaign's server is the stand-in, whose starts and windows take about a second."""
    backend = runner.backend
    return isinstance(backend, ModelBackend) and backend.server.simulated


def _launches_after(group: list[int], planned: int, at_once: int) -> int:
    """Launches of the plan still to come after the one making ``group`` (none after an added or re-run start)."""
    return len(range(group[-1] + 1, planned + 1, at_once))


def _prior_plan_text(priors: Mapping[str, StartPrior], windows: Mapping[str, int], alpha: float,
                     start_cost: float, start_windows_cost: float, max_starts: int | None, target: float) -> str:
    """What the start spread from earlier nights changes in the plan: the starts +-``target`` needs with it, per
    point that has one (or why it cannot be borrowed: another design's windows per start), each plan at the
    alpha its first look would spend with the rig's ``max_starts`` kept. ``windows``: each point's window pairs
    per start; ``start_windows_cost``: the seconds of a start's windows, every point's."""
    parts: list[str] = []
    for p, w in windows.items():
        prior = priors.get(p)
        if prior is None:
            continue
        if prior.windows != w:
            parts.append(f"{p}: the {prior.describe()} is of {prior.windows} window pairs per start, not this "
                         f"plan's {w}: not borrowed")
            continue
        try:
            # plan_with_prior prices a start's windows as points x its pairs x a pair's cost: the share that
            # makes that product this campaign's own (every point's pairs, each its own count)
            plan = plan_with_prior(prior, target, alpha, start_cost, start_windows_cost / (len(windows) * w),
                                   MAX_PLAN_STARTS, points=len(windows), alternating=True, spent_over=max_starts)
        except StatsError:
            continue
        parts.append(f"{p}: +-{target * 100:g} % would take {plan.describe()}")
    return "".join(f"; {x}" for x in parts)


def _plan_spreads(history: Mapping[str, SpreadSeen], windows: Mapping[str, int],
                  window_s: float) -> tuple[float, float, int, str]:
    """``(start sd, window sd, window pairs, whose figures)`` the plan assumes: what earlier nights measured here,
    at the point whose start mean varies most at tonight's window pairs, where every point has them: nights of this
    design, or where it has none yet, of another design of the rig (:class:`~pytest_p2p.stats.nested.Elsewhere`,
    the window's spread scaled to tonight's length); else the H100 figures (the window sd scaled to this window
    length) at the point of fewest pairs.

    Why: the H100 figures (start 1.0 %, window pair 2.0 % at 10 s) sized an H200 night's plan as if its c16
    start spread were 1.0 % when it was 1.3 % (2026-11-27); the nights on this pair say better, and still do after
    the rig's windows change (twentieth session: "H100 figures" with four nights of the same rig in the store).
    """
    got: list[tuple[float, float, int, str | None]] = []  # (start sd, window sd, pairs, another design's nights)
    nights: list[int] = []
    for p, w in windows.items():
        s = history.get(p)
        if s is not None and s.start_sd is not None and s.window_sd is not None and s.windows == w:
            got.append((s.start_sd, s.window_sd, w, None))
            nights.append(s.nights)
        elif s is not None and s.window_sd is None and s.elsewhere is not None:
            got.append((s.elsewhere.start_sd, s.elsewhere.window_sd, w, s.elsewhere.what))
    if windows and len(got) == len(windows):
        start_sd, window_sd, w, other = max(got, key=lambda g: g[0] ** 2 + g[1] ** 2 / g[2])
        if other is not None:
            return start_sd, window_sd, w, f"measured here on {other}, of another design"
        n = min(nights)
        return start_sd, window_sd, w, f"measured on {n} earlier night{'' if n == 1 else 's'} here"
    return (PLAN_START_SD, PLAN_WINDOW_SD * (PLAN_WINDOW_SD_AT_S / window_s) ** 0.5, min(windows.values(), default=1),
            "H100 figures")


def _history_text(history: Mapping[str, SpreadSeen], points: list[str], borrowed: Mapping[str, StartPrior]) -> str:
    """What the store held of earlier nights where no start spread is borrowed (one clause; the points named
    only where they differ), so a rig owner reads before the campaign why tonight decides on its own starts."""
    got = [(p, history[p].describe()) for p in points if p in history and p not in borrowed]
    if not got:
        return ""
    texts = {t for _, t in got}
    body = (f"{next(iter(texts))}{' at every point' if len(got) > 1 else ''}" if len(texts) == 1
            else ", ".join(f"{p} {t}" for p, t in got))
    # "a start spread is borrowed from 3 nights and 4 df" read as if one had been (2x H200, night 3 of the 7B
    # rig's chain, 2026-11-28): the clause says what is missing
    return (f"; earlier nights of this design on this pair (same rig file, driver and GPU models): {body}; no start "
            f"spread is borrowed before {MIN_PRIOR_NIGHTS} nights and {MIN_PRIOR_DF} df")


MAX_PLAN_STARTS = 40


def _window_text(cfg: CampaignConfig, points: Sequence[str]) -> str:
    """``6.5 s``, ``5 s (c16), 8.5 s (c64)`` or ``8 prompts per concurrency``."""
    w = cfg.window_s
    if isinstance(w, PerPoint):
        return w.text(points)
    return f"{w:g} s" if w is not None else f"{cfg.prompts_per_concurrency} prompts per concurrency"


#: seconds a server's warm-up at a point is expected to take: on a real server, and on the stand-in
PLAN_WARM_S = 2.0
STAND_IN_WARM_S = 0.5


#: Seconds between a launch's last window and its successor's launch on a real server, beyond the idle baseline:
#: the servers' teardown (vLLM's API server stops at once; what outlives it gets ``serve.procs.ORPHAN_GRACE_S``),
#: the GPU-memory release check and the VRAM wait. 2x H200, 2026-11-27: 0.5 s a launch (eighth night), ~7 s (tenth,
#: the TP workers in NCCL teardown, before the orphan grace), once 60 s (a hung ``Abort``)
PLAN_TEARDOWN_S = 2.0


def _launch_gap_s(runner: ResidentRunner) -> float:
    """Seconds each launch spends outside its servers' start: the idle baseline, and the teardown before it."""
    return runner.config.idle_baseline_s + (0.2 if _stand_in(runner) else PLAN_TEARDOWN_S)


def _warm_s(runner: ResidentRunner) -> float:
    if runner.config.warmup <= 0:
        return 0.0
    return STAND_IN_WARM_S if _stand_in(runner) else PLAN_WARM_S


#: Seconds each server beyond two adds to a parallel launch: eight 7B-shape servers (4 starts at once) were ready
#: in 160 s on 2x H200 with the compile cache loaded (215 s on a cold machine), where two take 93-99 s on H100
PLAN_PER_SERVER_S = 7.0
#: Seconds a later launch takes when its servers were started ahead and held (``campaign.start_ahead``): their GPU
#: part and readiness only. 7B-shape TP=2 on 2x H200 with the compile cache warm: 56.8 and 48.8 s (fourth session),
#: 42.4-46.9 s (fifth), 2026-11-27; the plan of the fifth expected 18 min for a night of 12.2 without it
PLAN_AHEAD_START_S = 50.0
#: The same with the engine core and workers forked (``VLLM_WORKER_MULTIPROC_METHOD: fork``, and ``max-num-seqs:
#: 64``): 32, 21, 19, 22 and 20 s (2x H200, 2026-11-27, seventh session); the workers no longer import vLLM after
#: the hold
PLAN_AHEAD_START_FORK_S = 25.0
#: A start not made ahead, forked: 89 s for the first launch of that night (compiling, a fresh machine), 79 s for
#: one start alone that compiled (``benchmarks/start_phases_gpu.py``), where spawned starts took 92-160 s
PLAN_START_FORK_S = 90.0


def _start_estimate(runner: ResidentRunner, launch: int, at_once: int = 1) -> float:
    """Seconds launch number ``launch`` (every arm's server, ``at_once`` times) is expected to take: one server's
    start when they start in parallel (the slowest; they start alike) plus :data:`PLAN_PER_SERVER_S` for each
    server beyond two (their CPU and file work adds up), the sum over the servers when one after the other.
    A planned launch whose servers start ahead (:func:`_ahead`) has only their GPU part left; a launch the
    campaign adds while undecided is not started ahead, and the progress line replaces these guesses with
    what it measures."""
    one = _server_start_s(runner, ahead=_ahead(runner, launch))
    servers = len(runner.config.arms) * at_once
    return one + PLAN_PER_SERVER_S * max(0, servers - 2) if _parallel(runner, launch) else servers * one


def _ahead(runner: ResidentRunner, launch: int) -> bool:
    """Whether planned launch ``launch`` is expected to find its servers started ahead (``campaign.start_ahead``,
    ``ModelBackend.start_ahead``): resident arms, starts in parallel, and a launch before it to start during
    (the third where the first learns the KV cache size, sequentially, and the second is sized by it)."""
    backend = runner.backend
    if not (isinstance(backend, ModelBackend) and backend.starts_ahead(runner.config.resident_mode(runner.kind))):
        return False
    plan = backend.start_plan("resident")
    return launch >= 2 if plan.parallel else launch >= 3 and plan.learn


def _parallel(runner: ResidentRunner, launch: int) -> bool:
    """Whether launch ``launch`` is expected to start its servers at once (``ModelBackend.start_plan``: a first
    launch that learns the KV cache size runs sequentially, the later ones in parallel)."""
    backend = runner.backend
    if not isinstance(backend, ModelBackend):
        return False
    plan = backend.start_plan(runner.config.resident_mode(runner.kind) or "resident")
    return plan.parallel or (plan.learn and launch > 1)


def _start_text(runner: ResidentRunner) -> str:
    """How the plan's starts launch their servers, for the plan line."""
    if _parallel(runner, 1):
        how = ", every start's servers in parallel"
    elif _parallel(runner, 2):
        how = ", in parallel after start 1 (sequential: it learns the KV cache size)"
    else:
        return ", one after the other"
    first = next((n for n in (2, 3) if _ahead(runner, n)), None)
    if first is not None:
        how += (f"; from launch {first} on, started ahead: ~{_server_start_s(runner, ahead=True):.0f} s of GPU "
                "work each")
    return how


def _server_start_s(runner: ResidentRunner, ahead: bool = False) -> float:
    """Seconds one server start is expected to take: the stand-in starts in about a second, vLLM in a minute
    or two (model load, torch.compile, CUDA graphs); measured starts replace the guess in the run's notes.
    ``ahead``: a start whose Python part ran ahead, while the launch before it ran (:data:`PLAN_AHEAD_START_S`);
    a rig that forks vLLM's engine core and workers starts faster either way (``ModelBackend.forks_workers``)."""
    if _stand_in(runner):
        return 1.0
    forked = isinstance(runner.backend, ModelBackend) and runner.backend.forks_workers()
    if ahead:
        return PLAN_AHEAD_START_FORK_S if forked else PLAN_AHEAD_START_S
    if forked:
        return PLAN_START_FORK_S
    # measured, 7B-shape TP=2 on H100 (docs/gpu-runs.md): 115-130 s a start that compiles, 93-99 s one that loads
    # vLLM's compile cache (every start after a night's first, and the first too since the key lasts), 156 s
    # for the first start on a cold machine
    return 120.0


def launches(first: int, goal: int, at_once: int) -> list[int]:
    """The starts of the next launch: from ``first`` up to ``at_once`` of them, never past ``goal``."""
    return list(range(first, min(first + at_once - 1, goal) + 1))


def starts_text(group: list[int]) -> str:
    """``start 4``, or ``starts 4-6`` for starts made at once."""
    return f"start {group[0]}" if len(group) == 1 else f"starts {group[0]}-{group[-1]}"


def run_blocks(runner: ResidentRunner, rd: RunWriter, result: CampaignResult, points: list[str],
               pending: set[tuple[str, str, int]], started: float) -> None:
    """Starts until the planned number, then adaptive starts while an uplift is undecided (see module doc).

    Starts are made ``campaign.starts_at_once`` at a time (one launch); the decision looks after each launch
    once the planned starts are in, and an added launch makes at most the starts left to ``max_starts``."""
    cfg = runner.config
    last = max(cfg.starts, cfg.max_starts or cfg.starts)
    budget = adaptive.TimeBudget(cfg.max_time_s, started, "start")
    ahead = _Ahead()
    try:
        _run_launches(runner, rd, result, points, pending, budget, last, ahead)
    finally:
        ahead.drop(result)


def _run_launches(runner: ResidentRunner, rd: RunWriter, result: CampaignResult, points: list[str],
                  pending: set[tuple[str, str, int]], budget: adaptive.TimeBudget, last: int, ahead: _Ahead) -> None:
    cfg = runner.config
    rule = cfg.uplift_rule_for(runner.kind)
    rerun: set[int] = set()
    start = 0
    while True:
        group = launches(start + 1, cfg.starts if start < cfg.starts else last, cfg.starts_at_once)
        start = group[-1]
        pending.update(cfg.window_keys(points, group))
        _pace_ahead(runner, _launches_after(group, cfg.starts, cfg.starts_at_once))
        following = launches(start + 1, cfg.starts, cfg.starts_at_once) if start < cfg.starts else None
        began = time.monotonic()
        _start_with_retries(runner, rd, result, group, points, pending, ahead=ahead, following=following)
        budget.took(began, time.monotonic(), size=len(group))
        if result.errors:
            return
        result.reps = start * cfg.window_stride
        if start < cfg.starts:
            continue
        for bad, why in adaptive.screen_starts_campaign(result.rep_data, cfg, runner.kind, points).items():
            if bad in rerun or result.errors:
                continue
            rerun.add(bad)
            _set_aside_start(runner, rd, result, bad, points, f"screened: {why}", kind="screened")
            result.notes.append(f"start {bad} screened and re-run: {why}")
            pending.update(cfg.window_keys(points, [bad]))
            _pace_ahead(runner, 0)
            _start_with_retries(runner, rd, result, [bad], points, pending, rerun=True)
        if result.errors:
            return
        reps = list(range(1, result.reps + 1))
        alpha = rule.family_alpha(len(points))
        decisions = {p: adaptive.decide_starts(*runner._arm_reps(result, p), cfg, runner.kind, reps,
                                               rule.threshold(p), alpha, runner.start_priors.get(p))
                     for p in points}
        undecided = any(not d.decided for d in decisions.values())
        # decided, but not known to the precision the rig asks (the estimate's interval at the point's alpha)
        halves = adaptive.estimate_halfwidths({p: runner._arm_reps(result, p) for p in points}, cfg, runner.kind,
                                              reps, alpha, runner.start_priors)
        wide = adaptive.too_wide(halves, cfg.precision)
        stopped = None
        if (undecided or wide) and start < last and (refused := budget.refuses(
                time.monotonic(), len(launches(start + 1, last, cfg.starts_at_once)))) is not None:
            stopped = refused
        elif (undecided or wide) and start >= last:
            stopped = (f"max_starts={last} reached" if last > cfg.starts
                       else "fixed design (campaign.max_starts not set)")
        if not (undecided or wide) or stopped is not None:
            result.decisions = {p: {**adaptive.decision_json(d, stopped=stopped), "needed_unit": "starts",
                                    **adaptive.precision_json(halves.get(p), cfg.precision, alpha),
                                    **adaptive.point_record(*runner._arm_reps(result, p), cfg, runner.kind, reps,
                                                            runner.start_priors.get(p))}
                                for p, d in decisions.items()}
            result.notes.extend(adaptive.noisy_window_notes(result.decisions))
            if wide:
                result.notes.append(f"precision not reached at {start} start(s) ({stopped}): "
                                    + adaptive.wide_text(wide, cfg.precision, alpha))
            return
        more = launches(start + 1, last, cfg.starts_at_once)
        why = (f"uplift inconclusive at {start} start(s)" if undecided
               else f"{adaptive.wide_text(wide, cfg.precision, alpha)} at {start} start(s)")
        result.notes.append(f"{why}: adding {starts_text(more)}")


def _start_with_retries(runner: ResidentRunner, rd: RunWriter, result: CampaignResult, group: list[int],
                        points: list[str], pending: set[tuple[str, str, int]], *, rerun: bool = False,
                        ahead: _Ahead | None = None, following: list[int] | None = None) -> None:
    """One launch (the starts of ``group``, made at once); a launch whose server died (or measured nothing) is set
    aside whole and made again: every start of it, since all of them went down with the launch.

    Every start the plan did not count (an added start, a screened start's re-run) adds its windows to what the
    progress line counts down, and a retry the windows its failed attempt had measured: the line must not read
    ``ETA 0:00`` while a start is still to come, nor stop short of its end.

    ``ahead``: servers started ahead for this launch are its first attempt's (``campaign.start_ahead``), and
    this launch starts those of ``following`` (the next planned launch) as it begins."""
    cfg = runner.config
    what = starts_text(group)
    again = 0  # windows a failed attempt measured (and the line counted done): the next attempt measures them again
    for attempt in range(1, cfg.rep_retries + 2):
        held = ahead.take(group, result) if ahead is not None and attempt == 1 else None
        if attempt == 1 and (rerun or group[-1] > cfg.starts):
            _count_more(runner, cfg.window_pairs(points) * len(cfg.arms) * len(group))
        # a retry adds only what its failed attempt had measured: the windows it never reached are the plan's
        # still (until 2026-11-28 a retry added the whole launch, so a launch that failed at its first window left
        # the line 8 windows short of its end: "26/34" on a loaded CI box)
        _count_more(runner, again)
        before = _counts(runner)
        for s in group:
            for arm in cfg.arms:
                for w in range(1, cfg.window_stride + 1):
                    # a window's attempts count on over a screened start's re-run and a retry (they name its
                    # set-aside files: counted from 1 again, a re-run's screened window overwrote the start's)
                    key = (arm, rep_of(s, w, cfg.window_stride))
                    runner._attempts[key] = runner._attempts.get(key, 0) + 1
        try:
            _run_start(runner, rd, result, group, points, attempt, pending, held=held, ahead=ahead,
                       following=following)
            return
        except RepFailed as exc:
            done, total = _counts(runner)
            again = (done - before[0]) - (total - before[1])  # steps beyond the windows this attempt added itself
            first = str(exc).splitlines()[0]
            for s in group:
                _set_aside_start(runner, rd, result, s, points, str(exc), kind="failed")
            if attempt > cfg.rep_retries:
                result.errors.append(f"{what}: not measured after {attempt} attempt(s): {first}")
                return
            result.notes.append(f"{what} attempt {attempt} set aside and re-run: {first}")
            if cfg.cooldown_s > 0:
                runner.sleep(cfg.cooldown_s)
        except OSError:
            raise  # disk full, read-only: nothing more can be recorded
        except P2PError as exc:
            if _fall_back_to_sleep(runner, result, exc):
                continue
            hint = (f" (campaign.starts_at_once {cfg.starts_at_once}: fewer servers at once need less memory)"
                    if cfg.starts_at_once > 1 and "out of GPU memory" in str(exc) else "")
            result.errors.append(f"{what}: {exc}{hint}")
            return


def _pace_ahead(runner: ResidentRunner, launches: int) -> None:
    if runner.progress is not None and runner.progress.pace is not None:
        runner.progress.pace.launches_ahead = launches


def _counts(runner: ResidentRunner) -> tuple[int, int]:
    """The progress line's windows done and its total (0, 0 without a line)."""
    return (runner.progress.done, runner.progress.total) if runner.progress is not None else (0, 0)


def _count_more(runner: ResidentRunner, windows: int) -> None:
    """Windows the plan did not count (a start or a window pair measured again, an added start): the progress
    line counts them too, so it never runs out while work is left."""
    if runner.progress is not None:
        runner.progress.total += windows


def _fall_back_to_sleep(runner: ResidentRunner, result: CampaignResult, exc: P2PError) -> bool:
    """``residency: auto``: the arms' servers did not fit on the pair together (a server ran out of GPU memory
    at start), so the campaign goes on in sleep mode, each server with the rig's whole memory share; says so.
    An explicit ``resident`` is the rig's choice and fails instead."""
    cfg = runner.config
    if (cfg.residency != "auto" or cfg.resident_mode(runner.kind) != "resident" or cfg.starts_at_once > 1
            or "out of GPU memory" not in str(exc)):
        return False  # starts made at once need them all up: fewer at once is the rig's choice, said in the error
    runner.config = dataclasses.replace(cfg, residency="sleep")
    if isinstance(runner.backend, ModelBackend):
        runner.backend.campaign = runner.config
    result.notes.append("residency auto: both arms' servers did not fit on the pair (out of GPU memory at start); "
                        "going on in sleep mode (the idle arm's server sleeps): " + str(exc).splitlines()[0])
    return True


def start_log(rd: RunWriter, arm: str, point: str, start: int) -> Path:
    """The server log of one start of ``arm`` (in its first point's scenario directory: one server served
    every point of the start)."""
    return rd.scenario_dir(arm, point) / f"server_start{start}.log"


def _set_aside_start(runner: ResidentRunner, rd: RunWriter, result: CampaignResult, start: int,
                     points: list[str], cause: str, *, kind: str) -> None:
    """Every window of ``start`` (both arms, every point) out of the data, its files kept aside with the cause."""
    w_n = runner.config.window_stride
    for arm in runner.config.arms:
        measured = {k: {p: d for p in points if (d := result.rep_data.get((arm, p), {}).pop(k, None)) is not None}
                    for k in (rep_of(start, w, w_n) for w in range(1, w_n + 1))}
        measured = {k: old for k, old in measured.items() if old} or {rep_of(start, w_n, w_n): {}}
        for k, old in measured.items():  # a start that measured nothing still records its cause, once
            runner._set_aside(rd, result, arm, k, points, old, cause, kind=kind)
        log = start_log(rd, arm, points[0], start)
        attempt = runner._attempts.get((arm, rep_of(start, 1, w_n)), 1)
        with contextlib.suppress(OSError):
            if log.is_file():
                os.replace(log, log.with_name(f"server_start{start}.try{attempt}.{kind}.log"))


def _run_start(runner: ResidentRunner, rd: RunWriter, result: CampaignResult, group: list[int],
               points: list[str], attempt: int, pending: set[tuple[str, str, int]], *,
               held: list[Held] | None = None, ahead: _Ahead | None = None,
               following: list[int] | None = None) -> None:
    """One launch: every arm's server once per start of ``group``, all up at once, then the windows.

    Window pair ``w`` of each start runs in turn (ABBA over windows, the first arm alternating between starts), so
    the starts of one launch see the same stretch of time; each server gets its own warm-up before its first
    window at a point and proves its transport from its own log.

    ``held``: this launch's servers, started ahead and held (continued instead of started). As this launch begins,
    the servers of ``following`` are started ahead into ``ahead``, and its windows wait until they are held
    (see :class:`_Ahead`)."""
    assert runner.progress is not None  # set by run()
    backend = runner.backend
    assert isinstance(backend, ModelBackend)
    cfg = runner.config
    mode = cfg.resident_mode(runner.kind) or "resident"
    arms = list(cfg.arms)
    w_n = cfg.window_stride
    first_rep = rep_of(group[0], 1, w_n)
    servers = [(a, s) for s in group for a in arms]
    labels = [a if len(group) == 1 else f"{a}@start{s}" for a, s in servers]
    logs = [start_log(rd, a, points[0], s) for a, s in servers]
    total = max(cfg.starts, group[-1])
    what = starts_text(group)
    with runner.lease.hold(runner.pair, f"{runner.pair_key} {what}"):
        runner.progress.launch_begins()
        if ahead is not None and following:
            # first: their Python start-up (~22 s forked) needs CPUs only, and the windows wait for its end
            # (_Ahead.settle); this launch's own servers, if started ahead, bind their ports only once continued
            ahead.start(runner, rd, result, following, points, mode, [h.server.port for h in held or ()])
        with runner.progress.waiting(what, first_rep, total * w_n, "waiting for free VRAM"):
            vram_note = wait_vram_free(runner.pair, cfg.vram_free_mib, cfg.vram_free_timeout_s, live=runner.live)
        reader = runner._reader()
        prompts = backend.prompts_ahead({p: cfg.window_reps(p, group) for p in points})
        try:
            idle_rows = runner._idle_rows(reader)
            t0 = time.monotonic()
            doing = "continuing" if held is not None else "starting"
            with runner.progress.waiting(what, first_rep, total * w_n,
                                         f"{doing} {len(servers)} servers ({mode})"
                                         + (f", attempt {attempt}" if attempt > 1 else "")) as beat, \
                    backend.resident([runner.arms[a] for a, _ in servers], logs, mode, labels,
                                     ahead=held, taken_ports=ahead.ports() if ahead is not None else ()) as by_label:
                beat.stop()  # the servers are up: the heartbeat covered their start only
                runner.progress.launch_ready()
                slots = {key: by_label[label] for key, label in zip(servers, labels, strict=True)}
                how = _record_start(rd, result, backend, group, attempt, time.monotonic() - t0)
                run = _Start(runner, rd, result, slots, reader, idle_rows, attempt, mode, vram_note, pending, how)
                if prompts is not None:
                    prompts.join()  # made while the servers started (done by now on a real server)
                for point in points:
                    if ahead is not None and point == points[0] and not backend.calibrated(point):
                        ahead.settle(result)  # a warm-up that sizes the windows measures its server undisturbed
                    run.warm(point, group)
                    if ahead is not None and point == points[0]:
                        # after the warm-ups, which may run beside it: no window runs beside a server's Python
                        # start-up, and the next launch's began this launch (~22 s forked, ~18 s of GPU work)
                        ahead.settle(result)
                    for w in range(1, cfg.windows_for(point) + 1):
                        for s in group:
                            for arm in order(arms, s, w):
                                run.window(point, arm, s, w)
                    for s in group:
                        _rescreen_windows(run, point, s)
                for s in group:
                    for arm in arms:  # after the load: the log holds every NCCL connection
                        if result.proofs.get(arm) is None:
                            runner._record_proof(rd, result, slots[(arm, s)], runner.arms[arm], list(points))
                        else:
                            _same_transport(runner, result, slots[(arm, s)], arm, s)
        finally:
            reader.close()


def _record_start(rd: RunWriter, result: CampaignResult, backend: ModelBackend, group: list[int], attempt: int,
                  took_s: float) -> Json:
    """Say how this launch started its servers: a note, ``server_starts`` in run.json (every attempt; starts made
    at once list them all under ``starts``), and what each of its rep files carries (``start_mode``, ``start_s``:
    launch to all ready, the KV cache size, ``at_once``: how many starts the launch made)."""
    rec: Json = {"start": group[0], "starts": list(group), "attempt": attempt, **backend.last_start}
    servers = as_dict(rec.get("servers"))
    ready = {a: as_dict(v).get("ready_s") for a, v in servers.items()}
    kv = rec.get("kv_cache_memory_bytes")
    result.notes.append(f"{starts_text(group)}: {rec.get('start_mode')} start, servers ready at {ready} s "
                        f"({took_s:.0f} s for all)"
                        + (f", --kv-cache-memory-bytes {kv} ({rec.get('kv_source')})" if kv is not None else "")
                        + (f"; next starts: --kv-cache-memory-bytes {rec['kv_learned_bytes']} (learned)"
                           if "kv_learned_bytes" in rec else "")
                        + (f"; {rec['kv_note']}" if "kv_note" in rec else "") + _ahead_text(as_dict(rec.get("ahead")))
                        + _phases_text(servers))
    again = _compiled_again(servers, backend.start_log)
    if again:
        result.notes.append(f"{starts_text(group)}: {again}")
    backend.start_log.append(rec)
    rd.write_run_meta({"server_starts": list(backend.start_log)})
    # ``launch`` numbers every launch (attempt) of the campaign: the launch guard groups starts by it, and a start
    # re-run alone after the screen is a launch of its own even though it keeps its start number
    return {"start_mode": rec.get("start_mode"), "start_s": rec.get("start_s"), "kv_cache_memory_bytes": kv,
            "kv_source": rec.get("kv_source"), "at_once": len(group), "launch": len(backend.start_log)}


def _ahead_text(ahead: Mapping[str, object]) -> str:
    """``; started ahead 110 s before the launch, held 64-66 s before their GPU work``, and any server that was not
    held in time (its GPU work began beside the windows); empty for a launch that started its servers itself."""
    if not ahead:
        return ""
    entries = [as_dict(v) for v in ahead.values()]
    before = [float(x) for e in entries if isinstance(x := e.get("spawned_before_s"), (int, float))]
    held = [float(x) for e in entries if isinstance(x := e.get("held_s"), (int, float))]
    text = f"; started ahead {max(before):.0f} s before the launch" if before else "; started ahead"
    if held:
        lo, hi = min(held), max(held)
        text += f", held {lo:.0f} s" if round(lo) == round(hi) else f", held {lo:.0f}-{hi:.0f} s"
        text += " before their GPU work"
    late = [f"{label}: {e['late']}" for label, e in zip(ahead, entries, strict=True) if e.get("late")]
    if late:
        text += f" (not held in time: {'; '.join(late)})"
    return text


@dataclass
class _Ahead:
    """The servers of the next planned launch, started as this launch begins and held before their GPU work
    (``campaign.start_ahead``, ``serve.hold``): the minute of Python every vLLM start pays (API server, then
    engine core) runs beside this launch's own start, which needs the GPUs, not beside its windows. The windows
    wait until every server started ahead is held (:meth:`settle`): on 2x H200 (2026-11-27), with servers started
    ahead *during* the last point's windows, some of the faster arm's c64 windows dipped 3-8 % (cause not
    settled: docs/campaign-design.md), and a window beside a start-up is a doubt the design can avoid.

    Only planned launches are started ahead: an added start waits for the decision that adds it, a start re-run
    after the screen for the screen. Servers that are gone by their launch (one exited, or was stopped for good
    because its GPU work began too early) are dropped and the launch starts its servers itself; servers no launch
    will use (the campaign failed or was interrupted first) are stopped at the end of the campaign."""

    group: list[int] | None = None
    held: list[Held] | None = None

    def start(self, runner: ResidentRunner, rd: RunWriter, result: CampaignResult, group: list[int],
              points: list[str], mode: str, taken_ports: Sequence[int]) -> None:
        if self.held is not None:
            return  # started during an earlier attempt of the present launch
        backend = runner.backend
        assert isinstance(backend, ModelBackend)
        servers = [(a, s) for s in group for a in runner.config.arms]
        logs = [start_log(rd, a, points[0], s) for a, s in servers]
        try:
            held = backend.start_ahead([runner.arms[a] for a, _ in servers], logs, mode, taken_ports)
        except P2PError as exc:  # not an error of the campaign: the launch starts its servers itself
            result.notes.append(f"{starts_text(group)}: not started ahead ({str(exc).splitlines()[0]})")
            return
        if held is not None:
            self.group, self.held = list(group), held

    def ports(self) -> list[int]:
        """The ports of the servers started ahead: they bind them only once continued, so none may be given twice."""
        return [h.server.port for h in self.held or ()]

    def settle(self, result: CampaignResult) -> None:
        """Wait until every server started ahead is held (or gone); one that is not by its startup timeout is
        dropped with the rest, so that no window runs beside it."""
        if not self.held:
            return
        deadline = time.monotonic() + min(h.server.config.startup_timeout_s for h in self.held)
        while not all(h.settled() for h in self.held) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not all(h.settled() for h in self.held):
            group = self.group or []
            result.notes.append(f"{starts_text(group)}: the servers started ahead did not reach their hold by the "
                                "startup timeout; stopped (the launch starts its servers itself)")
            self.drop(result)

    def take(self, group: list[int], result: CampaignResult) -> list[Held] | None:
        """The servers started ahead for ``group``, if they are still there to be continued."""
        if self.held is None or self.group != group:
            return None
        held, self.group, self.held = self.held, None, None
        gone = [h for h in held if not h.server.alive()]
        if gone:
            why = "; ".join(f"{h.server.arm}: {h.late or 'exited'}" for h in gone)
            result.notes.append(f"{starts_text(group)}: the servers started ahead are gone ({why}); the launch "
                                "starts its servers itself")
            _drop(held, result)
            return None
        return held

    def drop(self, result: CampaignResult) -> None:
        held, self.group, self.held = self.held, None, None
        if held:
            _drop(held, result)


def _drop(held: list[Held], result: CampaignResult) -> None:
    from ..serve.server import drop_ahead

    try:
        drop_ahead(held)
    except P2PError as exc:
        result.errors.append(f"servers started ahead: {exc}")


def _phases_text(servers: Mapping[str, object]) -> str:
    """``; slowest p2p_off: 63 s starting vLLM's processes, 58 s on the GPU (...)``: where the launch's time went
    (``serve.start_phases``, from the slowest server's log); empty when no log says."""
    best: tuple[float, str, str] | None = None
    for label, v in servers.items():
        ready, text = as_dict(v).get("ready_s"), as_dict(as_dict(v).get("phases")).get("text")
        if isinstance(ready, (int, float)) and isinstance(text, str) and text and (best is None or ready > best[0]):
            best = (float(ready), label, text)
    return "" if best is None else f"; slowest {best[1]}: {best[2]}"


def _compiled_again(servers: Mapping[str, object], earlier: Sequence[Json]) -> str:
    """A server of a later launch that compiled with torch.compile again: an earlier launch of this campaign filled
    vLLM's compile cache, so a start after it should load (2x H100, 2026-11-26: a per-start API key in the cache key
    made every start compile, ~20 s each). Says which and how long; empty when none did or no launch came before."""
    if not any(as_dict(r.get("servers")) for r in earlier):
        return ""
    slow = {label: as_dict(as_dict(v).get("phases")).get("compile_s") for label, v in servers.items()
            if as_dict(as_dict(v).get("phases")).get("compile_cache") == "compiled"}
    if not slow:
        return ""
    took = ", ".join(f"{label} {s:.0f} s" if isinstance(s, (int, float)) else label for label, s in slow.items())
    return (f"torch.compile compiled again ({took}) though an earlier start of this campaign filled its cache: "
            "vLLM's compile cache did not last between starts (is VLLM_CACHE_ROOT kept, and the same for every "
            "start?); each such start costs that time again")


def _same_transport(runner: ResidentRunner, result: CampaignResult, slot: ServerSlot, arm: str,
                    start: int) -> None:
    """Every start's server proves its transport from its own log: a later start that came up on another
    transport than the first (a changed environment, a fallback) fails the campaign, naming both."""
    proof, _ = runner.backend.proof(slot, runner.arms[arm])
    first = (result.proofs.get(arm) or {}).get("transport")
    now = (proof or {}).get("transport")
    if now != first:
        result.errors.append(f"arm {arm}: the server of start {start} used transport {now or 'unknown'}, the "
                             f"first start's used {first or 'unknown'} (log {slot.server.log_path})")


@dataclass
class _Start:
    """One launch's servers (keyed by arm and start) and what every window of it shares."""

    runner: ResidentRunner
    rd: RunWriter
    result: CampaignResult
    slots: dict[tuple[str, int], ServerSlot]
    reader: _Reader
    idle_rows: list[Row]
    attempt: int
    mode: str
    vram_note: object
    pending: set[tuple[str, str, int]]
    how: Json = field(default_factory=dict)  # how this launch started its servers (_record_start)
    warmed: set[tuple[str, int, str]] = field(default_factory=set)  # (arm, start, point): each server warms itself

    def warm(self, point: str, group: list[int]) -> None:
        """Warm every server of the launch at ``point`` before its first window there, one after the other, in
        the order of their first windows or its reverse (``campaign.warmup_order``, :func:`.schedule.warm_order`;
        the first window's server's warm-up sizes the point's windows where they have a time budget). Sleep mode
        leaves each server's warm-up to its first window, when it is awake.

        Why before the windows: the launch's first windows then wait for the next launch's servers started
        ahead (:meth:`_Ahead.settle`) after these warm-ups, not before them. Why not at once: two servers
        under load at once on one pair crawl. On 2x H200 (2026-11-27, ninth session) two 7B servers warming up
        together at c64 made 340-470 output tokens/s each, against ~5000 alone, and a start's warm-ups took 17 s
        instead of 3 (each server's NCCL kernels wait on their peer rank while the GPU runs the other
        process's)."""
        r = self.runner
        if r.config.warmup <= 0 or self.mode != "resident":
            return
        assert isinstance(r.backend, ModelBackend)
        # checked against what was warmed before this call: the order may name the first window's server twice
        # (sizing the windows, then settling it right before its window: schedule.warm_order)
        before = set(self.warmed)
        for arm, s in warm_order(list(r.config.arms), group, r.config.warmup_order,
                                 sized=r.backend.calibrated(point)):
            if (arm, s, point) not in before:
                signals.checkpoint()
                r._warm(self.slots[(arm, s)], arm, point, rep_of(s, 1, r.config.window_stride))
                self.warmed.add((arm, s, point))

    def window(self, point: str, arm: str, start: int, w: int) -> None:
        """One timed window of ``arm``'s server of ``start`` at ``point``: the server checked before and after,
        the rep written at once."""
        r = self.runner
        assert r.progress is not None and isinstance(r.backend, ModelBackend)
        w_n = r.config.window_stride
        k = rep_of(start, w, w_n)
        slot = self.slots[(arm, start)]
        signals.checkpoint()
        r.progress.update(f"{arm}-{point}", k, max(r.config.starts, start) * w_n, f"start {start} window {w}")
        r.backend.activate({a: sl for (a, s), sl in self.slots.items() if s == start}, arm)
        cause = r.backend.death(slot)
        if cause is not None:
            raise RepFailed(cause)
        data = r._measure_point(self.rd, slot, self.reader, arm, point, k, self.idle_rows,
                                warm=(arm, start, point) not in self.warmed)
        self.warmed.add((arm, start, point))
        data["meta"] = {**as_dict(data.get("meta")), "vram": self.vram_note, "attempt": self.attempt,
                        "start": start, "window": w, "residency": self.mode, **self.how}
        self.rd.write_rep(arm, point, k, data)
        self.result.rep_data.setdefault((arm, point), {})[k] = data
        self.pending.discard((arm, point, k))
        r.progress.step()


def _rescreen_windows(run: _Start, point: str, start: int) -> None:
    """Window pairs of ``start`` that telemetry flagged or that sit off against the start's other windows:
    set aside (kept, ``screened``) and measured again at once, on the same servers."""
    runner, cfg = run.runner, run.runner.config
    for w, why in adaptive.screen_windows_start(run.result.rep_data, cfg, runner.kind, point, start).items():
        k = rep_of(start, w, cfg.window_stride)
        for arm in cfg.arms:
            old = run.result.rep_data.get((arm, point), {}).pop(k, None)
            runner._set_aside(run.rd, run.result, arm, k, [point], {point: old} if old is not None else {},
                              f"screened: {why}", kind="screened")
            runner._attempts[(arm, k)] = runner._attempts.get((arm, k), 1) + 1
        run.result.notes.append(f"{point} start {start} window {w} screened and re-measured: {why}")
        _count_more(runner, len(cfg.arms))  # work the plan did not count, like a start run again
        for arm in order(list(cfg.arms), start, w):
            run.window(point, arm, start, w)
