"""The MLP's LRT local steps in Numba take the steps TF's autodiff takes on the same noise."""

import numpy as np
import pytest
import tensorflow as tf
from phase_check import assert_phases_agree

from learning import covariance, models
from learning.local import LocalConfig, LocalTrainer
from learning.models import MLP
from native.sampling import standard_normal

SHAPE = dict(input_shape=(3, 4), num_classes=5, hidden_units=(20, 9))


def _data(rng, rows, batch, num_classes):
    rows = np.asarray(rows)
    mask = (np.arange(batch)[None] < rows[:, None]).astype(np.float32)
    x = rng.uniform(0, 1, (rows.size, batch, 3, 4)).astype(np.float32) * mask[..., None, None]
    y = rng.integers(0, num_classes, (rows.size, batch)).astype(np.int32)
    weights = rows / rows.sum()
    return tf.constant(x), tf.constant(y), tf.constant(mask), tf.constant(weights, tf.float32)


def _fused_noise(rows):
    """``device_normal`` for the TF path that draws what the Numba path draws: device
    k's layer-``stream`` noise is ``standard_normal([M, rows_k, out])`` under its seed,
    on its real (leading) rows; padding rows get zeros (the loss masks them)."""

    def draw(seeds, shape, stream):
        out = np.zeros((seeds.shape[0], *shape), np.float32)
        for k, n in enumerate(rows):
            out[k, :, :n] = standard_normal([shape[0], n, shape[2]], seeds[k], stream)
        return out

    def device_normal(device_seeds, shape, stream=0):
        dims = tf.stack([tf.cast(s, tf.int32) for s in shape])
        noise = tf.numpy_function(
            lambda s, dims: draw(s, dims, stream), [device_seeds, dims], tf.float32, stateful=False
        )
        return tf.reshape(noise, tf.concat([tf.shape(device_seeds)[:1], dims], 0))

    return device_normal


@pytest.mark.parametrize("covariance_parameter", covariance.NAMES)
@pytest.mark.parametrize("phase2_prior,nll_reduction", [("fresh", "sum"), ("previous", "mean")])
def test_numba_lrt_steps_match_tensorflow_autodiff(rng, monkeypatch, phase2_prior, nll_reduction, covariance_parameter):
    """Both phases, E = 2, three devices (full, without data, padded), the precision
    floor active: updates, objectives and floor hits agree to float32 rounding."""
    model = MLP(**SHAPE)
    d = model.num_params
    common = dict(
        kl_scale=20.0 * d, learning_rate=0.2, local_steps=2, mc_samples=3, min_precision=2.0,
        phase2_prior=phase2_prior, nll_reduction=nll_reduction,
        covariance_parameter=covariance_parameter,
        estimator="local_reparameterization",
    )
    fused = LocalTrainer(model, LocalConfig(**common))
    plain = LocalTrainer(model, LocalConfig(**common, weight_sampler="tensorflow", jit_compile=False))
    assert fused.fused_steps is not None and plain.fused_steps is None
    rows = [6, 0, 3]
    x, y, mask, weights = _data(rng, rows, 6, 5)
    monkeypatch.setattr(models, "device_normal", _fused_noise(rows))
    mu_t = model.init_mean(tf.constant([1, 2]))
    rho_t = tf.constant(rng.uniform(1.99, 2.01, d), tf.float32)  # half below the floor: clamps
    seed = tf.constant([4, 5])

    assert_phases_agree(fused, plain, mu_t, rho_t, (x, y, mask, weights), seed, d)


def test_devices_are_independent_of_their_batch(rng):
    """A device's update depends on its own seed and data only: the batch of three equals
    each device run alone (bit for bit), whichever worker thread it lands on."""
    model = MLP(**SHAPE)
    config = LocalConfig(
        kl_scale=10.0, learning_rate=0.05, local_steps=2, mc_samples=2,
        estimator="local_reparameterization",
    )
    trainer = LocalTrainer(model, config)
    x, y, mask, weights = _data(rng, [5, 2, 4], 5, 5)
    mu_t = model.init_mean(tf.constant([3, 1]))
    rho_t = tf.fill([model.num_params], 400.0)
    seed = tf.constant([8, 9])
    ids = tf.constant([0, 1, 2])
    batch, _, _ = trainer.rho_phase(mu_t, rho_t, x, y, mask, weights, seed, device_ids=ids)
    for k in range(3):
        alone, _, _ = trainer.rho_phase(
            mu_t, rho_t, x[k : k + 1], y[k : k + 1], mask[k : k + 1], weights[k : k + 1], seed,
            device_ids=ids[k : k + 1],
        )
        np.testing.assert_array_equal(alone.numpy()[0], batch.numpy()[k])
    assert np.abs(batch.numpy()).max() > 0


def test_noise_is_fresh_per_step_and_device(rng):
    """Two devices with the same data and weights but different ids get different
    updates; the same id twice gets the same update."""
    model = MLP(**SHAPE)
    config = LocalConfig(kl_scale=1.0, local_steps=1, estimator="local_reparameterization")
    trainer = LocalTrainer(model, config)
    x, y, mask, weights = _data(rng, [4], 4, 5)
    x, y, mask = (tf.concat([t, t], 0) for t in (x, y, mask))
    weights = tf.constant([0.5, 0.5])
    mu_t = model.init_mean(tf.constant([3, 1]))
    rho_t = tf.fill([model.num_params], 400.0)
    seed = tf.constant([1, 1])
    same, _, _ = trainer.rho_phase(mu_t, rho_t, x, y, mask, weights, seed, device_ids=tf.constant([7, 7]))
    other, _, _ = trainer.rho_phase(mu_t, rho_t, x, y, mask, weights, seed, device_ids=tf.constant([7, 8]))
    np.testing.assert_array_equal(same.numpy()[0], same.numpy()[1])
    assert not np.array_equal(other.numpy()[0], other.numpy()[1])
