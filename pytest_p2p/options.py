"""Option resolution with a stated precedence, in the manner of pytest-timeout.

Every ``--p2p-*`` setting that also has an ini key and an environment variable is
resolved as: **command line > environment variable > ini file > default**. The
resolved value remembers where it came from, so an error can say
``PYTEST_P2P_RIG=/nope.yaml: no such file`` instead of just "no such file".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pytest

from .errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Resolved(Generic[T]):
    value: T
    origin: str  # "--p2p-rig", "PYTEST_P2P_RIG", "ini p2p_rig", "default"
    text: str | None = None  # what the user wrote, before conversion

    def where(self) -> str:
        shown = self.value if self.text is None else self.text
        return self.origin if self.origin == "default" else f"{self.origin}={shown}"


def resolve(
    config: pytest.Config,
    *,
    dest: str,
    flag: str,
    env: str | None,
    ini: str | None,
    default: T,
    convert: Callable[[str], T] | None = None,
) -> Resolved[T]:
    """Resolve one option; ``convert`` turns the text (from any origin) into the value and may raise ValueError."""
    candidates: list[tuple[str | None, str]] = []
    cli = config.getoption(dest, default=None)
    if cli is not None:
        if convert is None or not isinstance(cli, str):
            return Resolved(cli, flag)
        candidates.append((cli, flag))
    if env:
        candidates.append((os.environ.get(env) or None, env))
    if ini:
        try:
            raw = config.getini(ini)
        except (ValueError, KeyError):
            raw = None
        candidates.append((str(raw) if raw not in (None, "", []) else None, f"ini {ini}"))
    for raw_value, origin in candidates:
        if raw_value is None:
            continue
        if convert is None:
            return Resolved(raw_value, origin)  # type: ignore[arg-type]
        try:
            return Resolved(convert(raw_value), origin, raw_value)
        except ValueError as exc:
            raise ConfigError(origin, "", f"bad value {raw_value!r}: {exc}") from None
    return Resolved(default, "default")


def add_ini_and_option(
    group: pytest.OptionGroup,
    parser: pytest.Parser,
    flag: str,
    *,
    ini: str,
    env: str,
    help: str,
    metavar: str | None = None,
) -> None:
    """Register ``--p2p-x`` plus its ini key, naming the env variable and precedence in the help."""
    full = f"{help} (also ini '{ini}' and env {env}; precedence: command line > env > ini)"
    group.addoption(flag, action="store", default=None, metavar=metavar, help=full)
    parser.addini(ini, help=help, default=None)
