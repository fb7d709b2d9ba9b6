"""cosim/privacy/accounting.py: the accounting is the library's, and it equals the analytic figures."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from cosim import privacy
from phy.privacy import phase_mechanism

DELTA = 1e-5


def balle_wang_epsilon(sensitivity: float, sigma: float, delta: float) -> float:
    """Balle and Wang (2018), Theorem 8, written out here with scipy: the least epsilon with
    Phi(D/2s - e s/D) - exp(e) Phi(-D/2s - e s/D) <= delta."""
    a = sensitivity / (2 * sigma)

    def gap(eps):
        b = eps * sigma / sensitivity
        return norm.cdf(a - b) - np.exp(eps) * norm.cdf(-a - b) - delta

    return brentq(gap, 0.0, 200.0, xtol=1e-14, rtol=1e-13)


@pytest.mark.parametrize("noise_multiplier", [0.6, 1.0, 3.0])
def test_one_round_equals_the_analytic_gaussian_mechanism(noise_multiplier):
    """A round of one phase with known sensitivity and noise: its epsilon is Balle and
    Wang's to 1e-6 relative; the PLD accountant is above it by at most its discretisation
    and the RDP accountant above both (RDP's conversion is an upper bound)."""
    sensitivity = 2.5
    sigma = noise_multiplier * sensitivity
    mechanism = phase_mechanism(
        channel_gain=[[sensitivity**2]], tx_scaling=[[1.0]], sent=[True], num_symbols=1,
        tx_power_w=1.0, noise_power_w=2 * sigma**2, budgeted=True)
    assert mechanism.worst_noise_multiplier == pytest.approx(noise_multiplier, rel=1e-12)
    exact = balle_wang_epsilon(sensitivity, sigma, DELTA)
    assert privacy.gaussian_epsilon(mechanism.worst_noise_multiplier, DELTA) == pytest.approx(
        exact, rel=1e-6)
    event = privacy.round_event([mechanism.worst_noise_multiplier])
    pld = privacy.epsilon_of(event, DELTA, "pld")
    rdp = privacy.epsilon_of(event, DELTA, "rdp")
    assert pld == pytest.approx(exact, rel=1e-6)
    assert exact - 1e-9 <= pld <= exact + privacy.pld_interval(rdp)
    assert pld <= rdp <= 1.5 * pld


def test_both_phases_compose_and_t_identical_rounds_equal_the_librarys_composition():
    """The ledger over T identical rounds gives the library's SelfComposedDpEvent of T
    events (the projection), for both accountants; two phases compose like the library's
    ComposedDpEvent."""
    rounds, z = 5, (4.0, 6.0)
    for name in privacy.ACCOUNTANTS:
        ledger = privacy.PrivacyLedger(DELTA, name)
        for _ in range(rounds):
            total, this_round = ledger.add_round(privacy.round_event(z))
        one = privacy.epsilon_of(dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(z[0]), dp_accounting.GaussianDpEvent(z[1])]), DELTA, name,
            expected_epsilon=0.0)  # the ledger's grid (no expected epsilon given)
        assert this_round == pytest.approx(one, rel=1e-12)
        projected = privacy.projected_epsilon(privacy.round_event(z), rounds, DELTA, name)
        assert total == pytest.approx(projected, rel=1e-3 if name == "pld" else 1e-9)
        assert total > this_round


def test_the_pld_and_rdp_accountants_agree_on_a_subsampled_run():
    """Poisson subsampling of the round's two phases as one Gaussian (z = 2 / 2^1/2 for two
    phases at z = 2): PLD is the tighter, RDP within 25 % above it (4 rounds, q = 0.2),
    and subsampling lowers epsilon."""
    event = privacy.round_event([2.0, 2.0], sampling_probability=0.2)
    assert event == dp_accounting.PoissonSampledDpEvent(
        0.2, dp_accounting.GaussianDpEvent(pytest.approx(2**0.5, rel=1e-12)))
    pld = privacy.projected_epsilon(event, 4, DELTA, "pld")
    rdp = privacy.projected_epsilon(event, 4, DELTA, "rdp")
    assert pld <= rdp <= 1.25 * pld
    assert pld < privacy.projected_epsilon(privacy.round_event([2.0, 2.0]), 4, DELTA, "pld")


def test_silent_and_noiseless_phases():
    assert privacy.epsilon_of(privacy.round_event([np.inf]), DELTA) == 0.0
    assert np.isinf(privacy.epsilon_of(privacy.round_event([2.0, 0.0]), DELTA))


def test_privacy_columns_name_the_worst_device_per_phase():
    gain = np.array([[1.0], [4.0]])
    mechanisms = {
        name: phase_mechanism(channel_gain=gain, tx_scaling=np.ones_like(gain), sent=[True, True],
                              num_symbols=1, tx_power_w=1.0, noise_power_w=128.0, budgeted=True)
        for name in ("rho", "nu")}
    ledger = privacy.PrivacyLedger(DELTA)
    columns = privacy.privacy_columns(ledger, mechanisms)
    assert columns["privacy_worst_device_rho"] == 1.0
    assert columns["privacy_noise_multiplier_nu"] == pytest.approx(4.0)
    assert columns["privacy_epsilon"] == pytest.approx(columns["privacy_epsilon_round"])


def test_expected_max_fading_is_the_harmonic_number():
    assert privacy.expected_max_fading(1024) == pytest.approx(sum(1 / k for k in range(1, 1025)),
                                                              rel=1e-6)
    assert privacy.expected_max_fading(1024, flat=True) == pytest.approx(1.0, rel=1e-6)
