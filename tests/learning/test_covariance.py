"""The covariance parameterization (learning/local/covariance.py): every reading's q, slope,
floor and transmitted precision change, a hand-computed softplus step, and a server
that keeps small changes."""

import math

import numpy as np
import pytest
import tensorflow as tf

from learning.algorithms import build
from learning.local import covariance
from learning.local.trainer import LocalConfig, LocalTrainer
from learning.models.model import MLP
from learning.runtime import Runtime


def _softplus(x):
    return np.log1p(np.exp(x))


def _theta_of_sigma(reading, sigma):
    """The reading's parameter at std ``sigma`` (float64), the textbook definitions."""
    return {
        "precision": lambda: sigma**-2.0,
        "softplus_std": lambda: np.log(np.expm1(sigma)),
        "log_std": lambda: np.log(sigma),
        "log_precision": lambda: np.log(sigma**-2.0),
    }[reading]()


def _sigma_of_theta(reading, theta):
    return {
        "precision": lambda: theta**-0.5,
        "softplus_std": lambda: _softplus(theta),
        "log_std": lambda: np.exp(theta),
        "log_precision": lambda: np.exp(-0.5 * theta),
    }[reading]()


@pytest.mark.parametrize("name", covariance.NAMES)
def test_reading_matches_its_textbook_definition(name):
    """q = sigma(theta_t + delta) / sigma_t - 1, its slope (TF autodiff in float64), the
    precision change and the floor, against the plain definitions in float64."""
    reading = covariance.reading(name)
    rng = np.random.default_rng(1)
    sigma_t = rng.uniform(0.02, 0.5, 200)
    rho_t = sigma_t**-2.0
    step = {"precision": 0.05 * rho_t}.get(name, 0.05)
    delta = rng.uniform(-1.0, 1.0, 200) * step
    anchor = reading.anchor(rho_t, sigma_t)
    q, slope = reading.std_change(delta, sigma_t, anchor)
    theta_t = _theta_of_sigma(name, sigma_t)
    want_sigma = _sigma_of_theta(name, theta_t + delta)
    np.testing.assert_allclose(sigma_t * (1.0 + q), want_sigma, rtol=1e-10)
    # the slope is the derivative of q (autodiff of the same formula on tensors)
    d = tf.constant(delta, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(d)
        q_tf, _ = reading.std_change(d, tf.constant(sigma_t), tf.constant(anchor), tf.math)
    np.testing.assert_allclose(tape.gradient(q_tf, d).numpy(), slope, rtol=1e-9)
    np.testing.assert_allclose(q_tf.numpy(), q, rtol=1e-12)
    # the transmitted change of the precision, without cancellation at tiny delta
    np.testing.assert_allclose(rho_t * covariance.relative_precision_change(q), want_sigma**-2.0 - rho_t,
                               rtol=1e-8)
    tiny = delta * 1e-9
    q_tiny, slope_tiny = reading.std_change(tiny, sigma_t, anchor)
    np.testing.assert_allclose(q_tiny, slope_tiny * tiny, rtol=1e-6)
    # the floor: at delta = limit the precision is min_precision (the limit is float32)
    floor = 2.0
    limit = reading.limit(rho_t, floor).astype(np.float64)
    q_floor, _ = reading.std_change(limit, sigma_t, anchor)
    np.testing.assert_allclose(rho_t * (1.0 + covariance.relative_precision_change(q_floor)), floor, rtol=1e-4)
    assert reading.increasing == bool(np.all(slope > 0))


@pytest.mark.parametrize("name", covariance.NAMES)
def test_kernel_forms_equal_the_host_forms(name):
    """The Numba forms (bound to ``math``) give the NumPy forms' q and the transmitted change."""
    reading = covariance.reading(name)
    rng = np.random.default_rng(2)
    rho_t = rng.uniform(4.0, 500.0, 300).astype(np.float32)
    sigma_t, anchor, _ = reading.phase_constants(rho_t, 1.0)
    scale = {"precision": 0.01 * rho_t}.get(name, 0.01)
    delta = (rng.uniform(-1, 1, 300) * scale).astype(np.float32)
    out = np.empty_like(delta)
    covariance.precision_change_row(reading.code, delta, sigma_t, anchor, rho_t, out)
    q, _ = reading.std_change(delta.astype(np.float64), sigma_t.astype(np.float64), anchor.astype(np.float64))
    want = delta if name == "precision" else rho_t * covariance.relative_precision_change(q)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-12)
    np.testing.assert_allclose(covariance.kl_gap(q), q * (2 + q) - 2 * np.log1p(q), rtol=1e-6, atol=1e-18)


