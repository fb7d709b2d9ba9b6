"""The exact estimator's Numba passes (:mod:`learning.local.fused_local`) beyond conformance.

That the Numba steps take the steps TF's autodiff takes is ``test_conformance.py``.
"""

import numpy as np

from learning.local.fused_local import phase2_ratio, phase2_update


def test_phase2_passes_follow_ieee_on_diverged_inputs():
    """A diverged round (rho_{t+1} = 0, inf or NaN entries) gives inf/NaN entries, as TF's
    ops do, not an exception out of the parallel kernel (the harness and the engine's
    finite checks then report it)."""
    delta_rho_k = np.array([[1.0, 0.0, np.inf, 2.0]], np.float32)
    delta_rho = np.zeros(4, np.float32)
    rho_next = np.array([0.0, 0.0, 1.0, np.nan], np.float32)
    ratio = np.empty((1, 4), np.float32)
    phase2_ratio(delta_rho_k, delta_rho, rho_next, ratio)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.float32(1.0) / (np.float32(1.0) + (delta_rho_k - delta_rho) / rho_next)
    np.testing.assert_array_equal(ratio, expected)
    out = np.empty((1, 4), np.float32)
    phase2_update(delta_rho_k, delta_rho, rho_next, np.ones(4, np.float32), np.zeros((1, 4), np.float32), out)
    assert np.isinf(out[0, 0]) and np.isnan(out[0, 1]) and np.isinf(out[0, 2]) and np.isnan(out[0, 3])
