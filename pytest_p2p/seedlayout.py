"""Read a p2p-bench results directory (the seed report's layout) as it is on disk.

Rig owners arrive with results from p2p-bench (the harness behind the seed report). Its
layout is not ours, so ``report DIR`` and ``baseline save DIR`` read it through this
module instead of asking for a ``run.json`` the seed never wrote::

    <dir>/summary.csv                      arm,concurrency,output_tok_s,output_tok_s_std,...
    <dir>/env/p2p_evidence.json            versions, topo matrix, cuda-samples p2pBandwidthLatencyTest text
    <dir>/scenarios/<arm>-c<N>/aggregate.json        {n_runs, metrics: {name: {mean, std, values}},
                                                      energy: {mean_watts}}
                              run_<k>.json            ``vllm bench serve`` result keys
                              transport_proof.json    {nccl_used_p2p, nccl_used_shm, nccl_version}
                              scenario.json           {env, flags, args} of the server
                              telemetry.csv, telemetry_run<k>.csv   nvidia-smi --query-gpu columns
                              power_run<k>.json       {avg_watts, start, end}

The seed's ``std`` is the POPULATION standard deviation (ddof=0): 63.9867, 63.3248,
53.5476 give 4.7727, not the sample 5.845. :func:`std_convention` checks which one a
directory's numbers follow instead of assuming. Nothing here is a pytest or stage
module: it is stage-free (its files read through ``results.read``) so the report and the
baseline store can both call it. Everything it cannot find is listed in
:attr:`SeedRun.missing`, never filled in.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ResultsError
from .jsontypes import JSONValue, as_float
from .results.layout import AGGREGATE, PROOF, SCENARIO_META
from .results.read import is_run_dir, optional_object, rep_files

_SCENARIO_RE = re.compile(r"^(?P<arm>[A-Za-z0-9][A-Za-z0-9_.]*)-c(?P<c>[0-9]+)$")
_POWER_RE = re.compile(r"^power_run([0-9]+)\.json$")
_TELEMETRY_RE = re.compile(r"^telemetry(?:_run([0-9]+))?\.csv$")


@dataclass(frozen=True)
class SeedStat:
    """One metric of one scenario as aggregate.json holds it (``std`` in the file's convention)."""

    mean: float
    std: float | None
    values: tuple[float, ...] = ()


@dataclass(frozen=True)
class SeedScenario:
    """``scenarios/<arm>-c<N>/``: what p2p-bench wrote for one arm at one concurrency."""

    arm: str
    concurrency: int
    path: Path
    metrics: Mapping[str, SeedStat]
    mean_watts: float | None
    runs: Mapping[int, Mapping[str, float]]  # run_<k>.json, numeric keys only
    power_watts: Mapping[int, float]  # power_run<k>.json avg_watts
    transport: Mapping[str, JSONValue] | None  # transport_proof.json
    server: Mapping[str, JSONValue] | None  # scenario.json
    telemetry: Mapping[int, Path]  # rep -> telemetry CSV (telemetry.csv is rep 1)
    declared_runs: int | None = None  # aggregate.json n_runs

    @property
    def name(self) -> str:
        return f"{self.arm}-c{self.concurrency}"

    @property
    def point(self) -> str:
        """Our point name for this concurrency (``c8``)."""
        return f"c{self.concurrency}"

    @property
    def n_runs(self) -> int:
        return max([len(s.values) for s in self.metrics.values()] + [len(self.runs), self.declared_runs or 0])


@dataclass(frozen=True)
class SeedRun:
    """A whole p2p-bench results directory."""

    path: Path
    scenarios: tuple[SeedScenario, ...]
    summary_rows: tuple[Mapping[str, str], ...]  # summary.csv as text cells
    evidence: Mapping[str, JSONValue] | None  # env/p2p_evidence.json
    missing: tuple[str, ...] = field(default=())
    joined_from: tuple[Path, ...] = field(default=())  # the runs of a folder read as one set (join_seed_runs)

    @property
    def arms(self) -> list[str]:
        out: list[str] = []
        for s in self.scenarios:
            if s.arm not in out:
                out.append(s.arm)
        return out

    @property
    def std_convention(self) -> str:
        return std_convention(self)


def is_seed_layout(path: str | Path) -> bool:
    """A p2p-bench results directory: no ``run.json``, and a summary.csv or scenario aggregates."""
    p = Path(path)
    if not p.is_dir() or is_run_dir(p):
        return False
    if (p / "summary.csv").is_file() and (p / "scenarios").is_dir():
        return True
    return any(_SCENARIO_RE.match(d.name) and (d / AGGREGATE).is_file()
               for d in (p / "scenarios").glob("*-c*"))


def _stats(path: Path, metrics: JSONValue) -> dict[str, SeedStat]:
    out: dict[str, SeedStat] = {}
    if not isinstance(metrics, dict):
        return out
    for name, st in metrics.items():
        if not isinstance(st, dict) or (mean := as_float(st.get("mean"))) is None:
            continue
        raw = st.get("values")
        values = tuple(v for x in raw if (v := as_float(x)) is not None) if isinstance(raw, list) else ()
        out[str(name)] = SeedStat(mean=mean, std=as_float(st.get("std")), values=values)
    return out


def _numbered(d: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for f in d.iterdir():
        m = pattern.match(f.name)
        if m:
            out[int(m.group(1) or 1)] = f
    return dict(sorted(out.items()))


def _scenario(d: Path, arm: str, conc: int, missing: list[str]) -> SeedScenario:
    agg = optional_object(d / AGGREGATE)
    metrics = _stats(d / AGGREGATE, (agg or {}).get("metrics"))
    energy = (agg or {}).get("energy")
    watts = as_float(energy.get("mean_watts")) if isinstance(energy, dict) else None
    runs: dict[int, dict[str, float]] = {}
    for k, f in rep_files(d).items():
        data = optional_object(f) or {}
        runs[k] = {str(key): v for key, raw in data.items() if (v := as_float(raw)) is not None}
    power: dict[int, float] = {}
    for k, f in _numbered(d, _POWER_RE).items():
        w = as_float((optional_object(f) or {}).get("avg_watts"))
        if w is not None:
            power[k] = w
    name = d.name
    if agg is None:
        missing.append(f"{name}: no aggregate.json (means computed from the run files, population std)")
        metrics = _from_runs(runs)
    if not runs:
        missing.append(f"{name}: no run_<k>.json (per-run values only where aggregate.json lists them)")
    if watts is None and power:
        watts = sum(power.values()) / len(power)
    if watts is None:
        missing.append(f"{name}: no power reading (energy.mean_watts / power_run<k>.json): no tok/J")
    transport = optional_object(d / PROOF)
    if transport is None:
        missing.append(f"{name}: no transport_proof.json: the transport of this scenario is unproven")
    telemetry = _numbered(d, _TELEMETRY_RE)
    if not telemetry:
        missing.append(f"{name}: no telemetry CSV")
    return SeedScenario(arm=arm, concurrency=conc, path=d, metrics=metrics, mean_watts=watts, runs=runs,
                        power_watts=power, transport=transport, server=optional_object(d / SCENARIO_META),
                        telemetry=telemetry, declared_runs=_declared(agg))


def _declared(agg: Mapping[str, JSONValue] | None) -> int | None:
    n = (agg or {}).get("n_runs")
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 10**6 else None


def _from_runs(runs: Mapping[int, Mapping[str, float]]) -> dict[str, SeedStat]:
    names = sorted({k for r in runs.values() for k in r})
    out: dict[str, SeedStat] = {}
    for n in names:
        vals = tuple(r[n] for r in runs.values() if n in r)
        mean = sum(vals) / len(vals)
        out[n] = SeedStat(mean=mean, std=math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)), values=vals)
    return out


