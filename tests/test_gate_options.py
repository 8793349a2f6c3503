"""The option table is the one definition of every setting (issue 15): declared from it, documented from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_p2p.options import TABLE, Option, Resolved, declare, markdown_table, path_of, resolve

ROOT = Path(__file__).resolve().parent.parent


def test_docs_options_section_is_the_table() -> None:
    text = (ROOT / "docs" / "index.md").read_text()
    m = re.search(r"<!-- options:begin[^\n]*-->\n(.*?)<!-- options:end -->", text, re.S)
    assert m, "docs/index.md lost its generated options section markers"
    assert m.group(1) == markdown_table(), "regenerate: python -c 'from pytest_p2p.options import markdown_table'"
    for opt in TABLE:
        for name in (opt.flag, opt.ini, opt.env):
            assert name is None or f"`{name}" in m.group(1)


def test_rows_are_unique_and_consistently_named() -> None:
    for attr in ("dest", "flag", "ini", "env"):
        names = [getattr(o, attr) for o in TABLE if getattr(o, attr)]
        assert len(names) == len(set(names)), attr
    for opt in TABLE:
        assert opt.dest.startswith("p2p_")
        assert opt.flag is None or opt.flag == "--" + opt.dest.replace("_", "-")
        assert opt.ini is None or opt.ini == opt.dest
        assert opt.env is None or opt.env == "PYTEST_P2P_" + opt.dest[4:].upper()


def test_nothing_but_options_py_declares_an_option() -> None:
    """No pytest_addoption, addoption or addini outside options.py/plugin/__init__.py: each option is declared once."""
    offenders = []
    for path in sorted((ROOT / "pytest_p2p").rglob("*.py")):
        if path.relative_to(ROOT / "pytest_p2p").as_posix() in ("options.py", "plugin/__init__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "pytest_addoption":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} pytest_addoption")
            if isinstance(node, ast.Attribute) and node.attr in ("addoption", "addini", "_addoption"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert offenders == []


def test_every_row_is_declared_and_resolves_by_precedence(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = pytester.parseconfig()  # loads the entry point, which declares every row
    for opt in TABLE:
        if opt.flag:
            assert config.getoption(opt.dest) is None
        if opt.ini:
            config.getini(opt.ini)  # declared: no ValueError
    monkeypatch.setenv("PYTEST_P2P_REPS", "4")
    pytester.makeini("[pytest]\np2p_reps = 3\np2p_results = out\n")
    config = pytester.parseconfig()
    reps = next(o for o in TABLE if o.dest == "p2p_reps")
    assert resolve(config, reps) == Resolved(4, "PYTEST_P2P_REPS", "4")
    config = pytester.parseconfig("--p2p-reps", "5")
    assert resolve(config, reps).where() == "--p2p-reps=5"
    monkeypatch.delenv("PYTEST_P2P_REPS")
    config = pytester.parseconfig()
    assert resolve(config, reps).origin == "ini p2p_reps"
    results = resolve(config, next(o for o in TABLE if o.dest == "p2p_results"))
    assert path_of(config, results) == config.rootpath / "out"  # ini-relative: against the rootdir


def test_declare_accepts_a_custom_table() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.flags: list[str] = []
            self.inis: list[str] = []

        def getgroup(self, *a: object) -> Recorder:
            return self

        def addoption(self, flag: str, **kw: object) -> None:
            self.flags.append(flag)

        def addini(self, name: str, **kw: object) -> None:
            self.inis.append(name)

    rec = Recorder()
    declare(rec, (Option("p2p_x", "--p2p-x", "h", None, ini="p2p_x"),))  # type: ignore[arg-type]
    assert rec.flags == ["--p2p-x"] and rec.inis == ["p2p_x"]


@pytest.mark.parametrize(("where", "named"), [("env", "PYTEST_P2P_REPS"), ("ini", "ini p2p_reps"),
                                              ("cli", "--p2p-reps")])
def test_reps_past_the_bound_name_where_they_came_from(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       where: str, named: str) -> None:
    """--p2p-reps is bounded by its converter, at resolution, where its origin is known (issue 25).

    Bounded later, in the campaign config, it was always reported as ``--p2p-reps``, also when it
    came from the environment or the ini file."""
    from pytest_p2p.errors import ConfigError
    from pytest_p2p.options import MAX_REPS, REPS

    monkeypatch.delenv("PYTEST_P2P_REPS", raising=False)
    args: list[str] = []
    if where == "env":
        monkeypatch.setenv("PYTEST_P2P_REPS", "100000000")
    elif where == "ini":
        pytester.makeini("[pytest]\np2p_reps = 100000000\n")
    else:
        args = ["--p2p-reps", "100000000"]
    config = pytester.parseconfig(*args)
    with pytest.raises(ConfigError, match=rf"^{re.escape(named)}: bad value '100000000': expected an integer "
                                          rf"1\.\.{MAX_REPS}, got 100000000$"):
        resolve(config, REPS)
    monkeypatch.setenv("PYTEST_P2P_REPS", str(MAX_REPS))
    assert resolve(pytester.parseconfig(), REPS).value == MAX_REPS  # the bound itself is a valid count
