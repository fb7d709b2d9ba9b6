"""The MLP's Numba layers on the fused sample (:mod:`learning.local.fused_mlp`) beyond
conformance: the paper's widths against NumPy, workspace reuse.

That they compute what TF's layers compute on the same sample is ``test_conformance.py``.
"""

import numpy as np
import pytest

from learning.local import fused_mlp
from learning.models.model import MLP


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
