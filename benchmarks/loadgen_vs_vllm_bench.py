"""Is our load generator as exact as ``vllm bench serve``? Both against one real vLLM server, interleaved.

Why: if the client is slower than the server, the client -- not the interconnect -- shapes
TPOT and ITL and a P2P uplift is compressed. ``vllm bench serve`` is the reference vLLM
users trust, so ours is measured against it: the same server, the same workload, each
concurrency C run as ``--pairs`` interleaved pairs (bench first in even pairs, ours
first in odd ones, so drift cancels).

The same workload means the same prompts: by default (``--same-prompts``) each pair's
prompts are drawn once by our workload (random token ids of the served model's
tokenizer, exactly ``--input-len`` tokens) and bench reads the measured ones from a JSONL
file through its ``custom`` dataset (``--skip-chat-template --disable-shuffle``, the
output length from ``--custom-output-len``, ignore_eos); ours regenerates them from the
same seed. Without it each side draws its own random prompts (bench's ``random``
dataset), which made the server's work per token differ. The server runs without prefix
caching, so the second client of a pair gets no cache hits from the first; each pair has
fresh prompts. Bench's custom dataset needs pandas where bench runs.

Bench runs inside one persistent worker process that imports ``vllm.benchmarks.serve``
once (its CLI would pay vLLM's import per run) and is called with the CLI's own argument
parser; its CPU time per run is read from /proc. Ours runs in this process (and its
spawned client processes) through :func:`pytest_p2p.serve.loadgen.generate_load`.

Output: one JSON line per run, ``runs.json`` and ``table.md`` under ``--out``; the table
has per C the median over pairs of ours/bench output throughput and the relative
differences of mean TPOT, mean ITL and p99 ITL, and both input-token totals.
``--standin`` runs the whole thing on a CPU box against the SIMULATED stand-in with a
fake bench module (``--bench-module benchmarks.fake_vllm_bench``), to debug it before a
GPU is spent. Runs split over several device calls are numbered on with ``--pair-offset``
and tabled together with ``--merge runs.json ...`` (a ``runs.json`` or this script's log).
The table gives per C the geometric mean of the per-pair throughput ratios with its 95 %
t interval, and a second table each ``--also-ours-*`` variant against bench.

    PYTHONPATH=/tmp/site:. python3 benchmarks/loadgen_vs_vllm_bench.py --model-dir DIR --out OUT
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_p2p.metrics import metric
from pytest_p2p.probes.arms import Arm
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.cores import physical_cores, split_cores
from pytest_p2p.serve.loadgen import generate_load, make_spec
from pytest_p2p.serve.server import launch
from pytest_p2p.serve.workload import STANDIN_TOKENIZER, Tokenizer, load_tokenizer, token_prompts
from pytest_p2p.stats.summary import summarise

KEYS = ("output_throughput", "mean_tpot_ms", "mean_itl_ms", "p99_itl_ms", "median_itl_ms", "mean_ttft_ms",
        "total_input_tokens", "total_output_tokens", "completed", "failed", "duration")

_WORKER = r"""
import argparse, contextlib, json, os, sys, importlib
proto = os.fdopen(os.dup(1), "w", buffering=1)  # replies go here; anything bench prints goes to the log
os.dup2(2, 1)
def say(obj):
    proto.write("@@bench@@ " + json.dumps(obj) + "\n")
    proto.flush()
mod = importlib.import_module(sys.argv[1])
P = argparse.ArgumentParser
for where in ("vllm.utils.argparse_utils", "vllm.utils"):
    try:
        P = getattr(importlib.import_module(where), "FlexibleArgumentParser"); break
    except Exception:
        pass
parser = P()
mod.add_cli_args(parser)
try:
    import pandas  # bench's custom dataset reads JSONL with it
    pandas_ok = True
except Exception:
    pandas_ok = False
