"""Every NVML function our code calls exists in the installed nvidia-ml-py.

The live NVML paths only meet real hardware on a GPU machine; a misspelt function name
(``nvmlDeviceGetComputeProcesses`` for ``nvmlDeviceGetComputeRunningProcesses`` once
reached the H200 machine) would otherwise surface only there. This scans the package
source for ``<module>.nvmlXxx`` attribute uses and checks each against pynvml.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")
PKG = Path(__file__).resolve().parent.parent / "pytest_p2p"
CALL = re.compile(r"\b(?:pynvml|nv|nvml)\.(nvml[A-Za-z0-9_]+|NVML_[A-Z0-9_]+)"  # attribute uses
                  r"|[\"'](nvml(?:Device|System)[A-Za-z0-9_]+)[\"']")  # names passed to nvml_call


def test_every_nvml_name_we_use_exists():
    used: dict[str, list[str]] = {}
    for path in PKG.rglob("*.py"):
        for groups in CALL.findall(path.read_text(encoding="utf-8")):
            name = groups[0] or groups[1]
            used.setdefault(name, []).append(path.name)
    assert len(used) > 20, "the scan found too few NVML names: the pattern is stale"
    missing = {name: files for name, files in used.items() if not hasattr(pynvml, name)}
    assert not missing, f"not in nvidia-ml-py {getattr(pynvml, '__version__', '')}: {missing}"
