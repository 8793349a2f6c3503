"""The shape of a ``summary.json`` dict: what :mod:`render` and :mod:`seed_report` build and every
other report module reads (glance table, uplift line, csv/md files, plots, JUnit properties).

Every key is optional (``total=False``): a summary read back from disk may come from an older
version or be partial, and the readers already use ``.get`` for what may be absent. Fields
copied verbatim from ``run.json`` (``run_id``, ``rig``, ``status``, times, ``pair``, ``arms``,
``verdicts``) keep the honest JSON type (``object`` / ``JSONObject``) and are narrowed where
read. Leaves that come from ``aggregate.json`` or ``summary.json`` are checked with
:func:`is_stat` / :func:`is_summary` before they are trusted as these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, TypeGuard

from pytest_p2p.jsontypes import JSONObject, JSONValue


class Stat(TypedDict, total=False):
    """One metric over the reps: ``stats.summary.summarize`` plus its values (as in ``aggregate.json``)."""

    mean: float | None
    std: float | None
    median: float | None
    ci95: list[float | None] | None
    n: int | None
    values: list[float]


#: ``energy`` of a scenario: a :class:`Stat` per energy metric, plus ``method`` (and, from an
#: ``aggregate.json``, ``simulated``)
EnergyGroup = dict[str, "Stat | str | bool | None"]


class Scenario(TypedDict, total=False):
    """One ``<arm>-<point>`` row of the summary."""

    arm: str
    point: str
    reps: list[int]
    excluded_reps: list[int]
    expected_reps: int | None
    source: str  # "run files", "aggregate.json" or "summary.csv" (a p2p-bench directory)
    metrics: dict[str, Stat]
    energy: EnergyGroup
    flags: dict[str, list[int]]  # throttled_reps, downtrained_reps (and excluded_reps from aggregate.json)
    transport: str | None


class UpliftEntry(TypedDict, total=False):
    """The paired uplift of one arm over another at one point, and its verdict."""

    point: str
    metric: str
    faster_arm: str
    slower_arm: str
    estimate: float | None
    interval: list[float] | None  # the decision's own interval (never a second one computed for display)
    level: float | None  # its coverage, e.g. 0.98: shown as "98 % CI" wherever the interval is
    n: int
    direction: str
    threshold: float | None
    rule: str
    passed: bool | None  # None: not judged or inconclusive
    message: str
    outcome: str
    pairs_needed: int | None
    needed_unit: str  # what pairs_needed counts: "pairs" (restart per rep, probes) or "starts" (resident arms)


class TransportEntry(TypedDict, total=False):
    expected: JSONValue
    observed: list[str]


class Summary(TypedDict, total=False):
    """``summary.json``: see docs/results.md for every key."""

    schema: int
    run_id: JSONValue
    rig: JSONValue
    pair: JSONObject
    kind: str
    simulated: bool
    status: JSONValue
    status_note: str  # a run that says running: still going, cut (status then abandoned), or cannot tell here
    missing: list[str]
    reps: int | None
    schedule: JSONValue
    started_at: JSONValue
    finished_at: JSONValue
    arms: JSONObject
    points: list[str]
    transport: dict[str, TransportEntry]
    scenarios: list[Scenario]
    uplift: list[UpliftEntry]
    verdicts: JSONValue
    proof: JSONObject
    # a p2p-bench directory (seed_report) only
    source_layout: str
    std_convention: str
    uplift_convention: str
    uplift_label: str | None


def _number_or_none(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def is_stat(value: object) -> TypeGuard[Stat]:
    """A metric dict whose ``mean``/``std``/``median``/``n`` are numbers or null and whose lists are lists."""
    if not isinstance(value, dict):
        return False
    return (all(_number_or_none(value.get(k)) for k in ("mean", "std", "median", "n"))
            and isinstance(value.get("values", []), list)
            and (value.get("ci95") is None or isinstance(value.get("ci95"), list)))


def stat_at(scenario: Scenario, where: str, key: str) -> Stat | None:
    """``scenario[where][key]`` (``where`` is ``metrics`` or ``energy``) if it is a metric dict, else None."""
    group: Mapping[str, object] = (scenario.get("energy") if where == "energy" else scenario.get("metrics")) or {}
    value = group.get(key)
    return value if is_stat(value) else None


def _dicts_with_str(value: object, keys: tuple[str, ...]) -> bool:
    """A list of dicts, each with a string at ``keys`` (the keys the readers index)."""
    return isinstance(value, list) and all(
        isinstance(item, dict) and all(isinstance(item.get(k), str) for k in keys) for item in value)


def is_summary(value: object) -> TypeGuard[Summary]:
    """A ``summary.json`` dict whose containers have the shape the readers iterate.

    Absent keys are fine (every key is optional); scenarios need ``arm`` and ``point``, uplift
    entries ``point``, ``faster_arm`` and ``slower_arm``. Leaves are read with ``.get`` and
    metric dicts through :func:`stat_at`.
    """
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return False
    checks = (
        "scenarios" not in value or _dicts_with_str(value["scenarios"], ("arm", "point")),
        "uplift" not in value or _dicts_with_str(value["uplift"], ("point", "faster_arm", "slower_arm")),
        "missing" not in value or isinstance(value["missing"], list),
        all(k not in value or isinstance(value[k], dict) for k in ("pair", "arms", "transport")),
    )
    return all(checks)
