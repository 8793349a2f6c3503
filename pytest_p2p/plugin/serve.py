"""pytest integration of the serve stage: ``p2p_vllm_server``, ``p2p_openai_client`` and ``p2p_load`` fixtures.

They carry the ``p2p_`` prefix of every fixture of the plugin, so a project's own ``load``
or ``openai_client`` fixture is never shadowed. ``p2p_vllm_server`` is parametrised over
every (pair, arm) of the rig with ids like ``gpu0-gpu1-p2p_on`` and is session-scoped:
pytest groups the tests by parameter, so each arm's server starts once, serves every
test that asks for it, and is torn down (with the leftover-process and GPU-memory checks
of :mod:`.server`) before the next arm's server starts -- also after failures and on
Ctrl-C (pytest tears session fixtures down on interrupt; an ``atexit`` hook in
:mod:`.server` is the last resort).

Where the pairs, arms and server config come from is a :class:`ServerPlan`, built from
the rig session by default; tests and embedding tools can install their own with
:func:`set_server_plan` in ``pytest_configure``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..errors import P2PError
from ..util import atomic_write_json

if TYPE_CHECKING:
    from openai import OpenAI

    from ..probes.arms import ServerArm
    from ..serve.config import ServerConfig
    from ..serve.result import LoadResult
    from ..serve.server import RunningServer

PLAN_KEY = pytest.StashKey["ServerPlan"]()


@dataclass
class ServerPlan:
    """Everything the fixtures need to launch servers: config, pairs, arms, rig env, where logs go."""

    server: ServerConfig
    pairs: list[tuple[int, ...]]
    arms: Mapping[str, ServerArm]
    rig_env: Mapping[str, str] = field(default_factory=dict)
    results_root: Path = Path("p2p-results") / "servers"


def set_server_plan(config: pytest.Config, plan: ServerPlan) -> None:
    config.stash[PLAN_KEY] = plan


def server_plan(config: pytest.Config) -> ServerPlan:
    """The installed plan, or one built from the rig session (``pytest_p2p.plugin.session``)."""
    plan = config.stash.get(PLAN_KEY, None)
    if plan is None:
        from .session import get_session

        session = get_session(config)
        rig = session.rig
        plan = ServerPlan(server=rig.server, pairs=[tuple(p) for p in session.pairs], arms=dict(rig.arms),
                          rig_env=dict(rig.env), results_root=Path(session.results_root) / "servers")
        config.stash[PLAN_KEY] = plan
    return plan


def server_id(pair: tuple[int, ...], arm: str) -> str:
    return "-".join(f"gpu{g}" for g in pair) + f"-{arm}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "p2p_vllm_server" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "p2p_vllm_server" in names:
            return  # the test chose its own (pair, arm) params
    try:
        plan = server_plan(metafunc.config)
    except P2PError as exc:
        raise pytest.UsageError(str(exc)) from None
    params = [(tuple(pair), arm) for pair in plan.pairs for arm in plan.arms]
    metafunc.parametrize("p2p_vllm_server", params, indirect=True, scope="session",
                         ids=[server_id(p, a) for p, a in params])


def _sigterm_as_interrupt() -> None:
    """Make SIGTERM (a CI job timeout, ``kill``) unwind like Ctrl-C so servers are torn down.

    By default SIGTERM ends Python at once: no fixture teardown, no ``atexit``, and vLLM's
    workers keep the GPUs. Installed only in the main thread and only over the default
    handler, so a handler someone else installed is left alone.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@pytest.fixture(scope="session")
