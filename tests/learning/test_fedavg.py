"""FedAvg: exact aggregation is the weighted average of local models; it learns."""

import numpy as np
import tensorflow as tf

from learning.algorithms import build
from learning.algorithms.fedavg import LocalSGD
from learning.models.architectures import build_model
from tests.learning.test_bayes_aircomp import accuracy, blobs_task, exact_round


def test_exact_aggregation_is_weighted_average(rng):
    data, _, _ = blobs_task(rng, num_devices=4)
    model = build_model("mlp", (8,), 4, (8,))
    algo = build("fedavg", model, 4, local_steps=2)
    assert [(p.name, p.num_values) for p in algo.phases()] == [("delta", model.num_params)]
    assert algo.downlink_values() == model.num_params
    state = algo.init(tf.constant([0, 1]))
    updates, _, _ = algo.local_update(0, state, None, data, tf.constant([0, 0]))
    w_k = updates + state.w
    new, _, _ = algo.server_update(0, state, None, tf.reduce_sum(data.weights[:, None] * updates, 0))
    np.testing.assert_allclose(
        new.w.numpy(), tf.reduce_sum(data.weights[:, None] * w_k, 0).numpy(), rtol=1e-5, atol=1e-6
    )
    # batched local SGD equals one device at a time
    for k in range(4):
        w1, _ = algo.solver.run(state.w, data.x[k : k + 1], data.y[k : k + 1], data.mask[k : k + 1])
        np.testing.assert_allclose(w1[0].numpy(), w_k[k].numpy(), rtol=1e-5, atol=1e-6)
    back = algo.state_from_arrays(algo.state_to_arrays(new))
    np.testing.assert_array_equal(back.w.numpy(), new.w.numpy())


def test_penalty_hook_adds_a_gradient_term(rng):
    """The extension point FedProx uses: a proximal term mu/2 ||w - w_t||^2."""

    class Prox(LocalSGD):
        def penalty(self, w, anchor):
            return 0.5 * 0.7 * tf.reduce_sum(tf.square(w - anchor), -1)

    data, _, _ = blobs_task(rng, num_devices=3)
    model = build_model("mlp", (8,), 4, (8,))
    anchor = model.init_mean(tf.constant([1, 1]))
    w0 = anchor[None] + 0.1 * tf.ones([3, model.num_params])
    plain = LocalSGD(model, 0.1, 1, False)._step(w0, anchor, data.x, data.y, data.mask)[0]
    prox = Prox(model, 0.1, 1, False)._step(w0, anchor, data.x, data.y, data.mask)[0]
    np.testing.assert_allclose((plain - prox).numpy(), 0.1 * 0.7 * 0.1, rtol=1e-3)


def test_learns_synthetic_task(rng):
    data, x_test, y_test = blobs_task(rng)
    model = build_model("mlp", (8,), 4, (16, 16))
    algo = build("fedavg", model, 10)
    state = algo.init(tf.constant([0, 1]))
    before = accuracy(algo, state, x_test, y_test)
    for t in range(8):
        state, _ = exact_round(algo, state, data, t)
    after = accuracy(algo, state, x_test, y_test)
    assert after > 0.8 and after > before + 0.2, (before, after)
