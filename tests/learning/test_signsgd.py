"""signSGD with majority vote (learning/algorithms/signsgd.py): its defining identities
(exact) and learning on the non-i.i.d. blob task of test_baselines with the error-free
weighted sum as the estimate (the server takes its sign: the vote)."""

import numpy as np
import pytest
import tensorflow as tf
from test_baselines import (  # noqa: F401 (fixture)
    COMMON,
    NUM_DEVICES,
    SEED,
    _accuracy,
    _round,
    assert_learns_above_chance,
    task,
)

from learning.algorithms.fedavg import FedAvg, PointState
from learning.algorithms.signsgd import SignFeedbackState, SignSgd, SignState
from learning.catalog import CATALOG


def test_the_catalog_says_it_sends_signs_and_the_others_values():
    assert CATALOG["signsgd"].sends == "signs"
    assert {entry.sends for name, entry in CATALOG.items() if name != "signsgd"} == {"values"}


def test_it_sends_the_signs_of_fedavgs_deltas_and_steps_by_the_vote(task):  # noqa: F811
    """The updates are sgn of FedAvg's Delta_k (same local steps, bit for bit); the server
    adds eta_s sgn(sum_k pi_k s_k); with momentum beta, v = beta v + vote."""
    model, data, _, _ = task
    fedavg, sign = FedAvg(model, NUM_DEVICES, **COMMON), SignSgd(model, NUM_DEVICES, **COMMON)
    state = sign.init(SEED)
    assert isinstance(state, SignState)
    delta, _, _ = fedavg.local_update(0, fedavg.init(SEED), None, data, SEED)
    signs, _, _ = sign.local_update(0, state, None, data, SEED)
    np.testing.assert_array_equal(signs.numpy(), np.sign(delta.numpy()))
    estimate = tf.reduce_sum(data.weights[:, None] * signs, axis=0)
    new, _, _ = sign.server_update(0, state, None, estimate)
    np.testing.assert_array_equal(new.w.numpy(), (state.w + 0.003 * tf.sign(estimate)).numpy())
    heavy = SignSgd(model, NUM_DEVICES, server_momentum=0.5, server_learning_rate=0.01, **COMMON)
    again, _, _ = heavy.server_update(0, SignState(state.w, tf.ones_like(state.w)), None, estimate)
    v = 0.5 * tf.ones_like(state.w) + tf.sign(estimate)
    np.testing.assert_array_equal(again.v.numpy(), v.numpy())
    np.testing.assert_array_equal(again.w.numpy(), (state.w + 0.01 * v).numpy())


def test_error_feedback_keeps_what_the_scaled_sign_did_not_carry(task):  # noqa: F811
    """Per device and round: p_k = Delta_k + e_k, s_k = sgn(p_k), e_k' = p_k - (||p_k||_1 / d)
    s_k, so over rounds the scaled signs sent plus the last memory sum to the deltas
    (to float32 rounding), and the memories are the checkpoint's [K, d] array."""
    model, data, _, _ = task
    algo = SignSgd(model, NUM_DEVICES, error_feedback=True, **COMMON)
    state = algo.init(SEED)
    assert isinstance(state, SignFeedbackState) and state.e_k.shape == (NUM_DEVICES, model.num_params)
    sent, deltas = 0.0, 0.0
    fedavg = FedAvg(model, NUM_DEVICES, **COMMON)
    for t in range(3):
        delta, _, _ = fedavg.local_update(0, PointState(state.w), None, data, SEED)
        p = delta.numpy() + state.e_k.numpy()
        signs, carry, _ = algo.local_update(0, state, None, data, SEED + t)
        memory = carry.rows[0]["e_k"]
        np.testing.assert_array_equal(signs.numpy(), np.sign(p))
        scaled = np.abs(p).mean(axis=1, keepdims=True) * np.sign(p)
        np.testing.assert_allclose(memory.numpy(), p - scaled, rtol=1e-6, atol=1e-7)
        sent, deltas = sent + scaled, deltas + delta.numpy()
        estimate = tf.reduce_sum(data.weights[:, None] * signs, axis=0)
        state, _, _ = algo.server_update(0, state, carry, estimate)
        np.testing.assert_array_equal(state.e_k.numpy(), memory.numpy())
    np.testing.assert_allclose(sent + state.e_k.numpy(), deltas, atol=1e-5)
    arrays = algo.state_to_arrays(state)
    assert set(arrays) == {"w", "v", "e_k"}
    back = algo.state_to_arrays(algo.state_from_arrays(arrays))
    for key, value in arrays.items():
        np.testing.assert_array_equal(back[key], value)


@pytest.mark.parametrize("error_feedback", [False, True])
def test_learns_the_non_iid_task_above_chance(task, error_feedback):  # noqa: F811
    algo = SignSgd(task[0], NUM_DEVICES, server_learning_rate=0.05, error_feedback=error_feedback, **COMMON)
    assert_learns_above_chance(algo, task)


def test_bad_keys_raise(task):  # noqa: F811
    with pytest.raises(ValueError, match="server_momentum"):
        SignSgd(task[0], NUM_DEVICES, server_momentum=1.0)
    with pytest.raises(ValueError, match="server_learning_rate"):
        SignSgd(task[0], NUM_DEVICES, server_learning_rate=0.0)


def test_in_a_partial_round_only_the_received_devices_memories_advance(task):  # noqa: F811
    """A cohort of 4 devices of which the BS received 3: their memories become the new
    ones, every other device (the cohort's unreceived one, the unscheduled) keeps its own."""
    from learning.algorithms.base import Received

    model, data, _, _ = task
    algo = SignSgd(model, NUM_DEVICES, error_feedback=True, **COMMON)
    state = algo.init(SEED)
    state = SignFeedbackState(state.w, state.v, tf.fill(state.e_k.shape, 0.5))
    cohort = data.cohort([1, 4, 6, 8])
    signs, carry, _ = algo.local_update(0, state, None, cohort, SEED)
    memory = carry.rows[0]["e_k"]
    received = Received(rows=tf.constant([0, 2, 3]), devices=tf.constant([1, 6, 8]), share=0.5)
    estimate = tf.reduce_sum(tf.gather(cohort.weights, received.rows)[:, None] * tf.gather(signs, received.rows), 0)
    new, _, _ = algo.server_update(0, state, carry, estimate, received=received)
    e_k = new.e_k.numpy()
    np.testing.assert_array_equal(e_k[[1, 6, 8]], memory.numpy()[[0, 2, 3]])
    np.testing.assert_array_equal(np.delete(e_k, [1, 6, 8], axis=0), 0.5)
