"""Is a log the whole story? The sign that lets a transport proof say "not used".

A transport absent from an excerpt, a ``grep``, or one host's half of a job proves nothing.
A log is complete when, for every communicator it shows (grouped by ``commId`` where NCCL
prints it, else by size), every rank ``0..nranks-1`` printed ``Init COMPLETE`` and every
rank printed at least one connection line (the sender of a P2P/SHM/``[send]`` line, the
receiver of a ``[receive]`` line), and no line looked like a connection in an unknown format.
Only then may :mod:`.transport_claims` make a negative claim.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .transport_model import TransportProof, key_printer

MAX_RANKS = 4096  # a larger communicator is never shown complete (every rank is not checked)


@dataclass
class InitLines:
    """``Init COMPLETE`` lines per communicator: by commId where printed, else by size."""

    ranks: dict[tuple[str, int], Counter[int]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, comm_id: str | None, rank: int, nranks: int) -> None:
        self.ranks[(comm_id or "", nranks)][rank] += 1


def completeness(proof: TransportProof, init: InitLines, unparsed: int) -> tuple[bool, str]:
    """Is this the whole story? Every rank of every communicator finished init and printed its connections."""
    if not init.ranks:
        return False, "no 'Init COMPLETE' line: the log ends before initialisation finished, or is an excerpt"
    if unparsed:
        return False, f"{unparsed} connection-like line(s) in a format this parser does not know"
    printers = {key_printer(k) for k in proof.counts}
    for (comm_id, nranks), counts in sorted(init.ranks.items()):
        name = f"communicator {comm_id}" if comm_id else f"a {nranks}-rank communicator"
        if nranks > MAX_RANKS:
            return False, f"{name}: {nranks} ranks is more than this parser checks"
        missing = [r for r in range(nranks) if r not in counts]
        if missing:
            return False, (f"{name}: 'Init COMPLETE' from {len(counts)} of {nranks} ranks "
                           f"(none from rank {_few(missing)})")
        if not comm_id and len(set(counts.values())) > 1:
            return False, f"{name}: ranks finished init an uneven number of times (an excerpt of several runs?)"
        if nranks > 1:
            silent = [r for r in range(nranks) if r not in printers]
            if silent:
                return False, f"{name}: rank {_few(silent)} printed no connection line"
    sizes = sorted({n for _, n in init.ranks})
    return True, f"every rank of {len(init.ranks)} communicator(s) (sizes {', '.join(map(str, sizes))}) " \
                 f"finished init and printed its connections"


def _few(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:4])) + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")
