"""What an inconclusive verdict does to a test: a skip with the reason, or a failure in strict CI.

Why never a green pass: "we could not tell" is not "nothing regressed"; a pass would hide
that the campaign was too short or too noisy.  A skip keeps the run green for casual use
while the reason (and the pairs or reps that would decide) is on the summary line;
``--p2p-strict`` (ini ``p2p_strict``, env ``PYTEST_P2P_STRICT``) makes it fail for CI that
must decide.
"""

from __future__ import annotations

from typing import NoReturn

import pytest


def strict(config: pytest.Config) -> bool:
    """Whether inconclusive verdicts fail (the option table's ``STRICT`` row)."""
    from ..options import STRICT, resolve

    return bool(resolve(config, STRICT).value)


def inconclusive(config: pytest.Config, message: str) -> NoReturn:
    """Skip with ``message`` (strict: fail with it); never returns."""
    if strict(config):
        pytest.fail(f"INCONCLUSIVE (strict mode): {message}", pytrace=False)
    pytest.skip(f"INCONCLUSIVE: {message}")
