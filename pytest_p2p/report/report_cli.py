"""``python -m pytest_p2p report DIR [--no-plots]``: re-render a results directory, no GPU needed.

DIR is one run directory (it holds ``run.json``), a results root holding several, a folder
holding several p2p-bench runs (read as one set when each arm was measured in one run --
P2P on in one, P2P off in another -- with Welch's interval for unpaired runs; else each in
turn), or a p2p-bench results directory (the seed
report's layout: ``summary.csv`` and ``scenarios/<arm>-c<N>/aggregate.json``), which is read as it is and rendered into
``DIR/pytest-p2p-report/`` (or ``--out``) without touching its own files. Each run's
summary files and plots are rebuilt from its files and its glance table is printed.
A bad directory or a corrupt file raises a ``P2PError`` naming the file, which
``cli.py`` turns into exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ResultsError
from ..results.layout import RUN_META
from ..results.read import is_run_dir

if TYPE_CHECKING:
    from .summary_types import Summary


def _run_dirs(path: Path) -> list[Path]:
    if is_run_dir(path):
        return [path]
    if path.is_dir():
        found = sorted(d for d in path.iterdir() if d.is_dir() and is_run_dir(d))
        if found:
            return found
    if not path.exists():
        raise ResultsError(f"{path}: no such results directory")
    raise ResultsError(f"{path}: neither a run directory (no {RUN_META}), nor a results root holding run "
                       "directories, nor a p2p-bench results directory (summary.csv, scenarios/<arm>-c<N>/)")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pytest_p2p report",
        description="Re-render summary.{md,csv,json} and plots/ of a results directory from its files.",
    )
    p.add_argument("dir", metavar="DIR", help="a run directory <results>/<run-id>/, or a results root")
    p.add_argument("--no-plots", action="store_true", help="write the summary files only")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the paths written")
    p.add_argument("--out", metavar="OUT", help="p2p-bench directories only: where to write "
                   "(default DIR/pytest-p2p-report/)")
    args = p.parse_args(argv)

    from pytest_p2p.seedlayout import is_seed_layout

    from .render import render_report
    from .terminal import glance_table, uplift_line, verdict_line

    if is_seed_layout(args.dir):
        return _seed(Path(args.dir), args.out, not args.no_plots, args.quiet)
    seeds = _seed_set(Path(args.dir))
    if seeds and _joinable(Path(args.dir), seeds):  # P2P on in one run, P2P off in another: one comparison
        return _seed(Path(args.dir), args.out, not args.no_plots, args.quiet, joined=seeds)
    if seeds:  # a folder of several p2p-bench runs of the same arms: each read as it is, one after another
        for i, seed in enumerate(seeds):
            if i:
                print()
            out = str(Path(args.out) / seed.name) if args.out else None
            _seed(seed, out, not args.no_plots, args.quiet)
        return 0

    for i, run_dir in enumerate(_run_dirs(Path(args.dir))):
        try:
            rendered = render_report(run_dir, plots=not args.no_plots)
        except ResultsError:
            raise
        except OSError as exc:  # disk full / read-only while writing the summary: one paragraph, exit 2
            raise ResultsError(f"{run_dir}: cannot write the summary files ({exc.strerror or exc}); the run's "
                               "own files are untouched: free space or copy the directory elsewhere and re-run "
                               "'python -m pytest_p2p report'") from None
        if i:
            print()
        if not args.quiet:
            print(glance_table(rendered.summary))
            print(uplift_line(rendered.summary))
            _print_verdicts(rendered.summary)
            from .proof import proof_for_run, proof_text

            for line in proof_text(proof_for_run(rendered.run_dir, rendered.summary)):
                print(line)
        _print_tail(rendered.summary, rendered.notes, rendered.paths, args.quiet)
        if not args.quiet:
            print(verdict_line(rendered.summary))
    return 0


def _seed_set(path: Path) -> list[Path]:
    """The p2p-bench runs directly inside ``path`` (a folder the seed's scripts fill one run at a time)."""
    from pytest_p2p.seedlayout import is_seed_layout

    if not path.is_dir() or is_run_dir(path):
        return []
    return sorted(d for d in path.iterdir() if d.is_dir() and is_seed_layout(d))


def _joinable(folder: Path, seeds: list[Path]) -> bool:
    from pytest_p2p.seedlayout import join_seed_runs, read_seed_run

    return join_seed_runs(folder, [read_seed_run(d) for d in seeds]) is not None


def _print_verdicts(summary: Summary) -> None:
    from .terminal import text_table, verdict_rows

    headers, rows = verdict_rows(summary)
    if rows:
        print(text_table(headers, rows))


def _print_tail(summary: Summary, notes: list[str], paths: list[Path], quiet: bool) -> None:
    """What every rendered directory ends with: the missing reps (unless quiet), notes, the files written."""
    if not quiet:
        if note := summary.get("status_note"):
            print(f"status: {summary.get('status')}: {note}")
        for m in summary.get("missing") or []:
            print(f"missing: {m}")
    for note in notes:
        print(f"note: {note}")
    for path in paths:
        print(f"wrote {path}")


def _seed(path: Path, out: str | None, plots: bool, quiet: bool, joined: list[Path] | None = None) -> int:
    """One p2p-bench run, or (``joined``) the runs of one folder read as a set, rendered and printed."""
    from pytest_p2p.seedlayout import SeedRun, join_seed_runs, read_seed_run

    from .proof import proof_for_seed, proof_text
    from .seed_report import render_seed_report
    from .terminal import glance_table, uplift_line

    run: SeedRun | None = read_seed_run(path) if joined is None else \
        join_seed_runs(path, [read_seed_run(d) for d in joined])
    if run is None:
        raise ResultsError(f"{path}: its p2p-bench runs share an arm and concurrency; they are read one by one")
    rendered = render_seed_report(run, out=out, plots=plots)
    if not quiet:
        for src in run.joined_from:
            arms = sorted({s.arm for s in run.scenarios if s.path.parent.parent == src})
            print(f"joined: {src.name} ({', '.join(arms) or 'no scenario'})")
        print(glance_table(rendered.summary, short=False))  # the seed report's own columns, as it printed them
        print(f"(± = {rendered.summary['std_convention']} std, as p2p-bench writes it; "
              f"uplift = {rendered.summary['uplift_convention']})")
        print(uplift_line(rendered.summary))
        _print_verdicts(rendered.summary)
        for line in proof_text(proof_for_seed(run)):
            print(line)
    _print_tail(rendered.summary, rendered.notes, rendered.paths, quiet)
    return 0
