"""pytest-p2p: GPU-interconnect regression testing as a pytest plugin.

Data flows one way through six stages, one sub-package each:

    evidence  (NVML/CUDA: what the hardware says)
    probes    (NCCL all-reduce, P2P copy, transport proof)
    serve     (vLLM or the stand-in per arm x pair, OpenAI load)
    campaign  (interleaved reps, telemetry, energy, statistics)
    verdict   (thresholds, baselines, regression attribution)
    report    (terminal, results dir, plots, allure)

Importing this package imports nothing heavy: no torch, vllm or pynvml.
"""

__version__ = "0.1.0"
