"""Every import in pytest_p2p follows the stage order (issue 15), lazy ones included.

The stages, in data-flow order: evidence -> probes -> serve -> campaign -> verdict -> report.
A module may import an earlier stage, its own stage and the stage-free modules; never a
later stage. The walk sees every ``import`` / ``from ... import`` anywhere in a file
(module level, inside functions, under ``if TYPE_CHECKING:``) and every string naming a
module of the package in full (``"pytest_p2p.x.y"`` or ``"pytest_p2p.x.y:function"``, as
``pytest_plugins``, ``import_plugin`` and cli.py's lazy dispatch use them).

Four kinds of module, and what each may import:

* **stage code** (``<stage>/*.py``): stage-free modules, its own stage and earlier stages.
* **stage-free** (errors, util, validate, envs, options, lease, metrics, stats/*, and any other
  top-level module not named below): other stage-free modules only. Every stage may import
  them, so a stage import inside one would be an edge from that stage's importers to it.
* **stage integration** (the pytest glue of one stage): ``<stage>/hooks.py`` and
  ``<stage>/hookspecs.py`` sit at their stage's level: they may import stage code and other
  stages' hooks of their own or an earlier stage (``campaign/hooks.py`` importing
  ``report/hooks.py`` is an edge against the order), plus anything stage-free or shared.
* **shared integration**: ``rig.py`` (the rig file composes every stage's section, so it
  imports each stage's config) and ``session.py`` (the per-session view of rig and
  evidence). Any integration module may import them; they may import stage code and
  stage-free modules but no hooks and no entry point.
* **entry points**: ``plugin.py``, ``active.py``, ``cli.py``, ``__main__.py`` and the built-in
  checks ``checks/*`` (test modules that consume every stage): they may import anything.

Stage code and stage-free code never import integration code (hooks, rig, session, entry
points): the data flows from the stages up into the glue, never back.

Each failure lists every offending edge as ``file:line -> target (why)``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_p2p"
STAGES = ("evidence", "probes", "serve", "campaign", "verdict", "report")
TOP = len(STAGES)  # above every stage
FREE = -1  # below every stage
SHARED = {"rig", "session"}
ENTRY_POINTS = {"plugin", "active", "cli", "__main__", "checks"}
_MODULE_STRING = re.compile(r"pytest_p2p(?:\.\w+)+(?::\w+)?")


@dataclass(frozen=True)
class Kind:
    level: int  # FREE, a stage index, or TOP
    role: str  # "stage" | "free" | "integration" | "shared" | "entry"

    def name(self) -> str:
        if self.role in ("free", "shared", "entry"):
            return {"free": "stage-free", "shared": "shared integration", "entry": "entry point"}[self.role]
        stage = STAGES[self.level]
        return f"{stage} integration" if self.role == "integration" else stage


def kind(module: str) -> Kind:
    """Where a module (``pytest_p2p.campaign.runner``) sits in the stage order."""
    parts = module.split(".")[1:]
    if not parts:
        return Kind(FREE, "free")  # the package's __init__
    head, rest = parts[0], parts[1:]
    if head in STAGES:
        glue = bool(rest) and rest[0] in ("hooks", "hookspecs")
        return Kind(STAGES.index(head), "integration" if glue else "stage")
    if head in SHARED:
        return Kind(TOP, "shared")
    if head in ENTRY_POINTS:
        return Kind(TOP, "entry")
    return Kind(FREE, "free")


def module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a pytest_p2p module in the file, wherever it is."""
    return imports_in(path.read_text(), module_of(path), is_package=path.name == "__init__.py")


def imports_in(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pytest_p2p"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pytest_p2p":
                continue
            subs = [f"{target}.{a.name}" for a in node.names if _exists(f"{target}.{a.name}")]
            out += [(node.lineno, s) for s in subs]
            if len(subs) < len(node.names):  # names that are attributes of ``target`` itself
                out.append((node.lineno, target))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.fullmatch(node.value):
            out.append((node.lineno, node.value.split(":")[0]))
    return out


def violation(src: Kind, dst: Kind) -> str | None:
    """Why ``src`` may not import ``dst`` (None: it may)."""
    if src.role == "entry" or dst.role == "free":
        return None
    if src.role in ("stage", "free") and dst.role != "stage":
        return f"{src.name()} code imports {dst.name()} code"
    if src.role == "free":
        return f"stage-free code imports the {dst.name()} stage"
    if src.role == "shared":
        return None if dst.role in ("stage", "shared") else f"shared integration imports {dst.name()} code"
    if dst.role == "entry":
        return f"{src.name()} imports an entry point"
    if dst.role == "shared" or dst.level <= src.level:
        return None
    return f"{src.name()} imports the later {dst.name()}"


def edges() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "demo" in path.relative_to(PACKAGE).parts:
            continue
        src = module_of(path)
        for line, target in imports(path):
            why = violation(kind(src), kind(target))
            if why and target != src:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line} -> {target} ({why})")
    return found


def test_no_import_against_the_stage_order() -> None:
    found = edges()
    assert not found, f"{len(found)} import(s) against the stage order:\n" + "\n".join(found)


@pytest.mark.parametrize(("module", "expected"), [
    ("pytest_p2p.evidence.live", "evidence"), ("pytest_p2p.report.render", "report"),
    ("pytest_p2p.campaign.hooks", "campaign integration"), ("pytest_p2p.checks.test_baseline", "entry point"),
    ("pytest_p2p.session", "shared integration"), ("pytest_p2p.rig", "shared integration"),
    ("pytest_p2p.cli", "entry point"), ("pytest_p2p.stats.decide", "stage-free"), ("pytest_p2p", "stage-free"),
])
def test_every_module_has_a_place(module: str, expected: str) -> None:
    assert kind(module).name() == expected


def test_the_walk_sees_lazy_and_type_checking_imports() -> None:
    """The detector itself: a function-level import, one under TYPE_CHECKING and a module string are edges."""
    assert violation(kind("pytest_p2p.evidence.live"), kind("pytest_p2p.report.render"))
    assert violation(kind("pytest_p2p.campaign.runner"), kind("pytest_p2p.session"))  # stage -> integration
    assert violation(kind("pytest_p2p.util"), kind("pytest_p2p.probes.arms"))  # stage-free -> stage
    assert violation(kind("pytest_p2p.rig"), kind("pytest_p2p.verdict.config")) is None  # the composition root
    assert violation(kind("pytest_p2p.evidence.hooks"), kind("pytest_p2p.session")) is None
    assert violation(kind("pytest_p2p.session"), kind("pytest_p2p.evidence.hooks"))
    assert violation(kind("pytest_p2p.report.hooks"), kind("pytest_p2p.campaign.hooks")) is None
    assert violation(kind("pytest_p2p.campaign.hooks"), kind("pytest_p2p.report.hooks"))
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..report import render\n"
            "from .model import Evidence\n"
            "def f():\n    import pytest_p2p.verdict.compare\n    return 'pytest_p2p.serve.server:main'\n")
    got = {t for _, t in imports_in(code, "pytest_p2p.evidence.probe_of_the_walk")}
    assert got == {"pytest_p2p.report.render", "pytest_p2p.evidence.model", "pytest_p2p.verdict.compare",
                   "pytest_p2p.serve.server"}
