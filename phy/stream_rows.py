"""The order in which a scheme's stream takes the senders' updates: rows ``lo:hi`` in
turn, each row once, all of them before the phase is finished.

A scheme's ``open_stream`` (:mod:`phy.uplink.scheme`) returns a stream whose ``add(lo,
hi, updates)`` and ``finish()`` check the chunks through one :class:`RowOrder`.
"""

from __future__ import annotations

from typing import Any


class RowOrder:
    """The rows a stream over ``num_rows`` senders has taken so far.

    :meth:`take` accepts rows ``lo:hi`` only where the previous chunk ended (0 first),
    with ``hi - lo`` rows (none is allowed) of the same width as every chunk before; :meth:`check_done`
    refuses a stream that has not taken all ``num_rows``. ``num_values`` is the width n
    (None before the first chunk).
    """

    def __init__(self, num_rows: int, owner: str):
        self.num_rows, self.owner = int(num_rows), owner
        self.next_row = 0
        self.num_values: int | None = None

    def take(self, lo: int, hi: int, updates: Any) -> Any:
        """``updates`` ([hi - lo, n], NumPy or tf) once the chunk is checked; ValueError
        for a chunk out of order, past the last sender, or of the wrong shape."""
        lo, hi = int(lo), int(hi)
        if lo != self.next_row or not lo <= hi <= self.num_rows:
            raise ValueError(f"{self.owner}: rows {lo}:{hi} out of order; the next chunk starts at row "
                             f"{self.next_row} and ends by row {self.num_rows}")
        shape = tuple(int(d) for d in updates.shape)
        if len(shape) != 2 or shape[0] != hi - lo or self.num_values not in (None, shape[1]):
            width = "n" if self.num_values is None else self.num_values
            raise ValueError(f"{self.owner}: rows {lo}:{hi} need updates of shape [{hi - lo}, {width}], "
                             f"got {list(shape)}")
        self.num_values = shape[1]
        self.next_row = hi
        return updates

    def check_done(self) -> None:
        """ValueError unless every row was taken."""
        if self.next_row != self.num_rows:
            raise ValueError(f"{self.owner}: finished after row {self.next_row} of {self.num_rows}; "
                             "every sender's rows must be added first")
