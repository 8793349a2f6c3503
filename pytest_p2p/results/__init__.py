"""The results directory: its names (``layout``), its one writer (``write``) and its one reader (``read``).

Stage-free: the campaign writes it, the verdict and the report read it, so it sits below them all.
"""
