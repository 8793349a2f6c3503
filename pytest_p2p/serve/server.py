"""Server lifecycle: launch vLLM (or the stand-in) for one arm on one pair, prove it ready, tear it down.

Why each step:

* **Own process session** (``start_new_session``): teardown can signal the whole tree
  (API server, EngineCore, workers) with one ``killpg``.
* **Env marker** ``PYTEST_P2P_SERVER_TOKEN=<uuid>`` in the server's environment: vLLM
  workers inherit it, so a process that left the session or was re-parented after the
  API server died (vLLM issue #55510: a SIGKILLed API server orphans EngineCore/Worker,
  which keep the GPU memory) is still found by reading ``/proc/<pid>/environ``.
* **Dies with pytest** (``preexec_fn=die_with_parent()``, :mod:`pytest_p2p.children`): a
  SIGKILLed pytest cannot tear anything down, so the kernel sends the server SIGTERM when
  pytest's launching thread dies. vLLM's API server answers SIGTERM with its own shutdown,
  which stops its EngineCore and workers; anything that still survives carries the env
  markers and is killed by :func:`~pytest_p2p.serve.procs.sweep_orphans` at the next
  launch (it holds GPU memory the next measurement would share). Safe as launched:
  the serve fixtures and the campaign runner call :func:`launch` from pytest's main thread
  (the campaign's worker threads only run load); from any other thread it is not armed.
* **Ready** means what a client needs: ``/health`` 200, ``/v1/models`` lists the model,
  and one real completion returns a token. A port that answers is not yet a server.
* **Teardown**: SIGTERM the group, wait, SIGKILL the group and every marked process,
  then check ``/proc`` for survivors and NVML for compute processes / memory left on the
  pair. A leftover is a :class:`ServerError` naming its pid: the next arm on that pair
  would otherwise be measured against a half-occupied GPU.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import signals
from ..children import die_with_parent
from ..envs import subprocess_env
from ..errors import ServerError, WriteError
from ..util import write_error
from .config import ServerConfig
from .cores import cpu_list, server_blocks
from .hold import Held
from .logs import likely_cause, pair_key, tail
from .procs import (
    ORPHAN_GRACE_S,
    OWNER_ENV,
    TOKEN_ENV,
    find_leftovers,
    kill_tree,
    owner_mark,
    sweep_orphans,
    threads_of,
)
from .ready import API_KEY_ENV, check_port_free, free_port, prove_identity, wait_ready
from .running import GpuUse, RunningServer, ServerDeath
from .start_phases import HEADER, launched_line

if TYPE_CHECKING:
    from ..probes.arms import ServerArm
__all__ = ["API_KEY_ENV", "KEY_FILE_ENV", "TOKEN_ENV", "GpuUse", "RunningServer", "ServerDeath", "api_key_for",
           "check_port_free", "continue_all", "drop_ahead", "find_leftovers", "free_port", "gpu_usage",
           "key_file", "kill_tree", "launch", "launch_all", "likely_cause", "pair_key", "prove_identity",
           "prove_ready", "spawn", "spawn_ahead", "tail", "teardown", "teardown_all"]
_LIVE: dict[int, tuple[int, str]] = {}  # leader pid -> (session id, token): killed at interpreter exit
_KEYS: dict[tuple[str, tuple[int, ...]], str] = {}  # (arm, pair) -> the API key for its servers
#: where the per-user secret behind the API keys is kept; a test points it elsewhere
KEY_FILE_ENV = "PYTEST_P2P_KEY_FILE"


def key_file() -> Path:
    """``$PYTEST_P2P_KEY_FILE``, else ``server-key`` in the user's cache directory (where vLLM keeps its own
    compile cache by default: ``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    if os.environ.get(KEY_FILE_ENV):
        return Path(os.environ[KEY_FILE_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache) / "pytest-p2p" / "server-key"


def _user_secret(path: Path) -> bytes:
    """The secret in ``path``, created (mode 0600, in a 0700 directory) on first use.

    Created as a whole or not at all: written to a private temporary file and linked into place, so two
    pytest processes (xdist workers, two nights overlapping) that race agree on one secret. A file that
    others may read is not a secret and is refused (:class:`OSError`), as is one too short to be one.
    """
    with contextlib.suppress(FileNotFoundError):
        return _read_secret(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    st = path.stat()
    if st.st_mode & 0o077:
        raise OSError(f"{path} may be read by other users (mode {st.st_mode & 0o777:o}; chmod 600 it)")
    secret = path.read_bytes().strip()
    if len(secret) < 32:
        raise OSError(f"{path} holds {len(secret)} bytes, not a secret (delete it: a new one is made)")
    return secret


def api_key_for(arm: str, pair: Sequence[int]) -> str:
    """The API key of this arm's servers on this pair: the same at every start, tonight and the next night.

    Why the same: vLLM hashes every ``VLLM_*`` variable it knows into its torch.compile cache key,
    ``VLLM_API_KEY`` included (``vllm.envs.compile_factors`` ignores ports and paths, not the key). A fresh
    key per start gave every start its own cache directory: each start compiled again (about 20 s of a 7B
    start on H100) and left one more directory behind. With one key per arm, a resident campaign's later
    starts took 93-99 s on 2x H100 (2026-11-26, 7B-shape, TP=2: ``Directly load the compiled graph(s) ...
    from the cache``) where starts that compiled took 119-156 s. A key per process still recompiled each
    night's first start, so the key is derived (HMAC-SHA256) from a per-user secret kept in :func:`key_file`;
    a nightly rig's first start loads the cache too. Where that file cannot be made or is not private, the key
    is random for this process (one warning naming the file: it costs only the compile). The arms' keys
    differ, so the two arms never share a cache directory; copies of one arm's server (starts made at once) do,
    and eight of them compiling into it together raised no error on 2x H200. The identity check still holds
    (/proc names the port's owner, and a wrong key is refused). The key never appears in argv (other users can
    read /proc/<pid>/cmdline).
    """
    ident = (arm, tuple(int(g) for g in pair))
    if ident not in _KEYS:
        path = key_file()
        try:
            secret = _user_secret(path)
        except OSError as exc:
            if not _KEYS:
                import warnings
                warnings.warn(f"pytest-p2p: no lasting server key ({exc}); each pytest run's first vLLM start "
                              "compiles again", RuntimeWarning, stacklevel=2)
            _KEYS[ident] = "p2p-" + secrets.token_urlsafe(18)
        else:
            msg = f"{ident[0]}\0{','.join(map(str, ident[1]))}".encode()
            _KEYS[ident] = "p2p-" + hmac.new(secret, msg, hashlib.sha256).hexdigest()[:32]
    return _KEYS[ident]


# ----------------------------------------------------------------------------- processes


@atexit.register
def _kill_all_at_exit() -> None:
    """Last resort after Ctrl-C twice or an internal error: no server outlives the test session."""
    for sid, token in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            kill_tree(sid, token, grace_s=2.0)


# ----------------------------------------------------------------------------- NVML


def gpu_usage(indices: Sequence[int]) -> list[GpuUse] | None:
    """Memory used and compute pids per GPU (through evidence/nvml.py); None when NVML cannot be used.

    An index this machine does not have (a pair's second GPU on a one-GPU machine) is left
    out: no process of ours can be on it, and it must not turn teardown into an NVML error.
    """
    from ..errors import EvidenceError
    from ..evidence.nvml import nvml_session

    try:
        with nvml_session() as nv:
            n = nv.count()
            out = []
            for i in indices:
                if not 0 <= int(i) < n:
                    continue
                g = nv.gpu(int(i))
                mem = g.memory()
                if mem is not None:
                    out.append(GpuUse(int(i), float(mem.used_mib), g.running_pids() or []))
            return out
    except EvidenceError:
        return None


def process_name(pid: int) -> str:
    """The short name of ``pid`` (``/proc/<pid>/comm``), or ``?`` when it is gone or not ours to read."""
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip() or "?"
    except OSError:
        return "?"


def memory_holders(srv: RunningServer, siblings: Sequence[RunningServer] = ()) -> str:
    """Who holds memory on the server's GPUs, not counting the server itself: ``gpu1: pid 4242 (python3)
    holds 70000 MiB``. Why: "out of GPU memory" alone sends the user to lower the server's
    settings, when another job on the pair is the cause (issue 30). ``""`` without NVML."""
    from ..errors import EvidenceError
    from ..evidence.nvml import nvml_session

    parts: list[str] = []
    try:
        with nvml_session() as nv:
            n = nv.count()
            for i in srv.pair:
                if not 0 <= i < n:
                    continue
                for pid, mib in nv.gpu(i).compute_processes() or []:
                    if pid == os.getpid() or srv.ours(pid) or any(o.ours(pid) for o in siblings):
                        continue
                    held = "an amount NVML does not show" if mib is None else f"{mib} MiB"
                    parts.append(f"gpu{i}: pid {pid} ({process_name(pid)}) holds {held}")
    except EvidenceError:
        return ""
    return "; ".join(parts)


#: fresh ports tried when the one chosen was taken before the server could bind it
PORT_TRIES = 5


def _port(host: str, port: int | None) -> int:
    """The rig's port, checked free; or a free one. A port we chose can be taken by another process (an NCCL
    rank's bootstrap socket, on a 4x H100 running probes beside a demo campaign) between the choice and the
    check: then another is chosen. A port the rig named is the rig's: taken, it is an error naming the holder."""
    if port is not None:
        check_port_free(host, port)
        return port
    for _ in range(PORT_TRIES - 1):
        chosen = free_port(host)
        with contextlib.suppress(ServerError):
            check_port_free(host, chosen)
            return chosen
    chosen = free_port(host)  # the last try: taken again, its error names the holder
    check_port_free(host, chosen)
    return chosen


@contextlib.contextmanager
def launch(config: ServerConfig, arm: ServerArm, pair: Sequence[int], rig_env: Mapping[str, str] | None,
           log_path: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int | None = None,
           extra_env: Mapping[str, str] | None = None,
           startup_timeout_s: float | None = None, cpus: Sequence[int] | None = None) -> Iterator[RunningServer]:
    """Start the server for ``arm`` on ``pair``, yield it once ready, always tear it down.

    Teardown runs on success, failure and Ctrl-C; it raises :class:`ServerError` if a
    process of this server survives or the pair's GPUs still hold its memory. ``cpus``: where one of several
    servers started one after the other runs (:func:`launch_cpus`); ``None``: a server alone, as ``server.cpus``
    says.
    """
    started: list[RunningServer] = []  # filled by spawn while interrupts are held: nothing escapes teardown
    if cpus is None:
        cpus = launch_cpus(config, 1)[0]
    try:
        srv = spawn(config, arm, pair, rig_env, log_path, host=host, port=port, extra_env=extra_env, into=started,
                    cpus=cpus)
        prove_ready(srv, time.monotonic() + (startup_timeout_s or config.startup_timeout_s))
        yield srv
    finally:
        for srv in started:
            teardown(srv)


def spawn(config: ServerConfig, arm: ServerArm, pair: Sequence[int], rig_env: Mapping[str, str] | None,
          log_path: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int | None = None,
          extra_env: Mapping[str, str] | None = None,
          before: tuple[list[int], list[GpuUse] | None] | None = None,
          into: list[RunningServer] | None = None, cpus: Sequence[int] = ()) -> RunningServer:
    """Start the server process for ``arm`` on ``pair`` and return it, not yet ready (:func:`prove_ready`).

    The caller owns its teardown (:func:`teardown`; :data:`_LIVE` kills it at interpreter exit).
    ``before`` is what :func:`launch_all` found once for several servers: the orphans it swept and the
    pair's idle GPU use; ``None`` sweeps and takes the snapshot here, just before this one server starts.
    ``into`` gets the server appended while interrupts are held, so a Ctrl-C cannot land between the fork
    and the caller's record of it. ``cpus``: the CPUs its processes may run on (:func:`pin`); empty: any.
    """
    log = Path(log_path)
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(log.parent, exc, "create the directory of the server log") from None
    pair = tuple(int(g) for g in pair)
    token = uuid.uuid4().hex
    api_key = api_key_for(arm.name, pair)
    port = _port(host, port)
    arm_vllm_env = arm.vllm_env()  # e.g. symmetric-memory all-reduce
    extra_env = engine_ready_env(extra_env, config.env, rig_env, arm.env, arm_vllm_env)
    # the secret travels in the environment (readable only by us and root), never in argv (/proc/PID/cmdline)
    env = subprocess_env(pair, rig_env, config.env, arm.env, arm_vllm_env, extra_env,
                         {TOKEN_ENV: token, OWNER_ENV: owner_mark(), API_KEY_ENV: api_key})
    argv = config.argv(list(arm.vllm_flags()), host=host, port=port)
    if before is None:
        swept = sweep_orphans()  # servers of a pytest that died (SIGKILL) and did not die with it
        idle = gpu_usage(pair)
    else:
        swept, idle = before
    try:
        fh = open(log, "ab")  # noqa: SIM115 -- closed by the with below; here only its OSError is ours
    except OSError as exc:  # a read-only or full results disk: one paragraph naming the log, no server
        raise write_error(log, exc, "open the server log") from None
    # held: an interrupt between the fork and _LIVE would leave a server that nothing tears down
    with fh, signals.held():
        if swept:
            fh.write(f"# pytest-p2p: killed processes of a server whose pytest is gone: pids {swept}\n".encode())
        fh.write(f"{HEADER}{arm.name} on {pair_key(pair)} (API key in ${API_KEY_ENV}): "
                 f"{' '.join(argv)}\n".encode())
        fh.write(launched_line().encode())  # where the start's phases begin (serve.start_phases)
        fh.flush()
        try:
            proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=die_with_parent())
        except OSError as exc:
            raise ServerError(f"cannot start the server for arm {arm.name} on {pair_key(pair)}: {argv[0]!r}: "
                              f"{exc.strerror or exc}; check server.command in the rig file") from None
        _LIVE[proc.pid] = (proc.pid, token)
        srv = RunningServer(base_url=f"http://{host}:{port}", api_key=api_key, model=config.model_name or "",
                            log_path=log, pid=proc.pid, simulated=config.simulated, arm=arm.name, pair=pair,
                            argv=argv, token=token, config=config, process=proc, idle=idle,
                            spawned_at=time.monotonic())
        if into is not None:
            into.append(srv)
    if swept:
        srv.notes.append(f"killed pids {swept}: a server left behind by a pytest that is gone")
    # right after the exec, before its interpreter has started a thread or a child: vLLM's engine core and
    # workers are its children and inherit the set (not preexec_fn: Python between fork and exec is unsafe
    # while this process has threads)
    pin_tree(srv, cpus)
    if not srv.model:
        srv.model = _served_name_from_argv(argv)
    return srv


def pin_tree(srv: RunningServer, cpus: Sequence[int]) -> None:
    """Pin every thread of every process of ``srv`` (its session and its marked processes) to ``cpus``
    (nothing where empty); ``srv.cpus`` says where it runs.

    Called at the spawn, and for a server started ahead at its continue: it was spawned unpinned, so that its
    imports ran beside the launch before it rather than on that launch's cores (its block is the same as
    theirs). A thread or process that ends meanwhile is skipped. One that cannot be pinned (a CPU the cgroup
    took away since the blocks were made) leaves the server as it was, with a note: the measurement is still
    sound, only its start-to-start spread may be wider."""
    if not cpus:
        return
    tids = threads_of(find_leftovers(srv.token, srv.pid))
    try:
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, set(cpus))
    except OSError as exc:
        srv.notes.append(f"not pinned to CPUs {cpu_list(cpus)} (server.cpus auto): {exc.strerror or exc}")
        return
    srv.cpus = tuple(sorted(set(cpus)))


