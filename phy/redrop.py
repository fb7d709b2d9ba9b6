"""New drops every N rounds: ``channel.redrop_every_rounds`` of the ray-traced channel.

Round t uses drop ``d = t // N``: the devices placed anew by the cell's layout, traced
(or read from the cache) and used for the N rounds ``dN .. dN + N - 1``. Drop 0 is the
run's first drop (built with the world, from the static geometry stream); drop d >= 1
is made by the caller's ``drop_of(d)`` (:mod:`cosim.world`: the geometry stream of round
``dN``), so a drop is a function of the seed and the round index alone, and a run
resumed at any round uses the drop the uninterrupted run used there. Only the current
drop and the first are kept (rounds run in order; an earlier drop asked for again is made again, the
same, from the cache).

No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class Drops:
    """The drops of a run, one every ``every_rounds`` rounds (module docstring).

    Parameters
    ----------
    every_rounds : int
        N >= 1.
    first : (channel, positions_m)
        Drop 0: the channel model built on it (with ``path_gain`` [K]) and the devices'
        ``[K, 2]`` positions.
    drop_of : callable int -> (channel, positions_m)
        Drop d >= 1, as ``first``.
    """

    def __init__(self, every_rounds: int, first, drop_of: Callable[[int], tuple]):
        self.every_rounds = int(every_rounds)
        if self.every_rounds < 1:
            raise ValueError(f"every_rounds must be >= 1, got {every_rounds!r}")
        self._first = first
        self._drop_of = drop_of
        self._index, self._current = 0, first

    def index(self, t: int) -> int:
        """The drop of round ``t``: ``t // N``."""
        return int(t) // self.every_rounds

    def at(self, t: int) -> tuple:
        """``(channel, positions_m [K, 2] float64)`` of round ``t``'s drop."""
        index = self.index(t)
        if index != self._index:
            self._current = self._first if index == 0 else self._drop_of(index)
            self._index = index
        return self._current

    def columns(self, t: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(scalars, per_device)`` of round ``t``: ``drop_index``; per device
        ``position_x_m``, ``position_y_m`` (scene coordinates) and ``path_gain`` of its drop."""
        channel, positions = self.at(t)
        positions = np.asarray(positions, np.float64)
        return ({"drop_index": float(self.index(t))},
                {"position_x_m": positions[:, 0].copy(), "position_y_m": positions[:, 1].copy(),
                 "path_gain": np.asarray(channel.path_gain, np.float64).copy()})
