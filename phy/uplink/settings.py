"""What an :class:`phy.uplink.Uplink` is built from besides its channel, CSI and scheme:
small frozen groups with their units.

- :class:`AirInterface`: the OFDM numerology, the powers, the waveform and the BS's
  antennas (what every scheme's ``send`` reads; it holds no state of a round);
- :class:`Cohort`: the devices (their large-scale gains), the phases they send, their
  data shares, who takes part and how long they train;
- :class:`DownlinkLoad`: what the BS multicasts each round;
- :class:`TraceOptions`: which optional columns and signals go to the trace;
- :class:`ChannelOverTime`: devices that move within a round, new drops every N rounds.

Nothing here draws or computes: the block does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from phy.combiner import ReceiveCombiner
from phy.sync import UniformOffsets


def _set(instance, **values) -> None:
    """Set fields of a frozen dataclass in its ``__post_init__``."""
    for name, value in values.items():
        object.__setattr__(instance, name, value)


@dataclass(frozen=True)
class AirInterface:
    """The air of a run: F subcarriers, the powers, the OFDM symbol's duration, the domain
    the received signal is formed in and the BS's antennas.

    Attributes
    ----------
    num_subcarriers : int
        F.
    tx_power_w : float
        P, every device's power budget per OFDM symbol (W).
    noise_power_w : float
        sigma_z^2, the receiver noise per subcarrier (W).
    symbol_duration_s : float
        An OFDM symbol with its cyclic prefix, ``(F + C) / B`` seconds (NaN: unknown; the
        round's seconds and joules are then NaN).
    domain : "frequency" or "time"
        Eq. ``ReceivedSignal`` per subcarrier, or the waveform (:mod:`phy.ofdm_time`).
    bandwidth_hz : float or None
        B, the time-domain waveform's sampling rate (``domain = "time"``).
    cyclic_prefix_length : int or None
        C, the time-domain waveform's prefix in samples (``domain = "time"``).
    num_antennas : int
        N_r, the BS's receive antennas.
    combiner : phy.combiner.ReceiveCombiner
        The BS's receive combiner (``num_antennas > 1``; default ``"centroid"``).
    sync : phy.sync.UniformOffsets
        The devices' timing offsets and CFOs (time domain; default none).
    """

    num_subcarriers: int
    tx_power_w: float
    noise_power_w: float
    symbol_duration_s: float = float("nan")
    domain: str = "frequency"
    bandwidth_hz: float | None = None
    cyclic_prefix_length: int | None = None
    num_antennas: int = 1
    combiner: ReceiveCombiner | None = None
    sync: UniformOffsets | None = None

    def __post_init__(self):
        _set(self, num_subcarriers=int(self.num_subcarriers), symbol_duration_s=float(self.symbol_duration_s),
             num_antennas=int(self.num_antennas),
             combiner=self.combiner if self.combiner is not None else ReceiveCombiner("centroid"),
             sync=self.sync if self.sync is not None else UniformOffsets(0.0, 0.0, "none"))

    @property
    def waveform(self) -> dict[str, Any]:
        """The keywords of :meth:`phy.ofdm_time.TimeDomainUplink.from_paths`'s waveform."""
        return {"bandwidth_hz": self.bandwidth_hz, "num_subcarriers": self.num_subcarriers,
                "cyclic_prefix_length": self.cyclic_prefix_length}


@dataclass(frozen=True, eq=False)
class Cohort:
    """The devices of a run and what they train.

    Attributes
    ----------
    path_gain : [K], float
        The devices' large-scale gains (linear; K is its length); with new drops every N
        rounds drop 0's (a round's own travel with its :class:`phy.uplink.RoundLink`).
    phases : sequence of (name, num_values)
        The uplink phases of a round in order.
    population_weights : [K], float64, optional
        pi_k, the devices' data shares (the BS's weights in a partial round).
    participation : the ``[participation]`` table or None
        The cohort policy (:mod:`phy.uplink.participation`); None or at its defaults:
        every device trains and sends.
    local_steps : int
        E, a device's local steps.
    training_phases : int
        The phases in which a device trains (the stragglers' deadline).
    """

    path_gain: Any
    phases: Sequence[tuple[str, int]]
    population_weights: Any = None
    participation: Any = None
    local_steps: int = 1
    training_phases: int = 1

    def __post_init__(self):
        _set(self, phases=tuple((name, int(n)) for name, n in self.phases),
             local_steps=int(self.local_steps), training_phases=int(self.training_phases))


@dataclass(frozen=True)
class DownlinkLoad:
    """What the BS multicasts to the devices that train each round (the global model).

    Attributes
    ----------
    values : int
        The values multicast (0: nothing).
    bits_per_value : int
        Bits per value.
    bs_tx_power_w : float
        The BS's downlink power (W).
    """

    values: int = 0
    bits_per_value: int = 32
    bs_tx_power_w: float = 1.0

    def __post_init__(self):
        _set(self, values=int(self.values), bits_per_value=int(self.bits_per_value),
             bs_tx_power_w=float(self.bs_tx_power_w))


def _never(t: int) -> bool:
    return False


@dataclass(frozen=True)
class TraceOptions:
    """What optional columns and signals the block writes.

    Attributes
    ----------
    per_device : bool
        Write the per-device power and distortion columns of every phase.
    keep_signals : callable int -> bool
        The rounds whose raw signals go to the trace (default: none).
    """

    per_device: bool = True
    keep_signals: Callable[[int], bool] = field(default=_never)

    def __post_init__(self):
        _set(self, per_device=bool(self.per_device))


@dataclass(frozen=True)
class ChannelOverTime:
    """How the channel changes beyond block fading (both None: block fading from the
    block's ``channel`` for the whole run, nothing of it drawn).

    Attributes
    ----------
    moving : phy.moving_channel.MovingChannel, optional
        Devices that move (``[mobility]``): the channel is then a function of time, each
        phase estimated at its start and received at its middle
        (:mod:`phy.uplink.moving_link`), and the round ends on the moving channel's clock.
    drops : phy.redrop.Drops, optional
        New drops every N rounds (``channel.redrop_every_rounds``): round t's channel model
        and path gains are its drop's (its round link's ``channel`` and ``path_gain``; the
        block keeps drop 0's), and the round's columns say which drop and where its
        devices stand.
    """

    moving: Any = None
    drops: Any = None

    def __post_init__(self):
        if self.moving is not None and self.drops is not None:  # both would write the positions
            raise ValueError("moving devices and new drops every N rounds cannot be combined")


NO_DOWNLINK = DownlinkLoad()
"""Nothing multicast (the block's default)."""
DEFAULT_TRACE = TraceOptions()
"""Per-device columns, no signals (the block's default)."""
BLOCK_FADING = ChannelOverTime()
"""No moving devices, no new drops (the block's default)."""
