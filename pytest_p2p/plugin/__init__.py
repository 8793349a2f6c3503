"""pytest entry point (``pytest11: p2p``): thin, and inert unless the run is about p2p.

Installed in a virtualenv, this module is loaded by every pytest run there, most of which
have nothing to do with GPU interconnects. So, in the manner of pytest-xdist (whose
``DSession`` is registered only when a distribution mode is asked for), this module only:

* declares the options (cheap: the table in options.py, nothing else imported), so that
  ``pytest --help`` lists them and a ``--p2p-*`` flag is never "unrecognized";
* registers the ``p2p`` and ``gpu`` markers (a ``--strict-markers`` project may use them);
* decides once, at configure time, whether this is a **p2p run**, and only then registers
  the stage hook modules (``plugin/<stage>.py``) with ``import_plugin``. pytest calls the
  historic ``pytest_configure`` of a plugin registered late, and the fixture manager
  picks up its fixtures, so the stages behave as if they had been listed statically.

A p2p run is one where the user asked for it (see :func:`activation`): ``-m`` naming p2p
(``-m "not p2p"`` does not), any ``--p2p-*`` option, a ``PYTEST_P2P_*`` variable or
``p2p_*`` ini key of the option table, test paths inside this package (``--pyargs
pytest_p2p``), ini ``p2p_enable = true``, or ``-p pytest_p2p.plugin.active`` / ``pytest_plugins =
["pytest_p2p.plugin.active"]``. Otherwise nothing is printed, probed, reordered or scheduled,
and no module of the package beyond ``pytest_p2p``, ``pytest_p2p.plugin`` and
``pytest_p2p.options`` is imported.

xdist workers make the same decision as their controller: the controller hands it over in
``workerinput`` (as pytest-randomly hands over its seed), so a worker never disagrees.
"""

from __future__ import annotations

import re
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..options import ENABLE, TABLE, declare, given, resolve

if TYPE_CHECKING:
    from _pytest.mark.expression import Expression

#: The stage hook modules, in stage order (a later stage may rely on an earlier one's hooks).
STAGES = (
    "pytest_p2p.plugin.evidence",  # header, p2p_session / p2p_evidence, p2p_gpu / p2p_pair parametrisation
    "pytest_p2p.plugin.probes",  # all-reduce / P2P-copy probes, replay, probe checks
    "pytest_p2p.plugin.serve",  # p2p_vllm_server, p2p_openai_client, p2p_load
    "pytest_p2p.plugin.campaign",  # p2p_campaign, scenarios, GPU lease, xdist hand-off
    "pytest_p2p.plugin.verdict",  # baselines: --p2p-compare, --p2p-save-baseline, --p2p-fail-on
    "pytest_p2p.plugin.report",  # terminal glance table, allure labels
)
OPT_IN_PLUGIN = "pytest_p2p.plugin.active"
WORKER_KEY = "p2p_active"  # workerinput: the controller's reason, "" when inactive
ACTIVE_KEY = pytest.StashKey[str]()  # why this run is a p2p run; absent: not (yet) decided to be one

MARKERS = (
    "p2p: GPU-interconnect check (peer access, links, NCCL transport, P2P uplift); select with -m p2p",
    "gpu: needs a real GPU and driver; skipped with a reason when none is present",
)
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_IDENT = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")  # pytest's -m identifier characters
_KEYWORDS = {"and", "or", "not", "True", "False", "None"}
_MAX_NAMES = 10  # names besides p2p searched exhaustively (2**10 evaluations at most)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every ``--p2p-*`` option and ``p2p_*`` ini key, from the one table in options.py."""
    declare(parser)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Markers always; the stages only for a p2p run (after other plugins configured, like a static plugin)."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if ACTIVE_KEY in config.stash:  # activated already (by pytest_p2p.plugin.active)
        return
    reason = activation(config)
    if reason:
        activate(config, reason)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist controller -> worker: the controller's decision, so that both make the same one."""
    config: pytest.Config = node.config  # type: ignore[attr-defined]
    node.workerinput[WORKER_KEY] = config.stash.get(ACTIVE_KEY, "")  # type: ignore[attr-defined]


