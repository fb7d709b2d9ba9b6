"""Differential-privacy accounting of a run's uplink with Google's ``dp-accounting``.

Every round's phases are Gaussian mechanisms on the observer's received signal
(:func:`phy.privacy.phase_mechanism`: the worst device's noise multiplier decides); the
round is the library's ``ComposedDpEvent`` of its phases' ``GaussianDpEvent``s, wrapped
in a ``PoissonSampledDpEvent`` when ``privacy.subsampling = "poisson"``, and a run is the
composition of its rounds, all done by the library's PLD accountant (``"pld"``, the
reported figure by default) or its RDP accountant (``"rdp"``, the cross-check). Nothing
here composes privacy losses itself. Epsilon is at ``privacy.delta``. The threat model and
the derivation: ``docs/privacy.md``. NumPy and ``dp-accounting`` only (no TensorFlow).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_mechanism
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.optimize import brentq

from phy.privacy import joint_noise_multiplier

ACCOUNTANTS = ("pld", "rdp")
"""``privacy.accountant`` values."""

PLD_DISCRETIZATION = 1e-4
"""The PLD accountant's least ``value_discretization_interval`` (the library's default)."""

PLD_RELATIVE_DISCRETIZATION = 1e-4
"""The PLD accountant's interval relative to the epsilon it is expected to reach (the RDP
figure of the same events): ``max(PLD_DISCRETIZATION, 1e-4 eps)``. The PLD's array, and
so its cost, then stays bounded however small the noise multiplier; its pessimistic
epsilon stays within about 1e-4 relative of the exact one (measured: within 1e-6 at
eps = 30 and 160 against a ten times finer interval, 2026-11-27)."""


PLD_MAX_EPSILON = 1e3
"""Above this RDP epsilon the PLD accountant is not run (its array would not fit): the
figure reported is the RDP accountant's, an upper bound of the PLD's."""


def pld_interval(expected_epsilon: float) -> float:
    """The PLD discretisation interval for an expected epsilon."""
    return max(PLD_DISCRETIZATION, PLD_RELATIVE_DISCRETIZATION * float(expected_epsilon))


def _accountant(name: str, expected_epsilon: float = 0.0):
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=pld_interval(expected_epsilon))
    if name == "rdp":
        return rdp_privacy_accountant.RdpAccountant()
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {name!r}")


def phase_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """One phase's event: ``GaussianDpEvent(z)``; no device sent (``z = inf``): a no-op;
    an unbounded sensitivity or no noise (``z = 0``): non-private."""
    z = float(noise_multiplier)
    if math.isnan(z) or z < 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    if math.isinf(z):
        return dp_accounting.NoOpDpEvent()
    if z == 0.0:
        return dp_accounting.NonPrivateDpEvent()
    return dp_accounting.GaussianDpEvent(z)


def round_event(noise_multipliers: Sequence[float], sampling_probability: float = 1.0,
                joint_noise_multiplier: float | None = None) -> dp_accounting.DpEvent:
    """A round's event: its phases' Gaussian events composed; Poisson-subsampled if ``q < 1``.

    Parameters
    ----------
    noise_multipliers : sequence of float
        The worst device's noise multiplier of each phase.
    sampling_probability : float
        q in (0, 1]: each device's probability of taking part in the round.
    joint_noise_multiplier : float, optional
        With ``q < 1``: the round's phases as one Gaussian mechanism
        (:func:`phy.privacy.joint_noise_multiplier`). Both phases see the same cohort, so
        the sampling wraps the pair, and the library's PLD accountant subsamples a single
        Gaussian only; default: ``(sum_p z_p^-2)^-1/2`` of the phases' worst multipliers
        (each device's joint whitened sensitivity is at most that).
    """
    if not 0.0 < sampling_probability <= 1.0:
        raise ValueError(f"sampling_probability must be in (0, 1], got {sampling_probability!r}")
    if sampling_probability == 1.0:
        return dp_accounting.ComposedDpEvent([phase_event(z) for z in noise_multipliers])
    if joint_noise_multiplier is None:
        z = np.asarray(noise_multipliers, np.float64)
        if np.any(z == 0.0):
            joint_noise_multiplier = 0.0
        else:
            inverse = float(np.sum(1.0 / z[np.isfinite(z)] ** 2))
            joint_noise_multiplier = np.inf if inverse == 0.0 else 1.0 / np.sqrt(inverse)
    inner = phase_event(joint_noise_multiplier)
    if not isinstance(inner, dp_accounting.GaussianDpEvent):
        return inner
    return dp_accounting.PoissonSampledDpEvent(sampling_probability, inner)


def epsilon_of(event: dp_accounting.DpEvent, delta: float, accountant: str = "pld",
               expected_epsilon: float | None = None) -> float:
    """Epsilon at ``delta`` of ``event`` by the named library accountant (``inf`` for a
    non-private event). The PLD's interval is :func:`pld_interval` of
    ``expected_epsilon``, by default of the event's RDP epsilon."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    rdp = _accountant("rdp")
    rdp.compose(event)
    bound = float(rdp.get_epsilon(delta))
    if accountant == "rdp" or not bound <= PLD_MAX_EPSILON:
        _accountant(accountant)  # the name is checked
        return bound
    acc = _accountant(accountant, bound if expected_epsilon is None else expected_epsilon)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def projected_epsilon(event: dp_accounting.DpEvent, rounds: int, delta: float,
                      accountant: str = "pld", expected_epsilon: float | None = None) -> float:
    """Epsilon after ``rounds`` identical rounds: the library's ``SelfComposedDpEvent``
    (the PLD accountant self-composes by FFT: cost grows like log(rounds), not rounds)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    return epsilon_of(dp_accounting.SelfComposedDpEvent(event, rounds), delta, accountant,
                      expected_epsilon)


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """The analytic Gaussian mechanism's exact epsilon (Balle and Wang 2018, Theorem 8) at
    ``delta``: the root of the library's closed-form ``delta(epsilon)`` of
    ``GaussianPrivacyLoss`` (add/remove neighbours), found to 1e-12 relative."""
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=float(noise_multiplier), sensitivity=1.0)

    def gap(eps: float) -> float:
        return loss.get_delta_for_epsilon(eps) - delta

    if gap(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0.0:
        hi *= 2.0
    return float(brentq(gap, 0.0, hi, xtol=1e-14, rtol=1e-12))


FLOOR_MARGIN = 1e-4
"""The planned noise floor is raised by this much (relative) over the calibrated one (the
floor's noise is set in floating point)."""

VERIFIED_ROUNDS = 256
"""A plan of at most this many rounds is checked by composing them one by one in a copy of
the run's own ledger, as the run will (:func:`held_strictly`; about 9 ms a round of CPU
at z = 10, 2026-12-02); a longer one relies on the epsilon margin
(:func:`planning_target`)."""


def planning_target(target: float, accountant: str) -> float:
    """The epsilon a plan aims at for ``privacy.target_epsilon = target``: one PLD
    discretisation interval below it (:func:`cosim.privacy.pld_interval` of the target,
    the run's own interval), so that the run's round-by-round composition, which may end
    above the library's self-composition of the same rounds, stays at or below the target
    (the gap measured 2026-12-02: 1.0e-4 at epsilon 10 after 200 rounds, 1.2e-3 at 92 after
    50, 2.1e-4 at 174 after 1,000; the interval is 1e-3, 9.2e-3 and 1.7e-2 there); the RDP
    accountant composes exactly, so its plan aims at the target. Below an epsilon of
    2e-4 the interval (1e-4 there) would take the whole target: the margin is then half of
    it."""
    if accountant != "pld":
        return float(target)
    return float(target) - min(pld_interval(target), 0.5 * float(target))


def held_strictly(floors: dict[str, float], q: float, ledger: PrivacyLedger, rounds: int,
                  target: float, refusal: str) -> dict[str, float]:
    """``floors`` raised until a copy of ``ledger`` composed, round by round, with ``rounds``
    rounds at them ends at or below ``target`` (each step 1e-4 x 2^i relative); unchanged
    when they already do, or when ``rounds`` is above :data:`VERIFIED_ROUNDS`. ValueError
    ``refusal`` when no raise within 2^40 steps does."""
    if rounds > VERIFIED_ROUNDS:
        return floors
    factor = 1.0
    for step in range(41):
        trial = copy.deepcopy(ledger)
        event = round_event([value * factor for value in floors.values()], q)
        for _ in range(rounds):
            trial.compose(event)
        if trial.epsilon <= target:
            return {name: value * factor for name, value in floors.items()}
        factor *= 1.0 + FLOOR_MARGIN * 2.0 ** step
    raise ValueError(refusal)


class PrivacyLedger:
    """The run's accountant: the library's RDP accountant, and its PLD accountant for the
    ``"pld"`` figure, fed one event per round.

    ``add_round(event)`` composes the round and returns ``(epsilon so far, the round's own
    epsilon)`` at ``delta``; both on the PLD grid of the run's ``expected_epsilon``
    (:func:`pld_interval`), so the round's own figure may be pessimistic by that interval. With ``"pld"``, once the RDP figure passes
    :data:`PLD_MAX_EPSILON` the PLD accountant is dropped and the RDP figure (an upper
    bound) is reported from then on. A resumed run replays its rounds' events.
    """

    def __init__(self, delta: float, accountant: str = "pld", expected_epsilon: float = 0.0) -> None:
        """``expected_epsilon``: the run's projected epsilon (sets the PLD's interval,
        :func:`pld_interval`)."""
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        self.delta = float(delta)
        self.accountant = accountant
        self._rdp = _accountant("rdp")
        self._expected = min(float(expected_epsilon), PLD_MAX_EPSILON)
        self._pld = _accountant("pld", self._expected) if accountant == "pld" else None
        _accountant(accountant)  # the name is checked

    def compose(self, event: dp_accounting.DpEvent) -> None:
        """Compose one round's event (what :meth:`add_round` does before its figures)."""
        self._rdp.compose(event)
        if self._pld is not None and self._rdp.get_epsilon(self.delta) <= PLD_MAX_EPSILON:
            self._pld.compose(event)
        else:
            self._pld = None

    def add_round(self, event: dp_accounting.DpEvent) -> tuple[float, float]:
        self.compose(event)
        # the round's own epsilon on the run's PLD grid (one interval of pessimism at most)
        return self.epsilon, epsilon_of(event, self.delta, self.accountant, self._expected)

    @property
    def epsilon(self) -> float:
        """Epsilon of every round composed so far (0 before the first)."""
        source = self._pld if self._pld is not None else self._rdp
        return float(source.get_epsilon(self.delta))

    def epsilon_with(self, event: dp_accounting.DpEvent, accountant: str | None = None) -> float:
        """Epsilon at ``delta`` of the rounds composed so far and then ``event``, by a copy
        of the named accountant (default: the one :attr:`epsilon` reports; ``"rdp"``: the
        RDP bound); the ledger itself is unchanged."""
        source = self._rdp if accountant == "rdp" or self._pld is None else self._pld
        trial = copy.deepcopy(source)
        trial.compose(event)
        return float(trial.get_epsilon(self.delta))


def privacy_columns(ledger: PrivacyLedger, mechanisms: dict, sampling_probability: float = 1.0
                    ) -> dict[str, float]:
    """The round's trace columns, given each phase's :class:`phy.privacy.PhaseMechanism`
    (``{phase name: mechanism}``): ``privacy_epsilon`` (cumulative), ``privacy_epsilon_round``
    and per phase ``privacy_noise_multiplier_<phase>``, ``privacy_worst_device_<phase>``
    (population index, -1 if no device sent)."""
    columns: dict[str, float] = {}
    for name, mechanism in mechanisms.items():
        columns[f"privacy_noise_multiplier_{name}"] = mechanism.worst_noise_multiplier
        columns[f"privacy_worst_device_{name}"] = float(mechanism.worst_device)
    joint = None
    if sampling_probability < 1.0:
        joint, _ = joint_noise_multiplier(list(mechanisms.values()))
    event = round_event([m.worst_noise_multiplier for m in mechanisms.values()],
                        sampling_probability, joint)
    total, this_round = ledger.add_round(event)
    columns["privacy_epsilon"] = total
    columns["privacy_epsilon_round"] = this_round
    return columns
