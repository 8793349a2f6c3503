"""Strict narrowing of probe results read back from JSON: a wrong shape raises, it is never skipped.

:mod:`pytest_p2p.jsontypes` reads a wrong shape as absent, for readers that tolerate it.
A probe result (the worker's raw output, a recording replayed) is read whole or refused:
these helpers raise ``TypeError`` (or ``ValueError``, from the conversion itself), as the
subscripts and ``int()``/``float()`` calls on untyped values did before, and the readers
turn either into a :class:`~pytest_p2p.errors.ProbeError` naming the file.
"""

from __future__ import annotations

from ..jsontypes import JSONObject


def need_dict(value: object, what: str) -> JSONObject:
    """``value`` if it is a JSON object, else ``TypeError`` naming ``what``."""
    if isinstance(value, dict):
        return value
    raise TypeError(f"{what} is not a JSON object (a {type(value).__name__})")


def need_list(value: object, what: str) -> list[object]:
    """``value`` if it is a JSON array, else ``TypeError`` naming ``what``."""
    if isinstance(value, list):
        return value
    raise TypeError(f"{what} is not a JSON array (a {type(value).__name__})")


def to_int(value: object) -> int:
    """``int(value)`` for what JSON holds (a number, a bool or a numeric string); ``TypeError`` for the rest."""
    if isinstance(value, (str, int, float)):
        return int(value)
    raise TypeError(f"int() argument must be a string or a real number, not '{type(value).__name__}'")


def to_float(value: object) -> float:
    """``float(value)`` for what JSON holds (a number, a bool or a numeric string); ``TypeError`` for the rest."""
    if isinstance(value, (str, int, float)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")
