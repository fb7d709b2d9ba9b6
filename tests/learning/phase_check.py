"""Shared check of the Numba local steps against TF's: both phases, step by step."""

import numpy as np
import tensorflow as tf


def assert_phases_agree(fused, plain, mu_t, rho_t, data, seed, num_params):
    """Run phase 1 then phase 2 with both trainers and compare updates, objectives and
    floor hits to float32 rounding. ``rho_t`` is expected to put the floor to work (some,
    not all, entries clamped); phase 2 starts from ``plain``'s phase-1 update."""
    x, y, mask, weights = data
    got = fused.rho_phase(mu_t, rho_t, x, y, mask, weights, seed)
    want = plain.rho_phase(mu_t, rho_t, x, y, mask, weights, seed)
    scale = np.abs(want[0].numpy()).max()
    assert scale > 1e-3 and 0 < int(want[2]) < x.shape[0] * num_params
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-4, atol=1e-4)
    assert int(got[2]) == int(want[2])

    delta = want[0]
    rho_next = rho_t + tf.reduce_sum(weights[:, None] * delta, axis=0)
    got = fused.nu_phase(mu_t, rho_t, rho_next, delta, x, y, mask, weights, seed)
    want = plain.nu_phase(mu_t, rho_t, rho_next, delta, x, y, mask, weights, seed)
    scale = np.abs(want[0].numpy()).max()
    assert scale > 1e-3
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-4, atol=1e-4)
