"""The key reference of docs/rig-file.md, generated from the rig schema (``python tests/rig_reference.py`` rewrites
it; tests/test_config_schema.py fails while it is stale). Why generated: the ranges in the tables are the ones
the readers enforce, so the documentation cannot drift from the parser."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_p2p.campaign.config import CampaignConfig
from pytest_p2p.evidence.expect import Expectations, LinkExpect, NvlinkExpect, _Counters
from pytest_p2p.evidence.nodespec import Crossing, HostSpec, NicSpec
from pytest_p2p.probes.config import ProbeConfig, Thresholds, Uplift
from pytest_p2p.schema import reference
from pytest_p2p.serve.config import LoadDefaults, ServerConfig
from pytest_p2p.verdict.config import BaselineConfig

DOC = Path(__file__).resolve().parent.parent / "docs" / "rig-file.md"
BEGIN, END = "<!-- generated from the schema: begin -->", "<!-- generated from the schema: end -->"
#: each section's dataclass, its path in the rig file, and the keys its parser reads beside the table's
SECTIONS: list[tuple[type[object], str, str]] = [
    (Expectations, "expect", "`counters` (below); in `gpu.<selector>`: `pcie`, `nvlink`, `counters`; in "
                             "`pair.<a>-<b>`: `peer_access`, `topology`"),
    (LinkExpect, "expect.pcie", ""),
    (NvlinkExpect, "expect.nvlink", ""),
    (_Counters, "expect.counters", ""),
    (ProbeConfig, "probe", "`sizes` (a list of sizes, each a multiple of 4 B, 4 B .. 16 GiB; the decode sizes are "
                           "added), `decode` (`{hidden, tp, batches, dtype_bytes}`, instead of `decode_sizes`), "
                           "`thresholds` (below)"),
    (Thresholds, "probe.thresholds", "`per_arm: {arm: {busbw_min_gbs, latency_max_us}}`"),
    (Uplift, "probe.uplift", ""),
    (ServerConfig, "server", "`simulated` left out: whether `command` runs the stand-in"),
    (LoadDefaults, "server.load", ""),
    (CampaignConfig, "campaign", ""),
    (BaselineConfig, "baseline", "`tolerance` (a percentage, or `{default: 3%, <metric>: {rel, abs}}`), "
                                 "`primary` (a metric or a list of metrics with a direction)"),
    (HostSpec, "nodes.hosts.<host>", ""),
    (NicSpec, "nodes.hosts.<host>.nics.<nic>", ""),
    (Crossing, "nodes.crossings[i]", "`between` (two host names of `nodes.hosts`)"),
]


def generated() -> str:
    parts = [BEGIN, "", "Every key the schema declares, its default and what it accepts, as the parser enforces "
                        "them (generated: `python tests/rig_reference.py`).", ""]
    for cls, title, also in SECTIONS:
        parts.append(reference(cls, title))  # type: ignore[arg-type]  # each is a dataclass
        if also:
            parts.append(f"Also read: {also}.\n")
    return "\n".join(parts) + END


def current() -> str:
    got = re.search(re.escape(BEGIN) + ".*" + re.escape(END), DOC.read_text(encoding="utf-8"), re.S)
    return got.group(0) if got else ""


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    old = current()
    DOC.write_text(text.replace(old, generated()) if old else text.rstrip("\n") + "\n\n## Key reference\n"
                   + generated() + "\n", encoding="utf-8")
