"""Explicit opt-in: ``-p pytest_p2p.plugin.active`` or ``pytest_plugins = ["pytest_p2p.plugin.active"]`` in a conftest.

Makes every run a p2p run (see ``plugin/__init__.py``): the stage hooks are registered even
without ``-m p2p`` or a ``--p2p-*`` option, e.g. for a project whose own tests use the
``p2p_pair`` / ``p2p_campaign`` fixtures. The ini key ``p2p_enable = true`` does the same.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from . import OPT_IN_PLUGIN, activate

    activate(config, f"-p {OPT_IN_PLUGIN}")
