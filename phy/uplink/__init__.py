"""The uplink as one block (:class:`Uplink`, one :class:`RoundLink` per round, one
:class:`PhaseResult` per phase), the schemes a phase goes over the air by
(:mod:`.scheme`, :mod:`.analog`) and who takes part in a round (:mod:`.participation`)."""

from native.columns import Columns
from phy.uplink.analog import BUDGET_TOLERANCE, Analog
from phy.uplink.block import PhaseResult, RoundLink, Uplink
from phy.uplink.scheme import Scheme, SchemeResult

__all__ = ["BUDGET_TOLERANCE", "Analog", "Columns", "PhaseResult", "RoundLink", "Scheme", "SchemeResult",
           "Uplink"]
