"""What pytest-p2p costs a project that did not ask for it (issue 10 item 4), against pytest-timeout.

Two measures, each in fresh processes, hyperfine-style (warm-up runs, then interleaved
rounds in a shuffled order so that load drifting on a shared machine hits every variant
alike; median and quartiles reported, plus the median of the per-round difference to the
baseline, which cancels slow rounds):

1. **import cost**: in a process that has already imported pytest, the wall time of
   importing the entry point (``pytest_p2p.plugin``, what pytest's entry-point loading does)
   versus ``pytest_timeout``.
2. **run time** of ``python -m pytest`` in an unrelated project (20 trivial tests), with
   plugin autoloading off so that only the plugin under test differs:
   no plugin / ``-p pytest_p2p.plugin`` / ``-p pytest_timeout``, in ``-q`` and ``-v``.

Usage: ``python benchmarks/inert_overhead.py [--rounds 30]`` (needs pytest-timeout installed;
prints a markdown table). Results and the machine they came from: docs/performance.md,
section "Installed but not asked for".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = "".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n\n" for i in range(20))
IMPORT_SNIPPET = ("import pytest, time, sys; t = time.perf_counter(); import {mod}; "
                  "print(time.perf_counter() - t); "
                  "print(len([m for m in sys.modules if m.startswith('pytest_p2p')]))")


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def _import_cost(mod: str, env: dict[str, str]) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", IMPORT_SNIPPET.format(mod=mod)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def _summary(values: list[float], scale: float) -> str:
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), 0, max(values)]
    return f"{statistics.median(values) * scale:.1f} ({q[0] * scale:.1f}–{q[2] * scale:.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs per variant first (they compile bytecode)")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_P2P_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # as installed from a wheel: bytecode cached (here under a private prefix, the source tree stays clean)
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="p2p-bench-pyc-")
    rng = random.Random(1)

    imports = {"pytest_p2p.plugin": [], "pytest_timeout": []}  # type: dict[str, list[float]]
    modules = 0
    for _ in range(args.warmup):
        for mod in imports:
            _import_cost(mod, env)
    for _ in range(args.rounds):
        for mod in rng.sample(list(imports), len(imports)):
            cost, n = _import_cost(mod, env)
            imports[mod].append(cost)
            modules = max(modules, n) if mod == "pytest_p2p.plugin" else modules

    variants = {
        "no plugin": [],
        "pytest-p2p installed (inert)": ["-p", "pytest_p2p.plugin"],
        "pytest-timeout": ["-p", "pytest_timeout"],
    }
    runs: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        proj = Path(tmp)
        (proj / "test_unrelated.py").write_text(TESTS)
        (proj / "pytest.ini").write_text("[pytest]\n")
        for verbosity in ("-q", "-v"):
            cmds = {name: [sys.executable, "-m", "pytest", verbosity, "-p", "no:cacheprovider", *extra]
                    for name, extra in variants.items()}
            for _ in range(args.warmup):
                for cmd in cmds.values():
                    _time(cmd, proj, env)
            for _ in range(args.rounds):
                for name in rng.sample(list(cmds), len(cmds)):
                    runs.setdefault((verbosity, name), []).append(_time(cmds[name], proj, env))

    print(f"rounds: {args.rounds}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"median (25th–75th percentile)\n")
    print("| import (after pytest) | ms | pytest_p2p modules imported |")
    print("| --- | --- | --- |")
    for mod, vals in imports.items():
        print(f"| `import {mod}` | {_summary(vals, 1e3)} | {modules if mod == 'pytest_p2p.plugin' else '-'} |")
    print("\n| `pytest` run, 20 trivial tests | wall ms | paired difference to no plugin, ms (%) |")
    print("| --- | --- | --- |")
    for verbosity in ("-q", "-v"):
        base = runs[(verbosity, "no plugin")]
        for name in variants:
            vals = runs[(verbosity, name)]
            diff = [a - b for a, b in zip(vals, base, strict=True)]
            rel = statistics.median(diff) / statistics.median(base) * 100
            extra = "" if name == "no plugin" else f"{statistics.median(diff) * 1e3:+.1f} ({rel:+.1f} %)"
            print(f"| `{verbosity}` {name} | {_summary(vals, 1e3)} | {extra} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
