"""Local objective and the two-phase local updates, batched over devices."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from learning.local.trainer import LocalConfig, LocalTrainer
from learning.models.architectures import build_model
from learning.posterior import kl_precision
from learning.runtime import Runtime
from native import sampling

K, B, D, C = 3, 5, 4, 3
ESTIMATORS = ["reparameterization", "local_reparameterization"]


def _setup(rng, runtime=None, **config):
    """A small MLP, three devices (one padded twice), ``rho_t = 25``; the trainer on
    ``runtime`` (default: the auto backend, XLA off: XLA is checked once, in
    test_xla_default_for_lrt_is_batch_independent)."""
    model = build_model("mlp", (D,), C, (6, 5))
    x = tf.constant(rng.normal(size=(K, B, D)), tf.float32)
    y = tf.constant(rng.integers(0, C, size=(K, B)), tf.int32)
    mask = tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], tf.float32)
    weights = tf.constant([0.5, 0.3, 0.2], tf.float32)
    mu = model.init_mean(tf.constant([1, 2]))
    rho = tf.fill([model.num_params], 25.0)
    trainer = LocalTrainer(model, LocalConfig(kl_scale=K, **config), runtime or Runtime(jit_compile=False))
    return trainer, mu, rho, (x, y, mask, weights)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_batched_equals_single_device(rng, estimator):
    trainer, mu, rho, (x, y, mask, w) = _setup(rng, estimator=estimator)
    seed1, seed2 = tf.constant([3, 4]), tf.constant([5, 6])
    d_rho, loss1, _ = trainer.rho_phase(mu, rho, x, y, mask, w, seed1)
    rho_next = rho + tf.reduce_sum(w[:, None] * d_rho, 0)
    nu_k, loss2 = trainer.nu_phase(mu, rho, rho_next, d_rho, x, y, mask, w, seed2)
    for k in range(K):
        sl = slice(k, k + 1)
        args = (x[sl], y[sl], mask[sl], w[sl])
        r1, l1, _ = trainer.rho_phase(mu, rho, *args, seed1, device_ids=[k])
        n1, l2 = trainer.nu_phase(mu, rho, rho_next, d_rho[sl], *args, seed2, device_ids=[k])
        np.testing.assert_allclose(r1[0].numpy(), d_rho[k].numpy(), rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(n1[0].numpy(), nu_k[k].numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(l1[:, 0].numpy(), loss1[:, k].numpy(), rtol=1e-5)
        np.testing.assert_allclose(l2[:, 0].numpy(), loss2[:, k].numpy(), rtol=1e-5)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_device_loop_matches_batched(rng, estimator):
    """The TensorFlow backend's in-graph loop over devices computes exactly what the
    [K, ...] batch computes."""
    runtime = Runtime(backend="tensorflow", noise="tensorflow", jit_compile=False, device_loop=False)
    batched, mu, rho, data = _setup(rng, runtime, estimator=estimator, local_steps=1)
    looped = LocalTrainer(batched.model, batched.config, dataclasses.replace(runtime, device_loop=True))
    assert looped.backend.device_loop and not batched.backend.device_loop
    outs = []
    for trainer in (batched, looped):
        d_rho, loss1, _ = trainer.rho_phase(mu, rho, *data, tf.constant([3, 4]))
        rho_next = rho + tf.reduce_mean(d_rho, 0)
        nu_k, loss2 = trainer.nu_phase(mu, rho, rho_next, d_rho, *data, tf.constant([5, 6]))
        outs.append([t.numpy() for t in (d_rho, loss1, nu_k, loss2)])
    for a, b in zip(*outs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_xla_default_for_lrt_is_batch_independent(rng):
    """The LRT default compiles with XLA (whose normals differ from the TF kernel's, so a
    run replays only under the same setting); device k still sees only its own noise."""
    runtime = Runtime(backend="tensorflow", noise="tensorflow", jit_compile=False)
    graph, mu, rho, (x, y, mask, w) = _setup(rng, runtime, estimator="local_reparameterization")
    xla = LocalTrainer(graph.model, graph.config, dataclasses.replace(runtime, jit_compile=None))
    assert xla.runtime.jit_compile and not graph.runtime.jit_compile
    d_rho, _, _ = xla.rho_phase(mu, rho, x, y, mask, w, tf.constant([3, 4]))
    nu_k, _ = xla.nu_phase(mu, rho, rho * 1.01, d_rho, x, y, mask, w, tf.constant([5, 6]))
    sl = slice(2, 3)
    args = (x[sl], y[sl], mask[sl], w[sl])
    r1, _, _ = xla.rho_phase(mu, rho, *args, tf.constant([3, 4]), device_ids=[2])
    n1, _ = xla.nu_phase(mu, rho, rho * 1.01, d_rho[sl], *args, tf.constant([5, 6]), device_ids=[2])
    np.testing.assert_allclose(r1[0].numpy(), d_rho[2].numpy(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(n1[0].numpy(), nu_k[2].numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_phases_move_their_own_parameter(rng, estimator):
    """Phase 1 starts at rho_t and moves rho only; phase 2 starts at eq. nu_def."""
    trainer, mu, rho, data = _setup(rng, estimator=estimator, learning_rate=0.5)
    d_rho, _, _ = trainer.rho_phase(mu, rho, *data, tf.constant([1, 1]))
    assert np.abs(d_rho.numpy()).max() > 0
    rho_next = rho + tf.reduce_sum(data[3][:, None] * d_rho, 0)
    zero_step = LocalTrainer(
        trainer.model, dataclasses.replace(trainer.config, learning_rate=1e-30)
    )
    d_nu0, _ = zero_step.nu_phase(mu, rho, rho_next, d_rho, *data, tf.constant([2, 2]))
    rho_k = rho + d_rho
    np.testing.assert_allclose(
        (mu + d_nu0).numpy(), (rho_k / rho_next * mu).numpy(), rtol=1e-6, atol=1e-20
    )


def test_objective_terms(rng):
    """eq. localLoss: summed masked NLL (MC mean) + lambda pi_k / d KL (eq. KL_div)."""
    trainer, mu, rho, (x, y, mask, w) = _setup(rng, mc_samples=1)
    seeds = trainer.definition.step_seeds(tf.constant([0, 0]), 0, tf.range(K))
    rho_q = rho * 1.5
    obj = trainer.definition.objective(mu[None], rho_q[None] * tf.ones([K, 1]), mu, rho, x, y, mask, w, seeds)
    task = trainer.definition.task_loss(mu[None], tf.math.rsqrt(rho_q)[None], x, y, mask, seeds)
    kl = kl_precision(mu, rho_q, mu, rho)
    d = trainer.model.num_params
    np.testing.assert_allclose(obj.numpy(), (task + K * w / d * kl).numpy(), rtol=1e-6)
    # with a tiny std the task loss is the deterministic summed NLL over real rows only
    task0 = trainer.definition.task_loss(mu[None], tf.fill([1, d], 1e-12), x, y, mask, seeds)
    logits = trainer.model.logits(mu[None, None] * tf.ones([K, 1, 1]), x)[:, 0]
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    np.testing.assert_allclose(task0.numpy(), tf.reduce_sum(nll * mask, 1).numpy(), rtol=1e-5)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_local_training_lowers_objective(rng, estimator):
    """Phase 2 lowers the local objective (common random numbers, several fixed seeds)."""
    trainer, mu, rho, (x, y, mask, w) = _setup(rng, estimator=estimator, learning_rate=0.05)
    d_rho, _, _ = trainer.rho_phase(mu, rho, x, y, mask, w, tf.constant([1, 1]))
    rho_next = rho + tf.reduce_sum(w[:, None] * d_rho, 0)
    d_nu, _ = trainer.nu_phase(mu, rho, rho_next, d_rho, x, y, mask, w, tf.constant([2, 2]))
    rho_k, nu_k = rho + d_rho, mu + d_nu

    def objective(mean):
        vals = [
            trainer.definition.objective(
                mean, rho_next[None], mu, rho_next, x, y, mask, w,
                trainer.definition.step_seeds(tf.constant([9, s]), 0, tf.range(K)),
            )
            for s in range(8)
        ]
        return tf.reduce_mean(tf.stack(vals), 0).numpy()

    before = objective(mu[None] * tf.ones([K, 1]))
    after = objective(rho_next / rho_k * nu_k)
    assert np.all(after < before), (before, after)


def test_precision_floor_counts_clamps(rng):
    trainer, mu, rho, data = _setup(rng, min_precision=25.0, learning_rate=5.0)
    d_rho, _, hits = trainer.rho_phase(mu, rho, *data, tf.constant([1, 1]))
    assert int(hits) > 0
    assert float(tf.reduce_min(rho + d_rho)) == 25.0


@pytest.mark.parametrize(
    "field,value",
    [("estimator", "exact"), ("phase2_prior", "old"), ("min_precision", 0.0), ("local_steps", 0)],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        LocalConfig(kl_scale=1.0, **{field: value})


def _weight_noise(noise, seed, shape, stream):
    """The eps the trainer's weight sampler draws for one parameter tensor, float64."""
    if noise == "philox":
        eps = sampling.standard_normal(shape, seed.numpy(), stream)
    else:
        eps = tf.random.stateless_normal(shape, tf.random.experimental.stateless_fold_in(seed, stream))
    return tf.cast(eps, tf.float64)