def read_seed_run(path: str | Path) -> SeedRun:
    """Read every file of a p2p-bench results directory; a corrupt file is a ResultsError naming it."""
    p = Path(path)
    if not is_seed_layout(p):
        raise ResultsError(f"{p}: not a p2p-bench results directory (needs summary.csv and "
                           "scenarios/<arm>-c<N>/aggregate.json, and no run.json)")
    missing: list[str] = []
    scenarios: list[SeedScenario] = []
    for d in sorted((p / "scenarios").iterdir()) if (p / "scenarios").is_dir() else []:
        m = _SCENARIO_RE.match(d.name)
        if d.is_dir() and m:
            scenarios.append(_scenario(d, m.group("arm"), int(m.group("c")), missing))
    rows: list[dict[str, str]] = []
    summary_csv = p / "summary.csv"
    if summary_csv.is_file():
        try:
            with summary_csv.open(newline="", encoding="utf-8", errors="replace") as fh:
                rows = [{str(k): str(v or "") for k, v in r.items() if k is not None} for r in csv.DictReader(fh)]
        except (OSError, csv.Error) as exc:
            raise ResultsError(f"{summary_csv}: cannot read as CSV ({exc})") from None
    else:
        missing.append("summary.csv absent: the table comes from the scenario aggregates alone")
    if not scenarios:
        missing.append("no scenarios/<arm>-c<N>/ directory: only summary.csv is shown")
    evidence = optional_object(p / "env" / "p2p_evidence.json")
    if evidence is None:
        missing.append("env/p2p_evidence.json absent: no P2P latency/bandwidth matrix, no driver version")
    return SeedRun(path=p, scenarios=tuple(scenarios), summary_rows=tuple(rows), evidence=evidence,
                   missing=tuple(missing))


