"""benchmarks/compile_cache_gpu.py's verdict on the starts it saw (the GPU run itself is in docs/gpu-runs.md)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compile_cache_gpu  # noqa: E402

DIR = "/c/torch_compile_cache/e66b7d51cb/rank_0_0/backbone"


def _row(k: int, *, loaded: bool, key: str = "e66b7d51cb") -> dict[str, object]:
    return {"start": k, "ready_s": 90.0, "cache_dirs": [DIR.replace("e66b7d51cb", key)], "loaded": loaded,
            "compiled": not loaded}


def test_one_process_may_compile_at_its_first_start_only() -> None:
    assert compile_cache_gpu.problems([_row(1, loaded=False), _row(2, loaded=True), _row(3, loaded=True)]) == []
    assert compile_cache_gpu.problems([_row(1, loaded=False), _row(2, loaded=False)]) == ["start 2 compiled again"]
    assert compile_cache_gpu.problems([_row(1, loaded=False), _row(2, loaded=True, key="b36857d2c9")]) == [
        "2 cache keys over 2 starts: ['b36857d2c9', 'e66b7d51cb']"]


def test_a_later_process_must_load_at_its_first_start() -> None:
    """The key lasts across pytest runs: a second process with the same cache root must not compile at all."""
    assert compile_cache_gpu.problems([_row(1, loaded=True)], expect_cached=True) == []
    got = compile_cache_gpu.problems([_row(1, loaded=False)], expect_cached=True)
    assert got and got[0].startswith("start 1 compiled: an earlier process's cache was not found")