def launch_cpus(config: ServerConfig, n: int) -> list[tuple[int, ...]]:
    """The CPUs of each of ``n`` servers launched together (``server.cpus``): blocks of whole cores of their own
    (:func:`.cores.server_blocks`, of the CPUs this process may use) under ``auto``; none (any CPU) under
    ``none``, or where the CPUs are too few to give each server and the load generator a core."""
    if config.cpus != "auto":
        return [() for _ in range(n)]
    blocks = server_blocks(n, os.sched_getaffinity(0))
    return [tuple(b) for b in blocks] if blocks else [() for _ in range(n)]


def prove_ready(srv: RunningServer, deadline: float, *, siblings: Sequence[RunningServer] = ()) -> None:
    """Wait until ``srv`` serves (``ready.wait_ready``) by ``deadline`` (monotonic); sets ``srv.ready_s``
    (seconds from its spawn). An out-of-memory failure names who else holds the pair's memory, not
    counting ``siblings`` (servers started with it on purpose: stopping them is not the advice)."""
    try:
        wait_ready(srv, deadline, srv.config.request_timeout_s)
    except ServerError as exc:
        holders = memory_holders(srv, siblings) if "out of GPU memory" in str(exc) else ""
        if not holders:
            raise
        raise ServerError(f"{exc}\nGPU memory held by other processes when it failed (NVML): {holders}; "
                          "stop them or move the campaign to a free pair") from None
    srv.ready_s = time.monotonic() - srv.spawned_at


