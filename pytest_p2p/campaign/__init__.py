"""Stage 4 — campaign: interleaved reps of arms x concurrencies, telemetry, energy, statistics."""
