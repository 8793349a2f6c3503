"""Stage 6 — report: terminal summary, results directory, plots, allure."""
