"""Allure labels and attachments that are silent no-ops without allure.

allure-pytest is optional (``pytest-p2p[allure]``). Every function here imports
``allure`` when called and does nothing if it is absent, so campaign and check code can
call them unconditionally. With allure-pytest installed but no ``--alluredir`` given,
allure itself drops the calls (no listener), which is also fine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pytest_p2p.results.layout import AGGREGATE, PROOF

LABEL_KEYS = ("rig", "pair", "arm", "concurrency", "point", "size")

# file suffix -> allure AttachmentType member name
_TYPES = {".png": "PNG", ".csv": "CSV", ".json": "JSON", ".md": "TEXT", ".txt": "TEXT", ".log": "TEXT",
          ".html": "HTML", ".svg": "SVG"}


class AllureDynamic(Protocol):
    """``allure.dynamic``: labels and presentation of the running test."""

    def label(self, label_type: str, *labels: str) -> object: ...
    def epic(self, *epics: str) -> object: ...
    def feature(self, *features: str) -> object: ...
    def story(self, *stories: str) -> object: ...
    def severity(self, severity_level: str) -> object: ...
    def title(self, test_title: str) -> object: ...
    def parameter(self, name: str, value: str) -> object: ...
    def description(self, test_description: str) -> object: ...


class AllureAttach(Protocol):
    """``allure.attach``: a body, or a file with ``.file``."""

    def __call__(self, body: str | bytes, name: str | None = ..., attachment_type: object = ...) -> object: ...
    def file(self, source: str, name: str | None = ..., attachment_type: object = ...) -> object: ...


class AllureAttachmentTypes(Protocol):
    """``allure.attachment_type`` (an enum); the members named in code, others read with ``getattr``."""

    @property
    def JSON(self) -> object: ...
    @property
    def PNG(self) -> object: ...


class AllureAPI(Protocol):
    """The part of the ``allure`` module the report stage calls."""

    @property
    def dynamic(self) -> AllureDynamic: ...
    @property
    def attach(self) -> AllureAttach: ...
    @property
    def attachment_type(self) -> AllureAttachmentTypes: ...


def _allure() -> AllureAPI | None:
    try:
        import allure
    except ImportError:
        return None
    return allure


def available() -> bool:
    """Whether the allure API can be called (it may still drop calls without ``--alluredir``)."""
    return _allure() is not None


def labels(**values: object) -> int:
    """Set allure labels (``rig``, ``pair``, ``arm``, ``concurrency``...) on the running test.

    ``None`` values are skipped. Returns how many labels were set (0 without allure), so
    callers and tests can tell a no-op from work done.
    """
    allure = _allure()
    if allure is None:
        return 0
    n = 0
    for name, value in values.items():
        if value is None:
            continue
        allure.dynamic.label(name, str(value))
        n += 1
    return n


def attach_file(path: str | Path, name: str | None = None) -> bool:
    """Attach a file (type from its suffix); missing files and missing allure are skipped."""
    allure = _allure()
    p = Path(path)
    if allure is None or not p.is_file():
        return False
    kind = getattr(allure.attachment_type, _TYPES.get(p.suffix.lower(), "TEXT"))
    allure.attach.file(str(p), name=name or p.name, attachment_type=kind)
    return True


def attach_json(obj: object, name: str) -> bool:
    """Attach a JSON-serialisable object (a transport proof, an uplift verdict)."""
    allure = _allure()
    if allure is None:
        return False
    allure.attach(json.dumps(obj, indent=2, default=str), name=name, attachment_type=allure.attachment_type.JSON)
    return True


def describe_judged(what: str, outcome: str, lines: Sequence[tuple[str, str]]) -> bool:
    """The running test's Allure description: the check's verdict and each judged number with its interval.

    Why: a probe threshold check (busbw, latency, uplift, copy) that passed showed no number
    in Allure, only a failed one did, through its message (issue 26). ``lines`` are
    ``(outcome, line)`` pairs, each line the judge's own words (estimate, CI at its level,
    trials, threshold), so the terminal, the failure message and Allure say the same.
    """
    allure = _allure()
    if allure is None:
        return False
    body = "\n".join(f"- {word.upper()}: {line}" for word, line in lines)
    allure.dynamic.description(f"{outcome.upper()}: {what}\n\n{body}")
    return True


def attach_scenario(run_dir: str | Path, arm: str, point: str) -> int:
    """Attach one scenario's transport proof, aggregate and telemetry CSVs; returns the count attached."""
    d = Path(run_dir) / "scenarios" / f"{arm}-{point}"
    if not d.is_dir():
        return 0
    files = [d / PROOF, d / AGGREGATE, *sorted(d.glob("telemetry_run*.csv"))]
    return sum(attach_file(f, f"{arm}-{point}/{f.name}") for f in files)


def attach_run_dir(run_dir: str | Path) -> int:
    """Attach a rendered run directory's summary files and plots; returns the count attached."""
    d = Path(run_dir)
    files = [d / "summary.md", d / "summary.json", d / "summary.csv", *sorted((d / "plots").glob("*.png"))]
    return sum(attach_file(f, f.name if f.parent == d else f"plots/{f.name}") for f in files)
