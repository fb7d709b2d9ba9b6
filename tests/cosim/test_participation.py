"""Who takes part in a round (issue 31 item 1): the draws, the renormalised aggregate, every
algorithm's state under partial rounds and under a round nobody sends in, the scenario's
refusals."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest
import tensorflow as tf
from test_engine import _arrays
from tiny_scenario import time_domain, write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import ScenarioError, load_scenario
from cosim.scenario.tables import ParticipationConfig
from learning.catalog import CATALOG
from phy.uplink import participation

ALGORITHMS = ["bayes_aircomp", "fedavg", "fedprox", "scaffold", "fedsmoo", "fedgmt", "signsgd"]


def _cohort(config, gain, phases=2, steps=3, seed=0, training_phases=1):
    return participation.draw_cohort(config, np.asarray(gain, float), phases, steps, training_phases,
                                     np.random.default_rng(seed))


def test_uniform_scheduling_draws_the_fraction_without_replacement():
    config = ParticipationConfig(fraction=0.3)
    sizes, seen = set(), np.zeros(10)
    for seed in range(200):
        cohort = _cohort(config, np.ones(10), seed=seed)
        sizes.add(cohort.scheduled.size)
        assert np.all(np.diff(cohort.scheduled) > 0)
        seen[cohort.scheduled] += 1
        assert cohort.sent.shape == (2, 3) and cohort.sent.all()
        np.testing.assert_array_equal(np.flatnonzero(cohort.status == participation.TRANSMITTED),
                                      cohort.scheduled)
    assert sizes == {3}
    assert seen.min() > 30  # every device is drawn (200 * 0.3 = 60 on average)
    assert ParticipationConfig(fraction=0.01).cohort_size(10) == 1
    assert ParticipationConfig(fraction=0.25).cohort_size(10) == 3  # halves up


def test_best_channel_and_threshold_schedule_on_the_gain():
    gain = np.array([1e-9, 5e-8, 2e-10, 3e-8, 1e-7, 1e-12])
    best = _cohort(ParticipationConfig(fraction=0.5, scheduling="best_channel"), gain)
    np.testing.assert_array_equal(best.scheduled, [1, 3, 4])
    above = _cohort(ParticipationConfig(scheduling="gain_threshold", gain_threshold_db=-85.0), gain)
    np.testing.assert_array_equal(above.scheduled, [1, 3, 4])  # -73, -75.2, -70 dB
    nobody = _cohort(ParticipationConfig(scheduling="gain_threshold", gain_threshold_db=0.0), gain)
    assert nobody.scheduled.size == 0 and nobody.discarded
    assert np.all(nobody.status == participation.NOT_SCHEDULED)


def test_dropouts_per_phase_and_stragglers_against_the_deadline():
    config = ParticipationConfig(dropout_probability=0.2)
    sent = np.concatenate([_cohort(config, np.ones(50), seed=s).sent for s in range(40)], axis=1)
    assert abs(1.0 - sent.mean() - 0.2) < 0.02
    assert (sent[0] != sent[1]).any()  # a device can drop in one phase and send in the other
    # a device straggles when steps * (min + Exp(mean)) > deadline: P = exp(-(D/steps - min)/mean)
    late = ParticipationConfig(deadline_s=6.0, step_time_min_s=1.0, step_time_extra_mean_s=1.0)
    cohorts = [_cohort(late, np.ones(50), steps=3, seed=s) for s in range(40)]
    straggled = np.mean([c.status == participation.STRAGGLED for c in cohorts])
    assert abs(straggled - np.exp(-1.0)) < 0.03
    for cohort in cohorts:
        gone = cohort.status[cohort.scheduled] == participation.STRAGGLED
        assert not cohort.sent[:, gone].any()  # a straggler sends nothing
    codes = _cohort(ParticipationConfig(fraction=0.5, dropout_probability=0.5), np.ones(40)).status
    assert set(np.unique(codes)) == {participation.NOT_SCHEDULED, participation.TRANSMITTED,
                                     participation.DROPPED}


def test_fewer_steps_stragglers_take_the_steps_they_have_time_for():
    config = ParticipationConfig(deadline_s=5.0, step_time_min_s=1.0, step_time_extra_mean_s=1.0,
                                 straggler_policy="fewer_steps")
    drop = ParticipationConfig(deadline_s=5.0, step_time_min_s=1.0, step_time_extra_mean_s=1.0)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rng.permutation(30)
        step_s = 1.0 + rng.exponential(1.0, 30)  # the draw draw_cohort makes
        fewer = _cohort(config, np.ones(30), steps=3, seed=seed, training_phases=2)
        want = np.where(6 * step_s > 5.0, np.minimum(np.floor(5.0 / (2 * step_s)), 3), 3)
        np.testing.assert_array_equal(fewer.steps, np.maximum(want, 1))
        silent = want < 1
        assert not fewer.sent[:, silent].any() and fewer.sent[:, ~silent].all()
        np.testing.assert_array_equal(fewer.status == participation.FEWER_STEPS, (want >= 1) & (want < 3))
        np.testing.assert_array_equal(fewer.status == participation.STRAGGLED, silent)
        dropped = _cohort(drop, np.ones(30), steps=3, seed=seed, training_phases=2)
        np.testing.assert_array_equal(dropped.status == participation.STRAGGLED, want < 3)
        assert np.all(dropped.steps == 3)


def test_the_draws_of_one_key_do_not_shift_with_another():
    a = _cohort(ParticipationConfig(fraction=0.5), np.ones(20), seed=7)
    b = _cohort(ParticipationConfig(fraction=0.5, dropout_probability=0.3), np.ones(20), seed=7)
    np.testing.assert_array_equal(a.scheduled, b.scheduled)


@pytest.mark.parametrize(("overrides", "key", "value"), [
    (["participation.fraction=0"], "participation.fraction", "0"),
    (["participation.fraction=1.5"], "participation.fraction", "1.5"),
    (["participation.dropout_probability=-0.1"], "participation.dropout_probability", "-0.1"),
    (["participation.gain_threshold_db=-80"], "participation.gain_threshold_db", "-80"),
    (['participation.scheduling="gain_threshold"'], "participation.gain_threshold_db", "None"),
    (['participation.scheduling="gain_threshold"', "participation.gain_threshold_db=-80",
      "participation.fraction=0.5"], "participation.fraction", "0.5"),
    (['participation.scheduling="round_robin"'], "participation.scheduling", "round_robin"),
    (["participation.deadline_s=0"], "participation.deadline_s", "0"),
    (["bs.num_antennas=0"], "bs.num_antennas", "0"),
])
def test_bad_keys_name_the_key_and_the_value(tmp_path, overrides, key, value):
    with pytest.raises(ScenarioError) as error:
        load_scenario(write_tiny(tmp_path), overrides)
    message = str(error.value)
    assert key in message and value in message, message


def _state_arrays(engine, state):
    return {k: np.asarray(v, np.float64) for k, v in engine.algorithm.state_to_arrays(state).items()}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_survives_a_round_nobody_sends_in(tmp_path, algorithm):
    """dropout_probability = 1: every round is discarded, the state stays, the trace says so."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=1, algorithm=algorithm),
                             ["participation.dropout_probability=1.0"])
    summary = run_scenario(scenario, progress=False)
    assert summary.completed_rounds == 2
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        np.testing.assert_array_equal(rounds["round_discarded"][()], [1, 1])
        np.testing.assert_array_equal(rounds["uplink_symbols"][()], [0, 0])
        for phase in Engine(scenario).algorithm.phases():
            np.testing.assert_array_equal(rounds[f"devices_sent_{phase.name}"][()], [0, 0])
        assert np.all(rounds["model_finite"][()] == 1)
        assert np.all(np.isfinite(rounds["test_accuracy"][()]))
        assert np.all(rounds["per_device/participated"][()] == participation.DROPPED)
    engine = Engine(scenario)
    start = engine.initial_state()
    end, record = engine.run_round(0, start)
    for name, values in _state_arrays(engine, start).items():
        np.testing.assert_array_equal(_state_arrays(engine, end)[name], values, err_msg=name)
    assert record.divergence == [] and record.scalars["round_discarded"] == 1.0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_runs_partial_rounds_and_resumes(tmp_path, algorithm):
    steps = 3 * CATALOG[algorithm].training_phases  # E = 3; P(straggle) = exp(-0.3 / 0.2)
    overrides = ["participation.fraction=0.5", "participation.dropout_probability=0.3",
                 f"participation.deadline_s={1.3 * steps}", "participation.step_time_extra_mean_s=0.2",
                 'participation.straggler_policy="fewer_steps"']
    scenario = load_scenario(write_tiny(tmp_path, rounds=3, every=3, algorithm=algorithm), overrides)
    summary = run_scenario(scenario, progress=False)
    assert summary.completed_rounds == 3 and np.isfinite(summary.final_accuracy)
    whole = _arrays(summary.trace_path)
    (tmp_path / "b").mkdir()
    short = write_tiny(tmp_path / "b", rounds=2, every=3, algorithm=algorithm)
    run_scenario(load_scenario(short, overrides), progress=False)
    resumed = run_scenario(load_scenario(short, [*overrides, "rounds=3"]), resume=True, progress=False)
    again = _arrays(resumed.trace_path)
    assert (whole["rounds/per_device/participated"] == participation.FEWER_STEPS).any()
    steps = whole["rounds/per_device/local_steps"]
    assert np.nanmin(steps) >= 1 and np.nanmax(steps) == 3 and (steps < 3).any()
    for name in ("rounds/per_device/participated", "rounds/test_accuracy", "rounds/train_loss",
                 "rounds/per_device/local_steps"):
        np.testing.assert_array_equal(again[name], whole[name], err_msg=name)
    with h5py.File(summary.trace_path, "r") as f:
        status = f["rounds/per_device/participated"][()]
        assert status.shape == (3, 8)
        np.testing.assert_array_equal((status != participation.NOT_SCHEDULED).sum(axis=1), [4, 4, 4])
        phases = Engine(scenario).algorithm.phases()
        sent = sum(f[f"rounds/devices_sent_{p.name}"][()] for p in phases)
        assert np.all(sent <= 4 * len(phases))
        distortion = f[f"rounds/per_device/local_distortion_{phases[0].name}"][()]
        assert np.all(np.isnan(distortion[status == participation.NOT_SCHEDULED]))


