"""How often the README's main job fails with nothing wrong, on a loaded machine (issue 9, item 9).

Runs ``python -m pytest -m p2p --pyargs pytest_p2p`` (the README's main job: the demo rig,
replayed H200 snapshot, SIMULATED stand-in server) N times, each in a fresh directory,
while ``--load`` busy-loop processes keep the cores busy.  Nothing is wrong in any run, so
every failed test is a false alarm; inconclusive verdicts skip and are counted apart.

Usage: python benchmarks/verdict_demo_false_alarms.py [--runs 20] [--load 2] [--out FILE]
Prints one line per run and a summary (failures, inconclusive skips, load average, minutes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY = "import time\nwhile True:\n    pass\n"


def inconclusive_skips(text: str) -> int:
    """Inconclusive verdicts: the skips that say so (``SKIPPED [n] ...: INCONCLUSIVE: ...``), not every mention of
    the word (the report's table and verdict line repeat each one: one verdict counted as 3 until 2026-11-27)."""
    return sum(int(m) for m in re.findall(r"^SKIPPED \[(\d+)\] [^\n]*?: INCONCLUSIVE: ", text, flags=re.MULTILINE))


def outcomes(text: str) -> dict[str, int]:
    tail = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", ln)]
    got: dict[str, int] = {}
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", tail[-1] if tail else ""):
        got[what.rstrip("s") if what.startswith("error") else what] = int(n)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: cores)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--out", type=Path, default=None, help="also append the lines to this file")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
        if args.out is not None:
            with args.out.open("a") as fh:
                fh.write(line + "\n")

    fails = incon = 0
    loads: list[float] = []
    t0 = time.time()
    try:
        say(f"# {args.runs} runs of the README main job, {args.load} busy-loop processes on {os.cpu_count()} cores")
        for i in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="p2p-demo-fa-") as tmp:
                env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_P2P_")}
                env["PYTEST_P2P_LOCK_DIR"] = str(Path(tmp) / "locks")
                start = time.time()
                proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p",
                                       "-p", "no:cacheprovider", "-q", "-rfs"], cwd=tmp, env=env,
                                      capture_output=True, text=True, timeout=args.timeout)
                loads.append(os.getloadavg()[0])
                out = proc.stdout + proc.stderr
                got = outcomes(out)
                n_incon = inconclusive_skips(out)
                failed = got.get("failed", 0) + got.get("error", 0)
                fails += failed > 0
                incon += n_incon
                say(f"run {i}: rc {proc.returncode}, {got}, {n_incon} inconclusive, {time.time() - start:.0f} s, "
                    f"load {loads[-1]:.1f}")
                for ln in out.splitlines():
                    if ln.startswith(("FAILED", "ERROR")) or "INCONCLUSIVE" in ln:
                        say("    " + ln[:400])
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    n = len(loads)
    say(f"# summary: {fails} of {n} runs had a failing test; {incon} inconclusive verdicts (skips); "
        f"1-min load average {min(loads, default=0):.1f}..{max(loads, default=0):.1f}; "
        f"{(time.time() - t0) / 60:.0f} min")
    return 1 if fails else 0


if __name__ == "__main__":
    raise SystemExit(main())
