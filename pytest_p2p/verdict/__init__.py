"""Stage 5 — verdict: thresholds, fingerprints, baselines and regression attribution."""
