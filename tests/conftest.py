"""Shared test configuration: pytester for plugin behaviour, paths to recorded data."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def snapshot_5060ti() -> Path:
    return FIXTURES / "snapshots" / "5060ti-2x-gen3x4.snapshot.json"


@pytest.fixture
def snapshot_h200() -> Path:
    return FIXTURES / "snapshots" / "h200x2-nvlink.snapshot.json"


@pytest.fixture
def rig_5060ti() -> Path:
    return FIXTURES / "rigs" / "5060ti-budget.yaml"


@pytest.fixture
def rig_h200() -> Path:
    return FIXTURES / "rigs" / "h200x2-nvlink.yaml"
