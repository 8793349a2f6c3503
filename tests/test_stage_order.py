"""Every import in pytest_p2p follows the stage order (issues 15 and 25), lazy ones included.

The stages, in data-flow order: evidence -> probes -> serve -> campaign -> verdict -> report.
A module may import an earlier stage, its own stage and the stage-free modules; never a
later stage. The walk sees every ``import`` / ``from ... import`` anywhere in a file
(module level, inside functions, under ``if TYPE_CHECKING:``) and every string naming a
module of the package in full (``"pytest_p2p.x.y"`` or ``"pytest_p2p.x.y:function"``, as
``pytest_plugins``, ``import_plugin`` and cli.py's lazy dispatch use them).

Three kinds of module, and what each may import:

* **stage code** (``<stage>/*.py``): stage-free modules, its own stage and earlier stages.
* **stage-free** (errors, util, validate, envs, options, lease, metrics, signals, stats/*, and
  any other top-level module not named below): other stage-free modules only. Every stage may
  import them, so a stage import inside one would be an edge from that stage's importers to it.
* **glue** (entry points, above every stage): the pytest glue ``plugin/`` (every stage's hooks,
  the hookspecs, session, rig, the opt-in, xdist roles), ``cli.py``, ``__main__.py`` and the
  built-in checks ``checks/*``. They may import anything; nothing below imports them, so data
  flows from the stages up into the glue, never back.

The stage packages (and ``stats/``) import no pytest at all: a stage that needs a skip raises
its own P2PError subclass, which the glue turns into one (``probes.replay.NoRecording``).

Import cycles are counted on every import statement too, ``TYPE_CHECKING`` and function-level
ones included: a cycle that a type-only import closes still ties two modules together (issue 25).

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
GLUE = {"plugin", "cli", "__main__", "checks"}
PYTEST_FREE = (*STAGES, "stats")  # packages that never import pytest (nor its private parts, pluggy, xdist)
_MODULE_STRING = re.compile(r"pytest_p2p(?:\.\w+)+(?::\w+)?")


@dataclass(frozen=True)
class Kind:
    level: int  # FREE, a stage index, or TOP
    role: str  # "stage" | "free" | "glue"

    def name(self) -> str:
        return {"free": "stage-free", "glue": "glue"}.get(self.role) or STAGES[self.level]


def kind(module: str) -> Kind:
    """Where a module (``pytest_p2p.campaign.runner``) sits in the stage order."""
    parts = module.split(".")[1:]
    if not parts:
        return Kind(FREE, "free")  # the package's __init__
    if parts[0] in STAGES:
        return Kind(STAGES.index(parts[0]), "stage")
    if parts[0] in GLUE:
        return Kind(TOP, "glue")
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


def imports_in(source: str, module: str, *, is_package: bool = False,
               strings: bool = True) -> list[tuple[int, str]]:
    """(line, module) for every import statement of a pytest_p2p module, wherever it is.

    ``strings``: also module names written as strings (``"pytest_p2p.x.y:main"``), which the
    stage-order walk checks because they are loaded by name later.
    """
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(node.lineno, t) for t in _targets(node, package)]
        elif (strings and isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _MODULE_STRING.fullmatch(node.value)):
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


def violation(src: Kind, dst: Kind) -> str | None:
    """Why ``src`` may not import ``dst`` (None: it may)."""
    if src.role == "glue" or dst.role == "free":
        return None
    if dst.role == "glue":
        return f"{src.name()} code imports the pytest glue"
    if src.role == "free":
        return f"stage-free code imports the {dst.name()} stage"
    return None if dst.level <= src.level else f"{src.name()} imports the later {dst.name()}"


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


def graph(*, strings: bool) -> dict[str, dict[str, str]]:
    """module -> {imported module: "file:line" of the first such import}, for the whole package.

    ``strings``: with the module names written as strings, every edge the stage-order walk
    sees (for what a module reaches); without them, the import statements only (for cycles).
    """
    return graph_of([(module_of(p), str(p.relative_to(PACKAGE.parent)), p.read_text(), p.name == "__init__.py")
                     for p in _sources()], strings=strings)


def graph_of(files: list[tuple[str, str, str, bool]], *, strings: bool) -> dict[str, dict[str, str]]:
    """:func:`graph` of ``(module, path, source, is_package)`` files (the self-tests pass made-up ones).

    Every import statement is an edge: module level, inside a function and under
    ``if TYPE_CHECKING:`` alike. A type-only import is a dependency all the same: the importer
    cannot be type-checked, read or moved without the module it names, so a cycle that only a
    ``TYPE_CHECKING`` import closes is a cycle (issue 25 counted 6 such). A module name written
    as a string is not an import: ``plugin/__init__.py`` names its opt-in ``plugin.active`` to ask
    the plugin manager whether it is registered, which loads nothing.
    """
    out: dict[str, dict[str, str]] = {}
    for src, path, source, is_package in files:
        edges_of = out.setdefault(src, {})
        for line, target in imports_in(source, src, is_package=is_package, strings=strings):
            if target != src:
                edges_of.setdefault(target, f"{path}:{line}")
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
    """Stage code that reaches a later stage through any chain of imports.

    Each direct edge may be allowed and the chain still run back up: before issue 25 every
    ``<stage>/hooks.py`` imported ``session``, which imported ``rig``, which imports every
    stage's section parser, so an early stage loaded the later stages' code one hop removed.
    """
    found = []
    for src in sorted(g):
        k = kind(src)
        if k.role != "stage":
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
                if kind(nxt).level > k.level:  # a later stage, or the glue above them all
                    chain = [nxt]
                    while chain[-1] != src:
                        chain.append(parent[chain[-1]])
                    hops = list(reversed(chain))
                    found.append(f"{g[src][hops[1]]}: " + " -> ".join(hops) + f" ({kind(nxt).name()} is later)")
                    todo = []
                    break
    return found


_PYTEST_MODULES = {"pytest", "_pytest", "pluggy", "xdist"}


def pytest_imports(source: str, name: str = "<source>") -> list[tuple[int, str]]:
    """(line, module) for every import of pytest, its private parts, pluggy or xdist, wherever it is."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in _PYTEST_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out += [(node.lineno, node.module or "")] if (node.module or "").split(".")[0] in _PYTEST_MODULES else []
    return out


