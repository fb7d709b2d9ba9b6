"""The uplink as one block (:class:`Uplink`, one :class:`RoundLink` per round, one
:class:`PhaseResult` per phase) and who takes part in a round (:mod:`.participation`)."""

from native.columns import Columns
from phy.uplink.block import BUDGET_TOLERANCE, PhaseResult, RoundLink, Uplink

__all__ = ["BUDGET_TOLERANCE", "Columns", "PhaseResult", "RoundLink", "Uplink"]
