"""SIMULATED stand-in for ``vllm.benchmarks.serve``, for a dry run of loadgen_vs_vllm_bench.py on a CPU box.

Why: the comparison script drives bench through its module API (``add_cli_args`` and
``main``) and its ``--save-result`` JSON; this module has that shape and the flags the
script passes (random and custom datasets), so the script's plumbing -- argv, the shared
prompt file, the worker protocol, the table -- can be debugged before a GPU is spent.
It measures nothing about vLLM: it streams from whatever server it is given with a
thread per stream over ``http.client``. Never quote its figures.

    python benchmarks/loadgen_vs_vllm_bench.py --standin --model-dir x \
        --bench-module benchmarks.fake_vllm_bench
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


def add_cli_args(p: argparse.ArgumentParser) -> None:
    """The subset of bench's flags that the comparison script uses."""
    for flag in ("--backend", "--base-url", "--endpoint", "--model", "--tokenizer", "--dataset-name",
                 "--dataset-path", "--result-dir", "--result-filename", "--percentile-metrics",
                 "--metric-percentiles"):
        p.add_argument(flag)
    for flag in ("--random-input-len", "--random-output-len", "--num-prompts", "--max-concurrency", "--seed",
                 "--num-warmups", "--custom-output-len"):
        p.add_argument(flag, type=int, default=0)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--request-rate", default="inf")
    for flag in ("--ignore-eos", "--disable-tqdm", "--save-result", "--skip-chat-template", "--disable-shuffle"):
        p.add_argument(flag, action="store_true")


def _prompts(args: argparse.Namespace) -> tuple[list[str], int]:
    if args.dataset_name == "custom":
        lines = Path(args.dataset_path).read_text().splitlines()
        prompts = [str(json.loads(line)["prompt"]) for line in lines if line.strip()]
        return (prompts * args.num_prompts)[:args.num_prompts], args.custom_output_len
    rng = random.Random(args.seed)
    return [" ".join(f"w{rng.randrange(500)}" for _ in range(args.random_input_len))
            for _ in range(args.num_prompts)], args.random_output_len


@dataclass(frozen=True)
class _Request:
    """One streamed request: seconds to first text, seconds in all, tokens out and in, gaps between texts."""

    ttft: float
    latency: float
    out: int
    inp: int
    itl: list[float]


def _one(base: str, args: argparse.Namespace, prompt: str, out_len: int) -> _Request:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=300)
    body = json.dumps({"model": args.model, "prompt": prompt, "max_tokens": out_len, "stream": True,
                       "ignore_eos": args.ignore_eos, "stream_options": {"include_usage": True}})
    key = os.environ.get("OPENAI_API_KEY", "")
    t0 = time.perf_counter()
    conn.request("POST", args.endpoint, body, {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    resp = conn.getresponse()
    stamps: list[float] = []
    usage: dict[str, int] = {}
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        msg = json.loads(line[6:])
        if msg.get("usage"):
            usage = msg["usage"]
        if msg.get("choices") and msg["choices"][0].get("text"):
            stamps.append(time.perf_counter())
    conn.close()
    end = time.perf_counter()
    n = int(usage.get("completion_tokens", len(stamps)))
    return _Request(stamps[0] - t0 if stamps else 0.0, end - t0, n, int(usage.get("prompt_tokens", 0)),
                    [b - a for a, b in zip(stamps, stamps[1:], strict=False)])


def main(args: argparse.Namespace) -> None:
    prompts, out_len = _prompts(args)
    base = args.base_url
    for _ in range(args.num_warmups):
        _one(base, args, prompts[0], out_len)
    todo: queue.Queue[str] = queue.Queue()
    for p in prompts:
        todo.put(p)
    done: list[_Request] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                p = todo.get_nowait()
            except queue.Empty:
                return
            r = _one(base, args, p, out_len)
            with lock:
                done.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(max(1, args.max_concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - t0
    outs = [r.out for r in done]
    itls = [1000.0 * g for r in done for g in r.itl]
    tpots = [1000.0 * (r.latency - r.ttft) / (r.out - 1) for r in done if r.out > 1]
    itls_sorted = sorted(itls) or [0.0]
    result = {"duration": duration, "completed": len(done), "failed": 0, "simulated": True,
              "total_input_tokens": sum(r.inp for r in done), "total_output_tokens": sum(outs),
              "output_throughput": sum(outs) / duration,
              "mean_ttft_ms": 1000.0 * statistics.fmean(r.ttft for r in done),
              "mean_tpot_ms": statistics.fmean(tpots) if tpots else 0.0,
              "mean_itl_ms": statistics.fmean(itls) if itls else 0.0,
              "median_itl_ms": statistics.median(itls_sorted),
              "p99_itl_ms": itls_sorted[min(len(itls_sorted) - 1, int(0.99 * len(itls_sorted)))]}
    Path(args.result_dir, args.result_filename).write_text(json.dumps(result))
