"""pytest entry point (``pytest11: p2p``). Deliberately thin; see docs/architecture.md.

Each stage keeps its own pytest integration (options, fixtures, hooks) in
``<stage>/hooks.py``; this module only registers markers and lists those modules. None
of them imports torch, vllm, pynvml or openai at load time.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "pytest_p2p.evidence.hooks",  # core options, header, p2p_gpu / p2p_pair parametrisation
    "pytest_p2p.probes.hooks",  # all-reduce / P2P-copy probes, replay, probe checks
    "pytest_p2p.serve.hooks",  # vllm_server, openai_client, load
    "pytest_p2p.campaign.hooks",  # p2p_campaign, scenarios, GPU lease, xdist hand-off
    "pytest_p2p.verdict.hooks",  # baselines: --p2p-compare, --p2p-save-baseline, --p2p-fail-on
    "pytest_p2p.report.hooks",  # terminal glance table, allure labels
]

MARKERS = (
    "p2p: GPU-interconnect check (peer access, links, NCCL transport, P2P uplift); select with -m p2p",
    "gpu: needs a real GPU and driver; skipped with a reason when none is present",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every ``--p2p-*`` option and ``p2p_*`` ini key, from the one table in options.py."""
    from .options import declare

    declare(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
