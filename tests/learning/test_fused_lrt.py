"""The LRT's Numba steps (:mod:`learning.local.fused_lrt`) beyond conformance: the noise of a
device depends on its seed and id only.

That the Numba steps take the steps TF's autodiff takes is ``test_conformance.py``.
"""

import numpy as np
import tensorflow as tf

from learning.local.trainer import LocalConfig, LocalTrainer
from learning.models.model import MLP
from learning.runtime import Runtime

SHAPE = dict(input_shape=(3, 4), num_classes=5, hidden_units=(20, 9))


def _data(rng, rows, batch, num_classes):
    rows = np.asarray(rows)
    mask = (np.arange(batch)[None] < rows[:, None]).astype(np.float32)
    x = rng.uniform(0, 1, (rows.size, batch, 3, 4)).astype(np.float32) * mask[..., None, None]
    y = rng.integers(0, num_classes, (rows.size, batch)).astype(np.int32)
    weights = rows / rows.sum()
    return tf.constant(x), tf.constant(y), tf.constant(mask), tf.constant(weights, tf.float32)


def test_devices_are_independent_of_their_batch(rng):
    """A device's update depends on its own seed and data only: the batch of three equals
    each device run alone (bit for bit), whichever worker thread it lands on, in both
    phases (each keeps layer 1's shared path from a device's first step to its later
    ones: device 2 follows device 0 on the same worker)."""
    model = MLP(**SHAPE)
    config = LocalConfig(
        kl_scale=10.0, learning_rate=0.05, local_steps=2, mc_samples=2,
        estimator="local_reparameterization",
    )
    trainer = LocalTrainer(model, config, Runtime(backend="numba"))
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
    rho_next = rho_t + tf.reduce_mean(batch, axis=0)
    nus, _ = trainer.nu_phase(mu_t, rho_t, rho_next, batch, x, y, mask, weights, seed, device_ids=ids)
    for k in range(3):
        alone, _ = trainer.nu_phase(
            mu_t, rho_t, rho_next, batch[k : k + 1], x[k : k + 1], y[k : k + 1], mask[k : k + 1],
            weights[k : k + 1], seed, device_ids=ids[k : k + 1],
            delta_rho_global=rho_next - rho_t,
        )
        np.testing.assert_array_equal(alone.numpy()[0], nus.numpy()[k])
    assert np.abs(nus.numpy()).max() > 0


def test_noise_is_fresh_per_step_and_device(rng):
    """Two devices with the same data and weights but different ids get different
    updates; the same id twice gets the same update."""
    model = MLP(**SHAPE)
    config = LocalConfig(kl_scale=1.0, local_steps=1, estimator="local_reparameterization")
    trainer = LocalTrainer(model, config, Runtime(backend="numba"))
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


def test_subnormal_logit_gradients_are_flushed_to_zero():
    """A logit 100 below the row's top has softmax probability about 4e-44: its
    gradient is subnormal in float32 and both Numba paths write 0 (as TF's thread pools
    flush it); the other entries are the softmax gradient as defined."""
    from learning.local import fused_local, fused_lrt

    logits = np.array([[0.0, -100.0, -1.0]], np.float32)
    labels = np.array([0])
    grad = np.full((1, 3), np.nan, np.float32)
    fused_lrt._softmax_xent(logits, labels, 1, 1, False, grad)
    p = np.exp(logits[0].astype(np.float64) - np.log(np.exp(logits[0].astype(np.float64)).sum()))
    assert 0.0 < np.float32(p[1]) < np.finfo(np.float32).tiny  # subnormal unless flushed
    assert grad[0, 1] == 0.0
    np.testing.assert_allclose(grad[0, [0, 2]], [p[0] - 1.0, p[2]], rtol=1e-6)

    seen = {}

    class Net:  # the exact path's network, reduced to what task_loss_and_grads asks of it
        num_mc = 1

        def forward(self, *args, **kwargs):
            return logits[None], None, None

        def backward(self, grad_logits, *args, **kwargs):
            seen["grad"] = grad_logits
            return np.zeros(1, np.float32), np.zeros(1, np.float32)

    fused_local.task_loss_and_grads(Net(), None, None, None, None, labels, np.ones(1, np.float32),
                                    False, want="mean")
    assert seen["grad"][0, 0, 1] == 0.0
    np.testing.assert_allclose(seen["grad"][0, 0, [0, 2]], [p[0] - 1.0, p[2]], rtol=1e-6)
