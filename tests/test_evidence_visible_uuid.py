"""A hand-written snapshot may hold ``uuid: null``: CUDA_VISIBLE_DEVICES by UUID still reads, never a traceback."""

from __future__ import annotations

import json

from pytest_p2p.evidence.snapshot import bundled_demo, evidence_from_envelope
from pytest_p2p.evidence.visible import visible_gpus


def test_a_null_uuid_matches_no_gpu_uuid_entry_and_the_others_still_do() -> None:
    data = json.loads(bundled_demo().read_text(encoding="utf-8"))
    data["evidence"]["gpus"][0]["uuid"] = None
    ev = evidence_from_envelope(data, "hand-written")
    other = ev.gpus[1]
    assert other.uuid
    chosen, note = visible_gpus(ev, f"{other.uuid},GPU-")
    assert chosen == [other.index] and "limits auto-detection" in note
    chosen, _ = visible_gpus(ev, "GPU-0000")
    assert chosen == []
