"""The proposed method's phase 1 watched for inertia: ``cosim run`` says once when the
global precision has stopped moving.

When the global precision has changed by less than :data:`INERT_RELATIVE_CHANGE` (mean
relative change per round, the round metric ``precision_rel_change``) for
:data:`INERT_ROUNDS` rounds in a row, phase 1 is inert (at the paper's settings with the
precision reading it moves the precision by 1.5e-11 per round), and the run says so once
on stderr, naming the scenario key ``algorithm.covariance_parameter``. The server keeps
the precision in float64, so "not at all" would never trigger: the precision reading's
1.5e-11 still changes a float64 value, and crosses a float32 rounding boundary for
~0.1 % of the entries every round.
"""

from __future__ import annotations

from collections.abc import Iterable

INERT_ROUNDS = 10
"""Rounds in a row of an inert phase 1 before the run warns."""
INERT_RELATIVE_CHANGE = 1e-6
"""A round's ``precision_rel_change`` below this counts as inert: 1e-4 over 100 rounds.
Measured at paper-MNIST size (K = 100, d = 466,698, LRT, eta = 0.1, 100 rounds, seeds
1-3, mean NLL): the precision reading 1.5e-11 per round, ``softplus_std`` and
``log_std`` about 1e-5 (summed NLL, seed 1, rounds 0-18: ``softplus_std`` 4.7e-5 to
6.6e-4; docs/reproduction.md)."""


class InertPrecisionWatch:
    """Warns once when the global precision has been inert for ``rounds`` rounds in a row.

    Fed one ``precision_rel_change`` per round (the proposed method's round metric;
    rounds without it, or with NaN, break the streak). The first time the value has
    been below ``threshold`` for ``rounds`` consecutive rounds, :meth:`observe`
    returns the warning; afterwards it returns None.

    Parameters
    ----------
    rounds : int
        Length of the streak that triggers the warning (>= 1).
    history : iterable of float, optional
        The committed ``precision_rel_change`` of rounds 0 .. start-1 of a resumed
        trace: a streak may span the resume. History alone never warns.
    current : str, optional
        The scenario's ``algorithm.covariance_parameter``, named in the warning.
    threshold : float
        A round whose relative change is below it is inert (:data:`INERT_RELATIVE_CHANGE`).
    """

    def __init__(
        self,
        rounds: int = INERT_ROUNDS,
        history: Iterable[float] | None = None,
        current: str | None = None,
        threshold: float = INERT_RELATIVE_CHANGE,
    ):
        self.threshold = float(threshold)
        if int(rounds) < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds!r}")
        self.rounds = int(rounds)
        self.current = current
        self.warned = False
        self._first: int | None = None  # first round of the current streak of zeros
        for t, value in enumerate(history if history is not None else ()):
            self._track(t, value)

    def _track(self, round_index: int, value: float | None) -> int:
        if value is not None and value < self.threshold:  # NaN compares false: breaks the streak
            if self._first is None:
                self._first = round_index
            return round_index - self._first + 1
        self._first = None
        return 0

    def observe(self, round_index: int, value: float | None) -> str | None:
        """Track round ``round_index`` (0-based); the warning text once, else None."""
        streak = self._track(round_index, value)
        if streak < self.rounds or self.warned:
            return None
        self.warned = True
        first, last = self._first, self._first + self.rounds - 1
        now = f' (it is "{self.current}")' if self.current else ""
        return (
            f"cosim run: warning: the global precision has changed by less than {self.threshold:g} "
            f"(mean relative change per round) for {self.rounds} rounds "
            f"(trace rounds {first}-{last}): phase 1 is inert; try "
            f'algorithm.covariance_parameter = "softplus_std" (or "log_std"){now}'
        )
