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
from typing import TYPE_CHECKING, Generic, TypeVar

from .errors import ConfigError
from .validate import boolean, float_in, int_in, integer, join, mapping, sequence, string

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")
#: a key's reader: (value as written, source file, field path) -> the typed value, or a ConfigError
Read = Callable[[object, str, str], T]


def key(default: T, read: Read[T], *, name: str | None = None, null: bool = False, accepts: str = "") -> T:
    """A dataclass field that is also a rig key read by ``read``; ``name`` when the key is spelled unlike the
    field, ``null=True`` when ``key: null`` keeps the default (else ``null`` goes to the reader); ``accepts``
    words the reference row of a reader that does not say it itself."""
    return field(default=default, metadata={"read": read, "name": name, "null": null, "accepts": accepts})


def key_factory(factory: Callable[[], T], read: Read[T], *, accepts: str = "") -> T:
    """:func:`key` for a mutable default (a mapping)."""
    return field(default_factory=factory, metadata={"read": read, "name": None, "null": False, "accepts": accepts})


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


def reference(cls: type[DataclassInstance], title: str) -> str:
    """The Markdown table of a section's keys: default and what each accepts, as the readers enforce it (the
    key reference in docs/rig-file.md is generated from this, so the documented ranges cannot drift)."""
    rows = [f"**`{title}`**", "", "| key | default | accepts |", "| --- | --- | --- |"]
    for name, f in rig_keys(cls).items():
        default = f.default_factory() if callable(f.default_factory) else f.default
        accepts = f.metadata["accepts"] or _accepts(f.metadata["read"])
        null = "; null: the default" if f.metadata["null"] else ""
        rows.append(f"| `{name}` | {_shown(default)} | {accepts}{null} |")
    return "\n".join(rows) + "\n"


def _shown(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if value is None or isinstance(value, bool) or value == "":
        return {None: "null", True: "true", False: "false", "": "none"}[value]
    if isinstance(value, (str, float)):
        return f"`{value}`" if isinstance(value, str) else f"{value:g}"
    return str(value) if isinstance(value, int) else "{}" if isinstance(value, Mapping) and not value else "(below)"


# ------------------------------------------------------------------------- readers bound to their ranges


class Reader(Generic[T]):
    """A reader that also says what it accepts, in the words of the generated key reference."""

    def __init__(self, read: Read[T], accepts: str) -> None:
        self.read, self.accepts = read, accepts

    def __call__(self, value: object, source: str, path: str) -> T:
        return self.read(value, source, path)


def _accepts(read: Read[T]) -> str:
    return read.accepts if isinstance(read, Reader) else "a value"


def whole(lo: int, hi: int, what: str = "an integer") -> Reader[int]:
    """A count in ``lo..hi`` (``1e8`` refused: "write a plain integer")."""
    return Reader(lambda v, s, p: int_in(v, s, p, lo, hi, what=what), f"{what} {lo} .. {hi}")


def bounded(lo: int, hi: int) -> Reader[int]:
    """An integer in ``lo..hi`` with the plain message (hardware numbers, baseline depths)."""
    return Reader(lambda v, s, p: integer(v, s, p, lo, hi), f"an integer {lo} .. {hi}")


def real(lo: float, hi: float, what: str = "a number") -> Reader[float]:
    """A finite number in ``lo..hi``."""
    return Reader(lambda v, s, p: float_in(v, s, p, lo, hi, what=what), f"{what} {lo:g} .. {hi:g}")


def word(*choices: str) -> Reader[str]:
    """A non-empty string, one of ``choices`` when given."""
    return Reader(lambda v, s, p: string(v, s, p, choices or None),
                  " \\| ".join(f"`{c}`" for c in choices) or "a non-empty string")


flag: Reader[bool] = Reader(boolean, "`true` \\| `false`")


def as_written(value: object, source: str, path: str) -> object:
    """The value as the rig file wrote it (parsed later, where its meaning is known)."""
    return value


def optional(read: Read[T]) -> Reader[T | None]:
    """``null`` is ``None`` (not the default); anything else goes to ``read``."""
    return Reader(lambda v, s, p: None if v is None else read(v, s, p), f"{_accepts(read)} or null")


def each(read: Read[T]) -> Reader[tuple[T, ...]]:
    """A list, every item read with its index in the path (``campaign.arms[1]``)."""
    return Reader(lambda v, s, p: tuple(read(x, s, join(p, i)) for i, x in enumerate(sequence(v, s, p))),
                  f"a list, each {_accepts(read)}")


def distinct(read: Read[tuple[T, ...]], one: str, many: str) -> Reader[tuple[T, ...]]:
    """``read``'s tuple when it has at least one item and none repeats; else the error naming the path."""

    def check(value: object, source: str, path: str) -> tuple[T, ...]:
        items = read(value, source, path)
        if not items:
            raise ConfigError(source, path, f"expected at least one {one}")
        if len(set(items)) != len(items):
            raise ConfigError(source, path, f"{many} repeat: {list(items)}")
        return items

    return Reader(check, f"{_accepts(read)}, at least one, no repeats")
