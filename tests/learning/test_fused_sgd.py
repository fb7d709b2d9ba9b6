"""FedAvg's and FedProx's Numba steps (learning/local/fused_sgd.py) conform to TensorFlow's
LocalSGD / ProximalSGD on the same inputs; ``runtime.backend = "numba"`` selects them for
those two and signSGD (FedAvg's steps, then the sign and the error memory), whose signs
equal TensorFlow's.

Sizes. The MLP 33-131-9-5 (d = 5,692; odd widths everywhere: the kernels' four-row
passes end in remainders) on K = 7 devices (two Numba workers take devices 0, 2, 4, 6
and 1, 3, 5 on their own buffers, so a device runs on buffers its worker's previous,
larger or smaller, device left): one full, one without data (mask all zero: its
update is 0, its loss 0), the others padded with non-zero inputs and labels on their
padding rows (which must not count), one of a single row. Inputs 4..11 are 0 on every
row and others here and there (MNIST's blank pixels: the kernel rows the Numba steps
skip). E = 3 steps, eta = 0.1; stragglers take 1 or 2 of them.

Tolerance: the conformance suites' policy (tests/conformance.py): arrays
``|got - want| <= 1e-4 |want| + 5e-5 max|want|``, objectives ``1e-5 |want| + 1e-6
max|want|``. Both sides are float32 with the same formulas and order of steps but not
the same order of summation (TF's batched matmuls over the padded rows against the
Numba loops over the real rows; the Numba loss in float64). Measured worst at these
sizes on 2026-12-02: updates ``max|got - want| / max|want|`` = 4.1e-7 (at most 1.2e-7
absolute on updates of up to 0.31), objectives 9.1e-8 relative, for FedAvg and FedProx
(mu = 0.3) alike. Elementwise, the updates also meet ``np.testing.assert_allclose``'s
``rtol 1e-5, atol 1e-6`` (absolute), checked too. Scaling the largest device update
by 1 + 3e-4 fails the policy (checked in every case).

Neither side is exact: where a hidden unit's pre-activation lies within float32
rounding of 0 (about 1e-7), the summation order decides the ReLU's side and the two
updates differ by far more. At the quickstart's size (K = 100) this happens on one
device of 100 (a pre-activation of 9e-8): Numba 1.3e-4 off the same steps in float64
there, TF 3.6e-8; with other kernels it was another device, where TF was 4.8e-4 off
(benchmarks/README.md, ``fedavg_step.py``). The data here are drawn so that no unit is
that close.

signSGD: the Numba updates are within ``1e-5 |want| + 1e-6`` of TF's (above), so a sign
can differ only where TF's ``Delta_k`` (with error feedback ``Delta_k + e_k``) is within
about 1e-6 of 0; the signs are compared where it is not, and where it is exactly 0 (the
kernel rows of the blank inputs, which no step moves on either side). Measured at these
sizes on 2026-12-02: all 39,844 signs equal in each of the four cases (with and without
error feedback and stragglers), 7-19 entries within 1e-6 of 0 and not 0; the new
memories within 1.2e-7 of TF's (``|e_k|`` up to 0.30), checked with ``rtol 1e-5, atol 1e-6``.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conformance import assert_conforms

from learning.algorithms import build
from learning.algorithms.base import DeviceData
from learning.algorithms.fedavg import LocalSGD, NumbaSGD
from learning.models.architectures import build_model
from learning.runtime import Runtime, resolve

K, B, E = 7, 12, 3
SIZES = np.array([12, 0, 5, 1, 9, 12, 3])
STRAGGLERS = np.array([3, 3, 1, 2, 3, 2, 1], np.int32)
ALGORITHMS = [("fedavg", {}), ("fedprox", {"proximal_mu": 0.3})]


def _data(rng, steps=None) -> DeviceData:
    x = rng.normal(size=(K, B, 33)).astype(np.float32)  # padding rows too: they must not count
    x[:, :, 4:12] = 0.0  # blank inputs, as MNIST's borders: kernel rows the steps skip
    x[x < -1.0] = 0.0  # and scattered ones
    y = rng.integers(0, 5, (K, B)).astype(np.int32)
    mask = (np.arange(B)[None] < SIZES[:, None]).astype(np.float32)
    weights = SIZES / SIZES.sum()
    return DeviceData(tf.constant(x), tf.constant(y), tf.constant(mask), tf.constant(weights, tf.float32),
                      local_steps=None if steps is None else tf.constant(steps))


@pytest.fixture(scope="module")
def model():
    return build_model("mlp", (33,), 5, (131, 9))


def _both(model, name, hyper):
    common = dict(learning_rate=0.1, local_steps=E, **hyper)
    return (build(name, model, K, runtime=Runtime(backend="tensorflow"), **common),
            build(name, model, K, runtime=Runtime(backend="numba"), **common))


@pytest.mark.parametrize("stragglers", [False, True], ids=["all-steps", "stragglers"])
@pytest.mark.parametrize(("name", "hyper"), ALGORITHMS, ids=[name for name, _ in ALGORITHMS])
def test_numba_steps_conform_to_tensorflow(rng, model, name, hyper, stragglers):
    reference, numba = _both(model, name, hyper)
    assert numba.backend == "numba" and reference.backend == "tensorflow"
    data = _data(rng, STRAGGLERS if stragglers else None)
    state = reference.init(tf.constant([1, 2]))
    want, _, want_metrics = reference.local_update(0, state, None, data, tf.constant([0, 0]))
    got, _, got_metrics = numba.local_update(0, state, None, data, tf.constant([0, 0]))
    assert_conforms(got, want, "array", f"{name} updates")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert_conforms(got_metrics["train_loss"], want_metrics["train_loss"], "objective", "train_loss")
    args = (state.w, data.x, data.y, data.mask)
    _, want_losses, _ = reference.solver.updates(*args, steps=data.local_steps)
    _, got_losses, _ = numba.solver.updates(*args, steps=data.local_steps)
    assert got_losses.shape == (E, K)
    assert_conforms(got_losses, want_losses, "objective", f"{name} losses [E, K]")
    assert np.all(got.numpy()[1] == 0) and np.all(got_losses.numpy()[:, 1] == 0)  # no data
    if stragglers:  # a device that stopped repeats its last loss
        assert got_losses[1, 2] == got_losses[0, 2] and got_losses[2, 3] == got_losses[1, 3]
    wrong = got.numpy().copy()
    wrong[np.argmax(np.abs(wrong).max(1))] *= 1 + 3e-4  # the device with the largest update
    with pytest.raises(AssertionError):
        assert_conforms(wrong, want, "array", "a wrong update")


def test_fedprox_penalty_changes_the_numba_steps_as_tensorflows(rng, model):
    """The proximal term is in the Numba steps (not FedAvg's steps under FedProx's name):
    FedProx's mu = 0.3 updates differ from FedAvg's by what TF's differ."""
    data = _data(rng)
    plain, prox = _both(model, "fedavg", {})[1], _both(model, "fedprox", {"proximal_mu": 0.3})
    state = plain.init(tf.constant([1, 2]))
    seed = tf.constant([0, 0])
    gap_numba = prox[1].local_update(0, state, None, data, seed)[0] - plain.local_update(0, state, None, data, seed)[0]
    gap_tf = prox[0].local_update(0, state, None, data, seed)[0] - \
        _both(model, "fedavg", {})[0].local_update(0, state, None, data, seed)[0]
    assert np.abs(gap_tf.numpy()).max() > 1e-3
    np.testing.assert_allclose(gap_numba.numpy(), gap_tf.numpy(), atol=1e-6)


