"""A campaign's results directory without its per-request records: what the design comparison needs.

Why: a model rep's ``run_<k>.json`` holds every request (megabytes at c64); comparing two campaign designs
needs each rep's metrics, its meta (start, window, timings), its flags and the set-aside attempts with their
causes. ``python benchmarks/campaign_compact.py RUN_DIR... --out FILE`` writes them as one JSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

KEEP = ("output_throughput", "steady_output_throughput", "steady_s",
        "total_token_throughput", "request_throughput", "mean_ttft_ms", "median_ttft_ms",
        "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "completed", "failed",
        "duration", "total_output_tokens", "tokens_per_joule", "avg_power_w", "cause", "screened", "set_aside",
        "prefix_cache", "seed",
        # the instrument: how many client processes ran the window, and whether they were late (serve.result)
        "client_processes", "client_lateness", "client_loop_lag_p99_ms", "client_cpu_util_max")


def _rep(path: Path) -> dict[str, object]:
    d = json.loads(path.read_text())
    out: dict[str, object] = {k: d[k] for k in KEEP if k in d}
    out["file"] = path.name
    out["meta"] = d.get("meta")
    out["flags"] = d.get("flags")
    return out


def compact(run_dir: Path) -> dict[str, object]:
    scen: dict[str, list[dict[str, object]]] = {}
    for d in sorted((run_dir / "scenarios").iterdir()):
        scen[d.name] = [_rep(p) for p in sorted(d.glob("run_*.json"))]
    return {"run": json.loads((run_dir / "run.json").read_text()), "scenarios": scen,
            "files": sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    got = {str(p): compact(p) for p in a.run_dirs if (p / "run.json").is_file()}
    a.out.write_text(json.dumps(got, indent=1, default=str))
    print(f"{len(got)} run(s) -> {a.out} ({a.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
