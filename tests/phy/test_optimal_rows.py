"""phy.optimal_rows: the fast path's KKT rows against phy.power.optimal_amplitudes (eq.
``Opt_v``'s reference), row by row with edge cases (any order, a dead subcarrier, a padded
last symbol), under the conformance suites' tolerance policy."""

import numpy as np
from conformance import assert_conforms
from grid_helpers import padded_grid

from phy.optimal_rows import optimal_row_amplitudes, optimal_rows
from phy.power import optimal_amplitudes


def test_rows_equal_the_reference_amplitudes():
    """Rows in any order, binding and non-binding, a dead subcarrier, a padded last
    symbol: every output equals the formulas on v = optimal_amplitudes(...)."""
    rng = np.random.default_rng(3)
    k, d, f, budget = 5, 1000, 64, 1.0  # 16 symbols, the last one padded
    updates = (rng.standard_normal((k, d)) * rng.uniform(0.2, 3.0, (k, 1))).astype(np.float32)
    u = rng.exponential(1.0, (k, f)) * 0.05
    u[2, 7] = np.inf  # dead subcarrier of device 2
    u[4] = 1e-9  # device 4 fits its budget on every symbol
    est_gain = rng.uniform(0.5, 1.5, (k, f)).astype(np.float32)
    est_gain[2, 7] = 0.0
    weights = rng.dirichlet(np.ones(k)).astype(np.float32)
    devices = np.array([2, 0, 4, 1, 2, 3, 0, 2, 1])
    symbols = np.array([15, 3, 15, 0, 0, 15, 3 + 1, 7, 15])

    g_corr, w_corr, power, distortion, attenuated = optimal_rows(
        updates, devices, symbols, u, est_gain, weights, budget)

    grid = padded_grid(updates, f, np.float32)
    rows = grid[devices, symbols]  # [R, F]
    v = optimal_amplitudes(np.abs(rows), u[devices], budget).numpy().astype(np.float64)
    live = ~np.isinf(u[devices])
    corr = np.where(live, np.sign(rows) * v - rows, 0.0)
    want_g = np.zeros((16, f))
    want_w = np.zeros((16, f))
    np.add.at(want_g, symbols, est_gain[devices] * corr)
    np.add.at(want_w, symbols, weights[devices, None] * corr)
    # the conformance suites' tolerance policy (tests/conformance.py)
    assert_conforms(g_corr, want_g, "array", "estimate-gain corrections")
    assert_conforms(w_corr, want_w, "array", "weight corrections")
    assert_conforms(power, np.sum(np.where(live, u[devices], 0.0) * v**2, -1), "array", "row power")
    assert_conforms(distortion, np.sum((v - np.abs(rows)) ** 2, -1), "array", "row distortion")
    np.testing.assert_array_equal(
        attenuated, np.sum(v.astype(np.float32) < np.abs(rows) * np.float32(1 - 1e-6), -1))
    # the budget binds on most rows (the power meets it), device 4's row is untouched
    binding = power > 0.999 * budget
    assert binding.sum() >= 6 and np.all(power <= budget * (1 + 1e-9))
    assert distortion[2] == 0.0 and attenuated[2] == 0.0
    assert attenuated[0] >= 1  # at least the dead subcarrier of device 2

    # the signed amplitudes (the time-domain uplink's): sgn(Delta) v, 0 where dead, the
    # same whether the multipliers optimal_rows found are passed or solved again
    *_, multipliers = optimal_rows(updates, devices, symbols, u, est_gain, weights, budget,
                                   with_multipliers=True)
    given = optimal_row_amplitudes(updates, devices, symbols, u, budget, multipliers)
    solved = optimal_row_amplitudes(updates, devices, symbols, u, budget)
    np.testing.assert_array_equal(given, solved)
    assert_conforms(given, np.where(live, np.sign(rows) * v, 0.0), "array", "row amplitudes")


def test_no_rows():
    updates = np.ones((2, 10), np.float32)
    out = optimal_rows(updates, np.array([], np.int64), np.array([], np.int64),
                       np.ones((2, 4)), np.ones((2, 4), np.float32), np.ones(2, np.float32), 1.0)
    assert out[0].shape == (3, 4) and not out[0].any() and not out[1].any()
    assert all(x.shape == (0,) for x in out[2:])