def _one_device(rng, batch=6, num_classes=5):
    x = rng.uniform(0, 1, (1, batch, 3, 4)).astype(np.float32)
    y = rng.integers(0, num_classes, (1, batch)).astype(np.int32)
    mask = np.ones((1, batch), np.float32)
    return tf.constant(x), tf.constant(y), tf.constant(mask), tf.constant([1.0], tf.float32)


@pytest.mark.parametrize("backend", ["tensorflow", "numba"])
def test_one_softplus_step_moves_sigma_by_the_hand_computed_amount(rng, backend):
    """bayesian-torch's reading: theta = softplus^-1(sigma), one step of eta on theta.
    At delta = 0 the KL's gradient is 0, so ``theta_1 = theta_t - eta dL_task/dsigma
    sigmoid(theta_t)``; the device's new std is softplus(theta_1) and what it transmits
    is the change of its precision, ``softplus(theta_1)^-2 - rho_t``."""
    model = MLP(input_shape=(3, 4), num_classes=5, hidden_units=(7,))
    eta = 0.1
    config = LocalConfig(kl_scale=3.0, learning_rate=eta, local_steps=1, mc_samples=3,
                         covariance_parameter="softplus_std")
    noise = "tensorflow" if backend == "tensorflow" else "philox"
    trainer = LocalTrainer(model, config, Runtime(backend=backend, noise=noise))
    x, y, mask, weights = _one_device(rng)
    mu_t = model.init_mean(tf.constant([1, 2]))
    sigma_t = np.float32(_softplus(-3.0))  # bayesian-torch's initial rho = -3
    rho_t = tf.fill([model.num_params], tf.constant(float(sigma_t) ** -2, tf.float32))
    seed = tf.constant([3, 4])
    delta_rho, _, hits = trainer.rho_phase(mu_t, rho_t, x, y, mask, weights, seed)
    assert int(hits) == 0

    std = tf.fill([1, model.num_params], tf.math.rsqrt(rho_t[0]))
    seeds = trainer.definition.step_seeds(seed, 0, tf.range(1))
    with tf.GradientTape() as tape:
        tape.watch(std)
        task = trainer.definition.task_loss(mu_t[None], std, x, y, mask, seeds)
    g_sigma = tape.gradient(task, std).numpy()[0].astype(np.float64)
    sigma = 1.0 / math.sqrt(float(rho_t[0]))
    theta_t = math.log(math.expm1(sigma))
    theta_1 = theta_t - eta * g_sigma / (1.0 + math.exp(-theta_t))
    sigma_1 = _softplus(theta_1)
    moved = sigma_1 - sigma
    assert np.abs(moved).max() > 1e-4 * sigma  # the step moves sigma (the precision reading: ~1e-8)
    got_sigma = (rho_t.numpy().astype(np.float64) + delta_rho.numpy()[0]) ** -0.5
    np.testing.assert_allclose(got_sigma - sigma, moved, rtol=2e-3, atol=1e-7 * sigma)
    np.testing.assert_allclose(delta_rho.numpy()[0], sigma_1**-2.0 - float(rho_t[0]), rtol=2e-3,
                               atol=1e-3 * np.abs(sigma_1**-2.0 - float(rho_t[0])).max())


