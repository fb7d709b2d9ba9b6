"""The uplink as one block (:class:`Uplink`, one :class:`RoundLink` per round, one
:class:`PhaseResult` per phase), what it is built from (:mod:`.settings`: the
:class:`AirInterface`, the :class:`Cohort`, the :class:`DownlinkLoad`, the
:class:`TraceOptions`, the :class:`ChannelOverTime`), the schemes a phase goes over the air
by (:mod:`.scheme`, with the round hooks of :class:`SchemeRound`; :mod:`.analog`; under
``[privacy]`` wrapped in :class:`Private`, :mod:`.private`), what a round costs
(:class:`RoundLedger`, :mod:`.ledger`) and who takes part in a round (:mod:`.participation`)."""

from native.columns import Columns
from phy.uplink.analog import BUDGET_TOLERANCE, Analog
from phy.uplink.block import PhaseResult, RoundLink, Uplink
from phy.uplink.ledger import RoundLedger
from phy.uplink.private import Private, PrivateRound
from phy.uplink.scheme import Scheme, SchemeResult, SchemeRound
from phy.uplink.settings import AirInterface, ChannelOverTime, Cohort, DownlinkLoad, TraceOptions

__all__ = ["BUDGET_TOLERANCE", "AirInterface", "Analog", "ChannelOverTime", "Cohort", "Columns",
           "DownlinkLoad", "PhaseResult", "Private", "PrivateRound", "RoundLedger", "RoundLink", "Scheme",
           "SchemeResult", "SchemeRound", "TraceOptions", "Uplink"]
