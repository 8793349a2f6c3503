"""Goal of issue 24: the probe checks give no false failure on real NVLink in 20 repeated runs.

Each run is what a rig owner runs: a fresh ``python -m pytest -m p2p --pyargs
pytest_p2p.checks.test_probes --p2p-live`` session (new processes, new NCCL communicators,
cold GPUs at its start), on the pair's P2P-on and P2P-off arms. Per run it prints the
outcome of every probe check (pass / fail / inconclusive skip) and the uplift line per
decode size, taken from the recorded trials with the check's own judgement; at the end, the
count of runs with a failure. Goal: 0 failures in 20 runs where the true uplift at 8 KiB is
about +30 % (2x H200 NVLink: 11.8 vs 15.3 us).

Run on the GPU machine::

    python benchmarks/probe_uplift_repeat.py --runs 20 --max-s 170 --out $OUT/repeat

``--max-s`` stops starting runs when the next one would not finish in time (the count done is
printed); ``--sizes`` narrows the probe to the decode sizes plus one bandwidth size to keep a
run short. Results: ``runs.json`` and each run's JUnit XML and probe results under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from pytest_p2p.jsontypes import JSONObject
from pytest_p2p.probes.config import ProbeConfig, parse_probe
from pytest_p2p.probes.judge import judge_uplift
from pytest_p2p.probes.replay import load_allreduce

ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def rig(sizes: list[str], pair: str) -> JSONObject:
    """A live rig for one pair: P2P on/off, short sizes, loose thresholds that exercise every bound."""
    a, b = (int(x) for x in pair.split(","))
    return {
        "rig": "probe-uplift-repeat", "gpus": [a, b], "pairs": "all", "env": dict(ENV),
        "arms": {"p2p_on": "p2p_on", "p2p_off": "p2p_off"},
        "probe": {
            "sizes": sizes, "nccl_tests": False,
            "thresholds": {"per_arm": {
                "p2p_on": {"busbw_min_gbs": {"128MiB": 100}, "latency_max_us": {"8KiB": 40}},
                "p2p_off": {"busbw_min_gbs": {"128MiB": 5}, "latency_max_us": {"8KiB": 80}},
            }},
            "uplift": {"faster": "p2p_on", "slower": "p2p_off", "min": "5%"},
        },
    }


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / skipped / error (INCONCLUSIVE skips are named so)."""
    out: dict[str, str] = {}
    if not junit.is_file():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?")
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                kind = "failed" if child.tag == "failure" else "error"
            elif child.tag == "skipped":
                msg = child.get("message", "")
                kind = "inconclusive" if "INCONCLUSIVE" in msg else "skipped"
        out[name] = kind
    return out


def uplift_lines(results: Path, cfg: ProbeConfig, pair: tuple[int, int]) -> list[str]:
    """The uplift check's lines, re-judged from this run's recorded trials (what the check decided on)."""
    import pytest

    found = sorted(results.rglob(f"gpu{pair[0]}-gpu{pair[1]}/p2p_on/allreduce.json"))
    if not found:
        return [f"(no all-reduce recordings under {results})"]
    probes = found[0].parent.parent.parent
    try:
        on = load_allreduce(probes, pair, "p2p_on", "run")
        off = load_allreduce(probes, pair, "p2p_off", "run")
    except (Exception, pytest.skip.Exception) as exc:  # noqa: BLE001 - a run without recordings says why instead
        return [f"(no recordings: {exc})"]
    return [f"{j.outcome.value.upper():>12} {j.line}" for j in judge_uplift(on, off, cfg.uplift_sizes, cfg.uplift.min,
                                                                            cfg.alpha)]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pair", default="0,1")
    ap.add_argument("--sizes", default="8KiB,32KiB,128KiB,512KiB,128MiB")
    ap.add_argument("--max-s", type=float, default=0.0, help="stop starting runs after this many seconds (0: never)")
    ap.add_argument("--out", default=os.environ.get("OUT", "probe-uplift-repeat"))
    ns = ap.parse_args(argv)
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec = rig(ns.sizes.split(","), ns.pair)
    rig_path = out / "rig.yaml"
    rig_path.write_text(yaml.safe_dump(spec))
    cfg = parse_probe(spec["probe"], str(rig_path), "probe")
    a, b = (int(x) for x in ns.pair.split(","))
    runs: list[JSONObject] = []
    t0 = time.monotonic()
    longest = 0.0
    for k in range(ns.runs):
        elapsed = time.monotonic() - t0
        if ns.max_s and elapsed + 1.2 * longest > ns.max_s:
            print(f"stopping: {elapsed:.0f} s used, a run takes up to {longest:.0f} s, budget {ns.max_s:g} s")
            break
        res_dir, junit = out / f"run{k:02d}", out / f"run{k:02d}.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p.checks.test_probes",
               "--p2p-live", "--p2p-rig", str(rig_path), "--p2p-results", str(res_dir), "-k", "not benchmark",
               "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"]
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **ENV))
        took = time.monotonic() - started
        longest = max(longest, took)
        got = outcomes(junit)
        counts = {kind: sum(1 for v in got.values() if v == kind)
                  for kind in ("passed", "failed", "error", "inconclusive", "skipped")}
        if proc.returncode not in (0, 1) or not got:  # no session, a usage error, a crash: not a pass
            counts["error"] += 1
            got["session"] = "error"
        (out / f"run{k:02d}.log").write_text(proc.stdout + proc.stderr)
        lines = uplift_lines(res_dir, cfg, (a, b))
        bad = [name for name, v in got.items() if v in ("failed", "error")]
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] if "session" in got else []
        print(f"run {k + 1:2d}: {took:5.1f} s, pytest exit {proc.returncode}: "
              + ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
              + (f"; FAILED: {', '.join(bad)}" if bad else "") + (f"; {tail[0][:300]}" if tail else ""), flush=True)
        for line in lines:
            print(f"        {line}", flush=True)
        runs.append({"run": k + 1, "seconds": took, "exit": proc.returncode, "outcomes": dict(got),
                     "counts": dict(counts), "uplift": lines})
        (out / "runs.json").write_text(json.dumps(runs, indent=1))
    failed = sum(1 for r in runs if isinstance(r["counts"], dict) and (r["counts"].get("failed") or
                                                                         r["counts"].get("error")))
    undecided = sum(1 for r in runs if isinstance(r["counts"], dict) and r["counts"].get("inconclusive"))
    print(f"\n{len(runs)} runs in {time.monotonic() - t0:.0f} s: {failed} with a failure, {undecided} with an "
          f"inconclusive check, {len(runs) - failed - undecided} all decided and passed "
          f"(goal: 0 failures in 20 runs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