say({"ready": True, "flags": sorted(parser._option_string_actions), "pandas": pandas_ok})
for line in sys.stdin:
    argv = json.loads(line)
    t = os.times()
    try:
        args = parser.parse_args(argv)
        with contextlib.redirect_stdout(sys.stderr):
            mod.main(args)
        ok, err = True, ""
    except BaseException as exc:
        ok, err = False, f"{type(exc).__name__}: {exc}"
    u = os.times()
    say({"ok": ok, "error": err, "cpu_s": (u.user - t.user) + (u.system - t.system)})
"""


class Bench:
    """A persistent ``vllm bench serve`` worker: one import, many runs, results from its --save-result file."""

    def __init__(self, python: str, module: str, env: dict[str, str], log: Path) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 - lives as long as the worker
        self.python, self.env, self.cli = python, env, False
        self.proc = subprocess.Popen([python, "-c", _WORKER, module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, text=True)
        assert self.proc.stdout is not None
        hello = self._reply('{"ready": false}')
        if not hello.get("ready"):
            raise RuntimeError(f"bench worker did not start; see {log}")
        self.flags = set(hello["flags"])
        self.pandas = bool(hello.get("pandas"))

    def run(self, argv: list[str], out: Path) -> tuple[dict[str, Any] | None, str, float]:
        """One bench run in the worker; if that fails, the real CLI (and the CLI from then on)."""
        argv = self.known(argv)
        err = ""
        if not self.cli:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(argv) + "\n")
            self.proc.stdin.flush()
            reply = self._reply('{"ok": false, "error": "worker died", "cpu_s": 0}')
            if reply["ok"] and out.exists():
                return json.loads(out.read_text()), "", float(reply["cpu_s"])
            err = str(reply.get("error") or f"no result file {out}")
            print(f"# bench worker failed ({err}); trying the CLI", flush=True)
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([self.python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", *argv],
                              stdout=self.log, stderr=self.log, env=self.env, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode == 0 and out.exists():
            self.cli = True
            return json.loads(out.read_text()), "", cpu
        return None, f"{err}; CLI exit {done.returncode}", cpu

    def _reply(self, default: str) -> dict[str, Any]:
        """The worker's next protocol line (lines without the marker are skipped)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@bench@@ "):
                return dict(json.loads(line[10:]))
        return dict(json.loads(default))

    def known(self, argv: list[str]) -> list[str]:
        """``argv`` without the flags (and their values) this bench version does not have, e.g. --num-warmups."""
        out: list[str] = []
        skip = False
        for i, a in enumerate(argv):
            if skip:
                skip = False
                continue
            if a.startswith("--") and a not in self.flags:
                skip = i + 1 < len(argv) and not argv[i + 1].startswith("--")
                print(f"# bench: this version has no {a}; dropped", flush=True)
                continue
            out.append(a)
        return out

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _pin_prefix(args: argparse.Namespace) -> list[str]:
    """``taskset`` for the server when ``--split-cores`` gave it its own cores."""
    return ["taskset", "-c", ",".join(map(str, args.server_cores))] if args.server_cores else []


def _server_config(args: argparse.Namespace) -> object:
    if args.standin:
        return parse_server({"command": [*_pin_prefix(args), sys.executable, "-m", "pytest_p2p.serve.standin",
                                         "serve"],
                             "model": args.model_dir, "served_model_name": "tiny",
                             "args": {"ttft-ms": 5, "tpot-ms": 2, "jitter": 0.02},
                             "startup_timeout_s": 60, "request_timeout_s": 120, "teardown_timeout_s": 10},
                            "loadgen_vs_vllm_bench.py")
    return parse_server({
        "command": [*_pin_prefix(args), args.python, "-m", "vllm.entrypoints.cli.main", "serve"],
        "model": args.model_dir,
        "served_model_name": "tiny", "simulated": False,
        "args": {"load-format": "dummy", "attention-backend": "FLASH_ATTN", "tensor-parallel-size": 1,
                 "max-model-len": 1024, "gpu-memory-utilization": 0.5, "max-num-seqs": max(args.concurrency),
                 "dtype": "bfloat16", "no-enable-prefix-caching": True},
        "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "NCCL_NVLS_ENABLE": "0"},
        "startup_timeout_s": args.startup_timeout, "request_timeout_s": 300, "teardown_timeout_s": 30,
    }, "loadgen_vs_vllm_bench.py")