def _one_round(tmp_path, algorithm, overrides):
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, algorithm=algorithm, hidden=8),
                             ['power.control="ideal"', *overrides])
    engine = Engine(scenario)
    start = engine.initial_state()
    cohort = engine.uplink.round(0).cohort
    end, record = engine.run_round(0, start)
    return engine, start, end, record, cohort


@pytest.mark.parametrize("knows", [True, False])
def test_the_renormalised_aggregate_is_the_exact_sum_over_the_senders(tmp_path, knows):
    """FedAvg under ideal aggregation: w_{t+1} - w_t = sum_T pi_k Delta_k / share, share the
    senders' weight (the BS knows who dropped) or the cohort's (it does not)."""
    overrides = ["participation.fraction=0.75", "participation.dropout_probability=0.4",
                 f"participation.bs_knows_dropouts={str(knows).lower()}"]
    engine, start, end, record, cohort = _one_round(tmp_path, "fedavg", overrides)
    assert not cohort.discarded and 0 < cohort.sent[0].sum() < cohort.scheduled.size
    data = engine.world.device_data.cohort(cohort.scheduled)
    updates, _, _ = engine.algorithm.local_update(0, start, None, data, tf.constant([0, 0]))
    pi = np.asarray(engine.world.device_data.weights, np.float64)
    senders = cohort.scheduled[cohort.sent[0]]
    share = pi[senders].sum() if knows else pi[cohort.scheduled].sum()
    expected = (pi[senders] / share) @ np.asarray(updates, np.float64)[cohort.sent[0]]
    np.testing.assert_allclose(np.asarray(end.w) - np.asarray(start.w), expected, rtol=1e-4, atol=1e-7)
    received = pi[senders].sum() / pi[cohort.scheduled].sum()
    assert record.scalars["received_weight_delta"] == pytest.approx(received)
    # the error is against the senders' renormalised sum: 0 when the BS knows, the bias if not
    bias = 0.0 if knows else (1.0 - received) ** 2
    assert record.scalars["aggregate_nmse_delta"] == pytest.approx(bias, abs=1e-6)


