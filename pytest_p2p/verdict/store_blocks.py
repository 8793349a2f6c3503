"""Earlier nights' window pairs, grouped by server start: what a start-spread prior is learned from.

Why one reader: a resident campaign's uplift is judged on start means with ``df = starts - 1``
(3 or 4 starts a night). ``stats.nested.start_prior`` pools the start-to-start spread of earlier
nights of the same rig, pair, point, arms, metric and design; this is the one place that decides
which stored runs count and how their values become blocks:

* only runs whose status is ``complete`` (not failed, interrupted or abandoned), of the same
  ``simulated`` flag as tonight (a stand-in's spread says nothing about a GPU's), of the same
  design (:func:`.store_design.design_key`: comparable start means), newest ``limit`` first;
* in each, arm A's and arm B's values of ``metric`` at ``point`` are paired by rep index and
  grouped by the server start they ran in — a window pair is one rep of both arms, and both
  arms' servers of one start are one block;
* runs without starts (restart per rep, saved before schema v3) are skipped, never an error;
* where tonight's driver or rig digest is known (:attr:`BlockQuery.driver` / ``rig_digest``), only
  nights of the same one: a rig whose start-to-start spread grew cannot be told from 2-3 starts
  tonight (``benchmarks/verdict_prior.py``: 4-15 % wrong verdicts when it doubled or quadrupled), so
  the history lent must be this rig as it is now — a driver update or an edited rig file starts a
  new history of spreads;
* where tonight's GPU models are known (:attr:`BlockQuery.gpu_models`), only nights on the same models:
  the pair ident is the slots' bus ids, and a night on other GPUs in the same slots measured another
  spread.

A store that cannot be read raises :class:`~pytest_p2p.errors.StoreError` (the glue warns and
runs without a prior).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import StoreError
from ..stats.nested import Elsewhere, spread_seen
from .fingerprint import gpu_models, same_rig_file
from .store import Store
from .store_design import planning_kin, window_s_at

#: how many earlier nights a prior is learned from at most (a month of nightly runs)
DEFAULT_NIGHTS = 30

Pairs = list[tuple[float, float]]


@dataclass(frozen=True)
class BlockQuery:
    """Which history: tonight's rig, pair identity (bus ids), kind, point, arms, metric, design, simulated."""

    rig: str
    pair_ident: str
    kind: str
    point: str
    arm_a: str
    arm_b: str
    metric: str
    design: str
    simulated: bool
    driver: str | None = None  # tonight's driver version: nights of another driver are not lent
    rig_digest: str | None = None  # tonight's rig file digest: nights of another rig file are not lent
    rig_file_digest: str | None = None  # tonight's file's bytes: matches the nights saved before content digests
    # tonight's GPU model names, in any order (None: unknown): the pair ident is the slots' bus ids, and a
    # night on other GPUs in the same slots measured another spread, so it is not lent
    gpu_models: tuple[str, ...] | None = None


def _same_rig(fingerprint: object, q: BlockQuery) -> bool:
    """The night's fingerprint names tonight's driver, rig digest and GPU models (each where both are known).

    The GPU models compare as sorted lists (a multiset, as the pair ident sorts by bus id): the pair ident
    names only the slots, and a night on other GPUs in the same slots (H100s one night, H200s the next)
    measured another start spread. UUIDs are not compared: a GPU replaced by one of the same model keeps
    the design's spread (the baseline attribution reports that change).
    """
    try:
        fp = json.loads(fingerprint) if isinstance(fingerprint, str) else None
    except ValueError:
        fp = None
    if not isinstance(fp, dict):
        return q.driver is None and q.rig_digest is None
    versions = fp.get("versions")
    driver = versions.get("driver") if isinstance(versions, dict) else None
    digest = fp.get("rig_digest")
    names = gpu_models(fp) if q.gpu_models is not None else None
    tonight = {"rig_digest": q.rig_digest, "rig_file_digest": q.rig_file_digest}
    return ((q.driver is None or driver in (None, q.driver))
            and (not q.rig_digest or not digest or same_rig_file(fp, tonight))
            and (q.gpu_models is None or names is None or names == sorted(q.gpu_models)))


def _json_list(value: object, run_id: str, column: str) -> list[object]:
    try:
        got = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        got = None
    if not isinstance(got, list):
        raise StoreError(f"run {run_id}: results.{column} holds {value!r:.40}, not a JSON list "
                         "(a damaged or foreign store)")
    return got


def _by_rep(vals: object, starts: object, reps: object, run_id: str) -> dict[int, tuple[int, float]]:
    """``{rep: (start, value)}`` of one results row; values and their starts and reps aligned."""
    v, s, k = (_json_list(x, run_id, c) for x, c in ((vals, "vals"), (starts, "starts"), (reps, "reps")))
    if not len(v) == len(s) == len(k):
        raise StoreError(f"run {run_id}: results.vals, starts and reps differ in length "
                         f"({len(v)}, {len(s)}, {len(k)}): a damaged store")
    out: dict[int, tuple[int, float]] = {}
    for value, start, rep in zip(v, s, k, strict=True):
        # a window that measured nothing (0 tok/s: every request failed) or a damaged value has no log ratio,
        # and one such rep must not cost the campaign its whole prior: that window pair is left out
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            continue
        if isinstance(start, int) and isinstance(rep, int) and not isinstance(start, bool):
            out[rep] = (start, float(value))
    return out


