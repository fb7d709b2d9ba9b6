"""phy.aggregate_error: ||estimate - sum_k pi_k Delta_k||^2 and ||sum_k pi_k Delta_k||^2 in float64."""

import numpy as np
import pytest

from phy.aggregate_error import BLOCK, aggregate_error, normalised_error


def test_matches_a_float64_computation_across_blocks(rng):
    k, n = 7, 2 * BLOCK + 123  # a partial last block
    updates = rng.normal(0.0, 1e-3, (k, n)).astype(np.float32)
    weights = rng.dirichlet(np.ones(k)).astype(np.float32)
    weights[3] = 0.0
    updates[3, :5] = np.nan  # pi_k = 0 sends nothing: left out
    exact = np.einsum("k,kn->n", weights.astype(np.float64), np.nan_to_num(updates).astype(np.float64))
    estimate = (exact + rng.normal(0.0, 1e-4, n)).astype(np.float32)
    error, power = aggregate_error(updates, weights, estimate)
    np.testing.assert_allclose(error, np.sum((estimate.astype(np.float64) - exact) ** 2), rtol=1e-12)
    np.testing.assert_allclose(power, np.sum(exact**2), rtol=1e-12)
    assert normalised_error(error, power) == error / power


def test_an_estimate_equal_to_the_sum_up_to_float32_rounding_gives_rounding_only(rng):
    """A float32 estimate of the sum: the error is float32's rounding (relative 1e-14), not
    the cancellation of a float32 accumulation."""
    updates = rng.normal(0.0, 1.0, (100, 5000)).astype(np.float32)
    weights = np.full(100, 0.01, np.float32)
    exact = weights.astype(np.float64) @ updates.astype(np.float64)
    error, power = aggregate_error(updates, weights, exact.astype(np.float32))
    assert 0.0 < error / power < 1e-13


def test_edge_cases():
    assert normalised_error(0.0, 0.0) == 0.0
    assert normalised_error(1.0, 0.0) == np.inf
    assert np.isnan(normalised_error(np.nan, np.nan)) and np.isnan(normalised_error(1.0, np.nan))
    zeros = np.zeros((3, 10), np.float32)
    assert aggregate_error(zeros, np.ones(3) / 3, np.zeros(10, np.float32)) == (0.0, 0.0)
    with pytest.raises(ValueError, match="estimate"):
        aggregate_error(zeros, np.ones(3), np.zeros(9, np.float32))
