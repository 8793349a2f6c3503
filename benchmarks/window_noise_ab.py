"""Window noise with one output length against lengths within a range, interleaved on the same servers.

    PYTHONPATH=/tmp/site:. python3 benchmarks/window_noise_ab.py --rig RIG.yaml --out OUT [--ratio 0.5]

Why: the time to a decided uplift is set by how much a window pair's log ratio (P2P on over off) varies
within a server start (``stats.nested``). On 2x H200 (7B, 8 s windows, 2026-11-27) it was 2.7-2.8 % at
c16 and c64, and p2p_on's c16 windows fell into two levels 3.7 % apart that went with their mean TTFT:
the closed loop's waves, whose scheduling a few milliseconds of arrival order decide
(``serve.workload.request_lengths``). A range of lengths (bench's ``--random-range-ratio``) should keep
the waves from forming. This measures it where it matters, on the rig's own servers: both arms' servers
start once, at once (the rig's ``server`` section, as a resident campaign starts them), then for each
concurrency ``--windows`` rounds, each round one window pair per workload (fixed, ranged) with the
workloads' order and the arms' order alternating (ABBA), so drift and warm-up fall on both alike. Every
window pair shares its seed, so both arms of a pair get the same prompts; no two window pairs share one.
The ranged windows of one concurrency all ask the same lengths (as a campaign's do: ``lengths_seed``).

Output: ``windows.jsonl`` (one line per window), ``table.md`` and the same table on stdout: per
workload and concurrency, each arm's coefficient of variation over windows and the sd of the pair log
ratio, with an F test of the two workloads' ratio variances (two-sided p).
``--standin`` runs it against the SIMULATED stand-in (a CPU box: the script's own check).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pytest_p2p.plugin.rig import load_rig
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.loadgen import run_load
from pytest_p2p.serve.server import launch_all
from pytest_p2p.stats.nested import f_sf

ARMS = ("p2p_on", "p2p_off")


def _window(srv: Any, c: int, n: int, args: argparse.Namespace, seed: int, ratio: float) -> dict[str, Any]:
    t0 = time.time()
    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=c, num_prompts=n, input_len=args.input_len,
                 output_len=args.output_len, warmup=0, seed=seed, range_ratio=ratio, lengths_seed=c)
    return {"t0": t0, "output_throughput": r["output_throughput"], "mean_ttft_ms": r["mean_ttft_ms"],
            "mean_tpot_ms": r["mean_tpot_ms"], "duration": r["duration"], "completed": r["completed"],
            "failed": r["failed"], "total_output_tokens": r["total_output_tokens"]}


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| c | workload | windows | p2p_on CV | p2p_off CV | pair log-ratio sd | uplift (geo mean) |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    sds: dict[tuple[int, str], tuple[float, int]] = {}
    for c in sorted({r["c"] for r in rows}):
        for wl in ("fixed", "ranged"):
            pairs: dict[int, dict[str, float]] = {}
            for r in rows:
                if r["c"] == c and r["workload"] == wl and not r["failed"]:
                    pairs.setdefault(r["round"], {})[r["arm"]] = r["output_throughput"]
            full = [p for p in pairs.values() if len(p) == 2]
            if not full:
                continue
            on, off = [p["p2p_on"] for p in full], [p["p2p_off"] for p in full]
            lr = [math.log(a / b) for a, b in zip(on, off, strict=True)]
            sds[(c, wl)] = (_sd(lr), len(lr) - 1)
            out.append(f"| {c} | {wl} | {len(full)} | {_sd(on) / statistics.fmean(on) * 100:.2f} % | "
                       f"{_sd(off) / statistics.fmean(off) * 100:.2f} % | {sds[(c, wl)][0] * 100:.2f} % | "
                       f"{math.expm1(statistics.fmean(lr)) * 100:+.1f} % |")
    out.append("")
    for c in sorted({k[0] for k in sds}):
        if (c, "fixed") in sds and (c, "ranged") in sds:
            (sf, df_f), (sr, df_r) = sds[(c, "fixed")], sds[(c, "ranged")]
            if df_f > 0 and df_r > 0 and sr > 0:
                f = (sf / sr) ** 2
                p = 2 * min(f_sf(f, df_f, df_r), 1 - f_sf(f, df_f, df_r))
                out.append(f"c{c}: fixed / ranged ratio sd = {sf / sr:.2f} (F = {f:.2f} on {df_f}, {df_r} df, "
                           f"two-sided p = {p:.2g})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rig", type=Path, help="the rig file whose server section starts the servers")
    p.add_argument("--out", type=Path, default=Path("window-noise-ab"))
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--windows", type=int, default=6, help="rounds per concurrency (each: both workloads' pairs)")
    p.add_argument("--window-s", type=float, default=8.0, help="a window's length, sized by the first one")
    p.add_argument("--ratio", type=float, default=0.5)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--standin", action="store_true", help="against the SIMULATED stand-in (CPU box)")
    p.add_argument("--merge", type=Path, help="only print the table of this windows.jsonl")
    args = p.parse_args(argv)
    if args.merge:
        print(table([json.loads(x) for x in args.merge.read_text().splitlines() if x.strip()]))
        return 0
    if args.standin:
        from pytest_p2p.serve.config import parse_server

        server = parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": "standin",
                               "args": {"ttft-ms": 2, "tpot-ms": 1, "jitter": 0.05}, "startup_timeout_s": 60},
                              "window_noise_ab --standin")
        pair, env = (0, 1), {}
    else:
        if args.rig is None:
            p.error("--rig is required without --standin")
        rig = load_rig(args.rig)
        pairs = rig.pairs if isinstance(rig.pairs, list) else [(0, 1)]
        server, pair, env = rig.server, tuple(int(str(g)) for g in pairs[0]), dict(rig.env)
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "windows.jsonl").open("a")
    rows: list[dict[str, Any]] = []
    arms = [PRESETS[a] for a in ARMS]
    t_start = time.time()
    with launch_all(server, arms, pair, env, [args.out / f"server_{a}.log" for a in ARMS]) as servers:
        by_arm = dict(zip(ARMS, servers, strict=True))
        print(f"servers up in {time.time() - t_start:.0f} s", flush=True)
        for c in args.concurrency:
            for a in ARMS:  # warm-up at this concurrency, not measured
                run_load(by_arm[a].base_url, by_arm[a].api_key, by_arm[a].model, concurrency=c, num_prompts=2 * c,
                         input_len=args.input_len, output_len=args.output_len, warmup=0, seed=999_000 + c)
            n = 0
            for rnd in range(args.windows):
                wls = ("fixed", "ranged") if rnd % 2 == 0 else ("ranged", "fixed")
                for k, wl in enumerate(wls):
                    order = ARMS if (rnd + k) % 2 == 0 else ARMS[::-1]
                    seed = 1_000_000 * c + 100 * rnd + k
                    for a in order:
                        if not n:  # size windows by the first: requests in window_s at its rate
                            probe = _window(by_arm[a], c, 4 * c, args, seed - 50, 0.0)
                            n = max(2 * c, round(args.window_s * probe["completed"] / probe["duration"]))
                            print(f"c{c}: {n} requests a window", flush=True)
                        row = {"c": c, "round": rnd, "workload": wl, "arm": a, "seed": seed,
                               **_window(by_arm[a], c, n, args, seed, args.ratio if wl == "ranged" else 0.0)}
                        rows.append(row)
                        log.write(json.dumps(row) + "\n")
                        log.flush()
                        print(f"c{c} round {rnd} {wl:6} {a:7} {row['output_throughput']:9.1f} tok/s "
                              f"ttft {row['mean_ttft_ms']:.1f} ms", flush=True)
    text = table(rows)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    print(f"total {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
