"""The reference docs name everything they claim to cover: every module (architecture.md), every built-in
check (checks.md) and every rig-file key of the server/load/campaign sections (rig-file.md).

A new module, check or key without a line in its doc fails here, naming what is missing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pytest_p2p.campaign import config as campaign_config
from pytest_p2p.schema import rig_keys
from pytest_p2p.serve import config as serve_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_p2p"
DOCS = ROOT / "docs"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def _sections(text: str) -> dict[str, str]:
    """``{"evidence": text, ...}``: each package's paragraph, from its ``**name/**`` heading to the next heading."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^\*\*(\w+)/\*\*(.*?)(?=^\*\*\w+/\*\*|^## )", text, re.S | re.M):
        out[m.group(1)] = m.group(2)
    return out


def test_architecture_names_every_module() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    sections = _sections(text)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name == "__init__.py" or rel.parts[0] == "checks":
            continue  # a package is named by its heading; the checks are listed in checks.md
        where = text if len(rel.parts) == 1 else sections.get(rel.parts[0], "")
        if f"`{path.name}`" not in where and not re.search(rf"`{re.escape(path.stem)}[.`]", where):
            missing.append(rel.as_posix())
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)


def test_checks_doc_names_every_builtin_check() -> None:
    text = (DOCS / "checks.md").read_text(encoding="utf-8")
    missing = []
    for path in sorted((PACKAGE / "checks").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and node.name not in text:
                missing.append(f"{path.name}::{node.name}")
    assert not missing, "docs/checks.md does not name: " + ", ".join(missing)


def test_rig_file_doc_names_every_server_load_and_campaign_key() -> None:
    words = _words((DOCS / "rig-file.md").read_text(encoding="utf-8"))
    keys = {*rig_keys(serve_config.ServerConfig), *rig_keys(serve_config.LoadDefaults),
            *rig_keys(campaign_config.CampaignConfig)}
    missing = sorted(k for k in keys if k not in words)
    assert not missing, "docs/rig-file.md does not name: " + ", ".join(missing)
