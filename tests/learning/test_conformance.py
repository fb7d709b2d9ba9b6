"""Conformance of every backend of the local training to the definitions.

The definitions are :class:`learning.local.objective.LocalObjective`'s objectives; the
reference is the TensorFlow backend (TF's autodiff of them) drawing the Numba backend's
Philox noise, ``Runtime(backend="tensorflow", noise="philox", jit_compile=False)``, so
every other backend is compared with it number for number, without monkeypatching.
One suite, parametrized over

* definition: each covariance reading (:data:`learning.local.covariance.NAMES`) with the
  phase-2 prior and nll reduction ``("fresh", "sum")`` and ``("previous", "mean")``:
  phase 1 depends on the reading and the reduction, phase 2 on the prior and the
  reduction, so these eight cover every pair that matters (phase 2 runs with one
  reading per prior and reduction: its objective has no covariance parameter);
* backend: every backend of :data:`learning.runtime.BACKENDS` but the reference;
* estimator: ``"reparameterization"`` and ``"local_reparameterization"``;
* phase: 1 (rho) and 2 (nu, started from the *reference's* phase-1 update so that a
  phase-1 difference does not contaminate it).

Each case compares the ``[K, d]`` update, the objective before each step ``[E, K]``
and (phase 1) the number of floored entries, which must be equal. The layer test
holds the exact estimator's Numba network (:class:`learning.local.fused_mlp.FusedMLP`) to
TF's layers on the same weight sample: logits and both gradients at once (a phase
forms one of them), padding rows, a device without data.

Sizes. The MLP 33-131-9-5 (d = 5,692) crosses every kernel's blocks: the exact
estimator's update passes work on the whole d-vector in blocks of 2,048 entries
(``learning.local.fused_local._BLOCK``: three blocks, the last partial), the LRT's per layer
(layer 1 holds 4,454 parameters: three blocks); the forward pass splits a layer of 128
or more output columns in two (131: 65 + 66); the backward takes 64 kernel rows per
work item (``learning.local.fused_mlp._ROW_BLOCK``; 131 rows end in a partial item, 33 and 9
rows are narrower than one); the forward's four-way unrolled loop over kernel rows
gets remainders (33, 131, 9 rows). Three devices: one full, one without data (pi_k = 0, mask
all zero), one padded (non-zero inputs on its padding rows, which must not count);
with two Numba workers the LRT's first worker runs devices 0 and 2 on the same
buffers. E = 2 steps, M = 3 samples, eta = 0.01 (steps that change rho by up to a
factor of a few without the phase-2 iterates blowing up); ``rho_t`` within 1% of
``min_precision``, about half of it below, so the floor clamps some entries, not all.

Tolerance policy (one, :func:`conformance.assert_conforms`, shared with the PHY's suite). An array ``got`` conforms to
``want`` when, elementwise,

    |got - want| <= rtol |want| + atol max|want|,

with (rtol, atol) = (1e-4, 5e-5) for arrays (updates, logits, gradients) and
(1e-5, 1e-6) for the objectives; counts are equal. Both sides are float32 on the same
noise, formulas and order of steps, but not the same order of summation (TF's matmuls
and reductions against the Numba kernels' unrolled, blocked, fast-math loops and
single-threaded BLAS), and the transcendental covariance readings are evaluated in
float32 by TF and in float64 by the Numba kernels. A sum of n float32 terms is exact to
about n eps (eps = 6e-8) of its largest term, and many entries are themselves
near-cancelling sums (a std gradient is ``sum_m g_m eps_m``), so the error is relative
to the array's scale, not to each entry: hence ``atol max|want|``. Measured worst
``max|got - want| / max|want|`` at these sizes: updates 5.1e-6 in phase 1 with the
softplus_std and log_precision readings (transcendental, float32 against float64),
about 3e-7 with the others, 1.3e-6 in phase 2; logits and gradients 3.4e-7; objectives
2.5e-7 relative. The bounds are ten times the worst update error and forty times the
worst objective error: room for another machine's summation order, while a wrong term
does not fit: scaling the last block of a Numba update by 1 + 3e-4 fails every case
(the pairwise tests this suite replaces allowed rtol 1e-3, atol 1e-4 on the updates
and 1e-4 on the objectives: they would not have noticed).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from conformance import assert_conforms

from learning import runtime
from learning.local import covariance
from learning.local.trainer import LocalConfig, LocalTrainer
from learning.models.architectures import build_model
from native.sampling import sample_weights

REFERENCE = runtime.Runtime(backend="tensorflow", noise="philox", jit_compile=False)
BACKENDS = tuple(b for b in runtime.BACKENDS if b not in ("auto", REFERENCE.backend))
DEFINITIONS = tuple(
    (reading, prior, reduction)
    for reading in covariance.NAMES
    for prior, reduction in (("fresh", "sum"), ("previous", "mean"))
)

INPUT_SHAPE, NUM_CLASSES, HIDDEN = (3, 11), 5, (131, 9)
ROWS = (7, 0, 5)  # real rows per device: full, without data (pi_k = 0), padded
BATCH = 7
STEPS, SAMPLES = 2, 3
MIN_PRECISION = 2.0
NEAR_FLOOR = 1e-4
"""``|rho_t - min_precision|`` is at least this. An entry exactly on the floor with a
denormal gradient steps off it in Numba but not in TF, which flushes denormals to zero;
the iterate stays on the bound either way, so only the count of floored entries could
differ, and this suite holds the counts equal away from that. (Both backends form the
bound itself the same way, in float64 for the readings other than the precision:
``LocalObjective.floor``; measured with 1/7 of the entries at 1.99999988 against a
floor of 2: equal counts for all four readings.)"""


def _model():
    return build_model("mlp", INPUT_SHAPE, NUM_CLASSES, HIDDEN)


@functools.cache
def _inputs():
    """The round's inputs, shared by every case: ``((x, y, mask, pi), mu_t, rho_t, seed)``."""
    rng = np.random.default_rng(20240611)
    d = _model().num_params
    rows = np.asarray(ROWS)
    mask = (np.arange(BATCH)[None] < rows[:, None]).astype(np.float32)
    x = rng.uniform(0, 1, (rows.size, BATCH, *INPUT_SHAPE)).astype(np.float32)
    x[mask == 0] = rng.uniform(-5, 5, x[mask == 0].shape)  # padding rows must not count
    y = rng.integers(0, NUM_CLASSES, (rows.size, BATCH)).astype(np.int32)
    weights = (rows / rows.sum()).astype(np.float32)
    data = tuple(tf.constant(a) for a in (x, y, mask, weights))
    mu_t = _model().init_mean(tf.constant([1, 2]))
    offset = rng.uniform(NEAR_FLOOR, 0.01, d) * rng.choice([-1.0, 1.0], d)  # half below the floor
    rho_t = tf.constant(MIN_PRECISION + offset, tf.float32)
    return data, mu_t, rho_t, tf.constant([4, 5])