@contextlib.contextmanager
def launch_all(config: ServerConfig, arms: Sequence[ServerArm], pair: Sequence[int],
               rig_env: Mapping[str, str] | None, log_paths: Sequence[str | os.PathLike[str]], *,
               host: str = "127.0.0.1", extra_env: Mapping[str, str] | None = None,
               startup_timeout_s: float | None = None,
               taken_ports: Sequence[int] = ()) -> Iterator[list[RunningServer]]:
    """Start one server per arm on ``pair`` at once, wait for all of them together, always tear all down.

    Why: a vLLM start takes minutes (115-130 s, 7B-shape TP=2 on H100) and a resident start launches every
    arm's server; one after the other, the campaign spends most of its time starting servers. The servers
    must not size their KV cache by profiling at the same time (``--kv-cache-memory-bytes``: the caller's
    business, see ``campaign.backends``).

    * The orphan sweep and the pair's idle GPU use are taken **once, before any server starts**, and given
      to all: a snapshot taken while a sibling loads would count part of the sibling as "idle" and the rest
      as ours. Teardown therefore stops every server first and then checks the GPUs once, for all of them.
    * A server that exits or times out while starting tears all of them down and raises its own
      :class:`ServerError` (naming its arm), as :func:`launch` would have; Ctrl-C likewise.
    * Teardown stops them all at once (:func:`teardown_all`), on success, failure and Ctrl-C.
    """
    if len(arms) != len(log_paths):
        raise ServerError(f"launch_all: {len(arms)} arms but {len(log_paths)} server logs")
    pair = tuple(int(g) for g in pair)
    servers: list[RunningServer] = []
    try:
        before = (sweep_orphans(), gpu_usage(pair))  # swept first: an orphan's memory is not idle
        _spawn_each(config, arms, pair, rig_env, log_paths, host, extra_env, before, taken_ports, servers,
                    launch_cpus(config, len(arms)))
        _ready_together(servers, startup_timeout_s or config.startup_timeout_s)
        yield servers
    finally:
        teardown_all(servers)


