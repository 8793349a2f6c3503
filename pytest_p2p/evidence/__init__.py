"""Stage 1 — evidence: what the hardware says (NVML, CUDA), live or replayed from a snapshot."""
