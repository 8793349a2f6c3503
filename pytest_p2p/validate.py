"""Declarative-enough validation helpers for the rig file and other user input.

Each helper takes the value, the ``source`` (file name) and the field ``path`` and
either returns a typed value or raises :class:`~pytest_p2p.errors.ConfigError` whose
message reads ``rig.yaml: expect.pcie.gen: expected an integer 1..6, got 'four'``.
The rig schema (:mod:`.schema`) binds them to each key's range, so the error style is
the same in every section.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .errors import ConfigError
from .util import parse_size

if TYPE_CHECKING:
    from yaml.nodes import MappingNode, Node

# Bounds on user-written structured input (rig files, anything loaded with yaml_document):
# far above any real rig file, far below what hangs or exhausts the machine.
MAX_TEXT_CHARS = 1 << 20  # 1 MiB of YAML
MAX_DEPTH = 32  # nesting levels
MAX_VALUES = 100_000  # scalars + containers, counting every alias expansion
MAX_INT_DIGITS = 30


def join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _repr_text(text: str) -> str:
    """``repr`` of a string, with every character beyond the Basic Multilingual Plane escaped: which of those
    ``repr`` prints depends on the Unicode version of the Python that runs (3.11 escapes U+31E29, 3.12
    prints it), and an error message must read the same on every machine."""
    return "".join(c if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in repr(text))


def show(value: object) -> str:
    """A value as the user wrote it, short — never rendering a huge value whole (no full ``repr``)."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        text = repr(value)
    elif isinstance(value, int):
        if value.bit_length() > 200:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        text = repr(value)
    elif isinstance(value, str):
        text = _repr_text(value[:80])
    elif isinstance(value, bytes):
        text = repr(value[:80])
    elif isinstance(value, Mapping):
        keys = [show(k) for k, _ in zip(value, range(3), strict=False)]
        return f"a mapping of {len(value)} key(s) ({', '.join(keys)}{', ...' if len(value) > 3 else ''})"
    elif isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    else:
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def mapping(value: object, source: str, path: str, allowed: Iterable[str] | None = None) -> Mapping[str, object]:
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