def _trainer(definition, estimator, backend_runtime, covariance_learning_rate=None):
    reading, prior, reduction = definition
    config = LocalConfig(
        kl_scale=20.0 * _model().num_params,  # lambda_k ~ 10: the KL's gradient counts
        learning_rate=0.01, local_steps=STEPS, mc_samples=SAMPLES, min_precision=MIN_PRECISION,
        estimator=estimator, phase2_prior=prior, nll_reduction=reduction, covariance_parameter=reading,
        covariance_learning_rate=covariance_learning_rate,
    )
    trainer = LocalTrainer(_model(), config, backend_runtime)
    assert trainer.runtime.backend == trainer.backend.name == backend_runtime.backend
    assert trainer.runtime.noise == "philox"
    return trainer


def _phase1(trainer):
    (x, y, mask, weights), mu_t, rho_t, seed = _inputs()
    update, objective, hits = trainer.rho_phase(mu_t, rho_t, x, y, mask, weights, seed)
    return np.asarray(update), np.asarray(objective), int(hits)


def _phase2(trainer, delta_rho_k):
    (x, y, mask, weights), mu_t, rho_t, seed = _inputs()
    delta_rho_k = tf.constant(delta_rho_k)
    rho_next = rho_t + tf.reduce_sum(weights[:, None] * delta_rho_k, axis=0)
    update, objective = trainer.nu_phase(mu_t, rho_t, rho_next, delta_rho_k, x, y, mask, weights, seed)
    return np.asarray(update), np.asarray(objective)


@functools.cache
def _reference(definition, estimator):
    """The reference trainer and its phase-1 result (shared by the phase-1 and phase-2
    cases of every backend)."""
    trainer = _trainer(definition, estimator, REFERENCE)
    return trainer, _phase1(trainer)


CASES = [pytest.param(definition, phase, id=f"{'-'.join(definition)}-phase{phase}")
         for definition in DEFINITIONS for phase in (1, 2)
         if phase == 1 or definition[0] == covariance.NAMES[0]]
"""(definition, phase): phase 1 for every definition; phase 2, whose objective has no
covariance parameter (the readings differ only in the phase-1 update it starts from),
for one reading per prior and reduction."""


@pytest.mark.parametrize("estimator", runtime.ESTIMATORS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("definition", "phase"), CASES)
def test_backend_conforms_to_reference(definition, backend, estimator, phase):
    """E = 2 steps of one phase: the [K, d] update, the objective before each step
    [E, K] and (phase 1) the floor hits agree with the reference's."""
    reference, (ref_update, ref_objective, ref_hits) = _reference(definition, estimator)
    trainer = _trainer(definition, estimator, runtime.Runtime(backend=backend))
    if phase == 1:
        update, objective, hits = _phase1(trainer)
        want_update, want_objective = ref_update, ref_objective
        assert 0 < ref_hits < STEPS * len(ROWS) * ref_update.shape[1]  # the floor clamps some
        assert hits == ref_hits, "floor hits"
    else:
        update, objective = _phase2(trainer, ref_update)
        want_update, want_objective = _phase2(reference, ref_update)
    # what is compared is not (near) zero
    assert np.abs(want_update).max() > 1e-3
    assert np.all(np.abs(want_objective[:, np.asarray(ROWS) > 0]) > 1.0)
    assert_conforms(update, want_update, "array", f"phase {phase} update [K, d]")
    assert_conforms(objective, want_objective, "objective", f"phase {phase} objective [E, K]")


