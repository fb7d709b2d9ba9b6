"""The run's running totals of the channel: :class:`ChannelUses`.

Uplink and downlink OFDM symbols, the uplink's air time and the devices' transmit
energy, summed round by round in :meth:`cosim.engine.Engine.rounds` (the trace's
``cumulative_*`` columns) and kept in the checkpoint's attributes by ``cosim.run``, so
that a resumed run writes the same totals, bit for bit, as one that never stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cosim.trace import TraceWriter, channel_use_split

__all__ = ["ROUND_TOTALS", "ChannelUses"]


ROUND_TOTALS = (("uplink_seconds", "cumulative_uplink_seconds"),
                ("uplink_energy_j", "cumulative_uplink_energy_j"))
"""(round column, running-total column) of the uplink's time and energy; each total is
the rounds' values added one by one in round order (float64, so a resumed run that adds
the same values in the same order writes the same bits)."""


@dataclass
class ChannelUses:
    """Running totals of the uplink and downlink up to and including the last round added.

    The one place the cumulative channel uses are summed: :meth:`cosim.engine.Engine.rounds` adds
    every round to one, and ``cosim.run`` keeps it in the checkpoint's attributes.

    Attributes
    ----------
    uplink : float
        Uplink OFDM symbols (sum of the rounds' ``uplink_symbols``).
    downlink : float
        Downlink OFDM symbols (sum of the rounds' ``downlink_symbols``).
    uplink_seconds : float
        Uplink air time in seconds (sum of the rounds' ``uplink_seconds``; NaN once a
        round did not report it).
    uplink_energy_j : float
        The devices' uplink transmit energy in joules (sum of the rounds'
        ``uplink_energy_j``; NaN once a round did not report it).
    """

    uplink: float = 0.0
    downlink: float = 0.0
    uplink_seconds: float = 0.0
    uplink_energy_j: float = 0.0

    @property
    def total(self) -> float:
        """Uplink + downlink (``cumulative_channel_uses``; whole numbers of symbols, so
        the sum is exact)."""
        return self.uplink + self.downlink

    def add(self, scalars: dict[str, float]) -> None:
        """Add one round's ``uplink_symbols``, ``downlink_symbols``, ``uplink_seconds``
        and ``uplink_energy_j`` (NaN when the round has none) and write the five
        ``cumulative_*`` columns into ``scalars``."""
        up, down = scalars["uplink_symbols"], scalars["downlink_symbols"]
        self.uplink += up
        self.downlink += down
        self.uplink_seconds += float(scalars.get("uplink_seconds", math.nan))
        self.uplink_energy_j += float(scalars.get("uplink_energy_j", math.nan))
        scalars.update(self.attrs())

    def attrs(self) -> dict[str, float]:
        """The totals under their trace column names (also the checkpoint attributes)."""
        return {
            "cumulative_channel_uses": self.total,
            "cumulative_uplink_symbols": self.uplink,
            "cumulative_downlink_symbols": self.downlink,
            "cumulative_uplink_seconds": self.uplink_seconds,
            "cumulative_uplink_energy_j": self.uplink_energy_j,
        }

    @classmethod
    def resumed(cls, attrs: dict, writer: TraceWriter) -> ChannelUses:
        """The totals saved with a checkpoint.

        A checkpoint written before the uplink / downlink split holds only
        ``cumulative_channel_uses``; the split is then summed from the trace's
        committed ``uplink_symbols`` / ``downlink_symbols`` rows (whole numbers of
        symbols, so the sums are exact and equal a run that kept them). Likewise a
        checkpoint without ``cumulative_uplink_seconds`` / ``cumulative_uplink_energy_j``
        gets them by adding the committed ``uplink_seconds`` / ``uplink_energy_j`` rows
        one by one in round order, as the run did (the same bits); NaN when the trace
        has no such column (it was begun before the uplink's time and energy were
        written, so the earlier rounds' are unknown).
        """
        if "cumulative_uplink_symbols" in attrs and "cumulative_downlink_symbols" in attrs:
            uses = cls(float(attrs["cumulative_uplink_symbols"]), float(attrs["cumulative_downlink_symbols"]))
        else:
            rows = {name: writer.column(name) for name in ("uplink_symbols", "downlink_symbols")}
            split = channel_use_split({k: v for k, v in rows.items() if v is not None})
            uses = cls(*split) if split is not None else cls()
        for row, total in ROUND_TOTALS:
            if total in attrs:
                value = float(attrs[total])
            else:
                value, column = 0.0, writer.column(row)
                for entry in ([math.nan] if column is None else column.tolist()):
                    value += float(entry)
            setattr(uses, row, value)
        return uses