#: vLLM's API server gives its engine this long to come up (600 s by default) and counts a hold in it
ENGINE_READY_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
#: what every server gets instead, unless the rig sets it: our own startup timeout (counted from the continue for a
#: server started ahead) is the one that guards a start; a day is longer than any launch it could wait behind
HELD_ENGINE_READY_S = 86_400


def engine_ready_env(extra_env: Mapping[str, str] | None, *envs: Mapping[str, str] | None) -> dict[str, str]:
    """``extra_env`` with :data:`ENGINE_READY_ENV` at :data:`HELD_ENGINE_READY_S` unless it or one of ``envs``
    (the rig's, the server's, the arm's) sets it -- for **every** server, held or not.

    Why every server: vLLM counts the variable into its torch.compile cache key (``vllm.envs.compile_factors``
    ignores only some timeouts), so a server started ahead with it and one started at once without it compile
    into two caches. On a fresh 2x H200 (2026-11-27, sixth session) launch 1 compiled into
    ``torch_compile_cache/d17783a567`` and launch 2, started ahead, compiled again into ``f8f11bec0b`` (26 s, a
    90 s launch); launches 3-6 loaded the second."""
    if any(ENGINE_READY_ENV in e for e in (extra_env or {}, *(e or {} for e in envs))):
        return dict(extra_env or {})
    return {**(extra_env or {}), ENGINE_READY_ENV: str(HELD_ENGINE_READY_S)}


