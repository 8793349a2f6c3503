"""Rig keys declared once: a section's dataclass field carries its key's reader, and one loader reads them all.

Why: each ``campaign:`` key used to be written three times (the dataclass field, a hand-written
validator, the list of known keys), and the three drifted. Here a field declared with :func:`key`
*is* the rig key: its default is the field's, its reader (a :mod:`.validate` helper bound to its
range) checks and converts the value, and :func:`load` derives the known keys, reads them in field
order and builds the dataclass. Errors stay :mod:`.validate`'s, naming file, field path and value.
Keys whose value spans several fields (``probe.thresholds``) are read by their section's parser
with the same helpers; cross-field rules stay there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, field, fields
from typing import TYPE_CHECKING, TypeVar

from .errors import ConfigError
from .validate import float_in, int_in, integer, join, mapping, sequence, string

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")
#: a key's reader: (value as written, source file, field path) -> the typed value, or a ConfigError
Read = Callable[[object, str, str], T]


def key(default: T, read: Read[T], *, name: str | None = None, null: bool = False) -> T:
    """A dataclass field that is also a rig key read by ``read``; ``name`` when the key is spelled unlike the
    field, ``null=True`` when ``key: null`` keeps the default (else ``null`` goes to the reader)."""
    return field(default=default, metadata={"read": read, "name": name, "null": null})


def key_factory(factory: Callable[[], T], read: Read[T], *, name: str | None = None) -> T:
    """:func:`key` for a mutable default (a mapping)."""
    return field(default_factory=factory, metadata={"read": read, "name": name, "null": False})


def rig_keys(cls: type[DataclassInstance]) -> dict[str, Field[object]]:
    """The rig keys a section dataclass declares, in field order: key name -> its field."""
    return {f.metadata.get("name") or f.name: f for f in fields(cls) if "read" in f.metadata}


def load(cls: type[D], value: object, source: str, path: str, /, *, only: Iterable[str] | None = None,
         also: Iterable[str] = (), **fixed: object) -> tuple[D, Mapping[str, object]]:
    """The section ``value`` read into ``cls`` (``None``: every default) and the mapping as written.

    Keys are read in field order, so the first bad one is the error; ``only`` narrows the keys allowed here
    (``pair.<a>-<b>`` takes two of the expectations), ``also`` names keys the caller reads itself from the
    returned mapping, ``fixed`` sets fields that are not keys (the source file, a NIC's name).
    """
    declared = rig_keys(cls)
    if only is not None:
        declared = {name: f for name, f in declared.items() if name in only}
    body = mapping(value, source, path, allowed=(*declared, *also))
    kw: dict[str, object] = dict(fixed)
    for name, f in declared.items():
        if name in body and not (f.metadata["null"] and body[name] is None):
            read: Read[object] = f.metadata["read"]
            kw[f.name] = read(body[name], source, join(path, name))
    return cls(**kw), body


# ------------------------------------------------------------------------- readers bound to their ranges


def whole(lo: int, hi: int, what: str = "an integer") -> Read[int]:
    """A count in ``lo..hi`` (``1e8`` refused: "write a plain integer")."""
    return lambda v, s, p: int_in(v, s, p, lo, hi, what=what)


def bounded(lo: int, hi: int) -> Read[int]:
    """An integer in ``lo..hi`` with the plain message (hardware numbers, baseline depths)."""
    return lambda v, s, p: integer(v, s, p, lo, hi)


def real(lo: float, hi: float, what: str = "a number") -> Read[float]:
    """A finite number in ``lo..hi``."""
    return lambda v, s, p: float_in(v, s, p, lo, hi, what=what)


def word(*choices: str) -> Read[str]:
    """A non-empty string, one of ``choices`` when given."""
    return lambda v, s, p: string(v, s, p, choices or None)


def as_written(value: object, source: str, path: str) -> object:
    """The value as the rig file wrote it (parsed later, where its meaning is known)."""
    return value


def optional(read: Read[T]) -> Read[T | None]:
    """``null`` is ``None`` (not the default); anything else goes to ``read``."""
    return lambda v, s, p: None if v is None else read(v, s, p)


def each(read: Read[T]) -> Read[tuple[T, ...]]:
    """A list, every item read with its index in the path (``campaign.arms[1]``)."""
    return lambda v, s, p: tuple(read(x, s, join(p, i)) for i, x in enumerate(sequence(v, s, p)))


def distinct(read: Read[tuple[T, ...]], one: str, many: str) -> Read[tuple[T, ...]]:
    """``read``'s tuple when it has at least one item and none repeats; else the error naming the path."""

    def check(value: object, source: str, path: str) -> tuple[T, ...]:
        items = read(value, source, path)
        if not items:
            raise ConfigError(source, path, f"expected at least one {one}")
        if len(set(items)) != len(items):
            raise ConfigError(source, path, f"{many} repeat: {list(items)}")
        return items

    return check