PYARGS_HINT = "the built-in checks run with: pytest -m p2p --pyargs pytest_p2p"
BUILTIN_NOTE = ("p2p checks: none of your tests is marked p2p, so the package's built-in checks run "
                "(the same as --pyargs pytest_p2p)")


@pytest.hookimpl(tryfirst=True)  # before pytest's -m deselection, which would leave nothing to look at
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """``pytest -m p2p`` alone, where no test of the user's is marked p2p: collect the built-in checks.

    The rule: only when ``-m`` selects p2p tests, no collected test carries the ``p2p``
    mark and no test path points into the package already. A project with its own p2p tests keeps
    collecting only those; a run that ``-m p2p`` would leave empty runs the checks instead, as the
    README's first sentence promises (issue 26).
    """
    markexpr = str(config.getoption("markexpr", default="") or "")
    if not is_active(config) or not selects_p2p(markexpr):
        return
    if any(_inside_package(config, a) for a in config.args):
        return  # --pyargs pytest_p2p, or a path into the package: collected already
    if any(item.get_closest_marker("p2p") is not None for item in items):
        return  # the user's own p2p tests, and only those
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    directory = getattr(pytest, "Dir", None)  # pytest >= 8; 7.x collects directories otherwise
    if directory is None:
        if reporter is not None:
            reporter.write_line(f"p2p checks: none of your tests is marked p2p; {PYARGS_HINT}")
        return
    initial = getattr(session, "_initialpaths", None)
    if isinstance(initial, frozenset):  # node ids as --pyargs pytest_p2p gives them: checks/test_x.py::...
        session._initialpaths = initial | {_PACKAGE_DIR}
    node = directory.from_parent(session, path=_PACKAGE_DIR / "checks")
    found = [x for x in session.genitems(node) if isinstance(x, pytest.Item)]
    if not found:
        return
    items.extend(found)
    session.testscollected += len(found)
    if reporter is not None:
        reporter.write_line(BUILTIN_NOTE)


def is_active(config: pytest.Config) -> bool:
    """Whether this session registered the stages (a p2p run)."""
    return ACTIVE_KEY in config.stash


def activate(config: pytest.Config, reason: str) -> None:
    """Register every stage hook module (idempotent; a stage blocked with ``-p no:<module>`` stays out)."""
    if ACTIVE_KEY in config.stash:
        return
    config.stash[ACTIVE_KEY] = reason
    check_options(config)
    from .xdist_roles import is_worker  # here, not at the top: an inert run imports three modules

    if not is_worker(config):  # the controller checked them for its workers
        check_paths(config)
    for module in STAGES:
        config.pluginmanager.import_plugin(module)


def check_options(config: pytest.Config) -> None:
    """Every row of the option table, converted now: a bad value (``--p2p-reps x``, ``PYTEST_P2P_ARMS=a``)
    is one ``ERROR: pytest-p2p: ...`` paragraph before collection, not a collection error whenever a
    stage first reads it (issue 30). Resolving is pure (no file, no GPU), so nothing else changes."""
    try:
        for opt in TABLE:
            resolve(config, opt)
    except Exception as exc:  # ConfigError naming the origin; imported lazily by resolve
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None


