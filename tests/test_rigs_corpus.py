"""The whole ``-m p2p`` suite replayed on every corpus machine × {no rig file, a gen-config rig}.

For each run: no INTERNALERROR and no traceback; the evidence checks that ran, passed, failed
and skipped, by test id, are exactly the expected ones; every skip has a reason, and the
reasons of the pair selection (one GPU, MIG, no P2P) say why. Probes and campaigns cannot run
on a replay: every test outside the evidence checks is skipped, with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAPS = ROOT / "fixtures" / "snapshots"
CORPUS = sorted(p.name.removesuffix(".snapshot.json") for p in SNAPS.glob("*.snapshot.json"))


@dataclass
class Expect:
    """Expected evidence-check outcomes of one run; anything not listed under ``fail``/``skip`` passes."""

    gpus: list[int]
    pairs: list[str]
    fail: dict[str, str] = field(default_factory=dict)  # test id -> fragment of the failure message
    skip: dict[str, str] = field(default_factory=dict)  # test id -> fragment of the skip reason
    selection: str = "pass"  # test_rig_selection: "pass", or "skip: <fragment>" / "fail: <fragment>"


NO_LINK = "the rig sets no NVLink expectation"
NO_PEER = "the rig sets no peer-access expectation"


def _nvlink_skips(gpus: list[int]) -> dict[str, str]:
    return {f"test_nvlink[gpu{g}]": NO_LINK for g in gpus}


def _pairs(n: int, only: list[tuple[int, int]] | None = None) -> list[str]:
    pairs = only if only is not None else [(a, b) for a in range(n) for b in range(a + 1, n)]
    return [f"gpu{a}-gpu{b}" for a, b in pairs]


AUTO: dict[str, Expect] = {
    "h100x1-pcie": Expect([0], [], skip=_nvlink_skips([0]), selection="skip: no GPU pair to check: the rig selects 1"),
    "h200x2-nvlink": Expect([0, 1], _pairs(2)),
    "5060ti-2x-gen3x4": Expect(
        [0, 1, 2], _pairs(3, [(1, 2)]),
        fail={"test_pcie_link[gpu1]": "runs PCIe Gen3 x4 under load; the rig expects at least Gen3 x16",
              "test_pcie_link[gpu2]": "runs PCIe Gen3 x4 under load; the rig expects at least Gen3 x16"},
        skip={"test_pcie_link[gpu0]": "the rig sets no PCIe expectation", **_nvlink_skips([0, 1, 2])}),
    "h200x4-nvswitch": Expect([0, 1, 2, 3], _pairs(4)),
    "h100x4-nvlink": Expect([0, 1, 2, 3], _pairs(4)),  # recorded on the lent 4x H100 (issue 28)
    "h200x4-nvswitch-gpu-lost": Expect([0, 1, 2], _pairs(3)),
    "h100x8-dgx-nvswitch": Expect(list(range(8)), _pairs(8)),
    "rtx6000ada-x4-pcie-switch": Expect([0, 1, 2, 3], _pairs(4), skip=_nvlink_skips([0, 1, 2, 3])),
    "l40s-x4-dual-socket": Expect(
        [0, 1, 2, 3], _pairs(4, [(0, 1), (2, 3)]),
        skip={**_nvlink_skips([0, 1, 2, 3]), "test_peer_access[gpu0-gpu1]": NO_PEER,
              "test_peer_access[gpu2-gpu3]": NO_PEER}),  # NODE: auto-detection does not insist on P2P
    "a100x2-mig": Expect([0, 1], [], skip=_nvlink_skips([0, 1]), selection="skip: MIG is enabled on GPU 0"),
    "rtx4090x4-p2p-patched": Expect([0, 1, 2, 3], _pairs(4), skip=_nvlink_skips([0, 1, 2, 3])),
    "rtx5090x2-stock": Expect([0, 1], [], skip=_nvlink_skips([0, 1]),
                              selection="skip: no GPU pair can do P2P here, so none is checked (gpu0-gpu1: no peer "
                                        "access (NVML P2P read GNS (GPU not supported)"),
}

# gen-config writes what the machine shows today, so every check of its rig passes; it keeps only the
# GPUs of P2P-capable pairs (all GPUs when there is none) and names them by bus id.
GENERATED: dict[str, Expect] = {
    name: Expect(e.gpus, e.pairs, skip={k: r for k, r in e.skip.items() if "NVLink" in r}, selection=e.selection)
    for name, e in AUTO.items()
}
GENERATED["5060ti-2x-gen3x4"] = Expect([1, 2], _pairs(3, [(1, 2)]), skip=_nvlink_skips([1, 2]))
GENERATED["l40s-x4-dual-socket"] = Expect([0, 1, 2, 3], _pairs(4, [(0, 1), (2, 3)]), skip=_nvlink_skips([0, 1, 2, 3]))
# the rig generated on the whole 4-GPU machine, replayed after GPU 0000:3A:00.0 fell off the bus
GENERATED["h200x4-nvswitch-gpu-lost"] = Expect(
    [0, 1, 2], _pairs(3), selection="fail: gpus[2]: no GPU with bus id 0000:3A:00.0 on this machine")
RIG_FROM = {"h200x4-nvswitch-gpu-lost": "h200x4-nvswitch"}

EVIDENCE_CHECKS = ("test_rig_selection", "test_peer_access", "test_topology", "test_pcie_link", "test_nvlink",
                   "test_error_counters")

# Crashes in other stages' files that the corpus still finds (owner + cause); strict so a fix is noticed.
KNOWN_CRASHES: dict[str, str] = {}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_P2P_", "PYTEST_ADDOPTS"))}
    env["PYTEST_P2P_NVML"] = "off"  # hermetic on a GPU machine: the snapshot is the only evidence
    return env


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[str, str]]]:
    xml = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p", "-p", "no:cacheprovider", "-q",
         f"--junitxml={xml}", f"--p2p-results={tmp_path / 'results'}", "-o", "junit_family=xunit1", *args],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    outcomes: dict[str, tuple[str, str]] = {}
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = case.get("name", "")
            module = case.get("classname", "").rsplit(".", 1)[-1]
            status, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    status = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                    message = (child.get("message") or "") + "\n" + (child.text or "")
            outcomes[f"{module}::{name}"] = (status, message)
    return proc, outcomes


def _crash(text: str) -> str:
    """The crash in two lines: the last frame in pytest_p2p and the exception."""
    lines = [line.replace("INTERNALERROR>", "").strip() for line in text.splitlines()]
    frames = [line for line in lines if line.startswith("File ") and "pytest_p2p" in line]
    errors = [line for line in lines if line and (line.split(":")[0].endswith(("Error", "Exception")))]
    return f"{frames[-1] if frames else '?'} -> {errors[-1] if errors else text[-800:]}"


def _generate_rig(tmp_path: Path, snapshot: Path) -> Path:
    out = tmp_path / "rig.yaml"
    proc = subprocess.run([sys.executable, "-m", "pytest_p2p", "gen-config", "--snapshot", str(snapshot), "--out",
                           str(out), "--name", "corpus"], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def _expected(e: Expect) -> dict[str, str]:
    want = {"test_rig_selection": e.selection.split(":", 1)[0]}
    for g in e.gpus:
        want[f"test_pcie_link[gpu{g}]"] = "passed"
        want[f"test_nvlink[gpu{g}]"] = "passed"
        want[f"test_error_counters[gpu{g}]"] = "skipped"
    for p in e.pairs:
        want[f"test_peer_access[{p}]"] = "passed"
        want[f"test_topology[{p}]"] = "passed"
    want.update({k: "failed" for k in e.fail})
    want.update({k: "skipped" for k in e.skip})
    return {k: {"pass": "passed", "skip": "skipped", "fail": "failed"}.get(v, v) for k, v in want.items()}


@pytest.mark.parametrize("rig_mode", ["auto", "gen-config"])
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_run_ends_in_the_expected_outcomes(name, rig_mode, tmp_path, request):
    if (name, rig_mode) in KNOWN_CRASHES or name in KNOWN_CRASHES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_CRASHES.get(name, "")))
    expect = (AUTO if rig_mode == "auto" else GENERATED)[name]
    args = [f"--p2p-snapshot={SNAPS / f'{name}.snapshot.json'}"]
    if rig_mode == "gen-config":
        args.append(f"--p2p-rig={_generate_rig(tmp_path, SNAPS / f'{RIG_FROM.get(name, name)}.snapshot.json')}")
    proc, outcomes = _run(tmp_path, *args)
    text = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in text and "Traceback" not in text, _crash(text)
    assert proc.returncode in (0, 1), text[-3000:]
    evidence = {k.split("::", 1)[1]: v for k, v in outcomes.items() if k.startswith("test_evidence::")}
    got = {k: v[0] for k, v in evidence.items()}
    if not expect.pairs:  # no pair: the pair checks are one skipped placeholder each (empty parametrisation)
        placeholders = {k: got.pop(k) for k in list(got) if k.startswith(("test_peer_access[", "test_topology["))}
        assert placeholders and set(placeholders.values()) == {"skipped"}, placeholders
    assert got == _expected(expect), json.dumps({"got": got, "want": _expected(expect)}, indent=1)
    fragments = {**expect.fail, **expect.skip}
    if ":" in expect.selection:
        fragments["test_rig_selection"] = expect.selection.split(":", 1)[1].strip()
    for test_id, fragment in fragments.items():
        assert fragment in evidence[test_id][1], (test_id, evidence[test_id][1][:500])
    for test_id, (status, message) in outcomes.items():
        if test_id.startswith("test_evidence::"):
            continue
        assert status == "skipped", (test_id, status, message[:500])  # a replay runs no probe or campaign
        assert message.strip(), f"{test_id} skipped without a reason"


def test_committed_corpus_is_what_make_corpus_builds():
    sys.path.insert(0, str(SNAPS))
    try:
        import make_corpus
    finally:
        sys.path.remove(str(SNAPS))
    for name, snap in make_corpus.corpus().items():
        assert json.loads((SNAPS / f"{name}.snapshot.json").read_text()) == snap, name