@contextlib.contextmanager
def _busy_core(on: bool) -> Iterator[None]:
    """A process spinning on the lowest client core while the block runs (nothing when ``on`` is false)."""
    if not on:
        yield
        return
    core = min(os.sched_getaffinity(0))
    spin = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


@contextlib.contextmanager
def _loop_stamps(on: bool) -> Iterator[None]:
    """Ours with every read dated when its task gets the bytes -- the clock before kernel stamps, and bench's.

    Why: the same client, server and prompts, dated two ways in one pair, show how much of a p99 ITL
    is the client's own lateness (docs/performance.md). One client process only: the patch is this
    process's (spawned client processes would not see it).
    """
    if not on:
        yield
        return
    from pytest_p2p.serve.stamped import StampedConnection

    saved = StampedConnection.stamp, StampedConnection.stamped_by_kernel
    StampedConnection.stamp = property(lambda self: time.perf_counter())  # type: ignore[assignment,method-assign]
    StampedConnection.stamped_by_kernel = property(lambda self: False)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        StampedConnection.stamp, StampedConnection.stamped_by_kernel = saved  # type: ignore[method-assign]


def _warmups(args: argparse.Namespace, c: int) -> int:
    """Warm-up requests of a run at concurrency ``c``: the same for bench and ours."""
    return min(c, int(args.max_warmup))


def _bench_argv(args: argparse.Namespace, base_url: str, c: int, n: int, seed: int, out: Path,
                dataset: Path | None) -> list[str]:
    if dataset is not None:
        data = ["--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len",
                str(args.output_len), "--skip-chat-template", "--disable-shuffle"]
    else:
        data = ["--dataset-name", "random", "--random-input-len", str(args.input_len), "--random-output-len",
                str(args.output_len), "--random-range-ratio", "0"]
    return ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", "tiny",
            "--tokenizer", args.model_dir, *data, "--num-prompts", str(n), "--max-concurrency", str(c),
            "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
            "--num-warmups", str(_warmups(args, c)), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
            "--result-filename", out.name]


def _shared_prompts(args: argparse.Namespace, tok: Tokenizer, c: int, n: int, seed: int, pair: int) -> Path:
    """The JSONL file of the measured prompts ours will send for this seed (its warm-ups come first)."""
    warm = _warmups(args, c)
    prompts = token_prompts(tok, warm + n, args.input_len, seed)
    path: Path = args.out / f"prompts-p{pair}-c{c}.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts[warm:]))
    return path


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _pairs_at(runs: list[dict[str, Any]], c: int) -> list[dict[str, dict[str, Any]]]:
    """The measured runs at concurrency ``c``, one ``{who: run}`` per pair."""
    pairs: dict[int, dict[str, dict[str, Any]]] = {}
    for r in runs:
        if r["concurrency"] == c and r.get("result"):
            pairs.setdefault(int(r["pair"]), {})[str(r["who"])] = r
    return list(pairs.values())


