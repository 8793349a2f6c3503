"""The one table of pytest-p2p's settings, and their resolution with a stated precedence.

Every ``--p2p-*`` option is one :class:`Option` row in :data:`TABLE`: its flag, its
``dest``, its ini key, its environment variable, its converter, its default and its help.
:func:`declare` registers the whole table (``plugin/__init__.py`` calls it from its one
``pytest_addoption``); :func:`resolve` reads one row. Nothing else spells a flag, an ini
key or an env variable, so they cannot drift apart (issue 15).

Precedence, in the manner of pytest-timeout: **command line > environment variable >
ini file > default**. The resolved value remembers where it came from, so an error can
say ``PYTEST_P2P_RIG=/nope.yaml: no such file`` instead of just "no such file".

This module is imported in every pytest process where the package is installed (the
options are always declared, even when the plugin stays inert), so it imports nothing
of the package at module level and nothing heavy at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import pytest

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

GROUP = "p2p"
GROUP_TITLE = ("GPU interconnect checks (pytest-p2p; the built-in checks: pytest -m p2p, "
               "or pytest --pyargs pytest_p2p from a project with p2p tests of its own)")
ENV_PREFIX = "PYTEST_P2P_"
INI_PREFIX = "p2p_"


@dataclass(frozen=True)
class Resolved(Generic[T]):
    value: T
    origin: str  # "--p2p-rig", "PYTEST_P2P_RIG", "ini p2p_rig", "default"
    text: str | None = None  # what the user wrote, before conversion

    def where(self) -> str:
        shown = self.value if self.text is None else self.text
        return self.origin if self.origin == "default" else f"{self.origin}={shown}"


@dataclass(frozen=True)
class Option(Generic[T_co]):
    """One setting: how it is spelled on each origin, how its text becomes a value, its default.

    ``flag`` is None for a setting that only an ini key / env variable carries (``p2p_enable``).
    ``path`` marks a filesystem path: :func:`path_of` makes a relative one absolute
    against the rootdir when it came from the ini file, else against where pytest ran.
    ``shown_default`` is the default as docs/index.md states it (``None``: the value itself).
    """

    dest: str
    flag: str | None
    help: str
    default: T_co
    ini: str | None = None
    env: str | None = None
    convert: Callable[[str], T_co] | None = None
    metavar: str | None = None
    action: str = "store"
    nargs: str | None = None
    const: str | None = None
    path: bool = False
    ini_type: str | None = None  # pytest's addini type ("bool" for p2p_enable); None: a string
    shown_default: str | None = None

    @property
    def origins(self) -> tuple[str, ...]:
        """Every spelling a user may write, for docs and error messages."""
        return tuple(x for x in (self.flag, self.env, self.ini and f"ini {self.ini}") if x)


# -- converters (text from any origin -> value; ValueError says what was expected) ---------------------
def one_of(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text

    return convert


#: the most timed repetitions a campaign takes (``campaign.reps`` in the rig file has the same bound)
MAX_REPS = 1000


def reps_count(text: str | int) -> int:
    """``--p2p-reps``: bounded here, where its origin is known, so the error names the flag, the
    ``PYTEST_P2P_REPS`` variable or the ini key that gave it (not always ``--p2p-reps``)."""
    n = int(text)
    if n < 1:
        raise ValueError("expected an integer >= 1")
    if n > MAX_REPS:
        raise ValueError(f"expected an integer 1..{MAX_REPS}, got {n}")
    return n


def arm_list(text: str) -> list[str]:
    arms = [a.strip() for a in str(text).split(",") if a.strip()]
    if len(arms) < 2:
        raise ValueError("expected at least two comma-separated arms, e.g. p2p_on,p2p_off")
    return arms


def truthy(text: str) -> bool:
    low = str(text).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


CAMPAIGN_MODES = ("auto", "probe", "model", "off")
FAIL_ON_CHOICES = ("regression", "never")

# -- the table ------------------------------------------------------------------------------------------
RIG: Option[str | None] = Option(
    "p2p_rig", "--p2p-rig", "rig file (YAML) naming the GPUs, pairs and expectations; default: auto-detect",
    None, ini="p2p_rig", env="PYTEST_P2P_RIG", metavar="PATH", path=True,
    shown_default="auto-detect (demo rig without GPU)")
SNAPSHOT: Option[str | None] = Option(
    "p2p_snapshot", "--p2p-snapshot",
    "replay evidence recorded by 'python -m pytest_p2p snapshot' instead of reading NVML live",
    None, ini="p2p_snapshot", env="PYTEST_P2P_SNAPSHOT", metavar="PATH", path=True, shown_default="live NVML")
RESULTS: Option[str] = Option(
    "p2p_results", "--p2p-results", "results directory root (default: ./p2p-results)",
    "p2p-results", ini="p2p_results", env="PYTEST_P2P_RESULTS", metavar="DIR", path=True,
    shown_default="`./p2p-results`")
LIVE: Option[bool] = Option(
    "p2p_live", "--p2p-live",
    "demand live NVML: fail instead of falling back to the embedded demo rig when no GPU answers",
    False, action="store_true")
PROBE_REPLAY: Option[str | None] = Option(
    "p2p_probe_replay", "--p2p-probe-replay",
    "replay recorded probe results (JSON + NCCL logs written by a real run) instead of running the all-reduce "
    "and copy probes", None, ini="p2p_probe_replay", env="PYTEST_P2P_PROBE_REPLAY", metavar="DIR", path=True,
    shown_default="live probes (demo: shipped recording)")
CAMPAIGN: Option[str | None] = Option(
    "p2p_campaign", "--p2p-campaign",
    "campaign kind: auto (the rig's; model if it has a server), probe (NCCL all-reduce only, quick), "
    "model (a server per arm and rep) or off", None, ini="p2p_campaign", env="PYTEST_P2P_CAMPAIGN",
    convert=one_of(*CAMPAIGN_MODES), metavar="auto|probe|model|off", shown_default="from the rig")
REPS: Option[int | None] = Option(
    "p2p_reps", "--p2p-reps", "timed repetitions per arm and point (overrides campaign.reps)",
    None, ini="p2p_reps", env="PYTEST_P2P_REPS", convert=reps_count, metavar="N", shown_default="from the rig")
ARMS: Option[list[str] | None] = Option(
    "p2p_arms", "--p2p-arms", "comma-separated arms to compare, first over second (overrides campaign.arms)",
    None, ini="p2p_arms", env="PYTEST_P2P_ARMS", convert=arm_list, metavar="A,B", shown_default="from the rig")
COMPARE: Option[str | None] = Option(
    "p2p_compare", "--p2p-compare",
    "compare campaign results with the named baseline (default 'accepted'); write it as --p2p-compare=NAME",
    None, metavar="NAME", nargs="?", const="accepted", shown_default="off (`NAME` defaults to `accepted`)")
SAVE_BASELINE: Option[str | None] = Option(
    "p2p_save_baseline", "--p2p-save-baseline",
    "store this session's campaign runs and accept them under NAME (default 'accepted')",
    None, metavar="NAME", nargs="?", const="accepted", shown_default="off (`NAME` defaults to `accepted`)")
FAIL_ON: Option[str] = Option(
    "p2p_fail_on", "--p2p-fail-on", "fail tests on a regression verdict (default) or only report it",
    "regression", ini="p2p_fail_on", env="PYTEST_P2P_FAIL_ON", metavar="regression|never")
DB: Option[str | None] = Option(  # not path=True: a postgresql:// URL must reach the store untouched
    "p2p_db", "--p2p-db",
    "baseline/history store: an SQLite file (default .p2p/history.db under the rootdir, or the rig's "
    "baseline.db) or a postgresql:// URL shared by a fleet of runners (docs/fleet.md; shown redacted)",
    None, ini="p2p_db", env="PYTEST_P2P_DB", metavar="PATH|URL", shown_default="see [baselines.md](baselines.md)")
STRICT: Option[bool] = Option(
    "p2p_strict", "--p2p-strict", "inconclusive verdicts (uplift, baseline) fail instead of skipping, for CI "
    "that must decide", False, ini="p2p_strict", env="PYTEST_P2P_STRICT", convert=truthy, ini_type="bool",
    action="store_true")
RAY_ADDRESS: Option[str | None] = Option(
    "p2p_ray_address", "--p2p-ray-address",
    "the Ray cluster a rig with nodes: runs on (auto, HOST:6379, ray://HOST:10001); else RAY_ADDRESS; Ray is "
    "imported only for such a rig (docs/multinode.md)", None, ini="p2p_ray_address", env="PYTEST_P2P_RAY_ADDRESS",
    metavar="ADDRESS", shown_default="`RAY_ADDRESS`, else none")
ENABLE: Option[bool] = Option(
    "p2p_enable", None, "activate pytest-p2p for every run of this project (otherwise only a p2p run: "
    "-m p2p, a --p2p-* option, a PYTEST_P2P_* variable or p2p_* ini key, --pyargs pytest_p2p)",
    False, ini="p2p_enable", env="PYTEST_P2P_ENABLE", convert=truthy, ini_type="bool")

#: Every setting, in the order ``pytest --help`` lists them.
TABLE: tuple[Option[object], ...] = (
    RIG, SNAPSHOT, RESULTS, LIVE, PROBE_REPLAY, CAMPAIGN, REPS, ARMS, COMPARE, SAVE_BASELINE, FAIL_ON, DB, STRICT,
    RAY_ADDRESS, ENABLE,
)


def _shown_default(opt: Option[object]) -> str:
    if opt.shown_default is not None:
        return opt.shown_default
    if opt.default is None or opt.default is False:
        return "off"
    return f"`{opt.default}`"


def markdown_table(table: Sequence[Option[object]] = TABLE) -> str:
    """The options section's table of docs/index.md, generated from the table (a test keeps them equal)."""
    lines = ["| option | ini | env | default | what it does |", "| --- | --- | --- | --- | --- |"]
    for opt in table:
        if opt.flag is None:
            flag = ""
        elif opt.nargs == "?":
            flag = f"`{opt.flag}[={opt.metavar}]`"
        elif opt.action == "store":
            flag = f"`{opt.flag} {opt.metavar or 'VALUE'}`"
        else:
            flag = f"`{opt.flag}`"
        cells = [flag, f"`{opt.ini}`" if opt.ini else "", f"`{opt.env}`" if opt.env else "", _shown_default(opt),
                 opt.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _help(opt: Option[object]) -> str:
    also = [x for x in (opt.ini and f"ini '{opt.ini}'", opt.env and f"env {opt.env}") if x]
    if not also:
        return opt.help
    return f"{opt.help} (also {' and '.join(also)}; precedence: command line > env > ini)"


def declare(parser: pytest.Parser, table: Sequence[Option[object]] = TABLE) -> None:
    """Register every row: its flag in the ``p2p`` group and its ini key (cheap; imports nothing)."""
    group = parser.getgroup(GROUP, GROUP_TITLE)
    for opt in table:
        if opt.flag is not None:
            kwargs: dict[str, object] = {"action": opt.action, "dest": opt.dest, "help": _help(opt)}
            # absent on the command line reads as None, so resolve() falls through to env / ini / default
            kwargs["default"] = None
            if opt.action == "store":
                kwargs["metavar"] = opt.metavar
                if opt.nargs is not None:
                    kwargs["nargs"] = opt.nargs
                    kwargs["const"] = opt.const
            group.addoption(opt.flag, **kwargs)
        if opt.ini is not None:
            if opt.ini_type is None:
                parser.addini(opt.ini, help=opt.help, default=None)
            else:
                parser.addini(opt.ini, help=opt.help, type=opt.ini_type, default=None)  # type: ignore[arg-type]


def _ini_text(config: pytest.Config, ini: str) -> str | None:
    try:
        raw = config.getini(ini)
    except (ValueError, KeyError):
        return None
    if raw in (None, "", [], False):  # a bool ini key reads False when unset: the same as not given
        return None
    if raw is True:
        return "true"
    return str(raw)


def resolve(config: pytest.Config, opt: Option[T]) -> Resolved[T]:
    """Resolve one row: command line > env > ini > default; the converter sees the text from any origin."""
    candidates: list[tuple[str | None, str]] = []
    cli = config.getoption(opt.dest, default=None)
    if cli is not None:
        if opt.convert is None or not isinstance(cli, str):
            return Resolved(cli, opt.flag or opt.dest)
        candidates.append((cli, opt.flag or opt.dest))
    if opt.env:
        candidates.append((os.environ.get(opt.env) or None, opt.env))
    if opt.ini:
        candidates.append((_ini_text(config, opt.ini), f"ini {opt.ini}"))
    for raw_value, origin in candidates:
        if raw_value is None:
            continue
        if opt.convert is None:
            return Resolved(raw_value, origin)  # type: ignore[arg-type]
        try:
            return Resolved(opt.convert(raw_value), origin, raw_value)
        except ValueError as exc:
            from .errors import ConfigError  # lazy: an inert plugin imports no more than it must

            raise ConfigError(origin, "", f"bad value {raw_value!r}: {exc}") from None
    return Resolved(opt.default, "default")


def given(config: pytest.Config, opt: Option[object]) -> bool:
    """Whether the user set this row anywhere (command line, env or ini), whatever its value."""
    if opt.flag is not None and config.getoption(opt.dest, default=None) is not None:
        return True
    if opt.env and os.environ.get(opt.env):
        return True
    return bool(opt.ini) and _ini_text(config, opt.ini or "") is not None


def path_of(config: pytest.Config, resolved: Resolved[str]) -> Path:
    """A path setting made absolute: from the ini file against the rootdir, else against where pytest ran."""
    path = Path(resolved.value).expanduser()
    if path.is_absolute():
        return path
    base = config.rootpath if resolved.origin.startswith("ini") else Path(config.invocation_params.dir)
    return base / path


# -- paths checked before any GPU work -------------------------------------------------------------------
def _mount_of(path: Path) -> tuple[str, str]:
    """(mount point, file-system type) holding ``path``, from /proc/self/mounts; ("", "") where unknown."""
    best = ("", "")
    try:
        text = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return best
    target = str(path)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, fields[2])
    return best


