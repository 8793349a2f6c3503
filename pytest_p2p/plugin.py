"""pytest entry point (``pytest11: p2p``). Deliberately thin; see docs/architecture.md.

Each stage keeps its own pytest integration (options, fixtures, hooks) in
``<stage>/hooks.py``; this module only registers markers and lists those modules. None
of them imports torch, vllm, pynvml or openai at load time.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "pytest_p2p.evidence.hooks",
]

MARKERS = (
    "p2p: GPU-interconnect check (peer access, links, NCCL transport, P2P uplift); select with -m p2p",
    "gpu: needs a real GPU and driver; skipped with a reason when none is present",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