def spawn_ahead(config: ServerConfig, arms: Sequence[ServerArm], pair: Sequence[int],
                rig_env: Mapping[str, str] | None, log_paths: Sequence[str | os.PathLike[str]], *,
                host: str = "127.0.0.1", extra_env: Mapping[str, str] | None = None,
                taken_ports: Sequence[int] = ()) -> list[Held]:
    """Start one server per arm now, each held at its engine core's first line (:mod:`.hold`), for a launch to come.

    Other servers may start or run beside them: their ports are not offered again (``taken_ports``; these bind
    theirs only once continued, so the launch beside them is given theirs to avoid), and the pair's idle GPU use
    is taken when these are continued (:func:`continue_all`), after the servers before them are gone.
    The caller owns them: :func:`continue_all` makes them its launch, :func:`drop_ahead` stops them unused.

    vLLM's API server times its engine's start from its own spawn (``VLLM_ENGINE_READY_TIMEOUT_S``, 600 s),
    so a server held behind a launch of more than about 8 minutes timed out when continued and its launch
    was made again. Each gets :data:`HELD_ENGINE_READY_S` unless the rig's ``env`` or ``server.env`` (or the
    caller) sets the variable, as every server does (:func:`engine_ready_env`: one torch.compile cache for the
    servers started ahead and those started at once); the startup timeout, counted from the continue
    (:func:`continue_all`), still bounds its start.
    """
    if len(arms) != len(log_paths):
        raise ServerError(f"spawn_ahead: {len(arms)} arms but {len(log_paths)} server logs")
    pair = tuple(int(g) for g in pair)
    servers: list[RunningServer] = []
    try:
        _spawn_each(config, arms, pair, rig_env, log_paths, host, extra_env, (sweep_orphans(), None), taken_ports,
                    servers, [() for _ in arms])  # pinned at the continue (pin_tree)
    except BaseException:
        teardown_all(servers)
        raise
    held = [Held(srv, cpus=cpus) for srv, cpus in zip(servers, launch_cpus(config, len(servers)), strict=True)]
    for h in held:
        h.watch()
    return held


