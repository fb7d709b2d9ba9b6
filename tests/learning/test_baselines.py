"""The frequentist baselines (FedProx, SCAFFOLD, FedSMOO, FedGMT-v2): defining identities and learning.

Exact identities (bit-for-bit, ``assert_array_equal``): FedProx with mu = 0 is FedAvg
step for step; SCAFFOLD with zero control variates and one local step is FedAvg;
FedSMOO with rho = 0 and FedGMT with gamma = 0 (regularisers off) take FedAvg's
local steps. With the error-free reference (the exact weighted sum as the
estimate) each algorithm learns a non-i.i.d. Gaussian-blob task (10 devices, 2 of 5
classes each) well above chance (20 %) in 10 rounds (measured: FedProx 1.00,
SCAFFOLD 1.00, FedSMOO 1.00, FedGMT-v2 0.67, whose KL pull towards the slow EMA of
the random initial model slows the first rounds).
"""

from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf

from cosim.scenario import downlink_values, parse_scenario, uplink_phase_values
from learning.algorithms import build
from learning.algorithms.base import DeviceData, FederatedAlgorithm, Received
from learning.algorithms.fedavg import FedAvg, LocalOutcome
from learning.algorithms.fedgmt import FedGmt
from learning.algorithms.fedprox import FedProx
from learning.algorithms.fedsmoo import FedSmoo, clip_by_device_norm
from learning.algorithms.scaffold import Scaffold
from learning.catalog import NAMES
from learning.models.architectures import build_model

NUM_DEVICES = 10
NUM_CLASSES = 5
DIM = 6
COMMON = {"learning_rate": 0.1, "local_steps": 3}
SEED = tf.constant([3, 7], tf.int32)


def _blobs(rng, labels, centers):
    return (centers[labels] + 0.7 * rng.standard_normal((labels.size, DIM))).astype(np.float32)


@pytest.fixture(scope="module")
def task():
    """Non-i.i.d. Gaussian blobs: device k holds classes {k mod 5, (k + 1) mod 5}, 8..20 samples."""
    rng = np.random.default_rng(2024)
    centers = 3.0 * rng.standard_normal((NUM_CLASSES, DIM))
    sizes = rng.integers(8, 21, NUM_DEVICES)
    batch = int(sizes.max())
    x = np.zeros((NUM_DEVICES, batch, DIM), np.float32)
    y = np.zeros((NUM_DEVICES, batch), np.int32)
    mask = np.zeros((NUM_DEVICES, batch), np.float32)
    for k, n in enumerate(sizes):
        labels = rng.choice([k % NUM_CLASSES, (k + 1) % NUM_CLASSES], n)
        x[k, :n], y[k, :n], mask[k, :n] = _blobs(rng, labels, centers), labels, 1.0
    data = DeviceData(
        x=tf.constant(x),
        y=tf.constant(y),
        mask=tf.constant(mask),
        weights=tf.constant(sizes / sizes.sum(), tf.float32),
    )
    y_test = rng.integers(0, NUM_CLASSES, 400)
    x_test = tf.constant(_blobs(rng, y_test, centers))
    model = build_model("mlp", (DIM,), NUM_CLASSES, hidden_units=(16,))
    return model, data, x_test, y_test


def _round(algo, state, data, t=0):
    """One round with the error-free reference; returns the new state and every phase's updates."""
    carry, sent = None, []
    for index, _ in enumerate(algo.phases()):
        updates, carry, _ = algo.local_update(index, state, carry, data, SEED + t)
        sent.append(updates.numpy())
        estimate = tf.reduce_sum(data.weights[:, None] * updates, axis=0)
        state, carry, _ = algo.server_update(index, state, carry, estimate)
    return state, sent


def _accuracy(algo, state, x_test, y_test):
    probs = algo.predict_probs(state, x_test, 1, SEED).numpy()
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    return float(np.mean(probs.argmax(-1) == y_test))