def test_no_import_cycle() -> None:
    """0 cycles among every import, type-only ones included (issue 25: 6 before it, each closed by TYPE_CHECKING)."""
    g = graph(strings=False)
    found = cycles(g)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(_describe(c, g) for c in found)


def test_no_stage_reaches_a_later_one() -> None:
    """0 imports running back up the stage order, counted through any chain (issue 25: 5 before it)."""
    found = reaches_later_stage(graph(strings=True))
    assert not found, f"{len(found)} module(s) reach a later stage:\n" + "\n".join(found)


def test_stage_packages_import_no_pytest() -> None:
    """The stages are pytest-free (issue 25): every pytest API is used from ``plugin/``, the glue."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
             for package in PYTEST_FREE for path in sorted((PACKAGE / package).rglob("*.py"))
             for line, mod in pytest_imports(path.read_text(), str(path))]
    assert not found, f"{len(found)} pytest import(s) in the stage packages:\n" + "\n".join(found)


def test_the_pytest_import_finder_finds_them() -> None:
    """The detector itself: module level, inside a function, under TYPE_CHECKING, ``from _pytest...``."""
    code = ("from typing import TYPE_CHECKING\nimport pytest_p2p.util\nif TYPE_CHECKING:\n    import pytest\n"
            "def f():\n    from _pytest.junitxml import xml_key\n    import pluggy, json\nfrom .pytest import x\n")
    assert pytest_imports(code) == [(4, "pytest"), (6, "_pytest.junitxml"), (7, "pluggy")]


def test_the_cycle_finder_finds_cycles_and_chains() -> None:
    """The detectors themselves, on a made-up graph: a 3-cycle, a self-free chain, an upward chain."""
    g = {"pytest_p2p.serve.a": {"pytest_p2p.serve.b": "a:1"}, "pytest_p2p.serve.b": {"pytest_p2p.serve.c": "b:1"},
         "pytest_p2p.serve.c": {"pytest_p2p.serve.a": "c:1"}, "pytest_p2p.util": {}}
    assert cycles(g) == [["pytest_p2p.serve.a", "pytest_p2p.serve.b", "pytest_p2p.serve.c"]]
    assert cycles({"pytest_p2p.serve.a": {"pytest_p2p.serve.b": "a:1"}, "pytest_p2p.serve.b": {}}) == []
    up = {"pytest_p2p.evidence.a": {"pytest_p2p.util": "h:3"}, "pytest_p2p.util": {"pytest_p2p.stats.x": "u:1"},
          "pytest_p2p.stats.x": {"pytest_p2p.verdict.config": "s:9"}, "pytest_p2p.verdict.config": {}}
    assert reaches_later_stage(up) == ["h:3: pytest_p2p.evidence.a -> pytest_p2p.util -> pytest_p2p.stats.x"
                                       " -> pytest_p2p.verdict.config (verdict is later)"]
    assert reaches_later_stage({"pytest_p2p.serve.a": {"pytest_p2p.plugin.rig": "a:2"}}) == [
        "a:2: pytest_p2p.serve.a -> pytest_p2p.plugin.rig (glue is later)"]


def test_a_type_only_cycle_is_a_cycle() -> None:
    """The cycle check itself, on made-up files: a cycle closed under TYPE_CHECKING or by a lazy import fails.

    ``a`` imports ``b`` only to name a type, ``b`` imports ``a`` inside a function (the shape of all
    six cycles issue 25 found); a module name in a string closes none.
    """
    a = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cyc_b import Spec\n"
         "def run(spec: 'Spec') -> None: ...\n")
    b = "def plan():\n    from .cyc_a import run\n    return run\n"
    files = [("pytest_p2p.serve.cyc_a", "serve/cyc_a.py", a, False), ("pytest_p2p.serve.cyc_b", "serve/cyc_b.py", b,
                                                                      False)]
    g = graph_of(files, strings=False)
    assert cycles(g) == [["pytest_p2p.serve.cyc_a", "pytest_p2p.serve.cyc_b"]]
    assert _describe(cycles(g)[0], g) == ("pytest_p2p.serve.cyc_a -> pytest_p2p.serve.cyc_b (serve/cyc_a.py:3)  "
                                          "pytest_p2p.serve.cyc_b -> pytest_p2p.serve.cyc_a (serve/cyc_b.py:2)")
    named = [files[0], ("pytest_p2p.serve.cyc_b", "serve/cyc_b.py", "OPT_IN = 'pytest_p2p.serve.cyc_a'\n", False)]
    assert cycles(graph_of(named, strings=False)) == []
    assert cycles(graph_of(named, strings=True))  # the stage-order walk's graph does follow the string


def test_no_import_against_the_stage_order() -> None:
    found = edges()
    assert not found, f"{len(found)} import(s) against the stage order:\n" + "\n".join(found)


@pytest.mark.parametrize(("module", "expected"), [
    ("pytest_p2p.evidence.live", "evidence"), ("pytest_p2p.report.render", "report"),
    ("pytest_p2p.plugin.campaign", "glue"), ("pytest_p2p.checks.test_baseline", "glue"),
    ("pytest_p2p.plugin.session", "glue"), ("pytest_p2p.plugin", "glue"), ("pytest_p2p.signals", "stage-free"),
    ("pytest_p2p.cli", "glue"), ("pytest_p2p.stats.decide", "stage-free"), ("pytest_p2p", "stage-free"),
])
def test_every_module_has_a_place(module: str, expected: str) -> None:
    assert kind(module).name() == expected


def test_the_walk_sees_lazy_and_type_checking_imports() -> None:
    """The detector itself: a function-level import, one under TYPE_CHECKING and a module string are edges."""
    assert violation(kind("pytest_p2p.evidence.live"), kind("pytest_p2p.report.render"))
    assert violation(kind("pytest_p2p.campaign.runner"), kind("pytest_p2p.plugin.session"))  # stage -> glue
    assert violation(kind("pytest_p2p.util"), kind("pytest_p2p.probes.arms"))  # stage-free -> stage
    assert violation(kind("pytest_p2p.util"), kind("pytest_p2p.plugin"))  # stage-free -> glue
    assert violation(kind("pytest_p2p.plugin.rig"), kind("pytest_p2p.verdict.config")) is None  # glue: anything
    assert violation(kind("pytest_p2p.plugin.evidence"), kind("pytest_p2p.plugin.report")) is None
    assert violation(kind("pytest_p2p.report.render"), kind("pytest_p2p.evidence.model")) is None
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..report import render\n"
            "from .model import Evidence\n"
            "def f():\n    import pytest_p2p.verdict.compare\n    return 'pytest_p2p.serve.server:main'\n")
    got = {t for _, t in imports_in(code, "pytest_p2p.evidence.probe_of_the_walk")}
    assert got == {"pytest_p2p.report.render", "pytest_p2p.evidence.model", "pytest_p2p.verdict.compare",
                   "pytest_p2p.serve.server"}
