"""The results directory's names and shapes: one campaign (one GPU pair) is one run directory.

Why one place: the campaign writes the directory and the verdict and the report read it,
possibly in another process or on another machine (``python -m pytest_p2p report DIR`` needs
no GPU). Each side used to spell the names itself, and a reader that disagreed with the writer
by one character saw a run without reps. Layout (every key: docs/results.md)::

    <root>/<run-id>/run.json, env/<name>, summary.{md,csv,json}, plots/*.png
                   scenarios/<arm>-<point>/scenario.json, run_<k>.json, aggregate.json,
                                           transport_proof.json, telemetry_run<k>.csv, server_run<k>.log
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypedDict

from ..errors import ResultsError
from ..jsontypes import JSONObject

RUN_META = "run.json"
SCENARIOS = "scenarios"
ENV = "env"
PLOTS = "plots"
SCENARIO_META = "scenario.json"
AGGREGATE = "aggregate.json"
PROOF = "transport_proof.json"
REP_GLOB = "run_*.json"  # matches set-aside attempts too (run_<k>.try<n>.<why>.json): filter with REP_RE
KINDS = ("model", "probe")
#: A few KiB kept on disk from the start so that, when the disk fills, run.json can still be told the
#: truth: deleting this file frees the blocks the final status write needs.
RESERVE = ".p2p-space-reserve"

ARM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
POINT_RE = re.compile(r"^(?:c[0-9]+|s[0-9A-Za-z.]+)$")
REP_RE = re.compile(r"^run_([0-9]+)\.json$")
TELEMETRY_RE = re.compile(r"^telemetry_run([0-9]+)\.csv$")
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")
_PAIR_RE = re.compile(r"^gpu([0-9]+)-gpu([0-9]+)$")


@dataclass(frozen=True)
class Pair:
    """A GPU pair by NVML index, ``a < b``: ``gpu<a>-gpu<b>`` in test ids, run ids and ``run.json``'s ``pair.key``.

    Why a type: the key was once recovered from a run id by splitting on ``_``, which gave the
    wrong pair for an id with a ``-2`` suffix; :meth:`parse` reads the key itself.
    """

    a: int
    b: int

    @property
    def key(self) -> str:
        return f"gpu{self.a}-gpu{self.b}"

    @classmethod
    def parse(cls, key: str) -> Pair:
        m = _PAIR_RE.match(key)
        if not m:
            raise ResultsError(f"pair key {key!r} is not 'gpu<a>-gpu<b>'")
        return cls(int(m.group(1)), int(m.group(2)))


class PairMeta(TypedDict, total=False):
    """``run.json``'s ``pair``: the key and, once the campaign has read the evidence, both GPUs."""

    key: str
    gpus: list[JSONObject]  # index, bus_id, uuid, name


class RunHead(TypedDict, total=False):
    """What names a run in ``run.json`` (docs/results.md lists every key), typed: ``read.run_head`` checks it."""

    run_id: str
    rig: str
    kind: str  # one of KINDS
    status: str  # running | complete | interrupted | failed
    pair: PairMeta


def safe_component(text: str) -> str:
    """Squash ``text`` to the characters a run id allows (letters, digits, ``._-``)."""
    cleaned = _SAFE_RE.sub("-", str(text)).strip("-.")
    return cleaned or "unnamed"


def make_run_id(rig: str, pair_key: str, now: datetime | None = None) -> str:
    """``<UTC yyyymmdd-HHMMSS>_<rig>_<pair>``: sorts by time, says what was measured."""
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}_{safe_component(rig)}_{safe_component(pair_key)}"


def scenario_name(arm: str, point: str) -> str:
    """``<arm>-<point>``; names that would make the directory ambiguous are refused."""
    if not isinstance(arm, str) or not ARM_RE.match(arm):
        raise ResultsError(f"arm name {arm!r} cannot name a scenario directory: use letters, digits, '_' and '.' "
                           "(no '-', which separates arm and point in '<arm>-<point>')")
    if not isinstance(point, str) or not POINT_RE.match(point):
        raise ResultsError(f"point {point!r} is not a campaign point: expected 'c<N>' (model concurrency) or "
                           "'s<size>' (probe message size, e.g. 's8KiB')")
    return f"{arm}-{point}"


def split_scenario(name: str) -> tuple[str, str] | None:
    """``(arm, point)`` of a scenario directory's name, ``None`` for a name no campaign writes."""
    arm, sep, point = name.rpartition("-")
    return (arm, point) if sep and ARM_RE.match(arm) and POINT_RE.match(point) else None


def check_rep(rep: int) -> int:
    if isinstance(rep, bool) or not isinstance(rep, int) or rep < 1:
        raise ResultsError(f"rep number must be an integer >= 1 (reps count from 1), got {rep!r}")
    return rep


def rep_file(rep: int, aside: str = "") -> str:
    """``run_<k>.json``, or ``run_<k>.<aside>.json`` for an attempt set aside (never read as a rep)."""
    return f"run_{check_rep(rep)}.{aside}.json" if aside else f"run_{check_rep(rep)}.json"


def point_reps(n_reps: int, windows: object, points: Sequence[str]) -> dict[str, list[int]]:
    """The rep numbers each point of a campaign of ``n_reps`` reps was to measure, from ``run.json``'s
    ``campaign.windows``: every number at every point, unless that is a table per point (``{"default": 2, "c64":
    4}``: window pairs per start). Then a start takes as many numbers as its fullest point has pairs (the
    campaign's ``CampaignConfig.window_stride``) and a point with fewer measures the first of them in each start,
    so ``run 3 of 12 missing`` is not said of a number the point never had."""
    every = list(range(1, n_reps + 1))
    if not isinstance(windows, Mapping) or not points:
        return {p: every for p in points}
    default = windows.get("default")
    counts = {p: got if isinstance(got := windows.get(p, default), int) and got >= 1 else None for p in points}
    known = [c for c in counts.values() if c is not None]
    if len(known) != len(counts):  # a table this reader cannot read: claim nothing missing that may not be
        return {p: every for p in points}
    stride = max(known)
    return {p: [k for k in every if (k - 1) % stride < (counts[p] or stride)] for p in points}