SIGN_NEAR_ZERO = 1e-6
"""Below this |Delta_k (+ e_k)| (and above 0) the Numba and TF signs may differ: the
``atol`` the FedAvg updates meet."""


def assert_signs_equal(got, want, reference) -> None:
    """The signs ``got`` equal ``want`` [K, d] wherever the ``reference`` (TF's signed
    quantity) is 0 or at least :data:`SIGN_NEAR_ZERO` in magnitude."""
    compared = (np.abs(reference) >= SIGN_NEAR_ZERO) | (reference == 0)
    assert set(np.unique(want)) <= {-1.0, 0.0, 1.0} and compared.mean() > 0.99
    np.testing.assert_array_equal(np.asarray(got)[compared], np.asarray(want)[compared])


@pytest.mark.parametrize("stragglers", [False, True], ids=["all-steps", "stragglers"])
@pytest.mark.parametrize("error_feedback", [False, True], ids=["plain", "error-feedback"])
def test_signsgd_on_the_numba_steps_sends_tensorflows_signs(rng, model, error_feedback, stragglers):
    """signSGD on ``backend = "numba"`` runs FedAvg's Numba steps and sends the signs
    (and, with error feedback, keeps the memories) TensorFlow's steps give, within the
    module's tolerance; memories e_k != 0 so that ``sgn(Delta_k + e_k)`` is tested."""
    reference, numba = _both(model, "signsgd", {"error_feedback": error_feedback})
    assert type(numba.solver) is NumbaSGD and type(reference.solver) is LocalSGD
    data = _data(rng, STRAGGLERS if stragglers else None)
    state = reference.init(tf.constant([1, 2]))
    if error_feedback:
        memory = rng.normal(scale=1e-3, size=(K, model.num_params)).astype(np.float32)
        state = type(state)(w=state.w, v=state.v, e_k=tf.constant(memory))
    seed = tf.constant([0, 0])
    want, want_carry, want_metrics = reference.local_update(0, state, None, data, seed)
    got, got_carry, got_metrics = numba.local_update(0, state, None, data, seed)
    delta, _, _ = reference.solver.updates(state.w, data.x, data.y, data.mask, steps=data.local_steps)
    signed = delta.numpy() + (state.e_k.numpy() if error_feedback else 0.0)
    assert_signs_equal(got.numpy(), want.numpy(), signed)
    assert np.all(got.numpy()[1] == np.sign(signed[1]))  # no data: sgn(e_k), or 0
    assert_conforms(got_metrics["train_loss"], want_metrics["train_loss"], "objective", "train_loss")
    if error_feedback:
        np.testing.assert_allclose(got_carry.rows[0]["e_k"].numpy(), want_carry.rows[0]["e_k"].numpy(),
                                   rtol=1e-5, atol=1e-6)
    wrong = got.numpy().copy()
    wrong.flat[np.argmax(np.abs(signed))] *= -1  # the surest sign flipped
    with pytest.raises(AssertionError):
        assert_signs_equal(wrong, want.numpy(), signed)


