"""The xdist role helpers, and that nothing else in the package asks xdist which process this is."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from pytest_p2p.plugin import xdist_roles as roles

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_p2p"


class _Plugins:
    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def hasplugin(self, name: str) -> bool:
        return name in self.names


def test_a_worker_a_controller_and_a_plain_session() -> None:
    worker = SimpleNamespace(workerinput={"workerid": "gw1", "p2p_run_stamp": "s"}, workeroutput={},
                             pluginmanager=_Plugins())
    controller = SimpleNamespace(pluginmanager=_Plugins("dsession"))
    plain = SimpleNamespace(pluginmanager=_Plugins())
    assert roles.is_worker(worker) and not roles.is_controller(worker)  # type: ignore[arg-type]
    assert roles.is_controller(controller) and not roles.is_worker(controller)  # type: ignore[arg-type]
    assert not roles.is_worker(plain) and not roles.is_controller(plain)  # type: ignore[arg-type]
    assert roles.worker_input(worker)["p2p_run_stamp"] == "s"  # type: ignore[arg-type]
    assert roles.worker_input(plain) == {} and roles.worker_output(plain) is None  # type: ignore[arg-type]
    out = roles.worker_output(worker)  # type: ignore[arg-type]
    assert out is worker.workeroutput  # the channel itself: what is put in it reaches the controller


def test_a_worker_node_seen_from_the_controller() -> None:
    done = SimpleNamespace(workerinput={"workerid": "gw3"}, workeroutput={"k": [1]})
    died = SimpleNamespace(workerinput={"workerid": "gw4"})  # no workeroutput: it died before sending
    assert roles.node_worker_id(done) == "gw3" and roles.node_output(done) == {"k": [1]}
    assert roles.node_output(died) == {} and roles.node_worker_id(SimpleNamespace()) == "worker"


def test_only_xdist_roles_asks_which_process_this_is() -> None:
    """``hasattr``/``getattr`` of ``workerinput``/``workeroutput`` anywhere else is a second answer."""
    # plugin.activation is the gate of every run, inert ones too, and imports nothing of the package
    allowed = {"pytest_p2p/plugin/__init__.py": 1}
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "xdist_roles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in ("workerinput", "workeroutput")):
                found.append(str(path.relative_to(PACKAGE.parent)))
    extra = [f for f in set(found) if found.count(f) > allowed.get(f, 0)]
    assert not extra, sorted(found)
