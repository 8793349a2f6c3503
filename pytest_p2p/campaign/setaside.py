"""Keep a rep that is not a measurement on disk, under names no reader takes for a rep.

Why keep it: a dead server's partial numbers or a screened outlier are evidence of what
happened (the report and a human can look at them), but ``run_<k>.json``, ``telemetry_run<k>.csv``
and ``server_run<k>.log`` must belong to the rep that counts. So the attempt's files become
``run_<k>.try<n>.<why>.json`` (``set_aside``: the why, ``cause``: the reason; measured keys such as
``failed``, the failed-request count, kept as they were), ``telemetry_run<k>.try<n>.<why>.csv`` and
``server_run<k>.try<n>.<why>.log``; the results reader's ``run_<k>.json`` pattern never matches them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from ..util import atomic_write_json
from .result import RepAttempt
from .rundir import RunWriter

Json = dict[str, object]


def set_aside(rd: RunWriter, arm: str, rep: int, attempt: int, points: list[str], data: Mapping[str, Json],
              cause: str, kind: str = "failed") -> RepAttempt:
    """Move/write the attempt's files aside; ``data`` is ``{point: rep data}`` of what was measured anyway."""
    files: list[str] = []
    for point in points:
        base = rd.scenario_dir(arm, point)
        tag = f"try{attempt}.{kind}"
        rep_file = base / f"run_{rep}.json"
        if point in data:
            # the cause beside what was measured, never over it: "failed" is the load's failed-request count
            atomic_write_json(base / f"run_{rep}.{tag}.json", {**data[point], "set_aside": kind, "cause": cause})
            files.append(f"{arm}-{point}/run_{rep}.{tag}.json")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(rep_file)  # a screened rep's file: its copy with the cause is kept above
        for src in (rd.telemetry_path(arm, point, rep), rd.server_log_path(arm, point, rep)):
            if src.is_file():
                stem, dot, ext = src.name.partition(".")
                dst = src.with_name(f"{stem}.{tag}{dot}{ext}")
                with contextlib.suppress(OSError):
                    os.replace(src, dst)
                    files.append(f"{arm}-{point}/{dst.name}")
    return RepAttempt(arm, rep, attempt, tuple(points), cause, kind, tuple(files))