def _lrt_noise(noise, seed, num_mc, rows, n_out, stream):
    """The pre-activation eps the trainer's LRT path draws for one device and layer,
    [M, B, n_out] float64: the fused generator's on the ``rows`` real (leading) rows
    (``learning.local.fused_lrt``; padding rows get 0, the loss masks them), or TF's."""
    if noise == "philox":
        eps = np.zeros([num_mc, B, n_out], np.float32)
        eps[:, :rows] = sampling.standard_normal([num_mc, rows, n_out], seed.numpy(), stream)
        return tf.constant(eps, tf.float64)
    shape = [num_mc, B, n_out]
    eps = tf.random.stateless_normal(shape, tf.random.experimental.stateless_fold_in(seed, stream))
    return tf.cast(eps, tf.float64)


def _phase1_reference(trainer, mu, rho, data, seed):
    """Phase 1 in float64 with the trainer's noise: E steps on Delta_rho_k, [K, d] float64."""
    model, config = trainer.model, trainer.config
    x, y, mask, w = (tf.cast(t, tf.float64) if t.dtype.is_floating else t for t in data)
    x = tf.reshape(x, [K, B, -1])
    mu64, rho64 = tf.cast(mu, tf.float64), tf.cast(rho, tf.float64)
    lam = config.kl_scale * w / model.num_params
    delta = tf.zeros([K, model.num_params], tf.float64)
    num_mc, last = config.mc_samples, len(model.layer_sizes) - 1
    for step in range(config.local_steps):
        seeds = trainer.definition.step_seeds(seed, step, tf.range(K))
        noise = trainer.runtime.noise
        with tf.GradientTape() as tape:
            tape.watch(delta)
            rho_q = rho64 + delta
            var = 1.0 / rho_q
            means, vars_ = model.unflatten(mu64), model.unflatten(var)
            task = []
            for k in range(K):
                h = x[k]  # [B, in]
                for i in range(last + 1):
                    w_mu, b_mu = means[2 * i], means[2 * i + 1]
                    w_var, b_var = vars_[2 * i][k], vars_[2 * i + 1][k]
                    if config.estimator == "reparameterization":
                        eps = [
                            _weight_noise(noise, seeds[k], [num_mc, *model.param_shapes[j]], j)
                            for j in (2 * i, 2 * i + 1)
                        ]
                        kernel = w_mu + tf.sqrt(w_var) * eps[0]  # [M, in, out]
                        bias = b_mu + tf.sqrt(b_var) * eps[1]
                        h = (h if i else tf.repeat(h[None], num_mc, 0)) @ kernel + bias[:, None]
                    else:  # local reparameterization, noise per (sample, row, unit)
                        n_out = model.layer_sizes[i][1]
                        rows = int(tf.reduce_sum(mask[k]))
                        eps = _lrt_noise(noise, seeds[k], num_mc, rows, n_out, i)
                        h = h @ w_mu + b_mu + tf.sqrt(tf.square(h) @ w_var + b_var) * eps
                    if i < last:
                        h = tf.nn.relu(h)
                labels = tf.broadcast_to(y[k], [num_mc, B])
                nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h)
                task.append(tf.reduce_mean(tf.reduce_sum(nll * mask[k], -1)))
            ratio = rho64 / rho_q
            kl = 0.5 * tf.reduce_sum(-tf.math.log(ratio) + ratio - 1.0, -1)
            loss = tf.stack(task) + lam * kl
        delta = delta - config.learning_rate * tape.gradient(loss, delta)
        delta = tf.maximum(delta, config.min_precision - rho64)
    return delta.numpy()