def test_fedprox_with_mu_zero_is_fedavg_step_for_step(task):
    model, data, _, _ = task
    fedavg = FedAvg(model, NUM_DEVICES, **COMMON)
    fedprox = FedProx(model, NUM_DEVICES, proximal_mu=0.0, **COMMON)
    s_avg, s_prox = fedavg.init(SEED), fedprox.init(SEED)
    for t in range(3):
        s_avg, sent_avg = _round(fedavg, s_avg, data, t)
        s_prox, sent_prox = _round(fedprox, s_prox, data, t)
        np.testing.assert_array_equal(sent_prox[0], sent_avg[0])
        np.testing.assert_array_equal(s_prox.w.numpy(), s_avg.w.numpy())


def test_fedprox_term_pulls_towards_the_global_model(task):
    model, data, _, _ = task
    norms = []
    for mu in (0.0, 1.0, 5.0):
        algo = FedProx(model, NUM_DEVICES, proximal_mu=mu, **COMMON)
        delta, _, _ = algo.local_update(0, algo.init(SEED), None, data, SEED)
        norms.append(float(tf.norm(delta)))
    assert norms[0] > norms[1] > norms[2] > 0.0


def test_scaffold_with_zero_controls_and_one_step_is_fedavg(task):
    model, data, _, _ = task
    hyper = {"learning_rate": 0.1, "local_steps": 1}
    fedavg = FedAvg(model, NUM_DEVICES, **hyper)
    scaffold = Scaffold(model, NUM_DEVICES, **hyper)
    s_avg, sent_avg = _round(fedavg, fedavg.init(SEED), data)
    s_scf, sent_scf = _round(scaffold, scaffold.init(SEED), data)
    np.testing.assert_array_equal(sent_scf[0], sent_avg[0])
    np.testing.assert_array_equal(s_scf.w.numpy(), s_avg.w.numpy())
    # Option II after one step from c = c_k = 0: c_k^+ = (x - y_k) / eta = grad L_k(x).
    np.testing.assert_allclose(s_scf.c_k.numpy(), -sent_avg[0] / 0.1, rtol=1e-5)


def test_scaffold_server_control_is_the_weighted_sum_of_device_controls(task):
    model, data, _, _ = task
    algo = Scaffold(model, NUM_DEVICES, **COMMON)
    state = algo.init(SEED)
    for t in range(3):
        state, sent = _round(algo, state, data, t)
        assert len(sent) == 2
    expected = tf.reduce_sum(data.weights[:, None] * state.c_k, axis=0)
    np.testing.assert_allclose(state.c.numpy(), expected.numpy(), atol=1e-5)


def test_fedsmoo_with_radius_zero_takes_fedavg_steps(task):
    model, data, _, _ = task
    fedavg = FedAvg(model, NUM_DEVICES, **COMMON)
    smoo = FedSmoo(model, NUM_DEVICES, sam_rho=0.0, dynamic_alpha=0.0, max_grad_norm=None, **COMMON)
    delta_avg, _, _ = fedavg.local_update(0, fedavg.init(SEED), None, data, SEED)
    delta_smoo, _, _ = smoo.local_update(0, smoo.init(SEED), None, data, SEED)
    np.testing.assert_array_equal(delta_smoo.numpy(), delta_avg.numpy())


def test_fedgmt_with_gamma_zero_takes_fedavg_steps(task):
    model, data, _, _ = task
    fedavg = FedAvg(model, NUM_DEVICES, **COMMON)
    gmt = FedGmt(model, NUM_DEVICES, sharpness_gamma=0.0, **COMMON)
    delta_avg, _, _ = fedavg.local_update(0, fedavg.init(SEED), None, data, SEED)
    delta_gmt, _, _ = gmt.local_update(0, gmt.init(SEED), None, data, SEED)
    np.testing.assert_array_equal(delta_gmt.numpy(), delta_avg.numpy())


