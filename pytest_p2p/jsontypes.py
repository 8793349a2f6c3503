"""JSON as it comes off disk, typed honestly: ``object`` narrowed where it is read.

Why: results directories, snapshots, stores and server answers are JSON written by other
versions of this tool, by p2p-bench, by ``vllm bench serve`` or by hand. Typing them as
unchecked dynamic values lets a wrong shape travel silently into a verdict; typing the values
``object`` makes every reader say what it expects. Known shapes get a ``TypedDict`` in
their own stage; these helpers are the narrowing every reader needs (stage-free: any
stage may import them).

The ``as_*`` helpers are tolerant: a value of the wrong shape reads as absent (``None``,
an empty dict or list), for readers whose input was already validated or that report
what is missing. Where a wrong shape is an error the user must fix, validate first
(:mod:`pytest_p2p.validate` names the file and the key).
"""

from __future__ import annotations

import math

#: a JSON value as ``json.loads`` returns it (str, int, float, bool, None, list, dict): narrow before use
JSONValue = object
#: a JSON object (its values still to be narrowed)
JSONObject = dict[str, object]


def as_dict(value: object) -> JSONObject:
    """``value`` if it is a JSON object (string keys), else an empty dict."""
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return value
    return {}


def as_list(value: object) -> list[object]:
    """``value`` if it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def as_dicts(value: object) -> list[JSONObject]:
    """The JSON objects in an array (other items left out)."""
    return [as_dict(v) for v in as_list(value) if isinstance(v, dict)]


def as_float(value: object) -> float | None:
    """A finite number (int or float, never a bool) as float, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def as_int(value: object) -> int | None:
    """An integer (a float with an integral value too, never a bool), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_floats(value: object) -> list[float]:
    """The finite numbers of a JSON array (other items left out)."""
    return [f for f in (as_float(v) for v in as_list(value)) if f is not None]


def dig(value: object, *keys: str) -> object:
    """``value[k1][k2]…`` through nested JSON objects; ``None`` where a level is missing or not an object."""
    cur: object = value
    for key in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur
