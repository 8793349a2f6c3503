"""How a resident campaign's interval narrowed, start by start, against the wall time spent (issue 24).

    python benchmarks/decision_curve.py RUN_DIR|COMPACT.json ... [--alpha 0.005] [--metric output_throughput]

Why: issue 24's goal is a time to a decided uplift (a 98 % CI half-width of 2 % at every point, P2P on vs
off) within 15 minutes a pair. A campaign's own run.json gives its final decision only; this replays the
campaign's nested decision (:func:`pytest_p2p.stats.decide_nested`, the start as the unit) on the first
``k`` starts for every ``k``, and puts next to it the wall time from the run's start to the end of start
``k``'s last window. The windows are read back with the package's results reader, the window pairs
grouped by start as the campaign groups them (or from ``benchmarks/campaign_compact.py``'s file, which keeps
every rep's metrics and meta without its per-request records). Several run directories of one rig are read one by one (a
"night" each), never pooled: starts of different runs are not one campaign's starts.

Per point and ``k`` it prints the uplift, its two-sided ``1 - 2 alpha`` interval (alpha one-sided per
point: the campaign's 1 % split over two points is 0.005), the half-width in uplift points, and the
outcome against ``--threshold`` (default 0 %). ``half`` is in uplift points, ``/ratio`` the same as a share of
the ratio on / off (at +63 % uplift, 2.5 points are 1.5 % of the ratio).

``--prior-store DB`` replays what the product itself would have lent: the start spread of earlier nights
read from a baseline store exactly as the campaign reads it (``verdict.store_blocks.start_blocks`` with the
run's own rig, pair, design, driver, rig digests and GPU models from its ``run.json``; the run itself
excluded), per point, with the guard on tonight's start means. A replay of the real lending, not a projection.

``--prior-start-sd S --prior-df D`` asks what the same starts would decide if earlier nights of this design
had lent a start spread (``stats.StartPrior``: a start mean's variance ``S**2 + window_sd**2 / W`` with the
window sd measured tonight at each point, ``D`` df) — a projection on real windows with an assumed history,
printed as such, never a measured result. The guard (an F test) still looks at tonight's start means.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import campaign_time  # noqa: E402 - the wall-time reading of a results directory, shared

from pytest_p2p.campaign.aggregate import group_by_start  # noqa: E402
from pytest_p2p.campaign.schedule import sequence_label  # noqa: E402
from pytest_p2p.errors import P2PError, ResultsError  # noqa: E402
from pytest_p2p.results.layout import REP_GLOB, REP_RE, RUN_META  # noqa: E402
from pytest_p2p.results.read import optional_object, read_object, scenario_dirs  # noqa: E402
from pytest_p2p.stats import StartPrior, StatsError, components, decide_nested, nested_model  # noqa: E402
from pytest_p2p.stats.nested import start_prior  # noqa: E402


def _when(text: object) -> float | None:
    """An ISO time of the results (``started_at``) as epoch seconds: campaign_time's reading of it."""
    t = campaign_time._when(text)
    return None if t is None else t.timestamp()


Window = tuple[int, float, float, object]  # (start, value, end of the window: epoch seconds, launch)


