"""``python -m pytest_p2p baseline ...``: inspect and curate the baseline store.

    list [--name N]           runs in history (or in baseline N), with their baselines
    show RUN                  one run: fingerprint and metrics
    accept RUN [--name N]     accept a stored run into baseline N (default 'accepted')
    reject RUN [--name N]     take it out again (history is kept)
    save RUN_DIR [--accept N] store a results directory (e.g. from another machine, or p2p-bench's)
    diff A B [--histogram F]  run B against run A side by side (verdict per row), fingerprint changes
    history [--rig R] [--metric M]  runs per metric with change points, trend and baseline health
    export [--out FILE] [--rig R]  everything (or one rig's history) as JSON
    import FILE               add an export (from either backend) in one transaction

The store is ``--db PATH|URL``, else ``PYTEST_P2P_DB``, else ``.p2p/history.db``: an SQLite
file, or a ``postgresql://`` URL of a fleet database (docs/fleet.md). Moving a rig's
history to the fleet database and back::

    python -m pytest_p2p baseline --db .p2p/history.db export --rig my-rig --out rig.json
    python -m pytest_p2p baseline --db "$P2P_DB_URL" import rig.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import P2PError
from .config import DEFAULT_DB, DEFAULT_NAME, check_name

if TYPE_CHECKING:
    from .store import Store


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_p2p baseline", description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=None, metavar="PATH|URL",
                   help=f"SQLite file or postgresql:// URL (env PYTEST_P2P_DB, default {DEFAULT_DB})")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list stored runs")
    ls.add_argument("--name", default=None, help="only runs accepted under this baseline")
    sh = sub.add_parser("show", help="show one run")
    sh.add_argument("run")
    ac = sub.add_parser("accept", help="accept a run into a named baseline")
    ac.add_argument("run")
    ac.add_argument("--name", default=DEFAULT_NAME)
    ac.add_argument("--note", default=None)
    rj = sub.add_parser("reject", help="remove a run from a named baseline (history is kept)")
    rj.add_argument("run")
    rj.add_argument("--name", default=DEFAULT_NAME)
    sv = sub.add_parser("save", help="store a campaign results directory")
    sv.add_argument("run_dir")
    sv.add_argument("--accept", default=None, metavar="NAME")
    df = sub.add_parser("diff", help="run B against run A side by side (table, fingerprint, --histogram PNG)")
    df.add_argument("a")
    df.add_argument("b")
    df.add_argument("--histogram", default=None, metavar="FILE", help="also draw the rep values of A and B (PNG)")
    hi = sub.add_parser("history", help="runs per metric with change points, trend and baseline health")
    hi.add_argument("--rig", default=None, help="only this rig")
    hi.add_argument("--metric", default=None, help="only this metric (default: the primaries)")
    hi.add_argument("--name", default=DEFAULT_NAME, help="the baseline whose health is checked")
    ex = sub.add_parser("export", help="dump the store as JSON")
    ex.add_argument("--out", default=None)
    ex.add_argument("--rig", default=None, help="only this rig's runs")
    im = sub.add_parser("import", help="add an export (from either backend) to this store")
    im.add_argument("file", help="a file written by 'baseline export' ('-': standard input)")
    for sp in (ls, sh, ac, rj, sv, df, hi, ex, im):  # --db also after the subcommand
        sp.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    db = args.db or os.environ.get("PYTEST_P2P_DB") or DEFAULT_DB
    from .store import Store

    try:
        with Store(db, create=args.cmd in ("save", "import")) as store:
            return _run(args, store)
    except P2PError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, store: Store) -> int:
    out = sys.stdout
    if args.cmd == "list":
        if args.name is None and store.baseline_names():
            out.write("baselines: " + ", ".join(f"{n} ({c} runs)" for n, c in store.baseline_names()) + "\n")
        for rec in store.runs(name=args.name):
            sim = " [simulated]" if rec.simulated else ""
            names = ",".join(rec.baselines) or "-"
            out.write(f"{rec.run_id}  {rec.rig}  {rec.pair_key} ({rec.pair_ident})  {rec.kind}  "
                      f"{rec.started_at}  baselines: {names}{sim}\n")
        return 0
    if args.cmd == "show":
        rec = store.run(args.run)
        out.write(json.dumps({"run_id": rec.run_id, "baselines": list(rec.baselines), "saved_at": rec.saved_at,
                              "source_dir": rec.source_dir, "fingerprint": rec.fingerprint}, indent=2) + "\n")
        for m in store.metrics(rec.run_id):
            out.write(f"{m.arm}-{m.point}  {m.metric}  mean {m.mean}  std {m.std}  n {m.n}\n")
        return 0
    if args.cmd in ("accept", "reject"):
        name = check_name(args.name, "--name")
        rec = store.run(args.run)
        if args.cmd == "accept":
            store.accept(rec.run_id, name, args.note)
            out.write(f"accepted {rec.run_id} into baseline {name!r}\n")
        elif store.reject(rec.run_id, name):
            out.write(f"removed {rec.run_id} from baseline {name!r}\n")
        else:
            out.write(f"{rec.run_id} was not in baseline {name!r}\n")
            return 1
        return 0
    if args.cmd == "save":
        from ..seedlayout import is_seed_layout

        if is_seed_layout(args.run_dir):  # a p2p-bench directory (no run.json): see store_seed
            from .store_seed import seed_record

            run, fingerprint, rows = seed_record(args.run_dir)
            run_id = store.save(run, fingerprint, rows, source_dir=str(Path(args.run_dir).resolve()))
        else:
            run_id = store.save_run_dir(args.run_dir)
        if args.accept:
            store.accept(run_id, check_name(args.accept, "--accept"))
        out.write(f"saved {run_id}" + (f", accepted into {args.accept!r}" if args.accept else "") + "\n")
        return 0
    if args.cmd == "diff":
        from .baseline_diff import diff

        return diff(store, store.run(args.a), store.run(args.b), sys.stdout, histogram_to=args.histogram)
    if args.cmd == "history":
        from .history_cli import print_history

        return print_history(store, rig=args.rig, metric=args.metric, name=check_name(args.name, "--name"))
    if args.cmd == "export":
        text = json.dumps(store.export(rig=args.rig), indent=2, default=str) + "\n"
        if args.out:
            from ..util import atomic_write_text

            atomic_write_text(args.out, text)
        else:
            out.write(text)
        return 0
    if args.cmd == "import":
        return _import(store, args.file)
    raise AssertionError(args.cmd)


def _import(store: Store, file: str) -> int:
    from ..errors import StoreError

    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{file}: cannot be read ({exc}); nothing was imported") from None
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"{file}: not JSON ({exc}); nothing was imported") from None
    added, present, accepted = store.import_data(data, source=file)
    sys.stdout.write(f"imported {added} run(s) into {store.where} ({present} already there), "
                     f"{accepted} acceptance(s) added\n")
    return 0