def integer(value: object, source: str, path: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and (lo is None or value >= lo) \
            and (hi is None or value <= hi):
        return int(value)
    rng = f" {lo}..{hi}" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
    raise ConfigError(source, path, f"expected an integer{rng}, got {show(value)}")


def int_in(value: object, source: str, path: str, lo: int, hi: int, *, what: str = "an integer") -> int:
    """A bounded integer: ``reps``, ``concurrency``, counts. ``1e8`` (a float or a YAML string) is refused, and
    so is any value outside ``lo..hi`` — a huge count would exhaust memory or hang instead of failing here."""
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
        return int(value)
    hint = ""
    if isinstance(value, float) or (isinstance(value, str) and _looks_numeric(value)):
        hint = " (write a plain integer)"
    raise ConfigError(source, path, f"expected {what} {lo}..{hi}, got {show(value)}{hint}")


def float_in(value: object, source: str, path: str, lo: float, hi: float, *, what: str = "a number") -> float:
    """A bounded, finite number: timeouts, durations, rates (``1e308`` s or NaN never reach arithmetic)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and value.bit_length() > 1000:
            pass  # float() would overflow; reported below
        elif math.isfinite(float(value)) and lo <= float(value) <= hi:
            return float(value)
    raise ConfigError(source, path, f"expected {what} {lo:g}..{hi:g}, got {show(value)}")


def _looks_numeric(text: str) -> bool:
    try:
        float(text[:100])
    except ValueError:
        return False
    return True


def number(value: object, source: str, path: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and (not isinstance(value, int) or value.bit_length() <= 1000) \
            and (lo is None or value >= lo) and (hi is None or value <= hi):  # past 1000 bits float() overflows
        return float(value)
    rng = f" {lo}..{hi}" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
    raise ConfigError(source, path, f"expected a number{rng}, got {show(value)}")


def boolean(value: object, source: str, path: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(source, path, f"expected true or false, got {show(value)}")


def string(value: object, source: str, path: str, choices: Iterable[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, path, f"expected a non-empty string, got {show(value)}")
    if choices is not None:
        opts = list(choices)
        if value not in opts:
            raise ConfigError(source, path, f"expected one of {', '.join(opts)}, got {show(value)}")
    return value


def sequence(value: object, source: str, path: str) -> list[object]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigError(source, path, f"expected a list, got {show(value)}")


def percent(value: object, source: str, path: str) -> float:
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


def size(value: object, source: str, path: str) -> int:
    try:
        return parse_size(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(source, path, str(exc)) from None


def env_mapping(value: object, source: str, path: str) -> dict[str, str]:
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


def yaml_document(text: str, source: str) -> object:
    """Parse YAML text safely and bounded: size, nesting depth and alias expansion (billion laughs).

    ``yaml.safe_load`` refuses arbitrary objects but happily builds a document whose aliases
    expand to 10^9 values; any later walk (validation, ``repr``, a digest) then hangs. Here the
    composed node graph is measured with every alias counted at its expanded size (memoised,
    so the measuring itself stays linear) before anything is constructed.
    """
    import yaml

    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(source, "", f"{len(text)} characters is too large (limit {MAX_TEXT_CHARS})")
    try:
        loader = yaml.SafeLoader(text)  # the reader already refuses unprintable characters here
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"not valid YAML: {_yaml_problem(exc)}") from None
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(source, "", f"nested too deeply (limit {MAX_DEPTH} levels)") from None
        if node is None:
            return None
        _measure_nodes(node, source)
        try:
            return loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # int("<5000 digits>") and friends, past PyYAML's own errors
            raise ConfigError(source, "", f"a value cannot be read: {str(exc)[:200]}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"not valid YAML: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["?"])[0]
    hint = "; indent with spaces, YAML does not allow tabs" if "'\\t'" in str(problem) else ""
    return f"{where}{str(problem)[:200]}{hint}"


def _measure_nodes(root: Node, source: str) -> None:
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise ConfigError(source, "", f"nested too deeply (limit {MAX_DEPTH} levels)")
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(source, "", "an alias refers to a value that contains it (a recursive structure)")
        total = 1
        if isinstance(node, yaml.ScalarNode):
            if node.tag.endswith(":int") and len(str(node.value)) > MAX_INT_DIGITS:
                raise ConfigError(source, "", f"line {node.start_mark.line + 1}: an integer of {len(node.value)} "
                                              f"digits (at most {MAX_INT_DIGITS})")
        else:
            active.add(key)
            if isinstance(node, yaml.MappingNode):
                _refuse_duplicate_keys(node, source)
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [part for pair in node.value for part in pair]
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_VALUES:
                    break
            active.discard(key)
        if total > MAX_VALUES:
            raise ConfigError(source, "", f"expands to more than {MAX_VALUES} values (YAML aliases nested in "
                                          f"aliases?); a rig file needs a few hundred")
        sizes[key] = total
        return total

    size(root, 0)


def _refuse_duplicate_keys(node: MappingNode, source: str) -> None:
    """A key written twice in one mapping is an error naming both lines.

    PyYAML keeps the last value silently: a rig file with two ``campaign:`` sections (one pasted
    in from another rig) would run with half of what its author reads in it.
    """
    import yaml

    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<' merges may repeat; complex keys are refused later (keys must be strings)
        ident = (key_node.tag, str(key_node.value))
        line = key_node.start_mark.line + 1
        if ident in seen:
            raise ConfigError(source, "", f"key {show(key_node.value)} appears twice in one mapping, at line "
                                          f"{seen[ident]} and at line {line}; YAML would silently keep only the "
                                          "second: delete or merge one of them")
        seen[ident] = line


def check_bounded(data: object, source: str) -> None:
    """The same bounds for already-parsed data (shared references count at their expanded size)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(obj: object, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise ConfigError(source, "", f"nested too deeply (limit {MAX_DEPTH} levels)")
        if isinstance(obj, int) and not isinstance(obj, bool) and obj.bit_length() > MAX_INT_DIGITS * 4:
            raise ConfigError(source, "", f"{show(obj)} (at most {MAX_INT_DIGITS} digits)")
        if not isinstance(obj, (Mapping, list, tuple)):
            return 1
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(source, "", "a value contains itself (a recursive structure)")
        active.add(key)
        total = 1
        items = [p for kv in obj.items() for p in kv] if isinstance(obj, Mapping) else list(obj)
        for child in items:
            total += size(child, depth + 1)
            if total > MAX_VALUES:
                raise ConfigError(source, "", f"expands to more than {MAX_VALUES} values")
        active.discard(key)
        sizes[key] = total
        return total

    size(data, 0)
