"""Small shared helpers: atomic files, sizes, bus ids.

Atomic writes matter because a campaign can be interrupted at any rep (Ctrl-C, a
dying server, a CI timeout) and nothing already measured may be lost or half-written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from fractions import Fraction
from pathlib import Path

from .errors import WriteError

_WRITE_HINTS = {
    errno.ENOSPC: "the file system is full: free space (or point --p2p-results elsewhere) and re-run",
    errno.EDQUOT: "the disk quota is exhausted: free space (or point --p2p-results elsewhere) and re-run",
    errno.EROFS: "the file system is read-only: point --p2p-results at a writable directory",
    errno.EACCES: "no permission to write there: point --p2p-results at a directory you own",
    errno.EPERM: "the file is immutable or not ours: point --p2p-results at a directory you own",
}


def write_error(path: str | os.PathLike[str], exc: OSError, what: str = "write") -> WriteError:
    """One paragraph naming the file, the system's reason and what to do (``errno`` kept)."""
    if isinstance(exc, WriteError):
        return exc
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = _WRITE_HINTS.get(exc.errno or 0, "check the path and the file system")
    return WriteError(str(path), exc.errno,
                      f"cannot {what} {path}: {reason}; {hint}. Files already written are intact "
                      "(every write is atomic: the old file or the whole new one).")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    A failure (disk full, read-only, permission) is a :class:`~pytest_p2p.errors.WriteError`
    naming ``path``; the temporary file is removed and the previous ``path`` left as it was.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise write_error(target, exc) from None
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results and snapshots are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_error(target, exc) from None
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: object, *, compact: bool = False) -> Path:
    """``obj`` as JSON, indented for a reader's eye, or on one line where ``compact``: a campaign window's rep file
    (every request's inter-token latencies, ~70 000 numbers at c64) took 0.15 s to indent and 0.04 s not to, in
    the pause between two windows (Python's C encoder runs only without ``indent``)."""
    text = json.dumps(obj, default=str) if compact else json.dumps(obj, indent=2, sort_keys=False, default=str)
    return atomic_write_text(path, text + "\n")


MAX_SIZE_DIGITS = 18  # 10^18 bytes is an exabyte: past any GPU buffer, well inside int64
MAX_SIZE_CHARS = 64  # a size string longer than this is not a size (checked before any parsing)
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?|)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1000, "KIB": 1024, "M": 1024**2, "MB": 1000**2,
               "MIB": 1024**2, "G": 1024**3, "GB": 1000**3, "GIB": 1024**3, "T": 1024**4,
               "TB": 1000**4, "TIB": 1024**4}


def parse_size(text: object) -> int:
    """Parse ``8KiB``, ``256M``, ``4`` or ``1GB`` into bytes (K/M/G without B are binary, like nccl-tests).

    Every other value (a negative int, a list, a fraction of a byte) is a :class:`ValueError` naming it.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a size like '8KiB', got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"expected a non-negative size, got {text}")
        return text
    raw = str(text)
    if len(raw) > MAX_SIZE_CHARS:  # 309 digits made float() infinity and int(inf) an OverflowError
        raise ValueError(f"a size of {len(raw)} characters is far beyond any buffer (at most {MAX_SIZE_CHARS} "
                         f"characters), starting {raw[:20]!r}")
    m = _SIZE_RE.match(raw)
    if not m or m.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"expected a size like '8KiB' or '256MiB', got {text!r}")
    digits = m.group(1)
    if len(digits.split(".")[0].lstrip("0")) > MAX_SIZE_DIGITS:
        raise ValueError(f"size {text!r} is far beyond any buffer (at most {MAX_SIZE_DIGITS} digits before the "
                         "point)")
    value = Fraction(digits) * _SIZE_UNITS[m.group(2).upper()]  # exact: no float rounding, no infinity
    if value.denominator != 1:
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    """``8192`` -> ``8KiB``; exact binary units only, else bytes."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


_BUS_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def normalize_bus_id(bus_id: str) -> str:
    """Canonical PCI bus id ``0000:0A:00.0`` from NVML's ``00000000:0A:00.0``, torch's lower case, or ``0A:00.0``."""
    m = _BUS_RE.match(bus_id.strip())
    if not m:
        raise ValueError(f"not a PCI bus id: {bus_id!r} (expected e.g. '0000:0A:00.0')")
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04X}:{int(m.group(2), 16):02X}:{int(m.group(3), 16):02X}.{m.group(4)}"


def is_bus_id(text: str) -> bool:
    return bool(_BUS_RE.match(text.strip()))
