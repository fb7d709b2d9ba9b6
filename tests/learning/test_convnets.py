"""Tests of learning/models/convnets.py: counts, layout, batching, reference equivalence, LRT."""

import math

import numpy as np
import pytest
import tensorflow as tf

from learning.models.architectures import build_model
from learning.models.convnets import CNN, ResNet56
from learning.posterior import device_seeds

PAD1 = [[0, 0], [1, 1], [1, 1], [0, 0]]


def _weights(model, num_devices, num_samples, scale=0.05, seed=0):
    """Per-(device, sample) weights around the initial mean: ``[K, S, d]``."""
    mu = model.init_mean(tf.constant([seed, 1]))
    noise = tf.random.stateless_normal([num_devices, num_samples, model.num_params], [seed, 2])
    return mu + scale * noise


def _count(model, kinds):
    return sum(
        math.prod(s) for s, k in zip(model.param_shapes, model._kinds, strict=True) if k in kinds
    )


def test_parameter_counts():
    assert CNN((28, 28, 1), 10).num_params == 421_642
    assert CNN((32, 32, 3), 10).num_params == 545_098
    assert CNN((32, 32, 3), 100).num_params == 556_708
    net = ResNet56((32, 32, 3), 100)
    conv = sum(math.prod(s) for s in net.param_shapes if len(s) == 4)
    assert conv == 848_304
    assert _count(net, {"scale", "shift"}) == 4_064  # batch norms: 2 x 2032 channels
    assert math.prod(net.param_shapes[-2]) + math.prod(net.param_shapes[-1]) == 6_500
    assert net.num_params == 858_868 == 857_736 + 1_132  # the paper's d + 1,132
    assert len([s for s in net.param_shapes if len(s) == 4]) == 55  # 1 + 3 * 9 * 2 convs


def test_build_dispatch_and_bad_input():
    assert isinstance(build_model("cnn", (8, 8, 1), 3), CNN)
    assert isinstance(build_model("resnet56", (32, 32, 3), 100), ResNet56)
    with pytest.raises(ValueError, match="architecture must be one of 'mlp', 'cnn', 'resnet56'"):
        build_model("vgg", (8, 8, 1), 3)
    with pytest.raises(ValueError, match="input_shape"):
        CNN((784,), 10)
    with pytest.raises(ValueError, match="num_classes"):
        ResNet56((8, 8, 3), 1)


def test_init_mean_deterministic_he_normal():
    net = ResNet56((8, 8, 3), 10, blocks_per_stage=1)
    a, b = net.init_mean(tf.constant([3, 4])), net.init_mean(tf.constant([3, 4]))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), net.init_mean(tf.constant([3, 5])).numpy())
    parts = net.unflatten(a)
    assert parts[0].shape == (3, 3, 3, 16) and parts[1].shape == (16,)
    np.testing.assert_array_equal(parts[1].numpy(), 1.0)  # first BN scale
    np.testing.assert_array_equal(parts[2].numpy(), 0.0)  # first BN shift
    np.testing.assert_array_equal(parts[-1].numpy(), 0.0)  # dense bias
    last_conv = parts[-5].numpy()  # [3, 3, 64, 64]: 36,864 values
    assert last_conv.shape == (3, 3, 64, 64)
    # He normal: std sqrt(2 / 576); the sample std of 36,864 normals is within 2 %
    assert abs(last_conv.std() / math.sqrt(2 / 576) - 1) < 0.02


@pytest.mark.parametrize(
    "model", [CNN((8, 8, 3), 5), ResNet56((8, 8, 3), 5, blocks_per_stage=1)], ids=["cnn", "rn8"]
)
def test_devices_and_samples_batched_equal_separate_calls(model):
    w = _weights(model, 3, 2)
    x = tf.random.stateless_normal([3, 4, 8, 8, 3], [5, 6])
    out = model.logits(w, x)
    assert out.shape == (3, 2, 4, 5)
    for k in range(3):
        for s in range(2):
            single = model.logits(w[k : k + 1, s : s + 1], x[k : k + 1])
            np.testing.assert_allclose(out[k, s], single[0, 0], rtol=1e-5, atol=1e-5)