@pytest.mark.parametrize("cls", [FedSmoo, FedGmt])
def test_dynamic_regulariser_server_rule(task, cls):
    """Error-free: w_{t+1} = sum_k pi_k w_k^E + sum_k pi_k h_k (FedDyn / FedSMOO / FedGMT server)."""
    model, data, _, _ = task
    algo = cls(model, NUM_DEVICES, **COMMON)
    state = algo.init(SEED)
    for t in range(2):
        previous = state.w
        state, sent = _round(algo, state, data, t)
        local = previous[None, :] + sent[0]
        pi = data.weights[:, None]
        expected = tf.reduce_sum(pi * local, 0) + tf.reduce_sum(pi * state.h_k, 0)
        np.testing.assert_allclose(state.w.numpy(), expected.numpy(), atol=1e-5)


def test_fedsmoo_global_perturbation_has_radius_rho(task):
    model, data, _, _ = task
    algo = FedSmoo(model, NUM_DEVICES, sam_rho=0.05, **COMMON)
    state, sent = _round(algo, algo.init(SEED), data)
    assert len(sent) == 2
    np.testing.assert_allclose(float(tf.norm(state.s)), 0.05, rtol=1e-5)


def test_fedgmt_ema_follows_the_global_trajectory(task):
    model, data, _, _ = task
    algo = FedGmt(model, NUM_DEVICES, ema_decay=0.9, **COMMON)
    state = algo.init(SEED)
    np.testing.assert_array_equal(state.ema.numpy(), state.w.numpy())
    ema = state.ema.numpy()
    for t in range(2):
        state, _ = _round(algo, state, data, t)
        ema = 0.9 * ema + 0.1 * state.w.numpy()
        np.testing.assert_allclose(state.ema.numpy(), ema, rtol=1e-5, atol=1e-7)


@dataclass(frozen=True)
class _ToyState:
    w: tf.Tensor
    sent_k: tf.Tensor


class _ToyDelta(FedAvg):
    """FedAvg plus a per-device running sum of the updates each device had received."""

    name = "fedavg"  # FedAvg's payloads (learning.catalog)
    state_type = _ToyState

    def local_outcome(self, state, rows, data, delta, inputs, carried):
        return LocalOutcome((), ({"sent_k": rows["sent_k"] + delta},))


def test_a_delta_with_device_state_takes_partial_participation_from_fedavg(task):
    """A variant is its hooks: a state field ``*_k`` and one ``local_outcome`` give a
    per-device state that starts at zero, whose cohort rows the solver's round reads and
    whose rows only the devices the BS received advance (FedAvg's ``server_update``)."""
    model, data, _, _ = task
    toy, fedavg = _ToyDelta(model, NUM_DEVICES, **COMMON), FedAvg(model, NUM_DEVICES, **COMMON)
    state = toy.init(SEED)
    np.testing.assert_array_equal(state.sent_k.numpy(), np.zeros((NUM_DEVICES, model.num_params)))
    cohort = data.cohort([1, 3, 4, 8])
    delta, carry, _ = toy.local_update(0, state, None, cohort, SEED)
    np.testing.assert_array_equal(delta.numpy(), fedavg.local_update(0, fedavg.init(SEED), None, cohort, SEED)[0].numpy())
    received = Received(rows=tf.constant([0, 2]), devices=tf.constant([1, 4]), share=0.5)
    estimate = tf.reduce_mean(tf.gather(delta, [0, 2]), axis=0)
    new, _, _ = toy.server_update(0, state, carry, estimate, received=received)
    expected = np.zeros((NUM_DEVICES, model.num_params), np.float32)
    expected[[1, 4]] = delta.numpy()[[0, 2]]
    np.testing.assert_array_equal(new.sent_k.numpy(), expected)
    np.testing.assert_array_equal(new.w.numpy(), (state.w + estimate).numpy())
    assert toy.is_finite(new) and set(toy.state_to_arrays(new)) == {"w", "sent_k"}
    with pytest.raises(ValueError, match="phase must be 0, got 1"):
        toy.server_update(1, state, carry, estimate)


def test_clip_by_device_norm():
    g = tf.constant([[3.0, 4.0], [0.3, 0.4]])
    np.testing.assert_allclose(clip_by_device_norm(g, 1.0).numpy(), [[0.6, 0.8], [0.3, 0.4]])
    assert clip_by_device_norm(g, None) is g


