"""vLLM server-log attestation for the serve stage (the parser lives in :mod:`pytest_p2p.probes.vllm_log`).

The reading of a vLLM log is pure text work that the ``transport`` command (a probes tool)
also needs, so it sits with the probes; the serve stage and its callers keep importing it
from here (``RunningServer.attestation()``, the campaign's ``attestation.json``).
"""

from __future__ import annotations

from ..probes.vllm_log import NCCL_BACKENDS, P2P_BYPASS_BACKENDS, Attestation, Dispatch, parse_server_log

__all__ = ["NCCL_BACKENDS", "P2P_BYPASS_BACKENDS", "Attestation", "Dispatch", "parse_server_log"]
