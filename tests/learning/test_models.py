"""The MLP as a function of (device, sample)-batched weights."""

import numpy as np
import pytest
import tensorflow as tf

from learning.models.architectures import build_model
from learning.models.model import MLP


def test_paper_mlp_parameter_count():
    model = build_model("mlp", (28, 28, 1), 10, (256,) * 5)
    assert model.num_params == 466_698
    assert model.init_mean(tf.constant([0, 1])).shape == (466_698,)


def test_flatten_roundtrip(rng):
    model = MLP((3,), 2, (4,))
    flat = tf.constant(rng.normal(size=(2, 3, model.num_params)), tf.float32)
    np.testing.assert_array_equal(model.flatten(model.unflatten(flat), 2).numpy(), flat.numpy())


def test_logits_match_per_device_per_sample_numpy(rng):
    model = MLP((2, 3), 4, (5, 6))
    k, s, b = 3, 2, 7
    w = rng.normal(size=(k, s, model.num_params)).astype(np.float32)
    x = rng.normal(size=(k, b, 2, 3)).astype(np.float32)
    out = model.logits(tf.constant(w), tf.constant(x)).numpy()
    assert out.shape == (k, s, b, 4)
    for i in range(k):
        for j in range(s):
            params = [p.numpy() for p in model.unflatten(tf.constant(w[i, j]))]
            h = x[i].reshape(b, -1)
            for layer in range(3):
                h = h @ params[2 * layer] + params[2 * layer + 1]
                if layer < 2:
                    h = np.maximum(h, 0)
            np.testing.assert_allclose(out[i, j], h, rtol=1e-4, atol=1e-5)


def test_lrt_moments_match_weight_sampling(rng):
    """Single linear layer: sampled pre-activations have mean x mu and variance x^2 var."""
    model = MLP((3,), 2, ())
    mu = tf.constant(rng.normal(size=(1, model.num_params)), tf.float32)
    var = tf.constant(rng.uniform(0.1, 0.5, size=(1, model.num_params)), tf.float32)
    x = tf.constant(rng.normal(size=(1, 4, 3)), tf.float32)
    out = model.logits_lrt(mu, var, x, 20_000, tf.constant([[1, 2]])).numpy()[0]  # [S, B, C]
    kernel, bias = (p.numpy()[0] for p in model.unflatten(mu))
    vk, vb = (p.numpy()[0] for p in model.unflatten(var))
    xn = x.numpy()[0]
    np.testing.assert_allclose(out.mean(0), xn @ kernel + bias, atol=0.03)
    np.testing.assert_allclose(out.var(0), xn**2 @ vk + vb, rtol=0.05)


def test_build_model_rejects_unknown():
    with pytest.raises(ValueError, match="architecture"):
        build_model("transformer", (4,), 2, (3,))
