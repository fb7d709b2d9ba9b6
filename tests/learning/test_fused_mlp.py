"""The MLP's Numba layers on the fused sample compute what TF's layers compute on it."""

import numpy as np
import pytest
import tensorflow as tf

from learning import fused_mlp
from learning.models import MLP, build_model
from native.sampling import sample_weights


def _both_paths(model, mean, std, seeds, num_mc, x, mask, weight):
    """Logits and (dL/dmean, dL/dstd) of ``L = sum(weight * logits * mask)`` along the
    Numba layers and along TF's layers on the same fused sample."""

    @tf.function
    def run(mean, std):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([mean, std])
            fused = model.logits_sampled(mean, std, seeds, num_mc, x, mask)
            params = sample_weights(mean, std, seeds, num_mc, model.param_shapes)
            plain = model.logits_from_params(params, x) * mask[:, None, :, None]
            losses = [tf.reduce_sum(weight * t * mask[:, None, :, None]) for t in (fused, plain)]
        grads = [tape.gradient(loss, [mean, std]) for loss in losses]
        return fused, plain, grads

    return run(mean, std)


@pytest.mark.parametrize("num_devices,shared", [(1, None), (3, "mean"), (3, "std"), (2, None)])
def test_numba_layers_match_tf_layers_on_the_same_sample(rng, num_devices, shared):
    """Values and both gradients, with padding rows (and a device with none), 2-D inputs, shared or per-device
    mean/std, several devices (the map) and one (the static path); widths below and
    above the forward's column split (128) and a layer narrower than the row block."""
    model = build_model("mlp", (3, 7), 4, (130, 9))
    num_mc, batch = 3, 6
    d = model.num_params
    seeds = tf.constant(rng.integers(0, 2**31, size=(num_devices, 2)), tf.int32)
    mean = tf.constant(rng.normal(0, 0.3, (1 if shared == "mean" else num_devices, d)), tf.float32)
    std = tf.constant(rng.uniform(0.05, 0.3, (1 if shared == "std" else num_devices, d)), tf.float32)
    x = tf.constant(rng.normal(size=(num_devices, batch, 3, 7)), tf.float32)
    rows = rng.integers(1, batch + 1, num_devices)
    rows[0], rows[-1] = batch, batch - 2  # one device without padding (if K > 1), one with
    if num_devices == 3:
        rows[1] = 0  # a device without data (pi_k = 0) still passes through
    mask = tf.constant(np.arange(batch)[None] < rows[:, None], tf.float32)
    weight = tf.constant(rng.normal(size=(num_devices, num_mc, batch, 4)), tf.float32)

    fused, plain, ((fm, fs), (pm, ps)) = _both_paths(model, mean, std, seeds, num_mc, x, mask, weight)

    np.testing.assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-5, atol=1e-5)
    padding = np.broadcast_to((mask.numpy() == 0)[:, None, :, None], fused.shape)
    assert padding.any() and np.all(fused.numpy()[padding] == 0)
    for got, want in ((fm, pm), (fs, ps)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    assert np.abs(ps.numpy()).max() > 1e-2  # the comparison is not between zeros


def test_paper_mlp_forward_matches_numpy(rng):
    """At the paper's widths (784-256x5-10, M = 5), against a float64 NumPy forward."""
    model = MLP((784,), 10, (256,) * 5)
    net = fused_mlp.FusedMLP(model.layer_sizes, 5)
    mean = rng.normal(0, 0.05, model.num_params).astype(np.float32)
    std = np.full(model.num_params, 0.02, np.float32)
    x = rng.uniform(0, 1, (12, 784)).astype(np.float32)
    mask = np.ones(12, np.float32)
    logits, buffer, _ = net.forward(mean, std, (5, 6), x, mask)
    weights = [w.astype(np.float64) for w in net.layout.views(buffer)]
    h = np.broadcast_to(x.astype(np.float64), (5, 12, 784))
    for i, (n_in, n_out) in enumerate(model.layer_sizes):
        h = h @ weights[2 * i].reshape(5, n_in, n_out) + weights[2 * i + 1][:, None]
        if i < 5:
            h = np.maximum(h, 0.0)
    np.testing.assert_allclose(logits, h, rtol=1e-4, atol=1e-4)


def test_workspace_reuse_changes_nothing(rng):
    """Two devices in a row through one workspace (different batches, the second
    larger) give what fresh arrays give; a wrong ``out`` for the sample is refused."""
    model = MLP((6,), 3, (20, 7))
    net = fused_mlp.FusedMLP(model.layer_sizes, 2)
    work = fused_mlp.Workspace(net)
    for seed, batch in (((1, 2), 4), ((3, 4), 9)):
        mean = rng.normal(0, 0.3, model.num_params).astype(np.float32)
        std = rng.uniform(0.1, 0.3, model.num_params).astype(np.float32)
        x = rng.normal(size=(batch, 6)).astype(np.float32)
        mask = (np.arange(batch) < batch - 1).astype(np.float32)
        grad = rng.normal(size=(2, batch, 3)).astype(np.float32)
        fresh = net.forward(mean, std, seed, x, mask)
        reused = net.forward(mean, std, seed, x, mask, workspace=work)
        assert np.array_equal(fresh[0], reused[0])  # logits
        for a, b in zip(net.layout.views(fresh[1]), net.layout.views(reused[1]), strict=True):
            assert np.array_equal(a, b)  # the weight sample (hidden: through the backward)
        want = net.backward(grad, *fresh[1:], mean, std, x, mask)
        got = net.backward(grad, *reused[1:], mean, std, x, mask, workspace=work)
        assert got[0] is work.g_mean
        for a, b in zip(want, got, strict=True):
            assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="out must be float32"):
        net.layout.fill_buffer(mean, std, (1, 2), out=np.empty(3, np.float32))
