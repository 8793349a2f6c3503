"""Replaying recorded probe results: the recording is used only for the machine it was made on.

A recording (``<dir>/probes/<pair>/<arm>/{allreduce.json, nccl.log}``) carries the names of
the GPUs it ran on. Replayed against a session whose evidence shows other GPUs under the
same indices (another snapshot, another machine), its numbers would be judged against the
wrong hardware — so such a case skips, saying which GPUs each side has.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ProbeError
from .allreduce import AllReduceResult, proof_from_log
from .p2pcopy import P2PCopyResult

if TYPE_CHECKING:
    from ..evidence.model import Evidence


class NoRecording(ProbeError):
    """Nothing recorded for this case, or a recording of other GPUs: the check skips with this reason
    (the pytest glue turns it into a skip; the probe stage itself knows no pytest)."""


def probes_dir(replay: Path) -> Path:
    """Accept a results root (holding ``probes/``) or the ``probes/`` directory itself."""
    return replay / "probes" if (replay / "probes").is_dir() else replay


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("nvidia", "").split())


def recording_mismatch(recorded: object, evidence: Evidence | None, pair: Sequence[int]) -> str | None:
    """Why a recording made on GPUs ``recorded`` (names) does not belong to this session's pair, or None.

    None also when either side does not say (an old recording, evidence without the GPU).
    """
    if evidence is None or not isinstance(recorded, list) or len(recorded) != len(pair):
        return None
    if not all(isinstance(n, str) for n in recorded):
        return None
    here: list[str] = []
    for index in pair:
        try:
            here.append(evidence.gpu(index).name)
        except KeyError:
            return f"this session's evidence has no gpu{index}"
    if [_norm(str(n)) for n in recorded] == [_norm(n) for n in here]:
        return None
    return (f"the recording was made on {' + '.join(map(str, recorded))}, but this session's "
            f"gpu{pair[0]}-gpu{pair[1]} are {' + '.join(here)}: replaying it would judge another machine")


def _read_recording(path: Path) -> object:
    """A recording's JSON; an unreadable or corrupt file is a ProbeError naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ProbeError(f"{path}: unreadable JSON ({exc})") from None


def load_allreduce(replay: Path, pair: tuple[int, int], arm: str, label: str,
                   evidence: Evidence | None = None) -> AllReduceResult:
    """A recorded all-reduce result, its proof re-parsed from the recorded NCCL log."""
    where = probes_dir(replay) / f"gpu{pair[0]}-gpu{pair[1]}" / arm
    path = where / "allreduce.json"
    if not path.is_file():
        raise NoRecording(f"{label}: no all-reduce recording for gpu{pair[0]}-gpu{pair[1]} arm {arm} ({path})")
    data = _read_recording(path)
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: not an all-reduce recording (a JSON {type(data).__name__})")
    meta = data.get("meta")
    mismatch = recording_mismatch(meta.get("device_names") if isinstance(meta, Mapping) else None, evidence, pair)
    if mismatch:
        raise NoRecording(f"{label}: {path}: {mismatch}")
    log = where / str(data.get("log") or "nccl.log")
    result = AllReduceResult.from_dict(data, log if log.is_file() else None, str(path))
    if (result.pair, result.arm) != (tuple(pair), arm):
        raise ProbeError(f"{path}: records pair {result.pair_key} arm {result.arm}, "
                         f"but sits under gpu{pair[0]}-gpu{pair[1]}/{arm}")
    result.meta["replayed_from"] = str(where)
    if result.log_path is not None:
        result.proof = proof_from_log(result.log_path)
    return result


def load_copy(replay: Path, pair: tuple[int, int], label: str) -> P2PCopyResult:
    """A recorded P2P copy result."""
    path = probes_dir(replay) / f"gpu{pair[0]}-gpu{pair[1]}" / "p2pcopy.json"
    if not path.is_file():
        raise NoRecording(f"{label}: no P2P copy recording for gpu{pair[0]}-gpu{pair[1]} ({path})")
    data = _read_recording(path)
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: unreadable P2P copy probe result (a JSON {type(data).__name__}, not an object)")
    result = P2PCopyResult.from_dict(data, str(path))
    result.meta["replayed_from"] = str(path.parent)
    return result


def replay_index(replay: Path) -> Mapping[str, list[str]]:
    """``{pair: [arms]}`` recorded under a replay directory (for messages and the report)."""
    root = probes_dir(replay)
    out: dict[str, list[str]] = {}
    for pair_dir in sorted(p for p in root.glob("gpu*-gpu*") if p.is_dir()):
        out[pair_dir.name] = sorted(a.parent.name for a in pair_dir.glob("*/allreduce.json"))
    return out
