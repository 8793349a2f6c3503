"""Usage errors before collection, and the last parser crashes (issue 30 items 2-5).

Each is refused where the rig and the options load: pytest prints one ``ERROR: pytest-p2p: ...``
paragraph (no pluggy or ``_pytest`` frames, rc 4) and ``doctor --rig`` refuses the same file (rc 2).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_p2p import cli
from pytest_p2p.errors import ConfigError
from pytest_p2p.plugin.rig import load_rig, parse_rig
from pytest_p2p.util import parse_size
from pytest_p2p.validate import show, yaml_document

ROOT = Path(__file__).resolve().parents[1]
DEMO_RIG = ROOT / "pytest_p2p" / "demo" / "rig.yaml"
DEMO_SNAPSHOT = ROOT / "pytest_p2p" / "demo" / "h200x2-nvlink.snapshot.json"
FRAMEWORK = ("pluggy", "_pytest", "Traceback", "INTERNALERROR", "ERROR collecting")


def _rig_without_model(tmp_path: Path) -> Path:
    """The demo rig (a SIMULATED model campaign) with its ``server.model`` line removed."""
    text = DEMO_RIG.read_text()
    assert "  model: demo-model-simulated\n" in text and "campaign:\n  kind: model\n" in text
    rig = tmp_path / "nomodel.yaml"
    rig.write_text(text.replace("  model: demo-model-simulated\n", ""))
    return rig


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_P2P_")}
    env["PYTEST_P2P_LOCK_DIR"] = str(tmp_path / "locks")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--co", "--pyargs",
                           "pytest_p2p.checks.test_campaign", "--p2p-snapshot", str(DEMO_SNAPSHOT),
                           "--p2p-results", str(tmp_path / "res"), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _one_paragraph(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-3000:]  # pytest's usage error, not rc 2 (a collection error)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ERROR: pytest-p2p: ")]
    assert all(n in line for n in needles), line
    assert not any(f in out for f in FRAMEWORK), out[-3000:]


def test_model_campaign_without_model_is_a_usage_error_before_collection_and_doctor_refuses_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rig = _rig_without_model(tmp_path)
    _one_paragraph(_pytest(tmp_path, "--p2p-rig", str(rig)), "server.model", "a model campaign needs")
    assert cli.main(["doctor", "--snapshot", "demo", "--rig", str(rig)]) == cli.EXIT_USAGE
    assert "server.model: a model campaign needs" in capsys.readouterr().err
    # live, on this machine without a driver (the suite hides NVML): the rig file's mistake, not "no driver"
    assert cli.main(["doctor", "--rig", str(rig)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "server.model: a model campaign needs" in err and "NVML" not in err


@pytest.mark.parametrize(("args", "needle"), [
    (("--p2p-reps", "100000000"), "--p2p-reps: bad value '100000000': expected an integer 1..1000, got 100000000"),
    (("--p2p-reps", "many"), "--p2p-reps: bad value 'many'"),
    (("--p2p-arms", "p2p_on,nope"), "names nope, which the rig"),
])
def test_bad_option_values_are_one_paragraph_before_collection(tmp_path: Path, args: tuple[str, ...],
                                                                needle: str) -> None:
    _one_paragraph(_pytest(tmp_path, "--p2p-rig", str(DEMO_RIG), *args), needle)


def test_a_309_digit_size_is_a_config_error_naming_the_field(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    huge = "9" * 309 + "KiB"
    with pytest.raises(ValueError, match="far beyond any buffer"):
        parse_size(huge)  # was OverflowError: cannot convert float infinity to integer
    with pytest.raises(ValueError, match="far beyond any buffer"):
        parse_size("9" * 19)  # past an exabyte: refused, never rounded through a float
    assert parse_size("1.5KiB") == 1536 and parse_size("999999999999999999") == 999999999999999999
    with pytest.raises(ConfigError, match=r"rig.yaml: campaign.sizes\[0\]: a size of 312 characters"):
        parse_rig({"campaign": {"kind": "probe", "sizes": [huge]}}, "rig.yaml")
    rig = tmp_path / "big.yaml"
    rig.write_text(f"campaign:\n  kind: probe\n  sizes: [{huge}]\n")
    assert cli.main(["doctor", "--snapshot", "demo", "--rig", str(rig)]) == cli.EXIT_USAGE
    assert "campaign.sizes[0]" in capsys.readouterr().err


def test_a_duplicate_yaml_key_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"s.yaml: key 'reps' appears twice in one mapping, at line 2 and at "
                                          r"line 4"):
        yaml_document("campaign:\n  reps: 4\n  kind: model\n  reps: 8\n", "s.yaml")
    with pytest.raises(ConfigError, match=r"key 'campaign' appears twice .* at line 1 and at line 3"):
        yaml_document("campaign: {reps: 4}\nrig: x\ncampaign: {reps: 8}\n", "s.yaml")
    # not duplicates: the same key in two mappings, a merge key, an int key beside a string key
    assert yaml_document("a: {k: 1}\nb: {k: 2}\n", "s") == {"a": {"k": 1}, "b": {"k": 2}}
    assert yaml_document("a: &x {k: 1}\nb:\n  <<: *x\n  j: 2\n", "s") == {"a": {"k": 1}, "b": {"k": 1, "j": 2}}
    assert yaml_document("1: a\n'1': b\n", "s") == {1: "a", "1": "b"}
    rig = tmp_path / "dup.yaml"
    rig.write_text(DEMO_RIG.read_text() + "campaign:\n  kind: probe\n")
    with pytest.raises(ConfigError, match=r"key 'campaign' appears twice in one mapping, at line \d+ and at line"):
        load_rig(rig)


@pytest.mark.parametrize(("text", "shown"), [
    ("\U0001f600 ok", "'\\U0001f600 ok'"),       # printable since Unicode 6: repr prints it
    ("x\U00031e29", "'x\\U00031e29'"),           # printable on 3.12 (Unicode 15), escaped by 3.11's repr
    ("caf\u00e9", "'caf\u00e9'"),                 # below U+10000 as repr prints it
])
def test_a_bad_value_reads_the_same_on_every_python(text: str, shown: str) -> None:
    """A rig's value in an error is escaped beyond U+FFFF, so the message (and the recorded config oracle) do
    not change with the Unicode version of the Python that reads the rig (the 2x H100 suite, 3.12, 2026-11-27)."""
    assert show(text) == shown
    with pytest.raises(ConfigError, match=re.escape(f"expected a mapping, got {shown}")):
        parse_rig(text, "rig.yaml")