def table(runs: list[dict[str, Any]], concurrency: list[int]) -> str:
    """Per C: medians over pairs; ratio in the direction the metric registry gives (>= 1.0: ours no worse)."""
    thr = metric("output_throughput")
    head = ("| C | pairs | output tok/s bench | ours | ours/bench (median, min-max) | geometric mean (95 % CI) "
            "| mean TPOT ms bench / ours (diff) | mean ITL ms bench / ours (diff) | p99 ITL ms bench / ours (diff) "
            "| input tokens bench / ours | ours client CPU max | bench client CPU |")
    lines = [head, "|" + "---|" * 12]
    for c in concurrency:
        full = [p for p in _pairs_at(runs, c) if "bench" in p and "ours" in p]
        if not full:
            lines.append(f"| {c} | 0 | - | - | - | - | - | - | - | - | - | - |")
            continue

        def vals(who: str, key: str, full: list[dict[str, dict[str, Any]]] = full) -> list[float]:
            return [float(p[who]["result"][key]) for p in full]

        ratio = [o / b if thr.higher_is_better else b / o
                 for o, b in zip(vals("ours", "output_throughput"), vals("bench", "output_throughput"), strict=True)]

        def diff(key: str) -> str:
            d = [100.0 * (o / b - 1.0) for o, b in zip(vals("ours", key), vals("bench", key), strict=True) if b]
            return f"{_med(vals('bench', key)):.3f} / {_med(vals('ours', key)):.3f} ({_med(d):+.1f} %)"

        cpu_o = max(float(p["ours"]["result"].get("client_cpu_util_max", 0.0)) for p in full)
        cpu_b = max(float(p["bench"]["client_cpu_util"]) for p in full)
        lines.append(
            f"| {c} | {len(full)} | {_med(vals('bench', 'output_throughput')):.0f} | "
            f"{_med(vals('ours', 'output_throughput')):.0f} | {_med(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}) | "
            f"{_gm_ci(ratio)} | {diff('mean_tpot_ms')} | {diff('mean_itl_ms')} | {diff('p99_itl_ms')} | "
            f"{_med(vals('bench', 'total_input_tokens')):.0f} / {_med(vals('ours', 'total_input_tokens')):.0f} | "
            f"{cpu_o:.0%} | {cpu_b:.0%} |")
    return "\n".join(lines)


def _read_runs(path: Path) -> list[dict[str, Any]]:
    """Runs from a ``runs.json`` (a list) or from this script's log (its JSON lines; ``#`` lines skipped)."""
    try:
        text = path.read_text()
        if text.lstrip().startswith("["):
            return list(json.loads(text))
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    except (OSError, ValueError) as exc:
        sys.exit(f"loadgen_vs_vllm_bench: --merge {path}: {exc}")


def _gm_ci(ratios: list[float]) -> str:
    """Geometric mean of the per-pair ratios with its 95 % t interval (pairs are the unit; n < 2: none).

    A median says where the pairs sit; whether ours is slower needs the interval: when it
    holds 1.0 the pairs cannot tell the two clients apart at this server's noise.
    """
    logs = summarise([math.log(r) for r in ratios if r > 0]) if ratios else None
    if logs is None or logs.lower is None or logs.upper is None:
        return f"{math.exp(logs.mean):.3f} (n = 1)" if logs else "-"
    return f"{math.exp(logs.mean):.3f} ({math.exp(logs.lower):.3f}-{math.exp(logs.upper):.3f})"


