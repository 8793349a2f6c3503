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
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(node.lineno, t) for t in _targets(node, package)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.fullmatch(node.value):
            out.append((node.lineno, node.value.split(":")[0]))
    return out


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The pytest_p2p modules one import statement loads (``package``: the importer's package)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "pytest_p2p"]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "pytest_p2p":
        return []
    subs = [f"{target}.{a.name}" for a in node.names if _exists(f"{target}.{a.name}")]
    return subs + ([target] if len(subs) < len(node.names) else [])  # names that are attributes of ``target``


def executed_imports_in(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import statement that can run: module level and inside functions.

    Left out: imports under ``if TYPE_CHECKING:`` (they never run, so they cannot leave a module
    half-initialised; they name a type, and the stage-order walk above still checks them) and
    module names written as strings (``plugin.py`` names ``pytest_p2p.active`` to ask the plugin
    manager whether it is registered, which loads nothing).
    """
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend((node.lineno, t) for t in _targets(node, package))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source, module))
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


def _sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "demo" not in p.relative_to(PACKAGE).parts]


def graph(*, executed_only: bool) -> dict[str, dict[str, str]]:
    """module -> {imported module: "file:line" of the first such import}.

    ``executed_only``: the imports that can run (for cycles); otherwise every edge the stage-order
    walk sees (for what a module reaches).
    """
    out: dict[str, dict[str, str]] = {}
    for path in _sources():
        src = module_of(path)
        found = (executed_imports_in(path.read_text(), src, is_package=path.name == "__init__.py")
                 if executed_only else imports(path))
        edges_of = out.setdefault(src, {})
        for line, target in found:
            if target != src:
                edges_of.setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{line}")
    return out


def cycles(g: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, {}):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            strongconnect(v)
    return sorted(found)


def _describe(component: list[str], g: dict[str, dict[str, str]]) -> str:
    inside = set(component)
    return "  ".join(f"{a} -> {b} ({where})" for a in component for b, where in sorted(g[a].items()) if b in inside)


def reaches_later_stage(g: dict[str, dict[str, str]]) -> list[str]:
    """Stage code and stage glue that reach a later stage through any chain of imports.

    The direct walk lets ``<stage>/hooks.py`` import ``session``/``rig`` (shared integration);
    but ``rig`` composes every stage's section, so an early stage's hooks that import it load
    the later stages' code too: an import running back up the stage order, one hop removed.
    """
    found = []
    for src in sorted(g):
        k = kind(src)
        if k.role not in ("stage", "integration"):
            continue
        seen, parent, todo = {src}, {src: src}, [src]
        while todo:
            cur = todo.pop(0)
            for nxt in sorted(g.get(cur, {})):
                if nxt in seen:
                    continue
                seen.add(nxt)
                parent[nxt] = cur
                todo.append(nxt)
                dst = kind(nxt)
                if dst.role in ("stage", "integration") and dst.level > k.level:
                    chain = [nxt]
                    while chain[-1] != src:
                        chain.append(parent[chain[-1]])
                    hops = list(reversed(chain))
                    found.append(f"{g[src][hops[1]]}: " + " -> ".join(hops) + f" ({STAGES[dst.level]} is later)")
                    todo = []
                    break
    return found


def test_no_import_cycle() -> None:
    """0 cycles among the imports that run (issue 25: 6 on main before it)."""
    g = graph(executed_only=True)
    found = cycles(g)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(_describe(c, g) for c in found)


#: what still reaches a later stage, each through ``session``/``rig`` (which compose every stage's
#: section): the early stages' pytest glue. Issue 25 removes them by moving the glue above the
#: stages (a ``plugin/`` package); until then the list may only shrink.
STILL_UPWARD = {"pytest_p2p.campaign.hooks", "pytest_p2p.evidence.hooks", "pytest_p2p.probes.hooks",
                "pytest_p2p.serve.hooks"}


def test_no_stage_reaches_a_later_one() -> None:
    """0 imports running back up the stage order, counted through any chain (issue 25): none
    beyond :data:`STILL_UPWARD`, and each one fixed is taken off that list."""
    found = reaches_later_stage(graph(executed_only=False))
    modules = {line.split(": ", 1)[1].split(" -> ", 1)[0] for line in found}
    assert modules == STILL_UPWARD, (f"{len(found)} module(s) reach a later stage (known: {len(STILL_UPWARD)}):\n"
                                     + "\n".join(found))


def test_the_cycle_finder_finds_cycles_and_chains() -> None:
    """The detectors themselves, on a made-up graph: a 3-cycle, a self-free chain, an upward chain."""
    g = {"pytest_p2p.serve.a": {"pytest_p2p.serve.b": "a:1"}, "pytest_p2p.serve.b": {"pytest_p2p.serve.c": "b:1"},
         "pytest_p2p.serve.c": {"pytest_p2p.serve.a": "c:1"}, "pytest_p2p.util": {}}
    assert cycles(g) == [["pytest_p2p.serve.a", "pytest_p2p.serve.b", "pytest_p2p.serve.c"]]
    assert cycles({"pytest_p2p.serve.a": {"pytest_p2p.serve.b": "a:1"}, "pytest_p2p.serve.b": {}}) == []
    up = {"pytest_p2p.evidence.hooks": {"pytest_p2p.session": "h:3"}, "pytest_p2p.session": {"pytest_p2p.rig": "s:1"},
          "pytest_p2p.rig": {"pytest_p2p.verdict.config": "r:9"}, "pytest_p2p.verdict.config": {}}
    assert reaches_later_stage(up) == ["h:3: pytest_p2p.evidence.hooks -> pytest_p2p.session -> pytest_p2p.rig"
                                       " -> pytest_p2p.verdict.config (verdict is later)"]
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import server\n"
            "def f():\n    from .ready import x\n    return 'pytest_p2p.serve.logs'\n")
    assert [t for _, t in executed_imports_in(code, "pytest_p2p.serve.y")] == ["pytest_p2p.serve.ready"]


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
