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
"""The PLD accountant's ``value_discretization_interval`` (the library's default): its
epsilon is pessimistic by at most about this much."""


def _accountant(name: str):
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=PLD_DISCRETIZATION)
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


def epsilon_of(event: dp_accounting.DpEvent, delta: float, accountant: str = "pld") -> float:
    """Epsilon at ``delta`` of ``event`` by the named library accountant (``inf`` for a
    non-private event)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    acc = _accountant(accountant)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def projected_epsilon(event: dp_accounting.DpEvent, rounds: int, delta: float,
                      accountant: str = "pld") -> float:
    """Epsilon after ``rounds`` identical rounds: the library's ``SelfComposedDpEvent``
    (the PLD accountant self-composes by FFT: cost grows like log(rounds), not rounds)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    return epsilon_of(dp_accounting.SelfComposedDpEvent(event, rounds), delta, accountant)


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


class PrivacyLedger:
    """The run's accountant: one library accountant fed one event per round.

    ``add_round(event)`` composes the round and returns ``(epsilon so far, the round's own
    epsilon)`` at ``delta``. A resumed run replays its rounds' events from the trace
    (:meth:`from_events`), so a resumed ledger equals an uninterrupted one.
    """

    def __init__(self, delta: float, accountant: str = "pld") -> None:
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        self.delta = float(delta)
        self.accountant = accountant
        self._acc = _accountant(accountant)

    def add_round(self, event: dp_accounting.DpEvent) -> tuple[float, float]:
        self._acc.compose(event)
        total = float(self._acc.get_epsilon(self.delta))
        return total, epsilon_of(event, self.delta, self.accountant)

    @property
    def epsilon(self) -> float:
        """Epsilon of every round composed so far (0 before the first)."""
        return float(self._acc.get_epsilon(self.delta))


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


# ------------------------------------------------------------------ the up-front projection

def expected_max_fading(num_subcarriers: int, num_antennas: int = 1, flat: bool = False) -> float:
    """E[max_f G_f] of F i.i.d. small-scale power gains, each the sum over N_r antennas of
    unit-mean exponentials (Rayleigh fading: G_f ~ Gamma(N_r, 1)), by quadrature of
    ``int_0^inf 1 - P(G <= x)^F dx``; a flat channel has one draw (F = 1). For N_r = 1
    this is the harmonic number H_F (7.5 at F = 1024)."""
    from scipy.integrate import quad
    from scipy.special import gammainc

    count = 1 if flat else int(num_subcarriers)
    value, _ = quad(lambda x: -np.expm1(count * np.log(np.clip(gammainc(num_antennas, x),
                                                                1e-300, 1.0))),
                    0.0, np.inf, limit=200)
    return float(value)