def check_paths(config: pytest.Config) -> None:
    """``--p2p-results`` and an SQLite ``--p2p-db`` are writable, checked before any GPU work.

    Why here: a store that cannot be created was found only after the whole campaign had run, with
    a diagnosis (an I/O error, check dmesg) that sent the user to the wrong place (issue 26).
    """
    from ..errors import ConfigError, P2PError
    from ..options import DB, RESULTS, path_of, unwritable
    from ..verdict.store_base import is_url, target_of

    results = resolve(config, RESULTS)
    checks: list[tuple[str, Path]] = [(results.where(), path_of(config, results))]
    db = resolve(config, DB)
    if db.value is not None:
        base = config.rootpath if db.origin.startswith("ini") else Path(config.invocation_params.dir)
        try:
            target = target_of(str(db.value), base)
        except P2PError as exc:
            raise pytest.UsageError(f"pytest-p2p: {db.origin}: {exc}") from None
        if not is_url(target):
            checks.append((db.where(), Path(target).parent))
    for where, directory in checks:
        problem = unwritable(directory)
        if problem:
            raise pytest.UsageError(f"pytest-p2p: {ConfigError(where, '', problem)} (checked before any GPU work)")


def activation(config: pytest.Config) -> str:
    """Why this is a p2p run ("" when it is not); cheap, touches no GPU and imports nothing of the package."""
    # xdist_roles.worker_input, read inline: the gate of every (also inert) run imports nothing more
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and WORKER_KEY in workerinput:
        return str(workerinput[WORKER_KEY])
    if config.pluginmanager.has_plugin(OPT_IN_PLUGIN):
        return f"-p {OPT_IN_PLUGIN}"
    try:
        enable = resolve(config, ENABLE)
    except Exception as exc:  # ConfigError naming the origin; imported lazily by resolve
        raise pytest.UsageError(f"pytest-p2p: {exc}") from None
    if enable.value:
        return enable.where()
    for opt in TABLE:
        if opt is not ENABLE and given(config, opt):
            return f"{opt.flag or opt.env or opt.ini} given"
    markexpr = str(config.getoption("markexpr", default="") or "")
    if markexpr and selects_p2p(markexpr):
        return f"-m {markexpr!r}"
    for arg in config.args:
        if _inside_package(config, arg):
            return f"tests of pytest_p2p ({arg})"
    return ""


def selects_p2p(markexpr: str) -> bool:
    """Whether the ``-m`` expression selects a test *because* it is marked p2p.

    True when some combination of the other marks makes a p2p-marked test selected and the
    same test without the p2p mark not: ``p2p``, ``p2p or slow``, ``gpu and p2p`` are p2p
    runs; ``not p2p``, ``slow and not p2p``, ``slow`` are not.
    """
    if not re.search(r"\bp2p\b", markexpr):
        return False
    try:
        from _pytest.mark.expression import Expression

        expr = Expression.compile(markexpr)
    except Exception:  # an invalid expression is pytest's error to report; a private API may change
        return re.search(r"(?<!not )\bp2p\b", markexpr) is not None
    others = sorted({n for n in _IDENT.findall(markexpr) if n not in _KEYWORDS and n != "p2p"})[:_MAX_NAMES]
    try:
        for values in product((False, True), repeat=len(others)):
            marks = dict(zip(others, values, strict=True))
            if _selected(expr, marks, p2p=True) and not _selected(expr, marks, p2p=False):
                return True
    except Exception:
        return re.search(r"(?<!not )\bp2p\b", markexpr) is not None
    return False


def _selected(expr: Expression, marks: dict[str, bool], *, p2p: bool) -> bool:
    def matcher(name: str, /, **kwargs: object) -> bool:
        return p2p if name == "p2p" else marks.get(name, False)

    return bool(expr.evaluate(matcher))


def _inside_package(config: pytest.Config, arg: str) -> bool:
    """A test argument that points into this package (``--pyargs pytest_p2p.checks``, or a path in it)."""
    target = str(arg).split("::", 1)[0]
    if config.getoption("pyargs", default=False) and (target == "pytest_p2p" or target.startswith("pytest_p2p.")):
        return True
    try:
        path = (Path(config.invocation_params.dir) / target).resolve()
    except (OSError, ValueError):
        return False
    return path == _PACKAGE_DIR or _PACKAGE_DIR in path.parents