def unwritable(directory: Path) -> str | None:
    """Why ``directory`` cannot be made or written (nothing is created), or None when it can.

    Why try it rather than read permission bits: root passes every permission check, yet
    ``/proc`` refuses new entries and a read-only mount refuses them all; only creating
    something tells. The diagnosis names the cause the operating system gave: a missing
    parent that cannot be made, permission, a read-only file system, a file in the way.
    """
    import contextlib
    import errno
    import tempfile

    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    try:  # a directory made and removed again where the first missing one would go: nothing left behind
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".p2p-write-check-"))
    except OSError as exc:
        mount, fstype = _mount_of(existing)
        on = f" ({fstype} file system mounted at {mount})" if mount else ""
        read_only = False
        with contextlib.suppress(OSError):
            read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        if exc.errno == errno.EROFS or read_only:
            return f"{existing} is on a read-only file system{on}"
        if exc.errno in (errno.EACCES, errno.EPERM) and os.getuid() == 0:
            return f"{existing} refuses new entries even to root{on}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            st = existing.stat()
            return (f"permission denied: {existing} belongs to uid {st.st_uid} with mode {st.st_mode & 0o7777:o}, "
                    f"and this process runs as uid {os.getuid()}")
        if exc.errno == errno.ENOENT:
            what = "entries" if directory == existing else directory.relative_to(existing)
            return f"{existing} does not allow creating {what} in it{on}"
        if exc.errno == errno.ENOSPC:
            return f"no space left on the device holding {existing}{on}"
        return f"{directory} cannot be written: {exc.strerror or exc}{on}"
    return None