def extras_table(runs: list[dict[str, Any]], concurrency: list[int]) -> str:
    """Each extra variant of ours (``--also-ours-*``) against bench of the same pair: medians over pairs."""
    lines = ["| C | variant | pairs | ours-variant/bench throughput (median, min-max) | mean TPOT diff | "
             "p99 ITL ms bench / variant (diff) | client timestamps |", "|" + "---|" * 7]
    for c in concurrency:
        pairs = _pairs_at(runs, c)
        variants = sorted({w for p in pairs for w in p if w not in ("bench", "ours")})
        for who in variants:
            both = [(p[who]["result"], p["bench"]["result"]) for p in pairs if who in p and "bench" in p]
            ratio = [float(v["output_throughput"]) / float(b["output_throughput"]) for v, b in both]
            tpot = [100.0 * (float(v["mean_tpot_ms"]) / float(b["mean_tpot_ms"]) - 1.0) for v, b in both]
            p99 = [100.0 * (float(v["p99_itl_ms"]) / float(b["p99_itl_ms"]) - 1.0) for v, b in both]
            stamps = sorted({str(v.get("client_timestamps", "?")) for v, _ in both})
            lines.append(f"| {c} | {who} | {len(both)} | {_med(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}) | "
                         f"{_med(tpot):+.1f} % | {_med([float(b['p99_itl_ms']) for _, b in both]):.2f} / "
                         f"{_med([float(v['p99_itl_ms']) for v, _ in both]):.2f} ({_med(p99):+.1f} %) | "
                         f"{', '.join(stamps)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--bench-module", default="vllm.benchmarks.serve")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--waves", type=int, default=4, help="requests per run = max(--min-prompts, waves * C)")
    p.add_argument("--min-prompts", type=int, default=8)
    p.add_argument("--max-warmup", type=int, default=16)
    p.add_argument("--transport", default="raw")
    p.add_argument("--startup-timeout", type=float, default=400)
    p.add_argument("--deadline-epoch", type=float, default=0.0, help="start no new pair after this time.time()")
    p.add_argument("--out", type=Path, default=Path("loadgen-vs-bench"))
    p.add_argument("--same-prompts", action=argparse.BooleanOptionalAction, default=True,
                   help="bench reads ours' prompts through its custom dataset (default; needs pandas there)")
    p.add_argument("--pair-offset", type=int, default=0, help="number this call's pairs from here (and seed them)")
    p.add_argument("--merge", type=Path, nargs="+", help="only print the table of these runs.json files")
    p.add_argument("--also-ours-processes", type=int, nargs="*", default=[],
                   help="extra runs of ours with this many client processes (labelled ours-pN; not in the table)")
    p.add_argument("--also-ours-unpinned", action="store_true",
                   help="an extra run of ours whose client processes are not pinned (labelled ours-unpinned)")
    p.add_argument("--also-ours-busy-core", action="store_true",
                   help="an extra run of ours while a spinning process holds one client core (labelled "
                        "ours-busy-core): does client-side CPU activity slow the server?")
    p.add_argument("--also-ours-loop-stamps", action="store_true",
                   help="an extra run of ours in one process whose chunks are dated when its task reads them, "
                        "not by the kernel (labelled ours-loop-stamps): the client's share of a p99 ITL")
    p.add_argument("--extras-at", type=int, nargs="*", default=None,
                   help="run the extra variants only at these concurrencies (default: every one)")
    p.add_argument("--split-cores", action="store_true",
                   help="the server on the lower half of the physical cores, both clients on the upper half")
    p.add_argument("--standin", action="store_true", help="SIMULATED dry run on a CPU box")
    args = p.parse_args(argv)
    if args.merge:
        merged = [r for f in args.merge for r in _read_runs(f)]
        print(table(merged, args.concurrency) + "\n", flush=True)
        print(extras_table(merged, args.concurrency), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    args.server_cores = []
    if args.split_cores:
        args.server_cores, clients = split_cores(os.sched_getaffinity(0))  # no core with a thread on each side
        os.sched_setaffinity(0, clients)  # bench's worker and our client processes inherit this
        print(f"# server cores {args.server_cores}, client cores {clients}", flush=True)
    print(f"# physical cores (sibling threads together): {physical_cores(os.sched_getaffinity(0))}", flush=True)
    tok = load_tokenizer(STANDIN_TOKENIZER if args.standin else args.model_dir) if args.same_prompts else None
    cfg = _server_config(args)
    runs: list[dict[str, Any]] = []
    print(f"# cores {len(os.sched_getaffinity(0))}, loadavg {os.getloadavg()}, python {sys.version.split()[0]}",
          flush=True)
    with launch(cfg, Arm(name="bench"), (0,), None, args.out / "server.log") as srv:  # type: ignore[arg-type]
        print(f"# server ready in {srv.ready_s:.1f} s, pid {srv.pid}; notes {srv.notes}", flush=True)
        env = {**os.environ, "OPENAI_API_KEY": srv.api_key, "NCCL_NVLS_ENABLE": "0"}
        bench = Bench(args.python, args.bench_module, env, args.out / "bench-worker.log")
        if args.same_prompts and args.bench_module.startswith("vllm.") and not bench.pandas:
            bench.close()
            print(f"# bench cannot read a custom dataset: no pandas for {args.python} (install it, or pass "
                  "--no-same-prompts)", flush=True)
            return 2
        try:
            for pair in range(args.pair_offset, args.pair_offset + args.pairs):
                if args.deadline_epoch and time.time() > args.deadline_epoch:
                    print(f"# deadline reached: stopping before pair {pair}", flush=True)
                    break
                for c in args.concurrency:
                    n = max(args.min_prompts, args.waves * c)
                    extras: tuple[str, ...] = (*(f"ours-p{k}" for k in args.also_ours_processes),
                                               *(("ours-unpinned",) if args.also_ours_unpinned else ()),
                                               *(("ours-busy-core",) if args.also_ours_busy_core else ()),
                                               *(("ours-loop-stamps",) if args.also_ours_loop_stamps else ()))
                    if args.extras_at is not None and c not in args.extras_at:
                        extras = ()
                    order: tuple[str, ...] = ("bench", "ours", *extras)
                    order = order if pair % 2 == 0 else order[::-1]
                    shared = 1000 * pair + 10 * c
                    dataset = _shared_prompts(args, tok, c, n, shared, pair) if tok is not None else None
                    for who in order:
                        seed = shared if dataset is not None else shared + (2 if who == "bench" else 1)
                        row: dict[str, Any] = {"pair": pair, "concurrency": c, "who": who, "num_prompts": n,
                                                  "seed": seed, "same_prompts": dataset is not None}
                        t0 = time.perf_counter()
                        if who == "bench":
                            out = args.out / f"bench-p{pair}-c{c}.json"
                            res, err, cpu = bench.run(_bench_argv(args, srv.base_url, c, n, seed, out, dataset),
                                                      out)
                            if res is not None:
                                row["client_cpu_util"] = cpu / max(float(res["duration"]), 1e-9)
                                row["result"] = {k: res.get(k) for k in KEYS}
                            row["error"] = err
                        else:
                            spec = make_spec(concurrency=c, num_prompts=n, input_len=args.input_len,
                                             output_len=args.output_len, seed=seed, warmup=_warmups(args, c),
                                             tokenizer=args.model_dir if not args.standin else None,
                                             transport=args.transport, request_timeout_s=300.0,
                                             client_processes=int(who[6:]) if who.startswith("ours-p") else
                                             1 if who == "ours-loop-stamps" else 0,
                                             pin=who != "ours-unpinned")
                            with _busy_core(who == "ours-busy-core"), _loop_stamps(who == "ours-loop-stamps"):
                                r = generate_load(srv.base_url, srv.api_key, srv.model, spec).to_dict()
                            row["result"] = {k: r[k] for k in (*KEYS, "client_processes", "client_cpus",
                                                               "client_cpu_util_max",
                                                               "client_loop_lag_p99_ms", "client_saturated",
                                                               "client_lateness", "client_reshards", "seed",
                                                               "client_timestamps",
                                                               "server_input_tokens", "tokenizer_id")}
                        row["wall_s"] = time.perf_counter() - t0
                        runs.append(row)
                        print(json.dumps(row), flush=True)
                        (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
        finally:
            bench.close()
            dead = srv.death()
            print(f"# server at the end: {'alive, same process' if dead is None else dead.message()}", flush=True)
    md = table(runs, args.concurrency) + "\n\n" + extras_table(runs, args.concurrency)
    (args.out / "table.md").write_text(md + "\n")
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