def _launch(meta: dict[str, object], start: int) -> object:
    """The launch that made ``start``: ``meta.launch`` (numbered by the campaign), else, for a rep file written
    before it was kept, the launch ``at_once`` implies (starts 1..k, k+1..2k, ...; right unless a start was run
    again alone), else the start itself (a launch of its own)."""
    got, k = meta.get("launch"), meta.get("at_once")
    if isinstance(got, int) and not isinstance(got, bool):
        return ("launch", got)
    if isinstance(k, int) and not isinstance(k, bool) and k > 1:
        return ("at_once", (start - 1) // k)
    return ("start", start)


def _window(name: str, rec: dict[str, object], metric: str) -> tuple[int, Window] | None:
    """``(rep, window)`` of a kept rep file (a set-aside attempt ``run_<k>.try<n>.json`` is not data)."""
    m = REP_RE.match(name)
    meta = rec.get("meta")
    if not m or not isinstance(meta, dict):
        return None
    start, value = meta.get("start"), rec.get(metric)
    t, w = _when(meta.get("started_at")), meta.get("window_s")
    if isinstance(start, int) and isinstance(value, (int, float)) and t is not None and isinstance(w, (int, float)):
        return int(m.group(1)), (start, float(value), t + float(w), _launch(meta, start))
    return None


def windows(run_dir: Path, metric: str) -> dict[tuple[str, str], dict[int, Window]]:
    """``(arm, point) -> {rep: (start, value, end)}`` of the kept windows of a results directory."""
    out: dict[tuple[str, str], dict[int, Window]] = {}
    for arm, point, d in scenario_dirs(run_dir):
        reps: dict[int, Window] = {}
        for p in sorted(d.glob(REP_GLOB)):
            try:
                got = _window(p.name, read_object(p), metric)
            except ResultsError:
                continue  # a rep being written when the campaign was cut
            if got:
                reps[got[0]] = got[1]
        out[(arm, point)] = reps
    return out


def load(source: Path, metric: str) -> dict[str, tuple[dict[str, object], dict[tuple[str, str], dict[int, Window]]]]:
    """``{run: (run.json, windows)}`` of a results directory, or of every run in a compact file."""
    if source.is_dir():
        return {source.name: (dict(optional_object(source / RUN_META) or {}), windows(source, metric))}
    out = {}
    for run_dir, body in json.loads(source.read_text()).items():
        wins: dict[tuple[str, str], dict[int, Window]] = {}
        for scen, recs in body["scenarios"].items():
            arm, point = scen.rsplit("-", 1)
            reps = wins.setdefault((arm, point), {})
            for rec in recs:
                got = _window(str(rec.get("file")), rec, metric)
                if got:
                    reps[got[0]] = got[1]
        out[Path(run_dir).name] = (body.get("run") or {}, wins)
    return out


def stored_priors(db: Path, run: dict[str, object], points: list[str], on: str, off: str) -> dict[str, StartPrior]:
    """Per point, the start spread a baseline store lends this run, read as the campaign reads it
    (``plugin.campaign.start_priors``: the same query, with what the run's ``run.json`` states of its rig, pair,
    design, driver and GPU models; the run itself excluded, so a store that already holds it lends the nights
    before it). A point the store lends nothing is absent."""
    from pytest_p2p.verdict.fingerprint import gpu_models, pair_ident
    from pytest_p2p.verdict.store import Store
    from pytest_p2p.verdict.store_blocks import BlockQuery, start_blocks
    from pytest_p2p.verdict.store_design import run_design

    design = run_design(run)
    uplift = run.get("uplift")
    up = uplift if isinstance(uplift, dict) else {}
    versions = run.get("versions")
    driver = versions.get("driver") if isinstance(versions, dict) else None
    if design is None or not isinstance(up.get("metric"), str):
        raise SystemExit(f"decision_curve: --prior-store: run {run.get('run_id')!r} states no model campaign design "
                         "(run.json's kind, campaign and uplift): nothing to look up")
    models = gpu_models(run)
    higher = up.get("direction") != "lower"
    out: dict[str, StartPrior] = {}
    with Store(str(db), create=False) as store:
        for point in points:
            q = BlockQuery(rig=str(run.get("rig")), pair_ident=pair_ident(run), kind="model", point=point,
                           arm_a=on, arm_b=off, metric=str(up["metric"]), design=design,
                           simulated=bool(run.get("simulated")), driver=str(driver) if driver else None,
                           rig_digest=str(run.get("rig_digest") or "") or None,
                           rig_file_digest=str(run.get("rig_file_digest") or "") or None,
                           gpu_models=tuple(models) if models else None)
            nights = start_blocks(store, q, exclude=str(run.get("run_id") or "") or None)
            got = start_prior(nights, higher_is_better=higher) if nights else None
            if got is not None:
                out[point] = got
    return out


def curve(run: dict[str, object], wins: dict[tuple[str, str], dict[int, Window]], alpha: float, threshold: float,
          on: str, off: str, prior: tuple[float, float] | None = None, fit: bool = True,
          lent_by_point: dict[str, StartPrior] | None = None) -> list[dict[str, object]]:
    """One row per point and number of starts ``k``: the decision on starts 1..k and the wall time to it
    (``prior``: an assumed ``(start sd, df)`` of earlier nights, see the module doc; ``lent_by_point``: the
    priors a store lends, :func:`stored_priors`, used as the campaign would; ``fit``: the first arm's
    order labelled as the campaign ran it, ``campaign.schedule.sequence_label`` with ``on`` first in odd starts, so
    the decision fits its effect from 6 starts on as the campaign's own does; False replays the rule before it)."""
    begin = _when(run.get("started_at"))
    ends = [e for reps in wins.values() for (_, _, e, _) in reps.values()]
    if begin is None and ends:
        begin = min(ends)
    start_end: dict[int, float] = {}  # the end of each start's last window, any arm or point
    for reps in wins.values():
        for s, _, e, _ in reps.values():
            start_end[s] = max(e, start_end.get(s, e))
    points = sorted({p for (_, p) in wins}, key=lambda s: (len(s), s))
    rows: list[dict[str, object]] = []
    for point in points:
        a, b = wins.get((on, point), {}), wins.get((off, point), {})
        common = sorted(set(a) & set(b))
        by_start = group_by_start((a[r][0], (a[r][1], b[r][1])) for r in common if a[r][0] == b[r][0])
        starts = sorted(by_start)
        launch = {a[r][0]: a[r][3] for r in common}
        if lent_by_point is not None:
            lent = lent_by_point.get(point)
        else:
            lent = _assumed_prior(prior, [by_start[s] for s in starts]) if prior and starts else None
        for k in range(2, len(starts) + 1):
            if k < len(starts) and launch[starts[k]] == launch[starts[k - 1]]:
                continue  # starts made at once: the campaign looks when their launch is done
            blocks = [by_start[s] for s in starts[:k]]
            done = max(e for s, e in start_end.items() if s <= starts[k - 1])
            launches = [launch[s] for s in starts[:k]]
            orders = [sequence_label([on, off], s) for s in starts[:k]] if fit else None
            try:
                dec = decide_nested(blocks, threshold=threshold, alpha=alpha, prior=lent, launches=launches,
                                    sequences=orders)
            except StatsError as exc:
                rows.append({"point": point, "starts": k, "error": str(exc)})
                continue
            model = nested_model(blocks, prior=lent, launches=launches, sequences=orders)
            lo, hi = dec.lower, dec.upper
            rows.append({"point": point, "starts": k, "windows": sum(len(x) for x in blocks),
                         "uplift": dec.estimate, "lo": lo, "hi": hi, "half": (hi - lo) / 2,
                         # the same half-width as a share of the ratio (on / off), the goal's "+-2 %" read that way
                         "half_of_ratio": (hi - lo) / 2 / (1 + dec.estimate),
                         "outcome": dec.outcome.value, "wall_s": done - begin if begin is not None else None,
                         "first_arm": model.fit.status,
                         **({"prior": model.prior.status, "prior_sd": lent.var ** 0.5, "prior_df": lent.df,
                             "prior_guard_p": model.prior.guard_p, "prior_guard_level": model.prior.guard_level}
                            if lent is not None else {}),
                         **({} if model.launch.status == "none" else {"launch_guard": model.launch.status,
                                                                      "launches": model.launch.launches,
                                                                      "guard_p": model.launch.p})})
    return rows


def _start_sd(text: str) -> float:
    """``--prior-start-sd``: a start sd as a fraction of the log ratio, checked once. A value of 0.5 or more is
    almost surely a percentage typed as one (0.96 for 0.96 %), which would replay a history of 96 % spreads."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= v < 0.5:
        raise argparse.ArgumentTypeError(f"{text}: a start sd is a fraction of the log ratio (0.0096 for 0.96 %), "
                                         "from 0 to below 0.5")
    return v


def _assumed_prior(prior: tuple[float, float], blocks: list[list[tuple[float, float]]]) -> StartPrior | None:
    """The assumed history as a :class:`StartPrior` for this point: ``start_sd**2 + window_sd**2 / W`` with
    tonight's window sd (all its starts) and its windows per start (equal in every start, or no prior)."""
    sizes = {len(b) for b in blocks}
    if len(sizes) != 1:
        return None
    start_sd, df = prior
    window_sd = components(blocks).window_sd
    w = sizes.pop()
    return StartPrior(var=start_sd ** 2 + window_sd ** 2 / w, df=df, nights=max(1, round(df / 2)), windows=w)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path, help="results directories or compact files")
    ap.add_argument("--metric", default="output_throughput")
    ap.add_argument("--alpha", type=float, default=0.005, help="one-sided, per point (default 0.005)")
    ap.add_argument("--threshold", type=float, default=0.0, help="minimum uplift, a fraction (default 0)")
    ap.add_argument("--arms", default="p2p_on,p2p_off")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--prior-start-sd", type=_start_sd, help="an assumed start sd of earlier nights (a fraction of "
                    "the log ratio: 0.02 is 2 %%)")
    ap.add_argument("--prior-store", type=Path, metavar="DB",
                    help="replay the start spread this baseline store lends each run, as the campaign reads it")
    ap.add_argument("--prior-df", type=float, default=20.0, help="... and its df (default 20: ~10 nights of 3 starts)")
    ap.add_argument("--no-fit", action="store_true",
                    help="judge the plain start means, as before the first arm's effect was fitted (a comparison)")
    a = ap.parse_args(argv)
    if a.prior_store is not None and a.prior_start_sd is not None:
        ap.error("--prior-store and --prior-start-sd: one history at a time (the store's, or an assumed one)")
    if a.prior_store is not None and not a.prior_store.is_file():
        ap.error(f"--prior-store {a.prior_store}: no such file")
    prior = (a.prior_start_sd, a.prior_df) if a.prior_start_sd is not None else None
    on, off = a.arms.split(",")
    everything = {}
    runs = {}
    for src in a.run_dirs:
        runs.update(load(src, a.metric))
    for name, (run, wins) in runs.items():
        lent = None
        if a.prior_store is not None:
            points = sorted({p for (_, p) in wins}, key=lambda t: (len(t), t))
            try:
                lent = stored_priors(a.prior_store, run, points, on, off)
            except P2PError as exc:
                print(f"decision_curve: --prior-store {a.prior_store}: {' '.join(str(exc).split())}", file=sys.stderr)
                return 2
        rows = curve(run, wins, a.alpha, a.threshold, on, off, prior, fit=not a.no_fit, lent_by_point=lent)
        everything[name] = rows
        print(f"== {name}: {a.metric}, {(1 - 2 * a.alpha) * 100:.4g} % CI on start means"
              + (", first arm's effect never fitted (--no-fit)" if a.no_fit else "")
              + ("" if prior is None else f"; PROJECTION: earlier nights assumed to lend a start sd of "
                 f"{100 * prior[0]:.2g} % with {prior[1]:g} df")
              + ("" if lent is None else f"; REPLAY of the start spread {a.prior_store.name} lends: "
                 + (", ".join(f"{p} {100 * v.var ** 0.5:.2f} % ({v.nights} nights, {v.df:g} df)"
                              for p, v in lent.items()) or "nothing (no earlier night of this rig, pair and design)")))
        print(f"{'point':>6} {'starts':>6} {'windows':>7} {'uplift':>8} {'interval':>20} {'half':>7} "
              f"{'/ratio':>7} {'outcome':>12} {'wall':>7}")
        for r in rows:
            if "error" in r:
                print(f"{r['point']:>6} {r['starts']:>6} {r['error']}")
                continue
            wall = r["wall_s"]
            when = "" if wall is None else f"{float(wall) / 60:.1f} min"
            print(f"{r['point']:>6} {r['starts']:>6} {r['windows']:>7} {100 * float(r['uplift']):>+7.1f}% "
                  f"{100 * float(r['lo']):>+8.1f} .. {100 * float(r['hi']):>+6.1f}% {100 * float(r['half']):>6.1f}% "
                  f"{100 * float(r['half_of_ratio']):>6.1f}% {r['outcome']:>12} {when:>7}"
                  + ("  first arm fitted" if r.get("first_arm") == "fitted" else "")
                  + (f"  prior {r['prior']}" if "prior" in r else "")
                  + (f" (guard p = {float(r['prior_guard_p']):.2g} against {float(r['prior_guard_level']):g})"
                     if r.get("prior_guard_p") is not None else "")
                  + (f"  launch guard {r['launch_guard']} ({r['launches']} launches, p = {float(r['guard_p']):.2g})"
                     if r.get("guard_p") is not None else f"  {r['launch_guard']}" if "launch_guard" in r else ""))
    if a.json:
        a.json.write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
