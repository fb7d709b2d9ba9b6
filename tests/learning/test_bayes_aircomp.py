"""The proposed algorithm: exact two-phase aggregation = Gaussian conflation; it learns."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from learning.algorithms import ALGORITHMS, build
from learning.algorithms.base import DeviceData, FederatedAlgorithm
from learning.algorithms.bayes_aircomp import BayesCarry
from learning.local import covariance
from learning.models.architectures import build_model
from learning.posterior import conflate
from learning.runtime import Runtime


def blobs_task(rng, num_devices=10, num_classes=4, dim=8, max_size=12, labels_per_device=2):
    """Gaussian blobs split non-i.i.d. (2 labels per device, unequal padded sizes) + test set."""
    centers = 2.0 * rng.normal(size=(num_classes, dim))
    x = np.zeros((num_devices, max_size, dim), np.float32)
    y = np.zeros((num_devices, max_size), np.int32)
    mask = np.zeros((num_devices, max_size), np.float32)
    sizes = rng.integers(4, max_size + 1, num_devices)
    for k in range(num_devices):
        labels = rng.choice(rng.choice(num_classes, labels_per_device, replace=False), sizes[k])
        x[k, : sizes[k]] = centers[labels] + rng.normal(size=(sizes[k], dim))
        y[k, : sizes[k]] = labels
        mask[k, : sizes[k]] = 1.0
    data = DeviceData(
        tf.constant(x), tf.constant(y), tf.constant(mask),
        tf.constant(sizes / sizes.sum(), tf.float32),
    )
    y_test = rng.integers(0, num_classes, 400)
    x_test = (centers[y_test] + rng.normal(size=(400, dim))).astype(np.float32)
    return data, x_test, y_test


def exact_round(algo, state, data, round_index):
    """One round with an error-free air interface: estimate = sum_k pi_k updates_k."""
    carry, metrics = None, {}
    for phase in range(len(algo.phases())):
        updates, carry, m = algo.local_update(
            phase, state, carry, data, tf.constant([round_index, phase])
        )
        estimate = tf.reduce_sum(data.weights[:, None] * updates, axis=0)
        state, carry, m2 = algo.server_update(phase, state, carry, estimate)
        metrics.update(m, **m2)
    return state, metrics


def accuracy(algo, state, x, y):
    probs = algo.predict_probs(state, x, 8, tf.constant([5, 5])).numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    return float(np.mean(probs.argmax(1) == y))


@pytest.mark.parametrize("covariance_parameter", covariance.NAMES)
@pytest.mark.parametrize("estimator", ["reparameterization", "local_reparameterization"])
def test_two_phase_exact_aggregation_is_conflation(rng, estimator, covariance_parameter):
    """Every reading of phase 1's parameter: an error-free round is the exact Gaussian
    conflation of the local posteriors N(rho_{t+1}/rho_k nu_k, diag(rho_k)^-1)."""
    data, _, _ = blobs_task(rng, num_devices=5)
    model = build_model("mlp", (8,), 4, (8,))
    algo = build("bayes_aircomp", model, 5, estimator=estimator, learning_rate=0.2, init_std=0.3,
                 covariance_parameter=covariance_parameter)
    assert isinstance(algo, FederatedAlgorithm)
    state = algo.init(tf.constant([0, 1]))
    up_rho, carry, _ = algo.local_update(0, state, None, data, tf.constant([1, 0]))
    mid, carry, _ = algo.server_update(
        0, state, carry, tf.reduce_sum(data.weights[:, None] * up_rho, 0)
    )
    # phase 1 moved rho only
    np.testing.assert_array_equal(mid.mu.numpy(), state.mu.numpy())
    assert np.abs(mid.rho.numpy() - state.rho.numpy()).max() > 0
    up_nu, carry, _ = algo.local_update(1, mid, carry, data, tf.constant([1, 1]))
    new, _, _ = algo.server_update(1, mid, carry, tf.reduce_sum(data.weights[:, None] * up_nu, 0))
    # phase 2 moved mu only
    np.testing.assert_array_equal(new.rho.numpy(), mid.rho.numpy())
    rho_k = carry.rho_k
    nu_k = up_nu + state.mu32
    ref = conflate(mid.rho32 / rho_k * nu_k, rho_k, data.weights)
    np.testing.assert_allclose(new.rho.numpy(), ref.rho.numpy(), rtol=1e-6)
    np.testing.assert_allclose(new.mu.numpy(), ref.mu.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(new.mu.numpy() - state.mu.numpy()).max() > 1e-3


def test_protocol_bookkeeping(rng):
    model = build_model("mlp", (8,), 4, (8,))
    algo = build("bayes_aircomp", model, 10, init_std=0.1)
    d = model.num_params
    assert [(p.name, p.num_values) for p in algo.phases()] == [("rho", d), ("nu", d)]
    assert algo.downlink_values() == 2 * d
    state = algo.init(tf.constant([3, 4]))
    np.testing.assert_allclose(state.rho.numpy(), 100.0, rtol=1e-6)
    back = algo.state_from_arrays(algo.state_to_arrays(state))
    np.testing.assert_array_equal(back.mu.numpy(), state.mu.numpy())
    assert algo.is_finite(state)
    bad = algo.state_from_arrays({"mu": state.mu.numpy() * np.nan, "rho": state.rho.numpy()})
    assert not algo.is_finite(bad)


def test_server_floor_counts_hits(rng):
    model = build_model("mlp", (8,), 4, (8,))
    algo = build("bayes_aircomp", model, 10, init_std=0.5, min_precision=2.0)
    state = algo.init(tf.constant([3, 4]))
    estimate = -tf.ones([model.num_params]) * tf.constant([3.0] * 5 + [0.0] * (model.num_params - 5))
    new, _, metrics = algo.server_update(0, state, None, estimate)
    assert int(metrics["precision_floor_hits"]) == 5
    assert float(tf.reduce_min(new.rho)) == 2.0
    # phase 2 gets the applied update: the estimate itself, floor - rho_t where clamped
    carry = BayesCarry(tf.zeros([2, model.num_params]), state.rho)
    _, carry, _ = algo.server_update(0, state, carry, estimate + 1e-7)
    want = np.where(np.arange(model.num_params) < 5, 2.0 - 4.0, 1e-7).astype(np.float32)
    np.testing.assert_array_equal(carry.delta_rho.numpy(), want)


def test_registry_errors():
    model = build_model("mlp", (8,), 4, (8,))
    assert {"bayes_aircomp", "fedavg"} <= set(ALGORITHMS)
    with pytest.raises(ValueError, match="fedavg"):
        build("fedavgg", model, 3)
    with pytest.raises(ValueError, match="learning_rat"):
        build("bayes_aircomp", model, 3, learning_rat=0.1)


@pytest.mark.parametrize(
    "hyper",
    [
        # the paper's summed NLL: eta = 0.1 collapses on this task (about ten samples per
        # device make the summed loss ~10x the mean), so a smaller step is used here
        {"estimator": "reparameterization", "learning_rate": 0.02},
        {"estimator": "local_reparameterization", "learning_rate": 0.02},
        {"estimator": "reparameterization", "nll_reduction": "mean", "learning_rate": 0.1},
    ],
)
def test_learns_synthetic_task(rng, hyper):
    data, x_test, y_test = blobs_task(rng)
    model = build_model("mlp", (8,), 4, (16, 16))
    algo = build("bayes_aircomp", model, 10, **hyper)
    state = algo.init(tf.constant([0, 1]))
    before = accuracy(algo, state, x_test, y_test)
    for t in range(8):
        state, metrics = exact_round(algo, state, data, t)
    after = accuracy(algo, state, x_test, y_test)
    assert algo.is_finite(state)
    assert after > 0.8 and after > before + 0.2, (before, after)  # chance: 0.25
    assert int(metrics["precision_floor_hits"]) == 0


@pytest.mark.parametrize("estimator", ["reparameterization", "local_reparameterization"])
def test_device_chunks_change_no_number(rng, estimator):
    """Chunks of 3 (with a ragged last chunk) give the updates and state of one call for all 7."""
    data, _, _ = blobs_task(rng, num_devices=7)
    model = build_model("mlp", (8,), 4, (8,))
    results = []
    for chunk in (None, 3):
        algo = build("bayes_aircomp", model, 7, estimator=estimator, learning_rate=0.05,
                     init_std=0.3, runtime=Runtime(device_chunk=chunk))
        state = algo.init(tf.constant([0, 1]))
        state, metrics = exact_round(algo, state, data, 0)
        results.append((state.mu.numpy(), state.rho.numpy(), float(metrics["train_loss"])))
    (mu_a, rho_a, loss_a), (mu_b, rho_b, loss_b) = results
    np.testing.assert_allclose(mu_b, mu_a, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(rho_b, rho_a, rtol=1e-6, atol=1e-9)
    assert loss_b == pytest.approx(loss_a, rel=1e-6)


def _counted_take(take, shapes: list, shape, *args, **kwargs):
    shapes.append(tuple(shape))
    return take(shape, *args, **kwargs)


def test_numba_chunks_write_the_rows_of_one_update_array(rng):
    """With the Numba local-reparameterization steps, chunks of 3 of 7 devices write their
    rows of one [7, d] array per phase (no chunk array, no concatenation: at K = 10,000 a
    fresh [K, d] array per phase cost seconds of the kernel's page zeroing), and both
    phases' updates equal one call's bit for bit."""
    data, _, _ = blobs_task(rng, num_devices=7)
    model = build_model("mlp", (8,), 4, (8,))
    updates, shapes = [], []
    for chunk in (None, 3):
        algo = build("bayes_aircomp", model, 7, estimator="local_reparameterization",
                     learning_rate=0.05, init_std=0.3, runtime=Runtime(backend="numba", device_chunk=chunk))
        pool = algo.trainer.backend.buffers
        pool.take = functools.partial(_counted_take, pool.take, shapes)
        state, carry, found = algo.init(tf.constant([0, 1])), None, []
        for phase in range(2):
            update, carry, _ = algo.local_update(phase, state, carry, data, tf.constant([0, phase]))
            found.append(update.numpy().copy())
            estimate = tf.reduce_sum(data.weights[:, None] * update, axis=0)
            state, carry, _ = algo.server_update(phase, state, carry, estimate)
        updates.append(found)
    assert shapes == [(7, model.num_params)] * 4
    for one, chunked in zip(*updates):
        np.testing.assert_array_equal(chunked, one)


def test_posterior_mean_prediction_of_a_hand_built_posterior(rng):
    """predict_mean_probs is softmax(f(x; mu)) of the float32 mean, whatever the std: its
    accuracy, NLL and ECE equal a direct computation (a NumPy forward pass of mu, argmax
    against the labels)."""
    from learning.algorithms.bayes_aircomp import BayesState
    from learning.metrics import evaluate_probs  # what the engine evaluates with

    model = build_model("mlp", (6,), 3, (5,))
    algo = build("bayes_aircomp", model, 4)
    d = model.num_params
    mu = rng.normal(0.0, 0.7, d)
    rho = rng.uniform(1.0, 50.0, d)  # a large, uneven std: samples would differ from mu
    state = BayesState(tf.constant(mu, tf.float64), tf.constant(rho, tf.float64))
    x = rng.normal(size=(300, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 300)

    w = mu.astype(np.float32)
    w1, b1 = w[:30].reshape(6, 5), w[30:35]
    w2, b2 = w[35:50].reshape(5, 3), w[50:53]
    assert d == 53
    logits = np.maximum(x @ w1 + b1, 0.0) @ w2 + b2
    direct = np.exp(logits - logits.max(1, keepdims=True))
    direct /= direct.sum(1, keepdims=True)

    probs = algo.predict_mean_probs(state, x, chunk=128).numpy()
    np.testing.assert_allclose(probs, direct, rtol=1e-4, atol=1e-6)
    ev = evaluate_probs(probs, labels)
    assert ev.accuracy == np.mean(logits.argmax(1) == labels)
    np.testing.assert_allclose(ev.nll, np.mean(-np.log(direct[np.arange(300), labels])), rtol=1e-5)
    sampled = algo.predict_probs(state, x, 4, tf.constant([1, 2])).numpy()
    assert np.abs(sampled - probs).max() > 0.05  # the S-sample predictive is another thing


@pytest.mark.parametrize(("init", "rho_init"), [("bayesian_torch", -3.0), ("blitz", -7.0),
                                                 ("blitz_0.2.3", -6.0)])
def test_library_inits_draw_the_libraries_means_and_stds(init, rho_init):
    """init = <library>: every mean (biases too) ~ N(0, 0.1^2); every std softplus(r),
    r ~ N(posterior_rho_init, 0.1^2) (bayesian-torch 0.5.0, Blitz 0.2.8 / 0.2.3)."""
    from scipy import stats

    model = build_model("mlp", (30,), 10, (200,))  # d = 8,210
    state = build("bayes_aircomp", model, 4, init=init).init(tf.constant([4, 2]))
    mu, rho = state.mu.numpy(), state.rho.numpy()
    assert mu.shape == rho.shape == (model.num_params,)
    assert abs(mu.mean()) < 0.005 and abs(mu.std() - 0.1) < 0.003
    r = np.log(np.expm1(rho**-0.5))  # softplus^-1 of the std
    assert abs(r.mean() - rho_init) < 0.005 and abs(r.std() - 0.1) < 0.003
    assert stats.kstest(mu / 0.1, "norm").pvalue > 1e-3
    assert stats.kstest((r - rho_init) / 0.1, "norm").pvalue > 1e-3
    biases = mu[30 * 200 : 30 * 200 + 200]
    assert np.all(biases != 0.0)  # unlike He's zero biases
    np.testing.assert_allclose(np.median(rho**-0.5), np.log1p(np.exp(rho_init)), rtol=0.02)


def test_he_init_is_unchanged_and_library_init_refuses_an_init_std():
    model = build_model("mlp", (30,), 10, (200,))
    state = build("bayes_aircomp", model, 4, init_std=0.0025).init(tf.constant([4, 2]))
    np.testing.assert_array_equal(state.rho.numpy(), np.float32(0.0025**-2))
    np.testing.assert_array_equal(state.mu.numpy(), model.init_mean(tf.constant([4, 2])).numpy())
    with pytest.raises(ValueError, match='init_std: is the std of init = "he" only'):
        build("bayes_aircomp", model, 4, init="blitz", init_std=0.0025)
