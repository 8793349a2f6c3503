"""What a p2p session's campaigns will run, and how a scenario is named.

Kept apart from :mod:`pytest_p2p.plugin.campaign` (the pytest glue) because tests and fixtures read a
:class:`Plan` and build :class:`Scenario` ids without needing the hook module's logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import CampaignConfig


class Scenario(str):
    """``"p2p_on-c8"`` that also knows its ``.arm`` and ``.point``."""

    arm: str
    point: str

    def __new__(cls, arm: str, point: str) -> Scenario:
        obj = super().__new__(cls, f"{arm}-{point}")
        obj.arm = arm
        obj.point = point
        return obj


@dataclass
class Plan:
    """What this session's campaigns will run (resolved once, at collection)."""

    kind: str  # model | probe | off
    config: CampaignConfig
    arms: list[str]
    points: list[str]
    skip_reason: str | None
    origin: str