@pytest.mark.parametrize("knows", [True, False])
@pytest.mark.parametrize(("algorithm", "server", "devices"), [
    ("scaffold", "c", "c_k"), ("fedgmt", "h", "h_k"), ("fedsmoo", "h", "h_k")])
def test_the_server_duals_stay_the_population_sum_of_the_device_duals(tmp_path, algorithm, server, devices,
                                                                     knows):
    """SCAFFOLD's c = sum_k pi_k c_k and FedDyn-style h = sum_k pi_k h_k hold through partial
    rounds (ideal aggregation), whether or not the BS knows who dropped: only the devices
    the BS received advance their own."""
    overrides = ["participation.fraction=0.5", "participation.dropout_probability=0.3",
                 f"participation.bs_knows_dropouts={str(knows).lower()}"]
    scenario = load_scenario(write_tiny(tmp_path, rounds=3, algorithm=algorithm, hidden=8),
                             ['power.control="ideal"', *overrides])
    engine = Engine(scenario)
    pi = np.asarray(engine.world.device_data.weights, np.float64)
    state = engine.initial_state()
    moved = np.zeros(8, bool)
    for t in range(3):
        before = _state_arrays(engine, state)[devices]
        state, record = engine.run_round(t, state)
        arrays = _state_arrays(engine, state)
        np.testing.assert_allclose(pi @ arrays[devices], arrays[server], rtol=1e-4, atol=1e-6)
        changed = np.any(arrays[devices] != before, axis=1)
        status = record.per_device["participated"]
        assert not changed[status == participation.NOT_SCHEDULED].any()
        moved |= changed
    assert moved.any()


