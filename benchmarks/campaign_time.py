"""Where a campaign's wall time went: measured load, server starts, the rest (issue 24: >= 60 % under load).

    python benchmarks/campaign_time.py RUN_DIR [RUN_DIR ...] [--until ISO_TIME] [--json FILE]

Why a script of its own: the issue's second goal is the share of a campaign's wall time spent under
measured load, and a campaign cut short by a device budget has no final ``run.json`` to say it. Every
rep file (kept, set aside ``*.try<n>.json``, screened) carries ``meta.started_at`` (UTC, ms) and
``meta.window_s`` (the telemetry window: the timed load); every resident start appends
``start N: servers ready in {...} s (T s for all)`` to the run's notes, and every server log starts with
its launch line. This reads them back:

* **wall**: from ``run.json``'s ``started_at`` to its ``finished_at`` (or to the end of the last window,
  or to ``--until`` for a campaign still running);
* **measured**: the sum of every window's ``window_s``, split into kept and set aside (a set-aside window
  was load too, but bought nothing);
* **starts**: each resident start attempt's time to all servers ready and how it launched them
  (``run.json`` ``server_starts``: ``start.attempt`` keys; older runs: from the notes).

It prints one block per run directory; ``--json`` writes the figures for docs/gpu-runs.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_p2p.errors import ResultsError  # noqa: E402
from pytest_p2p.results.layout import REP_GLOB, REP_RE, RUN_META  # noqa: E402
from pytest_p2p.results.read import optional_object, read_object, scenario_dirs  # noqa: E402

START_NOTE = re.compile(r"^start (\d+): .*servers ready (?:in|at) .* \((\d+(?:\.\d+)?) s for all\)")


def _when(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _reps(run_dir: Path) -> list[tuple[Path, dict[str, object]]]:
    """Every rep file's meta, the set-aside attempts (``run_<k>.try<n>...json``) included."""
    out = []
    for _, _, d in scenario_dirs(run_dir):
        for p in sorted(d.glob(REP_GLOB)):
            try:
                meta = read_object(p).get("meta")
            except ResultsError:
                continue  # a rep being written when the campaign was cut: not a measurement
            if isinstance(meta, dict):
                out.append((p, meta))
    return out


def account(run_dir: Path, until: datetime | None = None) -> dict[str, object]:
    """The time figures of one campaign's results directory."""
    try:
        run: dict[str, object] = dict(optional_object(run_dir / RUN_META) or {})
    except ResultsError:
        run = {}  # unreadable: the rep files still tell the time
    kept = aside = 0.0
    first: datetime | None = None
    last: datetime | None = None
    windows = set_aside = 0
    for path, meta in _reps(run_dir):
        t, w = _when(meta.get("started_at")), meta.get("window_s")
        if t is None or isinstance(w, bool) or not isinstance(w, (int, float)):
            continue
        if not REP_RE.match(path.name):  # a set-aside attempt
            aside += float(w)
            set_aside += 1
        else:
            kept += float(w)
            windows += 1
        first = t if first is None or t < first else first
        end = t.timestamp() + float(w)
        last = datetime.fromtimestamp(end, timezone.utc) if last is None or end > last.timestamp() else last
    begin = _when(run.get("started_at")) or first
    finish = _when(run.get("finished_at")) or until or last
    wall = (finish - begin).total_seconds() if begin is not None and finish is not None else None
    starts: dict[int, float] = {}
    records = run.get("server_starts")
    for rec in records if isinstance(records, list) else []:  # every attempt; a re-run start counts again
        took = rec.get("start_s") if isinstance(rec, dict) else None
        if isinstance(took, (int, float)) and not isinstance(took, bool):
            key = int(rec.get("start", 0)) * 100 + int(rec.get("attempt", 1) or 1)
            starts[key] = float(took)
    modes = sorted({str(r.get("start_mode")) for r in records if isinstance(r, dict)}) if isinstance(records, list) \
        else []
    notes = run.get("notes") if isinstance(run.get("notes"), list) else []
    for n in notes or [] if not starts else []:  # before run.json kept server_starts: the notes
        m = START_NOTE.match(str(n))
        if m:
            starts[int(m.group(1)) * 100 + 1] = float(m.group(2))
    measured = kept + aside
    return {"run_dir": str(run_dir), "status": run.get("status"), "wall_s": wall, "measured_s": measured,
            "kept_s": kept, "set_aside_s": aside, "windows": windows, "windows_set_aside": set_aside,
            "share_measured": measured / wall if wall else None, "share_kept": kept / wall if wall else None,
            "starts_s": {f"{k // 100}.{k % 100}": v for k, v in sorted(starts.items())}, "start_modes": modes,
            "starts_total_s": sum(starts.values())}


def _pct(x: object) -> str:
    return f"{float(x) * 100:.0f} %" if isinstance(x, (int, float)) else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--until", help="end of the wall time for a campaign still running (ISO time, UTC)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    until = _when(a.until) if a.until else None
    if a.until and until is None:
        print(f"--until: not an ISO time: {a.until!r}", file=sys.stderr)
        return 2
    rows = [account(d, until) for d in a.run_dirs]
    for r in rows:
        wall = r["wall_s"]
        print(f"{r['run_dir']} ({r['status'] or 'no final run.json'}): wall "
              f"{wall:.0f} s" if isinstance(wall, float) else f"{r['run_dir']}: wall unknown", end="")
        print(f", measured {r['measured_s']:.0f} s ({_pct(r['share_measured'])}; kept {r['kept_s']:.0f} s = "
              f"{_pct(r['share_kept'])}, {r['windows']} windows, {r['windows_set_aside']} set aside), "
              f"server starts {r['starts_total_s']:.0f} s over {len(r['starts_s'])} start attempts {r['starts_s']} "
              f"({', '.join(r['start_modes']) or 'mode not recorded'})")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