def p2p_vllm_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """A ready server (vLLM or the SIMULATED stand-in) for one (pair, arm); torn down and verified at the end."""
    from ..serve.server import launch

    param = getattr(request, "param", None)
    if param is None:
        pytest.fail("p2p_vllm_server has no (pair, arm): the rig has no pairs or arms, or the test is not "
                    "parametrised by pytest-p2p", pytrace=False)
    pair, arm_name = param
    plan = server_plan(request.config)
    if arm_name not in plan.arms:
        pytest.fail(f"p2p_vllm_server: no arm named {arm_name!r} in the rig; arms: {', '.join(plan.arms)}",
                    pytrace=False)
    if not plan.server.model:
        pytest.fail("p2p_vllm_server: the rig file's server section names no model (server.model)", pytrace=False)
    log = plan.results_root / server_id(tuple(pair), arm_name) / "server.log"
    _sigterm_as_interrupt()
    try:
        with launch(plan.server, plan.arms[arm_name], pair, plan.rig_env, log) as srv:
            yield srv
    except P2PError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def p2p_openai_client(p2p_vllm_server: RunningServer) -> Iterator[OpenAI]:
    """A synchronous ``openai.OpenAI`` bound to the server: no retries, no proxy, explicit timeouts."""
    import openai

    from ..serve.transport import http_module

    httpx = http_module()
    timeout = httpx.Timeout(p2p_vllm_server.config.request_timeout_s, connect=10.0)
    http = httpx.Client(trust_env=False, timeout=timeout)
    client = openai.OpenAI(base_url=p2p_vllm_server.openai_base_url, api_key=p2p_vllm_server.api_key,
                           max_retries=0, timeout=timeout, http_client=http)
    try:
        yield client
    finally:
        client.close()


class LoadRunner:
    """``p2p_load(concurrency, **overrides) -> dict``: run the load generator against the fixture's server.

    Defaults come from the rig's ``server.load``; prompts are tokenized with the served
    model's tokenizer (the stand-in's words when SIMULATED). Every result is written
    (atomically) next to the server log before anything else can fail, then the server is
    checked to still be the one we started: a server that died under load fails the test
    *after* its numbers are saved. ``results`` keeps the typed results.
    """

    def __init__(self, server: RunningServer, name: str) -> None:
        self.server = server
        self.name = name
        self.results: list[LoadResult] = []

    def __call__(self, concurrency: int, *, num_prompts: int | None = None, input_len: int | None = None,
                 output_len: int | None = None, warmup: int | None = None, seed: int | None = None,
                 endpoint: str | None = None, client_processes: int | None = None) -> dict[str, object]:
        from ..serve.loadgen import generate_load, make_spec

        srv = self.server
        d = srv.config.load
        srv.check_alive()
        spec = make_spec(
            concurrency=concurrency, num_prompts=num_prompts or d.num_prompts, input_len=input_len or d.input_len,
            output_len=output_len or d.output_len, warmup=d.warmup if warmup is None else warmup,
            seed=d.seed if seed is None else seed, endpoint=endpoint or d.endpoint,
            request_timeout_s=srv.config.request_timeout_s, transport=d.transport,
            tokenizer=d.tokenizer or srv.tokenizer_id, request_rate=d.request_rate, range_ratio=d.range_ratio,
            client_processes=d.client_processes if client_processes is None else client_processes,
            **d.client_options())
        try:
            res = generate_load(srv.base_url, srv.api_key, srv.model, spec)
        except ValueError as exc:
            pytest.fail(f"p2p_load({concurrency}, ...): {exc}", pytrace=False)
        res["simulated"] = srv.simulated
        res["arm"] = srv.arm
        res["pair"] = list(srv.pair)
        self.results.append(res)
        result = res.to_dict()
        path = srv.log_path.parent / f"load-{self.name}-c{concurrency}-{len(self.results)}.json"
        atomic_write_json(path, result)
        dead = srv.death()
        if dead is not None:
            pytest.fail(f"load results were saved to {path}, but then: {dead.message()}", pytrace=False)
        return result


@pytest.fixture
def p2p_load(p2p_vllm_server: RunningServer, request: pytest.FixtureRequest) -> LoadRunner:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)[:80]
    return LoadRunner(p2p_vllm_server, safe)