def test_runtime_backend_numba_selects_the_steps_for_fedavg_fedprox_and_signsgd_only(model):
    for name in ("fedavg", "fedprox", "signsgd"):
        assert resolve(Runtime(backend="numba"), algorithm=name, architecture="mlp").backend == "numba"
        assert resolve(Runtime(), algorithm=name, architecture="mlp").backend == "tensorflow"  # auto
        with pytest.raises(ValueError, match=r"^runtime\.backend: model\.architecture = 'cnn' has no Numba"):
            resolve(Runtime(backend="numba"), algorithm=name, architecture="cnn")
        with pytest.raises(ValueError, match=r"^runtime\.jit_compile: XLA"):
            resolve(Runtime(backend="numba", jit_compile=True), algorithm=name, architecture="mlp")
        with pytest.raises(ValueError, match=r"^runtime\.noise: algorithm\.name = '.*' draws no noise"):
            resolve(Runtime(noise="philox"), algorithm=name, architecture="mlp")
    for name in ("scaffold", "fedsmoo", "fedgmt"):
        with pytest.raises(ValueError, match=r"^runtime\.backend: .* runs on TensorFlow only"):
            build(name, model, K, runtime=Runtime(backend="numba"))
        with pytest.raises(ValueError, match=r"^runtime\.backend: .* runs on TensorFlow only"):
            resolve(Runtime(backend="numba"), algorithm=name, architecture="mlp")
    cnn = build_model("cnn", (28, 28, 1), 10, ())
    with pytest.raises(ValueError, match=r"^runtime\.backend: model\.architecture = 'cnn'"):
        build("fedavg", cnn, K, runtime=Runtime(backend="numba"))
