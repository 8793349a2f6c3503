"""What the store keeps of a campaign's design and of where each value ran (schema v3, issue 24).

Why: a resident campaign judges its uplift on start means with ``df = starts - 1`` — three
or four starts a night, far too few to pin down the start-to-start spread. Earlier nights
of the same rig, pair and point measured that spread already; a prior learned from them
(``stats.nested.start_prior``) lends tonight their degrees of freedom. That is only sound
where the earlier start means are comparable to tonight's: the spread of a start mean is
``start_sd**2 + window_sd**2 / W``, so the window pairs per start, the window's size (seconds,
or prompts when ``window_s`` is null), the residency and the uplift metric must match.
:func:`design_key` is that identity, one canonical JSON text compared byte-wise by both
backends; :func:`value_starts` recovers the start (and rep index) of each stored value.

Both read only what a results directory states (``run.json``'s ``kind``, ``campaign`` and
``uplift`` sections; each rep file's ``meta.start``), so a results directory written before
v3 is saved with its starts too. Nothing here imports the campaign stage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ..jsontypes import JSONObject, as_float, as_int

V = TypeVar("V", int, float)

#: residencies whose windows nest within server starts (``campaign.config.RESIDENCY`` minus ``restart``)
NESTED = ("auto", "resident", "sleep")


def design_key(kind: object, campaign: object, metric: object, direction: object) -> str | None:
    """The design of a model campaign as canonical JSON, or ``None`` where it cannot be stated.

    ``campaign`` is ``CampaignConfig.to_dict()`` (run.json's ``campaign``); ``metric`` and
    ``direction`` are the uplift's (run.json's ``uplift``). The residency is the one the rig
    asked for (``auto`` stays ``auto``: a rig whose two servers do not fit falls back to sleep
    mode the same way every night). ``starts`` is not part of it: more starts of one design are
    still comparable starts; ``starts_at_once`` is, above 1 (a start made among 2k servers on the pair, with a
    2k-th of its memory, need not spread as a start made alone). A restart-per-rep campaign has a design too
    (it has no starts, so no prior is learned from it). Probe campaigns and p2p-bench directories have none.
    """
    if kind != "model" or not isinstance(campaign, Mapping) or not isinstance(metric, str):
        return None
    residency = campaign.get("residency")
    if not isinstance(residency, str):
        return None
    design: JSONObject = {"residency": residency, "metric": metric,
                          "direction": direction if isinstance(direction, str) else None}
    if residency in NESTED:
        window_s = _per_point(campaign.get("window_s"), as_float)
        design.update({"windows": _per_point(campaign.get("windows"), as_int), "window_s": window_s,
                       "prompts_per_concurrency": as_int(campaign.get("prompts_per_concurrency"))
                       if window_s is None else None})
        at_once = as_int(campaign.get("starts_at_once"))
        if at_once is not None and at_once > 1:  # 1 (or a run.json before the key) keeps the key it always had
            design["starts_at_once"] = at_once  # a start among 2k servers sharing the pair is another start
    return json.dumps(design, sort_keys=True, separators=(",", ":"))


def _per_point(value: object, convert: Callable[[object], V | None]) -> V | JSONObject | None:
    """A window's length or count as the design states it: one number, or one per point (``{"default": 5.0,
    "c64": 8.5}``, ``CampaignConfig.to_dict``); :func:`design_key`'s ``sort_keys`` makes a table one text in any
    order."""
    if not isinstance(value, Mapping):
        return convert(value)
    table: JSONObject = {}
    for k, v in value.items():
        if (got := convert(v)) is None:
            return None
        table[str(k)] = got
    return table


def window_s_at(design: str, point: str) -> float | None:
    """The seconds of a design's windows at ``point`` (``None`` where the design does not say: windows of prompts,
    a restart design, a key it cannot read)."""
    try:
        d = json.loads(design)
    except ValueError:
        return None
    value = d.get("window_s") if isinstance(d, Mapping) else None
    if isinstance(value, Mapping):
        value = value.get(point, value.get("default"))
    return as_float(value)


def planning_kin(design: str, tonight: str) -> bool:
    """Whether a stored night of ``design`` can size tonight's plan (:class:`~pytest_p2p.stats.nested.Elsewhere`):
    every part of the design but the windows' length and count the same (residency, metric and its direction,
    starts made at once, windows of seconds on both sides), and not tonight's own design."""
    try:
        a, b = json.loads(design), json.loads(tonight)
    except ValueError:
        return False
    if not isinstance(a, dict) or not isinstance(b, dict) or design == tonight:
        return False
    rest = ("windows", "window_s", "prompts_per_concurrency")
    same = {k: v for k, v in a.items() if k not in rest} == {k: v for k, v in b.items() if k not in rest}
    return same and a.get("window_s") is not None and b.get("window_s") is not None


def run_design(run: Mapping[str, object]) -> str | None:
    """:func:`design_key` of a ``run.json`` record."""
    uplift = run.get("uplift")
    up = uplift if isinstance(uplift, Mapping) else {}
    return design_key(run.get("kind"), run.get("campaign"), up.get("metric"), up.get("direction"))


def _start(rep: Mapping[str, object]) -> int | None:
    meta = rep.get("meta")
    return as_int(meta.get("start")) if isinstance(meta, Mapping) else None


def value_starts(reps: Mapping[int, Mapping[str, object]], aggregate: Mapping[str, object], metric: str,
                 values: Sequence[float]) -> tuple[list[int], list[int]] | None:
    """``(starts, rep indices)`` aligned with ``values`` (one metric's values in ``aggregate.json``).

    The aggregate keeps, in rep order, every rep not in ``flags.excluded_reps`` whose ``metric``
    is a number; the same selection over the rep files gives each value its rep and its
    ``meta.start``. The result is used only where it reproduces ``values`` exactly and every
    rep names its start; otherwise (a restart-per-rep run, an edited or partial directory)
    ``None``: no starts are better than wrong ones.
    """
    flags = aggregate.get("flags")
    listed = flags.get("excluded_reps") if isinstance(flags, Mapping) else None
    excluded = {k for k in listed if isinstance(k, int)} if isinstance(listed, list) else set()
    got: list[tuple[float, int, int | None]] = []
    for k in sorted(reps):
        if k in excluded:
            continue
        v = as_float(reps[k].get(metric))
        if v is not None:
            got.append((v, k, _start(reps[k])))
    if [v for v, _, _ in got] != list(values):
        return None
    starts = [s for _, _, s in got]
    if not got or any(s is None for s in starts):
        return None
    return [s for s in starts if s is not None], [k for _, k, _ in got]
