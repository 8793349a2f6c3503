"""benchmarks/arrivals_vs_bench.py runs bench's ``get_request`` read from vLLM's source, not a transcription.

The fake ``serve.py`` files here are written for these tests (vLLM's is not stored in
this repository): they have what makes the real one hard to execute alone -- annotations
naming vLLM types, imports of vLLM and aiohttp, a module-level helper the function calls.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("numpy")


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "arrivals_vs_bench.py"
    spec = importlib.util.spec_from_file_location("arrivals_vs_bench_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_SERVE = '''
import asyncio
import time
from collections.abc import AsyncGenerator

import aiohttp
import numpy as np
from vllm.benchmarks.datasets import SampleRequest


def _gap(rate: float, burstiness: float) -> float:
    return np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))


async def get_request(input_requests: list[SampleRequest], request_rate: float,
                      burstiness: float = 1.0) -> AsyncGenerator[tuple[SampleRequest, float], None]:
    sums: list[float] = []
    total = 0.0
    for _ in input_requests:
        total += 0.0 if request_rate == float("inf") else _gap(request_rate, burstiness)
        sums.append(total)
    if RESCALE and sums[-1] != 0:
        sums = [s * (len(input_requests) / request_rate) / sums[-1] for s in sums]
    start = time.time()
    for i, request in enumerate(input_requests):
        if sums[i] > 0:
            await asyncio.sleep(start + sums[i] - time.time())
        yield request, request_rate
'''


def _tree(tmp_path: Path, rescale: bool) -> Path:
    serve = tmp_path / "vllm" / "benchmarks" / "serve.py"
    serve.parent.mkdir(parents=True)
    serve.write_text(_SERVE.replace("RESCALE", str(rescale)))
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = version = '9.9.9'\n"
                                                   "__commit_id__ = commit_id = 'gabc1234'\n")
    return tmp_path


def test_the_function_is_cut_from_the_source_and_run_without_vllm(tmp_path: Path) -> None:
    bench = _bench()
    src = bench.load_bench_function(bench.find_serve_py(_tree(tmp_path, rescale=True)))
    assert src.version == "9.9.9 (commit abc1234)"
    from pytest_p2p.serve.workload import arrival_offsets

    for n, rate, burst, seed in [(64, 8.0, 1.0, 3), (50, 4.0, 0.5, 1), (5, math.inf, 1.0, 0)]:
        ref = bench.bench_schedule(src, n, rate, burst, seed)
        ours = arrival_offsets(n, rate, burst, seed)
        assert max(abs(a - b) for a, b in zip(ours, ref, strict=True)) <= 1e-6


def test_identical_source_passes_and_the_package_dir_is_accepted(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, rescale=True)
    assert _bench().main(["--vllm-src", str(root / "vllm")]) == 0
    out = capsys.readouterr().out
    assert "IDENTICAL" in out and "vLLM 9.9.9 (commit abc1234)" in out


def test_a_schedule_without_bench_rescaling_is_reported_different(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The old bug (no rescale to N / rate) must show: this is what the benchmark exists to catch."""
    assert _bench().main(["--vllm-src", str(_tree(tmp_path, rescale=False))]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_a_path_without_bench_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench().main(["--vllm-src", str(tmp_path)]) == 2
    assert "no vllm/benchmarks/serve.py" in capsys.readouterr().out
    (tmp_path / "serve.py").write_text("def other():\n    pass\n")
    assert _bench().main(["--vllm-src", str(tmp_path / "serve.py")]) == 2
    assert "defines no top-level get_request()" in capsys.readouterr().out