@pytest.mark.parametrize(
    ("cls", "uplink", "downlink"),
    [(FedProx, (1,), 1), (Scaffold, (1, 1), 2), (FedSmoo, (1, 1), 2), (FedGmt, (1,), 1)],
)
def test_payloads_protocol_and_checkpoint_round_trip(task, cls, uplink, downlink):
    model, data, _, _ = task
    algo = cls(model, NUM_DEVICES, **COMMON)
    d = model.num_params
    assert isinstance(algo, FederatedAlgorithm)
    assert tuple(p.num_values for p in algo.phases()) == tuple(u * d for u in uplink)
    assert algo.downlink_values() == downlink * d
    state, _ = _round(algo, algo.init(SEED), data)
    arrays = algo.state_to_arrays(state)
    again = algo.state_to_arrays(algo.state_from_arrays(arrays))
    assert arrays.keys() == again.keys()
    for key, value in arrays.items():
        np.testing.assert_array_equal(again[key], value)
    assert algo.is_finite(state)


def assert_learns_above_chance(algo, task, rounds: int = 10) -> None:
    """``algo`` starts near chance (1 / 5) on ``task`` and is above 0.5 after ``rounds``."""
    _, data, x_test, y_test = task
    state = algo.init(SEED)
    before = _accuracy(algo, state, x_test, y_test)
    for t in range(rounds):
        state, _ = _round(algo, state, data, t)
    after = _accuracy(algo, state, x_test, y_test)
    assert before < 0.3 < 0.5 < after, (before, after)


@pytest.mark.parametrize("cls", [FedProx, Scaffold, FedSmoo, FedGmt])
def test_learns_the_non_iid_task_above_chance(task, cls):
    assert_learns_above_chance(cls(task[0], NUM_DEVICES, **COMMON), task)


@pytest.mark.parametrize(
    ("cls", "bad"),
    [
        (FedProx, {"proximal_mu": -0.1}),
        (Scaffold, {"global_learning_rate": 0.0}),
        (FedSmoo, {"sam_rho": -1.0}),
        (FedSmoo, {"max_grad_norm": 0.0}),
        (FedGmt, {"ema_decay": 1.0}),
        (FedGmt, {"temperature": 0.0}),
    ],
)
def test_bad_hyper_parameters_raise(task, cls, bad):
    model = task[0]
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        cls(model, NUM_DEVICES, **bad, **COMMON)


@pytest.mark.parametrize("name", NAMES)
def test_the_scenario_counts_the_payloads_the_algorithm_sends(name):
    """cosim.scenario's channel-use arithmetic and the algorithm's own phases read one
    table (learning.catalog): the same phase names, values and downlink for every
    algorithm (they once disagreed: SCAFFOLD and FedSMOO as one 2d phase)."""
    scenario = parse_scenario({"algorithm": {"name": name}})
    model = build_model("mlp", (4,), 3, (5,))
    algo = build(name, model, 3)
    d = model.num_params
    assert uplink_phase_values(scenario, d) == {p.name: p.num_values for p in algo.phases()}
    assert downlink_values(scenario, d) == algo.downlink_values()


@pytest.mark.parametrize("name", NAMES)
def test_each_constructor_takes_its_models_keys_with_its_defaults(name):
    """learning.hyperparameters declares every algorithm's keys once: the class's keyword
    arguments are exactly its model's fields, with the model's defaults (``kl_scale``'s
    None is the model's "num_devices"), so the scenario, build() and the class agree."""
    import inspect

    from learning.algorithms import ALGORITHMS
    from learning.catalog import CATALOG
    from learning.hyperparameters import defaults

    runtime_args = {"self", "model", "num_devices", "runtime", "jit_compile", "backend"}
    signature = inspect.signature(ALGORITHMS[name].__init__).parameters
    taken = {key: p.default for key, p in signature.items() if key not in runtime_args}
    declared = defaults(CATALOG[name].parameters)
    if "kl_scale" in declared:
        assert taken.pop("kl_scale") is None and declared.pop("kl_scale") == "num_devices"
    assert taken == declared