def test_cnn_matches_keras():
    model = CNN((12, 12, 2), 4)
    w = _weights(model, 2, 1)
    x = tf.random.stateless_normal([2, 5, 12, 12, 2], [7, 8])
    out = model.logits(w, x)
    keras = tf.keras
    ref_net = keras.Sequential(
        [
            keras.Input((12, 12, 2)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(4),
        ]
    )
    for k in range(2):
        ref_net.set_weights([p.numpy() for p in model.unflatten(w[k, 0])])
        np.testing.assert_allclose(out[k, 0], ref_net(x[k]), rtol=1e-5, atol=1e-5)


def _reference_resnet(params, x, blocks_per_stage, mask=None):
    """Plain TensorFlow ResNet (PyTorch padding, batch statistics) for one weight set."""
    it = iter(params)

    def conv_bn(h, stride, valid):
        kernel, scale, shift = next(it), next(it), next(it)
        h = tf.nn.conv2d(tf.pad(h, PAD1), kernel, stride, "VALID")
        stats = tf.boolean_mask(h, valid) if valid is not None else h
        mean, var = tf.nn.moments(stats, axes=[0, 1, 2])
        return tf.nn.batch_normalization(h, mean, var, shift, scale, 1e-5)

    valid = None if mask is None else mask > 0
    h = tf.nn.relu(conv_bn(x, 1, valid))
    for width in (16, 32, 64):
        for block in range(blocks_per_stage):
            stride = 2 if (block == 0 and width > 16) else 1
            out = conv_bn(tf.nn.relu(conv_bn(h, stride, valid)), 1, valid)
            if stride == 2:
                h = tf.pad(h[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0], [width // 4] * 2])
            h = tf.nn.relu(out + h)
    kernel, bias = next(it), next(it)
    return tf.reduce_mean(h, axis=[1, 2]) @ kernel + bias


def test_resnet_matches_plain_tf_reference_with_mask():
    model = ResNet56((8, 8, 3), 6, blocks_per_stage=2)
    w = _weights(model, 2, 2)
    x = tf.random.stateless_normal([2, 6, 8, 8, 3], [9, 10])
    mask = tf.constant([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], tf.float32)
    x = tf.where(mask[:, :, None, None, None] > 0, x, 3.0)  # padding rows: far-off values
    out = model.logits(w, x, mask=mask)
    plain = model.logits(w, x)
    for k in range(2):
        for s in range(2):
            params = model.unflatten(w[k, s])
            ref = _reference_resnet(params, x[k], 2, mask[k])
            np.testing.assert_allclose(out[k, s], ref, rtol=1e-4, atol=1e-4)
            ref_nomask = _reference_resnet(params, x[k], 2)
            np.testing.assert_allclose(plain[k, s], ref_nomask, rtol=1e-4, atol=1e-4)
    assert np.abs(out[1] - plain[1]).max() > 1e-2  # the mask matters for device 1


@pytest.mark.parametrize(
    "model", [CNN((8, 8, 1), 3), ResNet56((8, 8, 3), 3, blocks_per_stage=1)], ids=["cnn", "rn8"]
)
def test_lrt_zero_variance_equals_point_path(model):
    mu = _weights(model, 3, 1)[:, 0]
    x = tf.random.stateless_normal([3, 4, 8, 8, model.input_shape[2]], [11, 12])
    seeds = device_seeds(tf.constant([1, 2]), tf.range(3))
    lrt = model.logits_lrt(mu, tf.zeros_like(mu), x, 2, seeds)
    point = model.logits(tf.repeat(mu[:, None], 2, axis=1), x)
    assert lrt.shape == (3, 2, 4, 3)
    np.testing.assert_allclose(lrt, point, rtol=1e-5, atol=1e-5)


def test_lrt_per_device_noise_and_determinism():
    model = ResNet56((8, 8, 3), 3, blocks_per_stage=1)
    mu = _weights(model, 2, 1)[:, 0]
    var = tf.fill(tf.shape(mu), 1e-3)
    x = tf.random.stateless_normal([2, 4, 8, 8, 3], [13, 14])
    seeds = device_seeds(tf.constant([5, 6]), tf.range(2))
    both = model.logits_lrt(mu, var, x, 3, seeds)
    np.testing.assert_array_equal(both, model.logits_lrt(mu, var, x, 3, seeds))
    alone = model.logits_lrt(mu[1:], var[1:], x[1:], 3, seeds[1:])
    np.testing.assert_allclose(both[1], alone[0], rtol=1e-5, atol=1e-5)
    assert np.abs(both[:, 0] - both[:, 1]).max() > 1e-3  # samples differ


def test_lrt_moments_of_last_layer():
    """Variance only on the output layer: logits ~ N(h mu + b, h^2 var_W + var_b) exactly."""
    model = CNN((8, 8, 1), 3)
    mu = _weights(model, 1, 1)[:, 0]
    sizes = [math.prod(s) for s in model.param_shapes]
    var = tf.concat([tf.zeros([sum(sizes[:-2])]), tf.fill([sum(sizes[-2:])], 0.01)], 0)[None]
    x = tf.random.stateless_normal([1, 2, 8, 8, 1], [15, 16])
    num = 4000
    draws = model.logits_lrt(mu, var, x, num, device_seeds(tf.constant([7, 8]), tf.range(1)))
    params = model.unflatten(mu[0])
    h = tf.nn.max_pool2d(
        tf.nn.relu(tf.nn.conv2d(x[0], params[0], 1, "SAME") + params[1]), 2, 2, "VALID"
    )
    h = tf.nn.max_pool2d(
        tf.nn.relu(tf.nn.conv2d(h, params[2], 1, "SAME") + params[3]), 2, 2, "VALID"
    )
    h = tf.nn.relu(tf.reshape(h, [2, -1]) @ params[4] + params[5])
    mean = h @ params[6] + params[7]
    variance = tf.square(h) @ tf.fill([128, 3], 0.01) + 0.01
    sample_mean = tf.reduce_mean(draws[0], axis=0)
    sample_var = tf.math.reduce_variance(draws[0], axis=0)
    # 4000 draws: mean within 5 standard errors, variance within 12 % (~5 sigma)
    np.testing.assert_array_less(np.abs(sample_mean - mean), 5 * np.sqrt(variance / num))
    np.testing.assert_allclose(sample_var, variance, rtol=0.12)


def test_tiny_cnn_gradient_descent_lowers_loss():
    """Synthetic 8x8 task (class = quadrant of a bright blob), K = 2 devices, 30 GD steps."""
    model = CNN((8, 8, 1), 4)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=(2, 32))
    images = 0.1 * rng.standard_normal((2, 32, 8, 8, 1))
    for k, b in np.ndindex(labels.shape):
        r, c = divmod(int(labels[k, b]), 2)
        images[k, b, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4, 0] += 1.0
    x, y = tf.constant(images, tf.float32), tf.constant(labels)
    w = tf.Variable(tf.repeat(model.init_mean(tf.constant([0, 0]))[None, None], 2, axis=0))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model.logits(w, x)[:, 0]
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), axis=1
            )
            total = tf.reduce_sum(loss)
        w.assign_sub(0.05 * tape.gradient(total, w))
        return loss

    first = step().numpy()
    for _ in range(29):
        last = step().numpy()
    assert np.all(last < 0.5 * first), (first, last)


def test_resnet_gradients_flow_through_every_parameter():
    model = ResNet56((8, 8, 3), 3, blocks_per_stage=1)
    w = tf.Variable(_weights(model, 2, 1))
    x = tf.random.stateless_normal([2, 4, 8, 8, 3], [17, 18])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model.logits(w, x)))
    grads = [g.numpy() for g in model.unflatten(tape.gradient(loss, w)[0, 0])]
    assert all(np.abs(g).max() > 0 for g in grads)
