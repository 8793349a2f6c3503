"""Judging a transport proof against an arm's expectation (``P2P``, ``SHM``, ``NET/IB``, ``P2P+NET/IB``).

Three outcomes, because a log can fail to say: ``pass`` (every connection the log shows
matches a part, every part was used, and the log is complete), ``fail`` (a line says
otherwise: a connection of another transport, or an expected part absent from a complete
log) and ``inconclusive`` (no INFO lines, no connection lines, a format not recognised, or
a log not shown complete — an excerpt proves what it shows, never what it leaves out).

Parts match labels segment by segment, case-insensitively, and the plugin segment of a
NET/COLLNET label matches by *family*: ``NET/IB`` covers ``NET/IBext`` and ``NET/IBext_v8``
(the SHARP / HPC-X plugin drives the same InfiniBand), ``NET/IBext`` covers ``IBext_v8``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
_VERSIONED = re.compile(r"_v\d{1,4}$")
_HINT_PREFIXES = ("NCCL_P2P", "NCCL_SHM", "NCCL_NET", "NCCL_IB", "NCCL_CUMEM", "NCCL_COLLNET")


class ShownConnection(Protocol):
    """What a judgement cites of a ``transport_model.Connection``: its line and its label."""

    @property
    def line(self) -> int: ...

    @property
    def label(self) -> str: ...


class JudgedProof(Protocol):
    """What :func:`check_expectation` reads of a ``transport_model.TransportProof``, and nothing else.

    Why a Protocol: ``TransportProof.check`` calls this module, so naming the class here made the
    model and its judgement an import cycle (issue 25); the proof matches these members as it is.
    """

    @property
    def source(self) -> str: ...

    @property
    def has_info(self) -> bool: ...

    @property
    def problem(self) -> str | None: ...

    @property
    def complete(self) -> bool: ...

    @property
    def completeness(self) -> str: ...

    @property
    def collnet_state(self) -> str | None: ...

    @property
    def env_overrides(self) -> Mapping[str, str]: ...

    @property
    def transport(self) -> str: ...

    @property
    def effective_labels(self) -> Mapping[str, int]: ...

    @property
    def effective_connections(self) -> Sequence[ShownConnection]: ...


@dataclass(frozen=True)
class ExpectResult:
    """An expectation judged: ``outcome`` is ``pass``, ``fail`` or ``inconclusive``; ``why`` cites lines."""

    outcome: str
    why: str

    @property
    def ok(self) -> bool:
        return self.outcome == PASS


def plugin_family(name: str) -> set[str]:
    """The names a network plugin answers to: ``IBext_v8`` -> {ibext_v8, ibext, ib}."""
    low = name.lower()
    base = _VERSIONED.sub("", low)
    names = {low, base}
    if base.startswith("ib"):
        names.add("ib")
    return names


def label_matches(label: str, expect: str) -> bool:
    """Does a connection label (``NET/IBext_v8/GDRDMA``) match one expectation part (``NET/IB``)?"""
    have = [s.lower() for s in label.split("/")]
    want = [s.lower() for s in expect.strip().strip("/").split("/")]
    if len(want) > len(have):
        return False
    for i, (h, w) in enumerate(zip(have, want, strict=False)):
        if h == w:
            continue
        if i == 1 and have[0] in ("net", "collnet") and w in plugin_family(label.split("/")[1]):
            continue
        return False
    return True


def _hint(proof: JudgedProof) -> str:
    hints = [f"{k}={v}" for k, v in proof.env_overrides.items() if k.startswith(_HINT_PREFIXES)]
    return f"; NCCL echoed {', '.join(hints)}" if hints else ""


def _shown(conns: Sequence[ShownConnection], total: int) -> str:
    shown = "; ".join(f"line {c.line}: {c.label}" for c in conns[:3])
    return shown + (f" (and {total - 3} more)" if total > 3 else "")


def check_expectation(proof: JudgedProof, expect: str) -> ExpectResult:
    """Judge ``proof`` against ``expect``; see the module docstring for the three outcomes."""
    src = proof.source
    parts = [p.strip() for p in expect.split("+") if p.strip()]
    if not parts:
        return ExpectResult(FAIL, f"{src}: empty transport expectation {expect!r}")
    if not proof.has_info:
        return ExpectResult(INCONCLUSIVE, f"{src}: cannot prove {expect}: {proof.problem or 'no NCCL INFO lines'}")
    labels = proof.effective_labels  # every connection line, counted per label (not only the kept ones)
    if not labels:
        why = proof.problem or "no channel connection lines"
        return ExpectResult(INCONCLUSIVE, f"{src}: cannot prove {expect}: {why}")
    wrong_labels = {lb for lb in labels if not any(label_matches(lb, p) for p in parts)}
    unseen = [p for p in parts if not any(label_matches(lb, p) for lb in labels)]
    n = sum(labels.values())
    if wrong_labels:
        n_wrong = sum(labels[lb] for lb in wrong_labels)
        shown = [c for c in proof.effective_connections if c.label in wrong_labels]
        msg = (f"expected {expect} but {n_wrong} of {n} connection(s) are not "
               f"({proof.transport}): {_shown(shown, n_wrong)}")
        if unseen:
            msg += f"; and no connection used {' or '.join(unseen)}"
        return ExpectResult(FAIL, f"{src}: {msg}{_hint(proof)}")
    abandoned = ""
    if proof.collnet_state in ("abandoned", "unconfirmed"):
        abandoned = f"; CollNet connection lines not counted (CollNet {proof.collnet_state})"
    if unseen:
        msg = f"expected {' and '.join(unseen)} but no connection shown used it (transport {proof.transport})"
        if proof.complete:
            return ExpectResult(FAIL, f"{src}: {msg}{abandoned}{_hint(proof)}")
        return ExpectResult(INCONCLUSIVE, f"{src}: {msg}, and the log is incomplete ({proof.completeness})")
    if not proof.complete:
        return ExpectResult(
            INCONCLUSIVE,
            f"{src}: the {n} connection(s) shown are all {expect} (transport {proof.transport}), but the log is "
            f"incomplete ({proof.completeness}): connections it leaves out could use another transport{abandoned}",
        )
    return ExpectResult(PASS, f"{src}: {n} connection(s) all {expect} (transport {proof.transport}){abandoned}")
