"""Tests for power control (phy/power.py)."""

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import brentq

from phy.parameters import POWER_CONTROLS
from phy.power import (
    FullInversion,
    IdealAggregation,
    OptimalPower,
    TruncatedInversion,
    optimal_amplitudes,
)


def _instance(rng, k=6, n=5, f=64, scale=1e-2):
    """Rayleigh-faded u (heavy-tailed, like |h|^-2) and Gaussian update magnitudes."""
    r = rng.uniform(20.0, 300.0, k)
    gain = r[:, None] ** -4.0 * rng.exponential(size=(k, f))
    u = (scale * 4e-11 / gain)[:, None, :]
    a = np.abs(rng.standard_normal((k, n, f)))
    return a, u


def _power(u, v):
    return np.sum(u * np.asarray(v, np.float64) ** 2, axis=-1)


def test_budget_met_with_equality_when_active(rng):
    a, u = _instance(rng)
    budget = 0.1
    v = optimal_amplitudes(tf.constant(a, tf.float32), u, budget).numpy()
    active = _power(u, a) > budget
    assert active.any() and (~active).any()
    np.testing.assert_allclose(_power(u, v)[active], budget, rtol=1e-6)
    assert np.all(v <= a.astype(np.float32))
    assert np.all(v >= 0.0)


def test_small_updates_untouched_exactly(rng):
    a, u = _instance(rng)
    a32 = a.astype(np.float32)
    v = optimal_amplitudes(tf.constant(a32), u, 0.1).numpy()
    inactive = _power(u, a32) <= 0.1
    np.testing.assert_array_equal(v[inactive], a32[inactive])
    # a huge budget leaves everything untouched
    np.testing.assert_array_equal(optimal_amplitudes(a32, u, 1e12).numpy(), a32)


def test_matches_one_dimensional_kkt_root_and_slsqp(rng):
    from scipy.optimize import minimize

    a, u = _instance(rng, k=3, n=2, f=16, scale=1e-1)
    budget = 0.05
    v = optimal_amplitudes(tf.constant(a), u, budget).numpy()  # float64 in, float64 out
    for k in range(a.shape[0]):
        for n in range(a.shape[1]):
            ak, uk = a[k, n], u[k, 0]
            if np.sum(uk * ak**2) <= budget:
                np.testing.assert_array_equal(v[k, n], ak)
                continue
            # brute-force reference: bracketed root of the KKT equation
            lam = brentq(lambda x, ak=ak, uk=uk: np.sum(uk * ak**2 / (1 + x * uk) ** 2) - budget,
                         0.0, 1e20, xtol=1e-300, rtol=1e-15, maxiter=500)
            np.testing.assert_allclose(v[k, n], ak / (1 + lam * uk), rtol=1e-10)
            # generic optimiser on the QCQP (eq. OptPow)
            res = minimize(
                lambda x, ak=ak: np.sum((x - ak) ** 2), x0=np.zeros_like(ak), method="SLSQP",
                jac=lambda x, ak=ak: 2 * (x - ak),
                constraints=[{"type": "ineq", "fun": lambda x, uk=uk: budget - np.sum(uk * x**2),
                              "jac": lambda x, uk=uk: -2 * uk * x}],
                bounds=[(0.0, None)] * ak.size, options={"ftol": 1e-15, "maxiter": 1000},
            )
            ours = np.sum((v[k, n] - ak) ** 2)
            assert ours <= res.fun * (1 + 1e-6) + 1e-15
            np.testing.assert_allclose(v[k, n], res.x, rtol=1e-3, atol=1e-6 * ak.max())


def test_dead_subcarriers_and_zero_updates_no_nan(rng):
    a, u = _instance(rng, k=2, n=3, f=8, scale=10.0)
    u = np.broadcast_to(u, a.shape).copy()
    u[0, :, 0] = np.inf  # dead subcarrier
    a[1, 0, :] = 0.0  # all-zero symbol
    a[1, 1, 3] = 0.0
    v = optimal_amplitudes(tf.constant(a, tf.float32), u, 1e-3).numpy()
    assert np.all(np.isfinite(v))
    np.testing.assert_array_equal(v[0, :, 0], 0.0)
    np.testing.assert_array_equal(v[1, 0], 0.0)
    assert v[1, 1, 3] == 0.0
    live = np.where(np.isinf(u), 0.0, u)
    np.testing.assert_allclose(_power(live, v)[0], 1e-3, rtol=1e-6)


def test_per_entry_budget_broadcasts(rng):
    a, u = _instance(rng, k=2, n=3, f=32, scale=1.0)
    budgets = np.array([1e-3, 1e-2], np.float64)[:, None]
    v = optimal_amplitudes(a, u, budgets).numpy()
    np.testing.assert_allclose(_power(u, v), np.broadcast_to(budgets, (2, 3)), rtol=1e-10)


def test_truncated_inversion_budget_and_silence(rng):
    a, u = _instance(rng, k=4, n=6, f=64, scale=1e-1)
    gain = (1e-1 * 4e-11 / u).astype(np.float32)  # |h_hat|^2, [K, 1, F]
    reference = gain.mean(axis=-1, keepdims=True)
    tci = TruncatedInversion(0.3)
    v = tci(tf.constant(a, tf.float32), u, 0.1, tf.constant(gain), tf.constant(reference)).numpy()
    silent = np.broadcast_to(gain < 0.3 * reference, v.shape)
    assert silent.any()
    np.testing.assert_array_equal(v[silent], 0.0)
    assert np.all(_power(u, v) <= 0.1 * (1 + 1e-6))
    # on subcarriers it uses, the amplitude is one common scale of |Delta| per symbol
    ratio = np.where(~silent, v / a, np.nan)
    spread = np.nanmax(ratio, axis=-1) - np.nanmin(ratio, axis=-1)
    assert np.all(spread <= 1e-6)
    # absolute threshold above every gain silences everything
    v_abs = TruncatedInversion(1.0, absolute=True)(a, u, 0.1, gain, reference).numpy()
    np.testing.assert_array_equal(v_abs, 0.0)


def test_references_and_factory(rng):
    a, u = _instance(rng, k=2, n=2, f=8)
    a32 = tf.constant(a, tf.float32)
    np.testing.assert_array_equal(FullInversion()(a32, u).numpy(), a32.numpy())
    np.testing.assert_array_equal(IdealAggregation()(a32).numpy(), a32.numpy())
    # the one way to build a control by name: the registry (as cosim.world does)
    assert isinstance(POWER_CONTROLS["optimal"].build({}), OptimalPower)
    assert POWER_CONTROLS["truncated_inversion"].build({"tci_gain_threshold": 0.5}).gain_threshold == 0.5
    assert not POWER_CONTROLS["full_inversion"].build({"tci_gain_threshold": 0.5}).budgeted
    assert POWER_CONTROLS["ideal"].build({}).name == "ideal"
    with pytest.raises(ValueError, match="tci_gain_threshold"):
        POWER_CONTROLS["truncated_inversion"].build({"tci_gain_threshold": -1.0})
    with pytest.raises(ValueError, match="gain_threshold"):
        TruncatedInversion(-1.0)