@contextlib.contextmanager
def continue_all(held: Sequence[Held], startup_timeout_s: float | None = None) -> Iterator[list[RunningServer]]:
    """The servers :func:`spawn_ahead` started, continued and proven ready together; always torn down at once.

    The idle GPU use their teardown is checked against is taken now, before they continue: the launch before
    theirs is gone, and they have not touched the GPUs. The startup timeout counts from here."""
    servers = [h.server for h in held]
    try:
        if servers:
            idle = gpu_usage(servers[0].pair)
            for srv in servers:
                srv.idle = idle
        for h in held:
            pin_tree(h.server, h.cpus)  # still stopped (or not yet at its GPU work): its threads stay put
            h.resume()
        if servers:
            _ready_together(servers, startup_timeout_s or servers[0].config.startup_timeout_s)
        yield servers
    finally:
        teardown_all(servers)


def drop_ahead(held: Sequence[Held]) -> None:
    """Stop servers started ahead that no launch will use (the campaign ended or failed first)."""
    for h in held:
        h.resume()  # a stopped server sees its SIGTERM only once continued (kill_tree continues it too)
    teardown_all([h.server for h in held])


def _spawn_each(config: ServerConfig, arms: Sequence[ServerArm], pair: tuple[int, ...],
                rig_env: Mapping[str, str] | None, log_paths: Sequence[str | os.PathLike[str]], host: str,
                extra_env: Mapping[str, str] | None, before: tuple[list[int], list[GpuUse] | None],
                taken_ports: Sequence[int], into: list[RunningServer], blocks: Sequence[Sequence[int]]) -> None:
    """One server per arm into ``into``, each on a port none of the others (nor ``taken_ports``) has; ``before``
    (the swept orphans and the pair's idle GPU use) is shared, its pids noted in the first server's log only.
    ``blocks``: each server's CPUs (:func:`launch_cpus`; empty: any)."""
    for arm, log, cpus in zip(arms, log_paths, blocks, strict=True):
        port = _distinct_port(host, {s.port for s in into} | set(taken_ports))
        spawn(config, arm, pair, rig_env, log, host=host, port=port, extra_env=extra_env, before=before, into=into,
              cpus=cpus)
        before = ([], before[1])