def std_convention(run: SeedRun) -> str:
    """``population (ddof=0)``, ``sample (ddof=1)`` or ``unknown``, judged from stored values and std."""
    votes = {"population": 0, "sample": 0}
    for sc in run.scenarios:
        for st in sc.metrics.values():
            n = len(st.values)
            if n < 2 or st.std is None:
                continue
            mean = sum(st.values) / n
            ss = sum((v - mean) ** 2 for v in st.values)
            pop, samp = math.sqrt(ss / n), math.sqrt(ss / (n - 1))
            if abs(pop - samp) < 1e-12:
                continue
            votes["population" if abs(st.std - pop) <= abs(st.std - samp) else "sample"] += 1
    if not any(votes.values()):
        return "unknown (no per-run values stored; p2p-bench writes the population std)"
    return "population (ddof=0)" if votes["population"] >= votes["sample"] else "sample (ddof=1)"


def sample_std(stat: SeedStat) -> float | None:
    """The sample std (ddof=1) of a stat, from its values or by rescaling a population std."""
    n = len(stat.values)
    if n >= 2:
        mean = sum(stat.values) / n
        return math.sqrt(sum((v - mean) ** 2 for v in stat.values) / (n - 1))
    return None


@dataclass(frozen=True)
class SeedMetric:
    """One stored number of a p2p-bench directory, in the shape a baseline store keeps.

    ``std`` is converted to the SAMPLE std (ddof=1) where the per-run values allow it, so
    that it compares with our own runs; ``std_population`` keeps the file's value.
    """

    arm: str
    point: str
    metric: str
    n: int
    mean: float
    std: float | None
    std_population: float | None
    values: tuple[float, ...]


def seed_metrics(run: SeedRun) -> list[SeedMetric]:
    """Every scenario metric (and ``avg_watts`` from energy.mean_watts) for ``baseline save DIR``."""
    out: list[SeedMetric] = []
    for sc in run.scenarios:
        for name, st in sorted(sc.metrics.items()):
            out.append(SeedMetric(sc.arm, sc.point, name, len(st.values) or sc.n_runs, st.mean,
                                  sample_std(st), st.std, st.values))
        if sc.mean_watts is not None:
            out.append(SeedMetric(sc.arm, sc.point, "avg_watts", sc.n_runs, sc.mean_watts, None, None, ()))
    return out


def join_seed_runs(folder: str | Path, runs: Sequence[SeedRun]) -> SeedRun | None:
    """Several p2p-bench runs of one folder read as one set, when each arm was measured in one run only.

    Why: p2p-bench is often run once with P2P on and once with P2P off, each into its own
    directory; read one at a time, neither has a second arm and no uplift is shown. Joined,
    the two arms compare, and as they come from separate runs (no shared rep index) the
    report's interval is Welch's for unpaired means (:mod:`pytest_p2p.stats.welch`), as it
    is for the arms of one p2p-bench run. None when the runs cannot be a set: fewer than
    two, or a scenario (arm, concurrency) present in more than one run -- repeated runs of
    the same arm are separate measurements to be read one by one, not silently pooled.
    """
    if len(runs) < 2:
        return None
    owner: dict[tuple[str, int], Path] = {}
    for run in runs:
        for sc in run.scenarios:
            key = (sc.arm, sc.concurrency)
            if key in owner:
                return None
            owner[key] = run.path
        for row in run.summary_rows:  # rows of scenarios without a directory count too
            arm, conc = row.get("arm", ""), row.get("concurrency", "")
            if arm and conc.isdigit() and (arm, int(conc)) in owner and owner[(arm, int(conc))] != run.path:
                return None
    missing = [f"{run.path.name}: {m}" for run in runs for m in run.missing]
    evidence = [run.evidence for run in runs if run.evidence is not None]
    if len(evidence) > 1 and any(e != evidence[0] for e in evidence[1:]):
        missing.append("the runs' env/p2p_evidence.json differ; the first run's is shown: "
                       + ", ".join(run.path.name for run in runs if run.evidence is not None))
    return SeedRun(path=Path(folder), scenarios=tuple(sc for run in runs for sc in run.scenarios),
                   summary_rows=tuple(row for run in runs for row in run.summary_rows),
                   evidence=evidence[0] if evidence else None, missing=tuple(missing),
                   joined_from=tuple(run.path for run in runs))