def test_server_keeps_changes_far_below_float32_spacing():
    """An aggregated change of 1e-7 (and 1e-9) relative per round survives: after 300
    rounds the global precision has moved by 300 x the change, which a float32 running
    sum at rho ~ 424 (spacing 3e-5) rounds to a different value or to nothing."""
    model = MLP(input_shape=(4,), num_classes=3, hidden_units=(5,))
    algo = build("bayes_aircomp", model, 4, init_std=0.048587)
    state = algo.init(tf.constant([0, 1]))
    rho_0 = state.rho.numpy()
    assert rho_0.dtype == np.float64 and abs(rho_0[0] - 423.6) < 0.1
    for relative in (1e-7, 1e-9):
        state = algo.init(tf.constant([0, 1]))
        estimate = tf.constant(np.float32(relative * rho_0[0]) * np.ones(model.num_params, np.float32))
        rho32 = state.rho32.numpy()
        for _ in range(300):
            state, _, _ = algo.server_update(0, state, None, estimate)
            rho32 = rho32 + estimate.numpy()
        want = rho_0 + 300 * np.float64(estimate.numpy())
        np.testing.assert_allclose(state.rho.numpy(), want, rtol=1e-13)
        assert abs((rho32[0] - rho_0[0]) / (want[0] - rho_0[0]) - 1.0) > 0.1  # float32 would lose it
        metrics = algo.round_metrics(algo.init(tf.constant([0, 1])), state)
        assert metrics["precision_rel_change"] == pytest.approx(300 * relative, rel=1e-3)