def night_blocks(a: dict[int, tuple[int, float]], b: dict[int, tuple[int, float]]) -> list[Pairs]:
    """One night's blocks: the reps both arms have, in the same start, grouped by start (start order), each
    block's pairs in rep order."""
    grouped: dict[int, Pairs] = {}
    for rep in sorted(set(a) & set(b)):
        (sa, va), (sb, vb) = a[rep], b[rep]
        if sa == sb:
            grouped.setdefault(sa, []).append((va, vb))
    return [grouped[s] for s in sorted(grouped)]


def start_blocks(store: Store, q: BlockQuery, *, limit: int = DEFAULT_NIGHTS,
                 exclude: str | None = None) -> list[list[Pairs]]:
    """Per earlier night (oldest first, the newest ``limit``), per start, the window pairs ``(a, b)``."""
    return [blocks for _, blocks in _nights(store, q, q.design, limit, exclude)]


def _nights(store: Store, q: BlockQuery, design: str | None, limit: int,
            exclude: str | None) -> list[tuple[str, list[Pairs]]]:
    """``(design, blocks)`` per earlier night of ``design`` (``None``: of any design), oldest first."""
    b = store.backend
    sql = (
        "SELECT r.run_id, x.vals, x.starts, x.reps, y.vals, y.starts, y.reps, r.fingerprint, r.design FROM runs r "
        "JOIN results x ON x.run_id = r.run_id AND x.arm = ? AND x.point = ? AND x.metric = ? "
        "JOIN results y ON y.run_id = r.run_id AND y.arm = ? AND y.point = ? AND y.metric = ? "
        "WHERE r.rig = ? AND r.pair_ident = ? AND r.kind = ? "
        + ("AND r.design = ? " if design is not None else "") + "AND r.simulated = ? "
        "AND r.status = 'complete' AND x.starts IS NOT NULL AND y.starts IS NOT NULL "
        f"AND r.run_id {b.null_safe_ne} ? ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?")
    args: Sequence[object] = (q.arm_a, q.point, q.metric, q.arm_b, q.point, q.metric, q.rig, q.pair_ident, q.kind,
                              *((design,) if design is not None else ()), int(q.simulated), exclude, limit)
    with store.backend.guard(f"reading earlier nights' starts of {q.metric} {q.point}"):
        rows = b.query(sql, args)
    nights = []
    for row in reversed(rows):
        run_id = str(row[0])
        if not _same_rig(row[7], q):
            continue
        blocks = night_blocks(_by_rep(row[1], row[2], row[3], run_id), _by_rep(row[4], row[5], row[6], run_id))
        if blocks and isinstance(row[8], str):
            nights.append((row[8], blocks))
    return nights


def elsewhere(store: Store, q: BlockQuery, *, higher_is_better: bool = True,
              limit: int = DEFAULT_NIGHTS) -> Elsewhere | None:
    """What earlier nights of another design of this rig on this pair measured at ``q.point``, the window pair's
    spread scaled to tonight's window length (:class:`~pytest_p2p.stats.nested.Elsewhere`: the plan line's, where
    tonight's design has no night yet); ``None`` where no such night is kept.

    The rig file is another one by construction (its windows changed), so only its digest is let go: the rig's
    name, the pair, tonight's driver and GPU models still hold. Of the designs kept, the one most nights ran
    (the newest on a tie) gives both spreads, from :func:`~pytest_p2p.stats.nested.spread_seen`."""
    tonight_s = window_s_at(q.design, q.point)
    if tonight_s is None:
        return None
    loose = dataclasses.replace(q, rig_digest=None, rig_file_digest=None)
    by_design: dict[str, list[list[Pairs]]] = {}
    for design, blocks in _nights(store, loose, None, limit, None):
        by_design.setdefault(design, []).append(blocks)
    # newest first (the designs in the order of their first night), so that a tie goes to the newest
    kin = [d for d in reversed(by_design) if planning_kin(d, q.design)]
    if not kin:
        return None
    design = max(kin, key=lambda d: len(by_design[d]))
    seen = spread_seen(by_design[design], higher_is_better=higher_is_better)
    their_s = window_s_at(design, q.point)
    if seen.start_sd is None or seen.window_sd is None or their_s is None or seen.windows is None:
        return None
    scale = math.sqrt(their_s / tonight_s)
    n = len(by_design[design])
    what = (f"{n} night{'' if n == 1 else 's'} of {seen.windows} pair{'' if seen.windows == 1 else 's'} of "
            f"{their_s:g} s windows" + (f", scaled to {tonight_s:g} s" if their_s != tonight_s else ""))
    return Elsewhere(n, seen.start_sd, seen.window_sd * scale, what)