def _distinct_port(host: str, taken: set[int]) -> int:
    """A free port none of ``taken`` has: a sibling spawned a moment ago may not listen yet, so the kernel can
    offer its port again, and two servers on one port (vLLM binds with SO_REUSEPORT) would share requests."""
    for _ in range(PORT_TRIES):
        chosen = _port(host, None)
        if chosen not in taken:
            return chosen
    raise ServerError(f"no free port on {host} other than {sorted(taken)} after {PORT_TRIES} tries")


def _ready_together(servers: list[RunningServer], timeout_s: float) -> None:
    """Every server proven ready by one deadline, each in a thread of its own (readiness is mostly waiting).

    The first failure wins: every server is torn down at once, so the other threads' waits end at their
    servers' exit instead of the startup timeout, and the failure is raised after they are joined.
    """
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    deadline = time.monotonic() + timeout_s
    pool = ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="p2p-ready")
    try:
        futures = [pool.submit(prove_ready, s, deadline, siblings=[o for o in servers if o is not s])
                   for s in servers]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((e for f in futures if f.done() and (e := f.exception()) is not None), None)
    except BaseException:  # Ctrl-C while waiting: stop them all now, so that no thread waits out the timeout
        try:
            teardown_all(servers)
        finally:
            pool.shutdown(wait=True)
        raise
    if failed is None:
        pool.shutdown(wait=True)
        return
    try:
        teardown_all(servers)
    except (ServerError, WriteError) as exc:  # the start's failure stays the message; the teardown's is added
        if isinstance(failed, ServerError):
            failed = ServerError(f"{failed}\nand its teardown: {exc}")
    finally:
        pool.shutdown(wait=True)
    raise failed


def teardown_all(servers: list[RunningServer]) -> None:
    """Stop every server at once, then prove the pair's GPUs back at the idle level they shared.

    Why at once: a vLLM server takes 5-10 s to shut down, and eight servers of a launch of starts made at once
    stopped one after the other took 40 s between two launches (2x H200, 2026-11-26). Every server is stopped
    even when one's teardown fails; the first failure (in the order last started first) is raised at the end.
    All leave ``servers`` before their teardowns begin; a teardown interrupted by Ctrl-C still finishes in its
    thread (each is bounded by the server's ``teardown_timeout_s``), and the kill at interpreter exit is the
    net under it.
    """
    from concurrent.futures import ThreadPoolExecutor

    stopping = list(reversed(servers))
    servers.clear()
    if not stopping:
        return
    with ThreadPoolExecutor(max_workers=len(stopping), thread_name_prefix="p2p-teardown") as pool:
        futures = [pool.submit(teardown, srv, check_gpus=False) for srv in stopping]
    first: BaseException | None = next((e for f in futures if (e := f.exception()) is not None), None)
    if first is None:
        check_gpus_released(stopping[-1], label=f"the servers for arms {', '.join(s.arm for s in reversed(stopping))}")
        return
    raise first