def test_round_metrics_report_the_posterior(rng):
    model = MLP(input_shape=(4,), num_classes=3, hidden_units=(5,))
    algo = build("bayes_aircomp", model, 4, init_std=0.1)
    before = algo.init(tf.constant([0, 1]))
    d = model.num_params
    change = np.zeros(d, np.float32)
    change[: d // 4] = 1.0  # a quarter of the entries: 100 -> 101
    after, _, _ = algo.server_update(0, before, None, tf.constant(change))
    metrics = algo.round_metrics(before, after)
    assert metrics["precision_changed_fraction"] == pytest.approx((d // 4) / d)
    assert metrics["precision_rel_change"] == pytest.approx((d // 4) / d * 0.01)
    std = np.where(np.arange(d) < d // 4, 101.0**-0.5, 0.1)
    for q in (5, 50, 95):
        assert metrics[f"posterior_std_p{q:02d}"] == pytest.approx(np.percentile(std, q))


def test_unknown_reading_is_refused():
    with pytest.raises(ValueError, match="covariance_parameter"):
        LocalConfig(kl_scale=1.0, covariance_parameter="sigma")
    with pytest.raises(ValueError, match="softplus_std"):
        covariance.reading("sigma")


def test_kl_gap_slope_is_the_derivative_of_the_kl_gap_and_the_kernel_gap_matches():
    """Both the TF custom gradient and the Numba phase-1 gradient use kl_gap_slope: it must
    be d(gap / 2)/dq (float64 central differences), and the Numba gap must equal the
    NumPy one on both sides of KL_SERIES_BOUND."""
    from numba import njit

    q = np.concatenate([np.linspace(-0.5, 0.5, 41), [-3e-3, 2e-4, 9.9e-3, 1.01e-2]])
    h = 1e-6
    numeric = (covariance.kl_gap(q + h) - covariance.kl_gap(q - h)) / (4 * h)
    np.testing.assert_allclose(covariance.kl_gap_slope(q), numeric, rtol=1e-6, atol=1e-10)
    kernel = njit(lambda values: np.array([covariance.nb_kl_gap(v) for v in values]))
    np.testing.assert_allclose(kernel(q), covariance.kl_gap(q), rtol=1e-12, atol=1e-20)
    kernel_slope = njit(lambda values: np.array([covariance.nb_kl_gap_slope(v) for v in values]))
    np.testing.assert_allclose(kernel_slope(q), covariance.kl_gap_slope(q), rtol=1e-12)


@pytest.mark.parametrize("name", ["softplus_std", "log_std", "log_precision"])
@pytest.mark.parametrize("spread", [0.004, 0.5], ids=["all-series", "mixed"])
def test_the_kernels_series_and_exact_entries_equal_the_definition(name, spread):
    """The kernels take q from float32 series where |delta| <= SERIES_DELTA_BOUND and from
    the exact forms elsewhere: every entry, of either kind, equals the float64 definition
    (the transmitted change, the sampling std and variance, one update step and its KL
    gap), in place or not."""
    from learning.local.fused_local import phase1_std, rho_update_serial
    from learning.local.fused_lrt import _layer_params

    reading = covariance.reading(name)
    rng = np.random.default_rng(5)
    size = 5000
    rho_t = rng.uniform(4.0, 500.0, size).astype(np.float32)
    sigma_t, anchor, limit = reading.phase_constants(rho_t, 1.0)
    delta = (rng.uniform(-1, 1, size) * spread).astype(np.float32)
    beyond = np.abs(delta) > covariance.SERIES_DELTA_BOUND
    assert beyond.any() == (spread > 0.01)
    q, slope = reading.std_change(delta.astype(np.float64), sigma_t.astype(np.float64),
                                  anchor.astype(np.float64))
    sigma_k = sigma_t * (1.0 + q)

    out = np.empty_like(delta)
    covariance.precision_change_row(reading.code, delta, sigma_t, anchor, rho_t, out)
    in_place = delta.copy()
    covariance.precision_change_row(reading.code, in_place, sigma_t, anchor, rho_t, in_place)
    want = rho_t * covariance.relative_precision_change(q)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-12)
    np.testing.assert_array_equal(in_place, out)

    std = np.empty_like(delta)
    phase1_std(reading.code, delta, sigma_t, anchor, std)
    np.testing.assert_allclose(std, sigma_k, rtol=2e-6)
    var = np.empty_like(delta)
    _layer_params(True, reading.code, sigma_t, anchor, delta, var)
    np.testing.assert_allclose(var, sigma_k**2, rtol=4e-6)

    g_std = rng.normal(0, 1.0, size).astype(np.float32)
    weight, rate = 3e-3, 1e-3
    step = np.empty_like(delta)
    kl, _ = rho_update_serial(reading.code, delta, sigma_t, anchor, limit, g_std, weight, rate,
                              reading.increasing, step)
    grad = (g_std * sigma_t + weight * covariance.kl_gap_slope(q)) * slope
    new = delta - rate * grad
    new = np.minimum(new, limit) if reading.increasing else np.maximum(new, limit)
    np.testing.assert_allclose(step, new, rtol=1e-5, atol=1e-7 * np.abs(new).max())
    np.testing.assert_allclose(kl, 0.5 * covariance.kl_gap(q).sum(), rtol=1e-5)


def test_series_mask_counts_what_it_marks_on_nan_and_inf():
    """``beyond`` equals the entries ``keep`` marks False, non-finite ones included: under
    fast-math the count skipped NaN while the mask did not, and ``precision_change_row``
    wrote past its buffer of ``beyond`` exact values (a diverging run's heap corrupted)."""
    from learning.local.covariance import SOFTPLUS_STD, precision_change_row, series_mask

    delta = np.array([0.001, np.nan, 0.5, -np.inf, np.inf, 0.0, np.nan] * 5, np.float32)
    beyond, keep = series_mask(delta)
    assert beyond == int((~keep).sum()) == 25
    sigma = np.full(delta.size, 0.05, np.float32)
    anchor = np.full(delta.size, 0.3, np.float32)
    rho = np.full(delta.size, 400.0, np.float32)
    out = np.empty_like(delta)
    precision_change_row(SOFTPLUS_STD, delta, sigma, anchor, rho, out)
    finite = np.isfinite(delta)
    alone = np.empty(int(finite.sum()), np.float32)
    precision_change_row(SOFTPLUS_STD, delta[finite], sigma[finite], anchor[finite],
                         rho[finite], alone)
    np.testing.assert_array_equal(out[finite], alone)  # the finite entries as if alone
    assert np.isnan(out[np.isnan(delta)]).all()  # (an infinite delta has a finite limit)
