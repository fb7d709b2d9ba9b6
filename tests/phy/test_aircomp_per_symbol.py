"""The AirComp chain with a true channel per OFDM symbol (``h`` [K, N, F], moving devices):
the fast path against the reference chain, and the per-symbol form of a constant channel
against the [K, F] form."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conformance import CHAIN_ARRAYS, CHAIN_SCALARS, assert_chain_conforms

from phy.aircomp import aggregate
from phy.parameters import POWER_CONTROLS

K, F, D = 10, 72, 6_275  # N = 88 symbols, the last one partial; F crosses the kernels' lanes
N = -(-D // F)
NOISE_W = 10 ** (-10.4)
CONTROLS = {"optimal": {}, "truncated_inversion": {"tci_gain_threshold": 0.1}, "full_inversion": {}}
FIELDS = CHAIN_ARRAYS
SCALARS = CHAIN_SCALARS


def _inputs(csi: str):
    """Updates, weights (one device with pi = 0), the estimate h_hat [K, F] (imperfect: one
    dead subcarrier), the channel at the phase's start h0 [K, F] and a channel per symbol
    h [K, N, F] that drifts away from it (a phase rotation and a fresh part growing with n)."""
    rng = np.random.default_rng(5)
    path_gain = rng.uniform(0.5, 2.0, K) * 1e-8

    def cn(*shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.sqrt(0.5)

    h0 = cn(K, F) * np.sqrt(path_gain)[:, None]
    drift = np.linspace(0.0, 0.6, N)[None, :, None]
    h = h0[:, None, :] * np.exp(1j * drift) * np.sqrt(1 - drift ** 2 / 2) \
        + cn(K, N, F) * np.sqrt(path_gain)[:, None, None] * drift
    h_hat = h0.copy()
    if csi == "imperfect":
        h_hat += cn(K, F) * np.sqrt(0.05 * path_gain)[:, None]
        h_hat[1, 3] = 0.0
    w = rng.dirichlet(np.ones(K))
    w[4] = 0.0
    return (tf.constant(rng.standard_normal((K, D)).astype(np.float32) * 1e-3),
            tf.constant((w / w.sum()).astype(np.float32)), tf.constant(h_hat, tf.complex64),
            tf.constant(h0, tf.complex64), tf.constant(h, tf.complex64), tf.constant(path_gain, tf.float32))


def _common(control, budget_w, path_gain):
    return dict(power_control=POWER_CONTROLS[control].build(CONTROLS[control]), tx_power_w=budget_w,
                noise_power_w=NOISE_W, gamma_w=NOISE_W, seed=tf.constant([3, 4]), path_gain=path_gain)


@pytest.mark.parametrize("budget_w", [0.1, 1e-4])
@pytest.mark.parametrize("csi", ["perfect", "imperfect"])
@pytest.mark.parametrize("control", list(CONTROLS))
def test_fast_path_with_a_channel_per_symbol_conforms_to_the_reference(control, csi, budget_w):
    updates, weights, h_hat, _, h, path_gain = _inputs(csi)
    common = _common(control, budget_w, path_gain)
    want = aggregate(updates, weights, h, h_hat, keep_signals=True, **common)
    got = aggregate(updates, weights, h, h_hat, **common)
    assert_chain_conforms(got, want, f"{control}, {csi} CSI, {budget_w} W",
                          rows_bind=budget_w == 1e-4 and control != "full_inversion")
    assert want.x.shape == (K, N, F)


@pytest.mark.parametrize("budget_w", [0.1, 1e-4])
@pytest.mark.parametrize("csi", ["perfect", "imperfect"])
@pytest.mark.parametrize("control", list(CONTROLS))
def test_equal_channels_per_symbol_give_the_constant_channel_bits(control, csi, budget_w):
    """h [K, N, F] with every symbol h0 is the [K, F] chain with h0, bit for bit: G_knf is
    G_kf elementwise, the linear sum runs one kernel in one order and the rows read the
    same gains."""
    updates, weights, h_hat, h0, _, path_gain = _inputs(csi)
    common = _common(control, budget_w, path_gain)
    want = aggregate(updates, weights, h0, h_hat, **common)
    got = aggregate(updates, weights, tf.tile(h0[:, None, :], [1, N, 1]), h_hat, **common)
    for name in (*FIELDS, *SCALARS, "attenuated_fraction"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_a_channel_per_symbol_changes_the_estimate_and_bad_shapes_are_refused():
    updates, weights, h_hat, h0, h, path_gain = _inputs("imperfect")
    common = _common("optimal", 0.1, path_gain)
    moving = aggregate(updates, weights, h, h_hat, **common).estimate.numpy()
    still = aggregate(updates, weights, h0, h_hat, **common).estimate.numpy()
    assert not np.allclose(moving, still, rtol=1e-3)
    with pytest.raises(ValueError, match=r"\[K, N, F\]"):
        aggregate(updates, weights, h[:, :-1], h_hat, **common)
