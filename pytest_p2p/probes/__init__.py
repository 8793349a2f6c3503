"""Stage 2 — probes: NCCL all-reduce, P2P copy and the transport proof that says which path the bytes took."""
