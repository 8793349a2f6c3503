"""One writer and one reader of the results directory (issue 25 item 1).

``results/write.py`` is the only module that writes ``run.json``, ``aggregate.json`` and the rep
files ``run_<k>.json``; ``results/read.py`` is the only one that parses them. Before, a second
full writer lived in the report stage (used by tests only) and four readers each treated a bad
file differently. The walk below fails, naming ``file:line``, when a module outside ``results/``

* spells one of those file names itself (a path built by hand: ``run_dir / "run.json"``,
  ``glob("*/aggregate.json")``, ``f"run_{k}.json"``), or
* locates them through the layout's names and also parses or writes JSON itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_p2p"
_FILE_NAME = re.compile(r"(?:.*/)?(?:run\.json|aggregate\.json|run_\*\.json)")
LOCATORS = {"RUN_META", "AGGREGATE", "REP_GLOB", "REP_RE", "rep_file"}  # results.layout names of those files
JSON_IO = {"load", "loads", "dump", "atomic_write_json"}


_PATH_CALLS = {"glob", "rglob", "joinpath", "with_name", "open", "Path"}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _path_operands(tree: ast.AST) -> list[ast.expr]:
    """Expressions used as a path part: either side of ``/``, or the argument of glob/joinpath/Path/open."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            out += [node.left, node.right]
        elif isinstance(node, ast.Call) and _called(node) in _PATH_CALLS:
            out += node.args
    return out


def offenders(source: str, name: str) -> list[str]:
    """``line: what`` for every way this module reads or writes the restricted files itself."""
    tree = ast.parse(source, name)
    found: list[str] = []
    located: list[str] = []
    for node in _path_operands(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _FILE_NAME.fullmatch(node.value):
            found.append(f"{node.lineno}: a path spells {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if parts and (parts[0].endswith("run_") or "/run_" in parts[0]) and parts[-1].endswith(".json"):
                found.append(f"{node.lineno}: a path spells a rep file {ast.unparse(node)}")
        elif isinstance(node, ast.Name) and node.id in LOCATORS:
            located.append(node.id)
    io = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) in JSON_IO]
    if located and io:
        found.append(f"{io[0]}: parses or writes JSON itself, and builds paths to {', '.join(sorted(set(located)))}")
    return found


def test_only_results_writes_and_reads_the_run_files() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("results", "demo"):
            continue
        found += [f"{rel}:{line}" for line in offenders(path.read_text(), str(rel))]
    assert not found, "the results directory has one writer and one reader (results/):\n" + "\n".join(found)


def test_the_walk_finds_a_second_writer_and_a_second_reader() -> None:
    """The detector itself: each way of going round the one writer/reader is found, a plain use is not."""
    cases = {
        "atomic_write_json(run_dir / 'run.json', meta)": 1,
        "sorted(d.glob('*/aggregate.json'))": 1,
        "(d / f'run_{k}.json').write_text('{}')": 1,
        "from pytest_p2p.results.layout import AGGREGATE\nimport json\nx = json.loads((d / AGGREGATE).read_text())": 1,
        "from pytest_p2p.results.read import run_meta\nmeta = run_meta(run_dir)": 0,
        "from pytest_p2p.results.layout import AGGREGATE\nattach(d / AGGREGATE)": 0,
        "raise ResultsError(f'{path}: not a run directory (no run.json)')": 0,
        "summary = {'source': 'aggregate.json'}\natomic_write_json(base / 'summary.json', summary)": 0,
    }
    for code, expected in cases.items():
        assert len(offenders(code, "<case>")) == expected, code