def _served_name_from_argv(argv: Sequence[str]) -> str:
    for i, a in enumerate(argv[:-1]):
        if a == "--served-model-name":
            return argv[i + 1]
    return ""


def teardown(srv: RunningServer, *, check_gpus: bool = True) -> None:
    """Stop the server and prove nothing of it is left (processes, then GPU memory unless ``check_gpus`` is
    off: :func:`teardown_all` checks the memory once, after every server sharing the pair is stopped)."""
    cfg = srv.config
    left = kill_tree(srv.pid, srv.token, grace_s=cfg.teardown_timeout_s, proc=srv.process,
                     orphan_grace_s=min(ORPHAN_GRACE_S, cfg.teardown_timeout_s))
    _LIVE.pop(srv.pid, None)
    # the log note is a courtesy: a results disk that turned read-only (or full) must not stop the
    # leftover and GPU checks below, and is reported after them as one paragraph naming the log
    unwritten = _append_log(srv.log_path, f"# pytest-p2p: teardown of arm {srv.arm}: exit code "
                                          f"{srv.process.returncode}, leftover pids {left or 'none'}\n")
    if left:
        raise ServerError(f"teardown of the server for arm {srv.arm} on {pair_key(srv.pair)} left processes "
                          f"alive after SIGKILL: pids {', '.join(map(str, left))}; kill them before the next "
                          f"run (they may hold GPU memory); log {srv.log_path}")
    if check_gpus:
        check_gpus_released(srv)
    if unwritten is not None:
        raise unwritten


def _append_log(path: Path, text: str) -> WriteError | None:
    """Append ``text`` to a server log; the failure (read-only or full disk) is returned, never raised."""
    try:
        with open(path, "ab") as fh:
            fh.write(text.encode())
    except OSError as exc:
        return write_error(path, exc, "append the teardown note to the server log")
    return None


def check_gpus_released(srv: RunningServer, wait_s: float = 20.0, *, label: str | None = None) -> None:
    """NVML: no compute process on the pair and memory back near its idle level (within tolerance).

    ``label`` names what was torn down when several servers shared ``srv.idle`` (:func:`launch_all`)."""
    if srv.idle is None:
        srv.notes.append("NVML not available: GPU release check skipped"
                         + (" (stand-in on CPU)" if srv.simulated else ""))
        return
    tol = srv.config.idle_memory_tolerance_mib
    idle = {g.index: g for g in srv.idle}
    deadline = time.monotonic() + wait_s
    problems: list[str] = []
    while True:
        now = gpu_usage(srv.pair)
        if now is None:
            srv.notes.append("NVML became unavailable during teardown: GPU release check skipped")
            return
        problems = []
        for g in now:
            base = idle.get(g.index)
            new_pids = [p for p in g.pids if base is None or p not in base.pids]
            if new_pids:
                problems.append(f"gpu{g.index} still runs compute pids {new_pids}")
            if base is not None and g.used_mib > base.used_mib + tol:
                problems.append(f"gpu{g.index} uses {g.used_mib:.0f} MiB, idle was {base.used_mib:.0f} MiB "
                                f"(tolerance {tol} MiB)")
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if problems:
        what = label or f"the server for arm {srv.arm}"
        raise ServerError(f"teardown of {what} on {pair_key(srv.pair)} did not release the GPUs"
                          f": {'; '.join(problems)} (orphaned vLLM EngineCore/Worker? see vLLM "
                          f"issue #55510; find them with nvidia-smi and kill them); log {srv.log_path}")
