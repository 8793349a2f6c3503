"""Issue 15: typed stage contracts stay typed. No module of the package imports ``typing.Any``;
JSON off disk is ``object`` narrowed where read (``pytest_p2p.jsontypes``), known shapes are TypedDicts,
third-party objects are Protocols. (``tox -e mypy`` runs ``mypy pytest_p2p``, strict per pyproject.toml.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_p2p"


def _any_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("typing", "typing_extensions"):
            hits += [f"{path.name}:{node.lineno} imports Any" for a in node.names if a.name == "Any"]
        elif isinstance(node, ast.Attribute) and node.attr == "Any" and isinstance(node.value, ast.Name) \
                and node.value.id in ("typing", "t"):
            hits.append(f"{path.name}:{node.lineno} uses typing.Any")
    return hits


def test_no_module_of_the_package_uses_typing_any() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100
    hits = [h for m in modules for h in _any_uses(m)]
    assert hits == [], "typing.Any in the package (type JSON as object and narrow it; see jsontypes.py): " + \
        ", ".join(hits)


def test_the_check_sees_both_spellings(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from typing import Any, cast\nimport typing\nx: typing.Any = 1\n")
    assert len(_any_uses(f)) == 2
