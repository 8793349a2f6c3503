"""A stand-in for ``_multinode_worker`` on CI (no GPU, no torch): replays a recorded rank log, writes a result.

``FAKE_MN_LOGS`` names a directory of ``rank<r>.log`` (fixtures/logs/multinode/<scenario>); ``FAKE_MN_TIME_US``
the time per call it reports. It prints where it ran, so a test can see that the Ray placement put each rank
on the node the rig names.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    rank = int(os.environ["RANK"])
    print(f"[p2p-mn] rank {rank} on {os.environ.get('P2P_HOST')} master {os.environ.get('MASTER_ADDR')}:"
          f"{os.environ.get('MASTER_PORT')} NCCL_NET_GDR_LEVEL={os.environ.get('NCCL_NET_GDR_LEVEL')} "
          f"NCCL_DEBUG={os.environ.get('NCCL_DEBUG')} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}",
          flush=True)
    sys.stdout.write((Path(os.environ["FAKE_MN_LOGS"]) / f"rank{rank}.log").read_text())
    t = float(os.environ.get("FAKE_MN_TIME_US", "100000"))
    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"bytes": n, "time_us": t * n / max(spec["sizes"])} for n in spec["sizes"]]
    (out / f"result{rank}.json").write_text(json.dumps({"rank": rank, "rows": rows, "sendrecv": rows,
                                                        "correct": True}))
    return int(os.environ.get("FAKE_MN_EXIT", "0")) if rank == 1 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
