"""The MLP's local steps without TensorFlow take the steps TF's autodiff takes."""

import numpy as np
import pytest
import tensorflow as tf
from phase_check import assert_phases_agree

from learning import covariance
from learning.fused_local import phase2_ratio, phase2_update
from learning.local import LocalConfig, LocalTrainer
from learning.models import MLP, Model


class _TFLayersMLP(MLP):
    """The same MLP run by TensorFlow: TF layers on the fused sample, TF autodiff, TF steps."""

    def fused_network(self, num_samples):
        return None

    logits_sampled = Model.logits_sampled


def _data(rng, num_devices, batch, num_classes):
    rows = np.array([batch, 0, batch - 3][:num_devices])  # full, empty (pi_k = 0), padded
    mask = (np.arange(batch)[None] < rows[:, None]).astype(np.float32)
    x = rng.uniform(0, 1, (num_devices, batch, 3, 4)).astype(np.float32) * mask[..., None, None]
    y = rng.integers(0, num_classes, (num_devices, batch)).astype(np.int32)
    weights = rows / rows.sum()
    return (tf.constant(x), tf.constant(y), tf.constant(mask), tf.constant(weights, tf.float32))


@pytest.mark.parametrize("covariance_parameter", covariance.NAMES)
@pytest.mark.parametrize("phase2_prior,nll_reduction", [("fresh", "sum"), ("previous", "mean")])
def test_numba_steps_match_tensorflow_steps(rng, phase2_prior, nll_reduction, covariance_parameter):
    """Both phases, E = 2 steps, three devices (one without data), the precision floor
    active: the updates, objectives and floor hits agree to float32 rounding."""
    shape = dict(input_shape=(3, 4), num_classes=5, hidden_units=(20, 9))
    fused_model, tf_model = MLP(**shape), _TFLayersMLP(**shape)
    d = fused_model.num_params
    config = LocalConfig(
        kl_scale=20.0 * d,  # lambda_k ~ 10: the KL's gradient counts
        learning_rate=0.2, local_steps=2, mc_samples=3, min_precision=2.0,
        phase2_prior=phase2_prior, nll_reduction=nll_reduction,
        covariance_parameter=covariance_parameter,
    )
    fused, plain = LocalTrainer(fused_model, config), LocalTrainer(tf_model, config)
    assert fused.fused_steps is not None and plain.fused_steps is None
    x, y, mask, weights = _data(rng, 3, 6, 5)
    mu_t = fused_model.init_mean(tf.constant([1, 2]))
    rho_t = tf.constant(rng.uniform(1.99, 2.01, d), tf.float32)  # half below the floor: clamps
    seed = tf.constant([4, 5])

    assert_phases_agree(fused, plain, mu_t, rho_t, (x, y, mask, weights), seed, d)


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
