"""Why did it change? Fingerprint differences between the baseline and now, most likely cause first.

The ranking encodes what moves interconnect numbers in practice: a GPU of the pair
training to a lower PCIe generation or width (a cable, riser or slot problem), lost
NVLinks, a different NCCL transport or arm environment, then NCCL/driver/CUDA/vLLM/torch
versions, topology, throttling during the run, and the rest (kernel, rig file, commit).
Unchanged headline facts (driver, NCCL) are stated too, because "driver unchanged"
rules a cause out for whoever reads the CI failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..jsontypes import JSONObject, JSONValue, as_dict
from .fingerprint import flatten, same_rig_file


@dataclass(frozen=True)
class Change:
    rank: int  # lower = more likely cause
    field: str  # flattened fingerprint key
    text: str
    before: JSONValue = None
    after: JSONValue = None


_RANKS: tuple[tuple[str, int], ...] = (
    ("links.", 0), ("pair_facts.nvlinks_between", 0), ("transport.", 1), ("arms.", 1),
    ("pair_facts.p2p", 1), ("versions.nccl", 2), ("versions.driver", 2), ("versions.cuda_driver", 2),
    ("versions.vllm", 3), ("versions.torch", 3), ("pair_facts.topology", 4), ("throttled.", 5),
    ("downtrained.", 5), ("versions.kernel", 6), ("kernel_cmdline", 6), ("server.flags", 6),
    ("rig_digest", 6), ("pair.gpus", 7), ("versions.python", 8), ("versions.plugin", 8),
    ("versions.git_commit", 8),
)
_IGNORED = ("run_id", "started_at", "fingerprint_version", "pair.key", "simulated", "rig_file_digest")
_NAMES = {"versions.driver": "driver", "versions.nccl": "NCCL", "versions.cuda_driver": "CUDA driver",
          "versions.vllm": "vLLM", "versions.torch": "torch", "versions.kernel": "kernel",
          "versions.python": "Python", "versions.plugin": "pytest-p2p", "versions.git_commit": "test repo commit",
          "kernel_cmdline": "kernel command line", "rig_digest": "rig file", "pair_facts.topology": "topology",
          "pair_facts.nvlinks_between": "NVLinks between the pair", "pair_facts.p2p_read": "P2P read status",
          "pair_facts.p2p_write": "P2P write status", "server.flags": "server flags"}


def _rank(key: str) -> int:
    for prefix, rank in _RANKS:
        if key.startswith(prefix):
            return rank
    return 9


def _show(x: object) -> str:
    if x is None:
        return "unset"
    text = str(x)
    return text if len(text) <= 48 else text[:45] + "..."


def _gpus_changed(base: object, cur: object) -> str:
    """``GPU 0000:0A:00.0 NVIDIA H100 80GB HBM3 GPU-1a2b3c4d -> NVIDIA H200 GPU-5e6f7a8b (other GPU model)``.

    Why per slot: the pair's GPUs are a list of objects, and its text cut at 48 characters named neither
    the slot nor what became of it. The pair ident is the slots' bus ids, so a change here is a GPU of
    the same slot replaced (same model: a cause to read; another model: not comparable, docs/baselines.md).
    """
    def by_bus(gpus: object) -> dict[str, Mapping[str, object]]:
        return {str(g.get("bus_id")): g for g in gpus if isinstance(g, Mapping)} if isinstance(gpus, list) else {}

    def label(g: Mapping[str, object] | None) -> str:
        if not g:
            return "none"
        uuid = str(g.get("uuid") or "no UUID")
        return f"{g.get('name') or 'unnamed GPU'} {uuid[:12]}"

    b, c = by_bus(base), by_bus(cur)
    parts = []
    for bus in sorted(set(b) | set(c)):
        gb, gc = b.get(bus), c.get(bus)
        if gb is None or gc is None or (gb.get("name"), gb.get("uuid")) != (gc.get("name"), gc.get("uuid")):
            what = "other GPU model" if gb and gc and gb.get("name") != gc.get("name") else "a GPU replaced"
            parts.append(f"GPU {bus} {label(gb)} -> {label(gc)} ({what})")
    return "; ".join(parts) or f"pair GPUs {_show(base)} -> {_show(cur)}"


def _links(fp: Mapping[str, object]) -> JSONObject:
    return as_dict(fp.get("links"))


def _gpu_label(fp: Mapping[str, object], bus: str) -> str:
    link = as_dict(_links(fp).get(bus))
    idx = link.get("index")
    return f"GPU {idx} ({bus})" if idx is not None else f"GPU {bus}"


def fingerprint_changes(base: Mapping[str, object], cur: Mapping[str, object], *, arm: str | None = None,
                        scenario: str | None = None, since: str | None = None) -> list[Change]:
    """Differences, most likely cause first. With ``arm``/``scenario``, other arms' facts are left out."""
    fb, fc = flatten(dict(base)), flatten(dict(cur))
    when = f" since baseline {since}" if since else ""
    changes: list[Change] = []
    handled: set[str] = set()
    # links: one line per GPU and reading, "Gen4 x4 -> Gen3 x4"
    for bus in sorted(set(_links(base)) | set(_links(cur))):
        lb, lc = as_dict(_links(base).get(bus)), as_dict(_links(cur).get(bus))
        for reading, what in (("loaded", "link under load"), ("max", "max link")):
            if lb.get(reading) != lc.get(reading):
                changes.append(Change(0, f"links.{bus}.{reading}",
                                      f"{_gpu_label(cur, bus)} {what} {_show(lb.get(reading))} -> "
                                      f"{_show(lc.get(reading))}{when}", lb.get(reading), lc.get(reading)))
        if lb.get("nvlinks_active") != lc.get("nvlinks_active"):
            changes.append(Change(0, f"links.{bus}.nvlinks_active",
                                  f"{_gpu_label(cur, bus)} active NVLinks {_show(lb.get('nvlinks_active'))} -> "
                                  f"{_show(lc.get('nvlinks_active'))}{when}"))
        handled.update(k for k in set(fb) | set(fc) if k.startswith(f"links.{bus}."))
    for key in sorted(set(fb) | set(fc)):
        if key in handled or key.startswith(_IGNORED):
            continue
        if arm is not None and key.startswith(("transport.", "arms.")) and key.split(".")[1] != arm:
            continue
        if scenario is not None and key.startswith(("throttled.", "downtrained.")) \
                and key.split(".", 1)[1] != scenario:
            continue
        b, c = fb.get(key), fc.get(key)
        if b == c or (key == "rig_digest" and same_rig_file(base, cur)):
            continue
        if key.startswith("throttled.") or key.startswith("downtrained."):
            what = "throttling" if key.startswith("throttled.") else "link downtraining"
            text = f"{what} during the run: reps {c}" if c else f"{what} in the baseline run: reps {b}"
        elif key.startswith("transport."):
            text = f"arm {key.split('.')[1]} NCCL {key.split('.')[-1].replace('_', ' ')} {_show(b)} -> {_show(c)}"
        elif key.startswith("arms."):
            text = f"arm {key.split('.')[1]} {'.'.join(key.split('.')[2:])} {_show(b)} -> {_show(c)}"
        elif key.startswith("pair.gpus"):
            text = _gpus_changed(b, c)
        else:
            text = f"{_NAMES.get(key, key)} {_show(b)} -> {_show(c)}"
        changes.append(Change(_rank(key), key, text + (when if _rank(key) <= 4 else ""), b, c))
    changes.sort(key=lambda ch: (ch.rank, ch.field))
    return changes


def unchanged_headlines(base: Mapping[str, object], cur: Mapping[str, object]) -> list[str]:
    """``driver 595.71.05 unchanged`` for the facts a reader would suspect first."""
    out = []
    for key in ("versions.driver", "versions.nccl", "versions.vllm"):
        fb, fc = flatten(dict(base)).get(key), flatten(dict(cur)).get(key)
        if fb is not None and fb == fc:
            out.append(f"{_NAMES[key]} {fb} unchanged")
    return out


def explain(headline: str, base: Mapping[str, object], cur: Mapping[str, object], *, arm: str | None = None,
            scenario: str | None = None, since: str | None = None) -> str:
    """``headline; cause 1; cause 2; driver X unchanged`` — the text of a regression failure."""
    changes = fingerprint_changes(base, cur, arm=arm, scenario=scenario, since=since)
    parts = [headline] + [c.text for c in changes]
    if not changes:
        parts.append("no fingerprint change since the baseline (software or workload outside the "
                     "fingerprint, or the server itself got slower)")
    parts += unchanged_headlines(base, cur)
    return "; ".join(parts)