@pytest.mark.parametrize("std_range", [(0.5, 0.8), (0.02, 0.08)], ids=["phase1_std", "phase2_std"])
def test_numba_layers_match_tf_layers_on_the_same_sample(rng, std_range):
    """:class:`learning.local.fused_mlp.FusedMLP` forward and backward of each device against
    TF's layers (``logits_from_params``) on the sample that
    :func:`native.sampling.sample_weights` draws under the same key: the logits of the
    real rows and ``dL/dmean``, ``dL/dstd`` of ``L = sum(weight * logits * mask)``,
    both at once; padding rows get logits 0 and a device without data zero gradients.
    ``std_range``: the weight stds of the phases here (rho ~ 2, rho ~ 400)."""
    model = _model()
    d = model.num_params
    net = model.fused_network(SAMPLES)
    (x, _, mask, _), _, _, _ = _inputs()
    x, mask = x.numpy().reshape(len(ROWS), BATCH, -1), mask.numpy()
    mean = rng.normal(0, 0.3, d).astype(np.float32)
    std = rng.uniform(*std_range, d).astype(np.float32)
    for k in range(len(ROWS)):
        seed = rng.integers(0, 2**31, 2).astype(np.int32)
        weight = rng.normal(size=(SAMPLES, BATCH, NUM_CLASSES)).astype(np.float32) * mask[k][None, :, None]
        logits, buffer, hidden = net.forward(mean, std, seed, x[k], mask[k])
        g_mean, g_std = net.backward(weight, buffer, hidden, mean, std, x[k], mask[k])
        assert logits.shape == (SAMPLES, BATCH, NUM_CLASSES)
        assert np.all(logits[:, mask[k] == 0] == 0)
        if ROWS[k] == 0:
            assert not g_mean.any() and not g_std.any()
            continue
        want_logits, want_mean, want_std = _tf_layers(model, mean, std, seed, x[k], weight)
        real = mask[k] > 0
        assert_conforms(logits[:, real], want_logits[:, real], "array", f"device {k} logits")
        assert_conforms(g_mean, want_mean, "array", f"device {k} dL/dmean")
        assert_conforms(g_std, want_std, "array", f"device {k} dL/dstd")
        assert np.abs(want_mean).max() > 1e-2 and np.abs(want_std).max() > 1e-2


def _tf_layers(model, mean, std, seed, x, weight):
    """TF's layers on the fused sample of one device: logits [M, B, C] and the
    gradients of ``sum(weight * logits)`` with respect to ``mean`` and ``std`` [d]."""
    mean, std = tf.constant(mean[None]), tf.constant(std[None])
    with tf.GradientTape() as tape:
        tape.watch([mean, std])
        params = sample_weights(mean, std, tf.constant(seed[None]), SAMPLES, model.param_shapes)
        logits = model.logits_from_params(params, tf.constant(x[None]))[0]
        loss = tf.reduce_sum(weight * logits)
    g_mean, g_std = tape.gradient(loss, [mean, std])
    return logits.numpy(), g_mean.numpy()[0], g_std.numpy()[0]


@pytest.mark.parametrize("estimator", runtime.ESTIMATORS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_covariance_step_of_its_own_conforms_and_leaves_phase_2_alone(backend, estimator):
    """``covariance_learning_rate`` (0.004, against eta = 0.01) is phase 1's step size on
    every backend: phase 1 conforms to the reference with the same option and differs from
    the eta-only update; phase 2 (eta) conforms and, from the same phase-1 update, equals
    the eta-only trainer's exactly."""
    definition = ("softplus_std", "fresh", "sum")
    reference = _trainer(definition, estimator, REFERENCE, covariance_learning_rate=0.004)
    trainer = _trainer(definition, estimator, runtime.Runtime(backend=backend),
                       covariance_learning_rate=0.004)
    ref_update, ref_objective, ref_hits = _phase1(reference)
    update, objective, hits = _phase1(trainer)
    assert hits == ref_hits
    assert_conforms(update, ref_update, "array", "phase 1 update [K, d]")
    assert_conforms(objective, ref_objective, "objective", "phase 1 objective [E, K]")
    plain, (plain_update, _, _) = _reference(definition, estimator)
    scale = np.abs(plain_update).max()
    assert np.abs(ref_update - plain_update).max() > 0.1 * scale  # a different step
    want = _phase2(reference, ref_update)
    got = _phase2(trainer, ref_update)
    assert_conforms(got[0], want[0], "array", "phase 2 update [K, d]")
    assert_conforms(got[1], want[1], "objective", "phase 2 objective [E, K]")
    for mine, eta_only in zip(want, _phase2(plain, ref_update), strict=True):
        np.testing.assert_array_equal(mine, eta_only)
