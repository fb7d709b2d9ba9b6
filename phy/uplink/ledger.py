"""What a round's uplink costs the devices: its OFDM symbols and each device's transmit
energy (:class:`RoundLedger`).

The round link (:class:`phy.uplink.RoundLink`) owns one ledger per round: each phase
charges the symbols and the senders' energy its scheme reports
(:class:`phy.uplink.scheme.SchemeResult`), and a scheme's round hooks
(:class:`phy.uplink.scheme.SchemeRound`, e.g. the privacy wrapper's devices' own noise)
charge what the devices send beyond it. The round's ``uplink_symbols``,
``uplink_energy_j`` and ``tx_energy_j`` are read from it.

No TensorFlow.
"""

from __future__ import annotations

import numpy as np


class RoundLedger:
    """One round's symbols and per-device transmit energy, both zero at the start.

    Parameters
    ----------
    num_devices : int
        K, the population (energy is kept for every device, 0 for one that sent nothing).

    Attributes
    ----------
    symbols : int
        The OFDM symbols of the phases sent.
    energy_j : [K], float64
        Each device's transmit energy this round (J).
    """

    def __init__(self, num_devices: int):
        self.symbols = 0
        self.energy_j = np.zeros(int(num_devices), np.float64)

    def charge_symbols(self, num_symbols: int) -> None:
        """Add a phase's ``num_symbols`` OFDM symbols."""
        self.symbols += num_symbols

    def charge_energy(self, rows, energy_j) -> None:
        """Add ``energy_j`` [len(rows)] (J) to the devices ``rows`` (population ids, or
        ``slice(None)`` for all K)."""
        self.energy_j[rows] += energy_j
