"""``CUDA_VISIBLE_DEVICES`` read against one machine's evidence: which NVML GPUs it selects.

Auto-detection honours it (a user who hides GPUs from CUDA means "not these"); the checks
still name GPUs by NVML index, so a reordered list selects the same GPUs.
"""

from __future__ import annotations

import os

from .model import Evidence


def visible_gpus(evidence: Evidence, visible: str) -> tuple[list[int], str]:
    """The NVML GPUs that ``CUDA_VISIBLE_DEVICES`` selects, and a note saying how it was read.

    Read as CUDA reads it: indices (PCI bus order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``),
    ``GPU-`` UUIDs or unique prefixes, ``MIG-`` instances; the first entry that names no GPU
    ends the list. The order does not matter here: checks name GPUs by NVML index.
    """
    chosen: list[int] = []
    extra: list[str] = []
    for raw in visible.split(",")[:1024]:
        entry = raw.strip()
        match: list[int] = []
        if entry.lstrip("-").isdigit() and len(entry) < 6:
            match = [g.index for g in evidence.gpus if g.index == int(entry)]
        elif entry.upper().startswith("GPU-") and len(entry) > 4:
            match = [g.index for g in evidence.gpus if (g.uuid or "").upper().startswith(entry.upper())]
        elif entry.upper().startswith("MIG-"):
            extra.append(f"{entry[:60]} is a MIG instance: MIG instances have no peer access, so it adds no pair")
            continue
        if len(match) != 1:
            if entry:
                extra.append(f"{entry[:60]!r} names no single GPU here, so CUDA ignores it and every entry after it")
            break
        if match[0] not in chosen:
            chosen.append(match[0])
    if chosen != sorted(chosen):
        extra.append("the order is ignored: checks name GPUs by NVML index (PCI bus order)")
    if any(e.strip().isdigit() for e in visible.split(",")) and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        extra.append("indices are read in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA agrees")
    which = ", ".join(f"gpu{i}" for i in sorted(chosen)) or "none"
    note = f"CUDA_VISIBLE_DEVICES={visible[:100]!r} limits auto-detection to {which}"
    return sorted(chosen), note + ("; " + "; ".join(extra) if extra else "")