@pytest.mark.parametrize(
    "estimator,backend",
    [(ESTIMATORS[0], "numba"), (ESTIMATORS[0], "tensorflow"), (ESTIMATORS[1], "numba")],
)
def test_phase1_update_survives_float32_at_large_precision(rng, estimator, backend):
    """rho_t = 400 (init std 0.05): a step of ~1e-6 is far below float32's spacing at 400
    (3e-5), yet Delta_rho_k is nonzero and matches a float64 run of the same E steps with
    the same noise (the update, not rho_k, is the optimisation variable)."""
    noise = "tensorflow" if backend == "tensorflow" else "philox"
    runtime = Runtime(backend=backend, noise=noise, jit_compile=False)
    trainer, mu, _, data = _setup(rng, runtime, estimator=estimator, learning_rate=1e-2)
    rho = tf.fill([trainer.model.num_params], 0.05**-2)
    seed = tf.constant([7, 8])
    d_rho, _, hits = trainer.rho_phase(mu, rho, *data, seed)
    d_rho = d_rho.numpy()
    ref = _phase1_reference(trainer, mu, rho, data, seed)
    assert int(hits) == 0
    assert np.abs(ref).max() < 1.5e-5  # rho_t + Delta would round back to rho_t in float32
    assert np.count_nonzero(d_rho) > d_rho.size // 2  # (dead ReLU units: exact zeros)
    np.testing.assert_allclose(d_rho, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_phase2_start_is_exact_at_large_precision(rng):
    """eq. nu_def at rho ~ 400: the start ``(rho_k / rho_{t+1} - 1) mu_t`` (~1e-8 mu_t,
    below float32's relative resolution) comes out as in float64."""
    trainer, mu, _, data = _setup(rng, learning_rate=1e-2)
    rho = tf.fill([trainer.model.num_params], 400.0)
    d_rho, _, _ = trainer.rho_phase(mu, rho, *data, tf.constant([7, 8]))
    d_global = tf.reduce_sum(data[3][:, None] * d_rho, 0)
    rho_next = rho + d_global
    zero_step = LocalTrainer(
        trainer.model, dataclasses.replace(trainer.config, learning_rate=1e-30)
    )
    d_nu, _ = zero_step.nu_phase(
        mu, rho, rho_next, d_rho, *data, tf.constant([2, 2]), delta_rho_global=d_global
    )
    d64, g64 = d_rho.numpy().astype(np.float64), d_global.numpy().astype(np.float64)
    ref = ((400.0 + d64) / (400.0 + g64) - 1.0) * mu.numpy().astype(np.float64)
    assert np.abs(ref).max() > 0
    np.testing.assert_allclose(d_nu.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_phase_objectives_equal_lemma1_objective(rng, estimator):
    """The increment-form objectives of both phases equal eq. localLoss with Lemma 1."""
    trainer, mu, rho, (x, y, mask, w) = _setup(rng, estimator=estimator)
    d = trainer.model.num_params
    seeds = trainer.definition.step_seeds(tf.constant([4, 4]), 0, tf.range(K))
    delta = tf.constant(rng.normal(scale=3.0, size=(K, d)), tf.float32)
    got = trainer.definition.rho_objective(delta, mu, rho, x, y, mask, w, seeds)
    ref = trainer.definition.objective(mu[None], rho + delta, mu, rho, x, y, mask, w, seeds)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5)
    z = tf.constant(rng.normal(scale=0.1, size=(K, d)), tf.float32)
    ratio = tf.constant(rng.uniform(0.8, 1.2, size=(K, d)), tf.float32)
    rho_next = rho * 1.3
    for prior in ("fresh", "previous"):
        tr = LocalTrainer(trainer.model, dataclasses.replace(trainer.config, phase2_prior=prior))
        prior_rho = rho_next if prior == "fresh" else rho
        got = tr.definition.nu_objective(z, ratio, mu, rho_next, prior_rho, x, y, mask, w, seeds)
        ref = tr.definition.objective(
            mu + ratio * z, rho_next[None], mu, prior_rho, x, y, mask, w, seeds
        )
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_padding_rows_stay_out_of_batch_norm(rng, estimator):
    """ResNet's batch norm uses batch statistics: the mask reaches the model, so zero
    padding rows do not change the loss of a device's real rows."""
    from learning.models.convnets import ResNet56

    model = ResNet56((4, 4, 3), 3, blocks_per_stage=1)
    trainer = LocalTrainer(
        model, LocalConfig(kl_scale=2.0, estimator=estimator, mc_samples=2), Runtime(jit_compile=False)
    )
    x = rng.normal(size=(2, 4, 4, 4, 3)).astype(np.float32)
    x[1, 2:] = 0.0  # device 1: two real rows, two padding rows
    y = tf.constant(rng.integers(0, 3, size=(2, 4)), tf.int32)
    mask = tf.constant([[1, 1, 1, 1], [1, 1, 0, 0]], tf.float32)
    mean = model.init_mean(tf.constant([3, 3]))[None]
    # LRT noise is per row (its shape follows B): compare at a negligible std there
    std = tf.fill([1, model.num_params], 0.05 if estimator == "reparameterization" else 1e-6)
    seeds = trainer.definition.step_seeds(tf.constant([1, 2]), 0, tf.range(2))
    padded = trainer.definition.task_loss(mean, std, tf.constant(x), y, mask, seeds)
    alone = trainer.definition.task_loss(
        mean, std, tf.constant(x[1:, :2]), y[1:, :2], mask[1:, :2], seeds[1:]
    )
    np.testing.assert_allclose(padded[1].numpy(), alone[0].numpy(), rtol=1e-4)
    # without the mask the padding rows would enter the statistics
    params = [p[:, None] for p in model.unflatten(mean * tf.ones([2, 1]))]
    logits_masked = model.logits_from_params(params, tf.constant(x), mask=mask)[1, 0, :2]
    logits_unmasked = model.logits_from_params(params, tf.constant(x))[1, 0, :2]
    assert np.abs(logits_masked.numpy() - logits_unmasked.numpy()).max() > 1e-3