def test_a_cohort_trains_as_its_devices_do_in_the_whole_population(tmp_path):
    """The proposed method's cohort rows equal the same devices' rows of a full round: the
    device's own pi_k in lambda_k and its own noise stream."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, hidden=8))
    engine = Engine(scenario)
    state, data = engine.initial_state(), engine.world.device_data
    seed = tf.constant([5, 6])
    full, _, _ = engine.algorithm.local_update(0, state, None, data, seed)
    rows = np.array([1, 4, 6])
    part, _, _ = engine.algorithm.local_update(0, state, None, data.cohort(rows), seed)
    np.testing.assert_allclose(np.asarray(part), np.asarray(full)[rows], rtol=1e-6, atol=1e-9)


def test_default_participation_writes_no_cohort_columns(tmp_path):
    summary = run_scenario(load_scenario(write_tiny(tmp_path, rounds=1)), progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        assert "participated" not in f["rounds/per_device"]
        assert "round_discarded" not in f["rounds"]


@pytest.mark.parametrize("overrides", [time_domain(3.0, 0.05), ["bs.num_antennas=4"]],
                         ids=["time", "antennas"])
def test_partial_rounds_through_the_time_domain_and_a_multi_antenna_bs(tmp_path, overrides):
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2),
                             [*overrides, "participation.fraction=0.5",
                              "participation.dropout_probability=0.2"])
    summary = run_scenario(scenario, progress=False)
    assert summary.completed_rounds == 2 and np.isfinite(summary.final_accuracy)
    with h5py.File(summary.trace_path, "r") as f:
        assert np.all(np.isfinite(f["rounds/aggregate_nmse_rho"][()]))


def _local_update_rows(tmp_path, algorithm, overrides, local_steps, steps):
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, algorithm=algorithm, hidden=8),
                             [*overrides, f"algorithm.local_steps={local_steps}"])
    engine = Engine(scenario)
    state, data = engine.initial_state(), engine.world.device_data
    if steps is not None:
        data = dataclasses.replace(data, local_steps=tf.constant(steps, tf.int32))
    seed = tf.constant([3, 4])
    updates, carry, _ = engine.algorithm.local_update(0, state, None, data, seed)
    phases = [np.asarray(updates)]
    if len(engine.algorithm.phases()) > 1:
        if algorithm == "bayes_aircomp":
            state, carry, _ = engine.algorithm.server_update(0, state, carry, tf.zeros_like(updates[0]))
        second, _, _ = engine.algorithm.local_update(1, state, carry, data, seed)
        phases.append(np.asarray(second))
    return phases


_RUNTIMES = {"lrt": [], "exact": ['algorithm.estimator="reparameterization"'],
             "tensorflow": ['runtime.backend="tensorflow"']}


@pytest.mark.parametrize(("algorithm", "runtime"), [
    ("fedavg", "lrt"), ("scaffold", "lrt"), ("fedsmoo", "lrt"), ("fedgmt", "lrt"),
    ("bayes_aircomp", "lrt"), ("bayes_aircomp", "exact"), ("bayes_aircomp", "tensorflow")])
def test_a_device_that_stops_early_sends_what_e_steps_would(tmp_path, algorithm, runtime):
    """A device given e of E local steps sends what it sends when E = e (every phase;
    every backend of the proposed method); the others are untouched."""
    steps = np.array([3, 1, 2, 3, 1, 2, 3, 3])
    partial = _local_update_rows(tmp_path, algorithm, _RUNTIMES[runtime], 3, steps)
    for taken in (1, 2, 3):
        (tmp_path / f"e{taken}").mkdir()
        alone = _local_update_rows(tmp_path / f"e{taken}", algorithm, _RUNTIMES[runtime], taken, None)
        rows = steps == taken
        for index, (got, want) in enumerate(zip(partial, alone, strict=True)):
            np.testing.assert_allclose(got[rows], want[rows], rtol=2e-5, atol=1e-7,
                                       err_msg=f"phase {index}, {taken} steps")
