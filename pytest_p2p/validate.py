"""Declarative-enough validation helpers for the rig file and other user input.

Each helper takes the value, the ``source`` (file name) and the field ``path`` and
either returns a typed value or raises :class:`~pytest_p2p.errors.ConfigError` whose
message reads ``rig.yaml: expect.pcie.gen: expected an integer 1..6, got 'four'``.
Every stage parses its own section of the rig file with these, so the error style is
the same everywhere.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError
from .util import parse_size


def join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def show(value: Any) -> str:
    """A value as the user wrote it, short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mapping(value: Any, source: str, path: str, allowed: Iterable[str] | None = None) -> Mapping[str, Any]:
    """A mapping with string keys; with ``allowed``, unknown keys are errors that list the known ones."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(source, path, f"expected a mapping, got {show(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(source, path, f"keys must be strings, got {show(key)}")
    if allowed is not None:
        known = list(allowed)
        for key in value:
            if key not in known:
                hint = _closest(key, known)
                extra = f" (did you mean '{hint}'?)" if hint else ""
                raise ConfigError(source, join(path, key),
                                  f"unknown key{extra}; known keys: {', '.join(known)}")
    return value


def _closest(word: str, candidates: list[str]) -> str | None:
    import difflib

    got = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return got[0] if got else None


def integer(value: Any, source: str, path: str, lo: int | None = None, hi: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and (lo is None or value >= lo) and (hi is None or value <= hi):
        return int(value)
    rng = f" {lo}..{hi}" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
    raise ConfigError(source, path, f"expected an integer{rng}, got {show(value)}")


def number(value: Any, source: str, path: str, lo: float | None = None, hi: float | None = None) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok and (lo is None or value >= lo) and (hi is None or value <= hi):
        return float(value)
    rng = f" {lo}..{hi}" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
    raise ConfigError(source, path, f"expected a number{rng}, got {show(value)}")


def boolean(value: Any, source: str, path: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(source, path, f"expected true or false, got {show(value)}")


def string(value: Any, source: str, path: str, choices: Iterable[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, path, f"expected a non-empty string, got {show(value)}")
    if choices is not None:
        opts = list(choices)
        if value not in opts:
            raise ConfigError(source, path, f"expected one of {', '.join(opts)}, got {show(value)}")
    return value


def sequence(value: Any, source: str, path: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigError(source, path, f"expected a list, got {show(value)}")


def percent(value: Any, source: str, path: str) -> float:
    """``5%``, ``'5 %'`` or ``0.05`` -> 0.05 (a bare number above 1 is read as percent: ``8`` -> 0.08).

    A quoted number without ``%`` (``'0.05'``) reads like the bare number, not as 0.05 %.
    """
    number: float | None = None
    if isinstance(value, str):
        text = value.strip()
        with contextlib.suppress(ValueError):
            if text.endswith("%"):
                number = float(text[:-1].strip()) / 100.0
            else:
                number = float(text)
                number = number / 100.0 if abs(number) > 1 else number
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value) / 100.0 if abs(value) > 1 else float(value)
    if number is not None and math.isfinite(number):
        return number
    raise ConfigError(source, path, f"expected a percentage like '5%', got {show(value)}")


def size(value: Any, source: str, path: str) -> int:
    try:
        return parse_size(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(source, path, str(exc)) from None


def env_mapping(value: Any, source: str, path: str) -> dict[str, str]:
    """An environment block: string keys, scalar values turned into strings (YAML's 1 -> '1')."""
    out: dict[str, str] = {}
    for key, val in mapping(value, source, path).items():
        if isinstance(val, bool):
            out[key] = "1" if val else "0"
        elif isinstance(val, (str, int, float)):
            out[key] = str(val)
        else:
            raise ConfigError(source, join(path, key), f"expected a string or number, got {show(val)}")
    return out
