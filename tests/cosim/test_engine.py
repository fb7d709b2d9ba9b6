"""End-to-end behaviour of the round loop on a tiny synthetic scenario."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import tensorflow as tf
from tiny_scenario import time_domain, write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.trace import TIMING_COLUMNS

K = 8


def _arrays(path):
    """Every dataset of a trace except the timings (``TIMING_COLUMNS``), as NumPy arrays, and the
    checkpoint slots' attributes (``<slot>.attrs_json``, ``<slot>.completed_rounds``)."""
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] not in TIMING_COLUMNS:
                out[name] = obj[()]

        f.visititems(visit)
        for slot_name, slot in f.get("checkpoint", {}).items():
            for key in ("attrs_json", "completed_rounds"):
                out[f"checkpoint/{slot_name}.{key}"] = np.asarray(slot.attrs[key])
    return out


@pytest.fixture(scope="module")
def four_rounds(tmp_path_factory):
    """The tiny scenario run once, uninterrupted, over 4 rounds evaluated every 2:
    ``(scenario, summary)``; its trace is read (never written) by the tests of the
    documented trace, of determinism, of resume and of overwriting."""
    directory = tmp_path_factory.mktemp("four_rounds")
    scenario = load_scenario(write_tiny(directory, rounds=4, every=2))
    return scenario, run_scenario(scenario, progress=False)


def test_run_writes_documented_trace(four_rounds):
    scenario, summary = four_rounds
    assert summary.completed_rounds == 4
    with h5py.File(summary.trace_path, "r") as f:
        assert f.attrs["completed_rounds"] == 4
        assert f["devices/position_m"].shape == (K, 2)
        assert f["devices/distance_m"].shape == (K,)
        assert f["devices/label_hist"].shape == (K, 4)
        rounds = f["rounds"]
        for column in ("round", "uplink_symbols", "downlink_symbols", "cumulative_channel_uses",
                       "cumulative_uplink_symbols", "cumulative_downlink_symbols", "test_accuracy", "test_nll", "ece", "train_loss", "delta_bar_rho",
                       "delta_bar_nu", "distortion_rho", "distortion_nu", "precision_floor_hits",
                       "wall_s", "cpu_s"):
            assert rounds[column].shape == (4,), column
        assert rounds["per_device/local_distortion_rho"].shape == (4, K)
        assert rounds["per_device/tx_power_w_nu"].shape == (4, K)
        assert rounds["per_device/csi_nmse"].shape == (4, K)
        assert rounds["reliability/bin_count"].shape == (4, 10)
        acc = rounds["test_accuracy"][()]
        # evaluated every 2 rounds: rounds 2 and 4 (1-based) hold numbers, the others NaN
        assert np.isnan(acc[0]) and np.isnan(acc[2])
        assert np.isfinite(acc[1]) and np.isfinite(acc[3])
        for column in ("posterior_mean_accuracy", "posterior_mean_nll", "posterior_mean_ece"):
            # the posterior mean's prediction: evaluated in the same rounds
            np.testing.assert_array_equal(np.isfinite(rounds[column][()]), np.isfinite(acc))
        # two phases of ceil(d / F) symbols each, every round
        engine_symbols = rounds["uplink_symbols"][()]
        assert np.all(engine_symbols == engine_symbols[0])
        assert np.all(np.diff(rounds["cumulative_channel_uses"][()]) > 0)
        uplink = rounds["cumulative_uplink_symbols"][()]
        downlink = rounds["cumulative_downlink_symbols"][()]
        np.testing.assert_array_equal(uplink, np.cumsum(engine_symbols))
        np.testing.assert_array_equal(downlink, np.cumsum(rounds["downlink_symbols"][()]))
        np.testing.assert_array_equal(uplink + downlink, rounds["cumulative_channel_uses"][()])
        assert np.all(np.isfinite(rounds["per_device/local_distortion_rho"][()]))
    tx = _arrays(summary.trace_path)["rounds/per_device/tx_power_w_rho"]
    assert np.all(tx <= scenario.power.tx_power_w * (1 + 1e-4))


def test_same_seed_gives_identical_traces(tmp_path, four_rounds):
    """The same scenario run again (in another directory, after other tests ran in this
    process) writes `four_rounds`'s trace bit for bit."""
    _, summary = four_rounds
    run_scenario(load_scenario(write_tiny(tmp_path, rounds=4, every=2)), progress=False)
    first, second = _arrays(summary.trace_path), _arrays(tmp_path / "tiny-seed3.h5")
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_resume_in_process_equals_uninterrupted(tmp_path, four_rounds):
    """An interrupted run (Ctrl-C after two rounds), resumed, equals an uninterrupted one
    (`four_rounds`)."""

    class InterruptedEngine(Engine):
        def run_round(self, t, state):
            if t == 2:
                raise KeyboardInterrupt
            return super().run_round(t, state)

    cut = load_scenario(write_tiny(tmp_path, rounds=4, every=2))
    with pytest.raises(KeyboardInterrupt):
        run_scenario(cut, progress=False, engine=InterruptedEngine(cut))
    with h5py.File(tmp_path / "tiny-seed3.h5", "r") as f:
        assert f.attrs["completed_rounds"] == 2
    run_scenario(cut, resume=True, progress=False)
    first, second = _arrays(four_rounds[1].trace_path), _arrays(tmp_path / "tiny-seed3.h5")
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    totals = ("cumulative_channel_uses", "cumulative_uplink_symbols", "cumulative_downlink_symbols",
              "cumulative_uplink_seconds", "cumulative_uplink_energy_j")
    for column in totals:
        assert first[f"rounds/{column}"].shape == (4,), column
        assert np.all(np.diff(first[f"rounds/{column}"]) > 0), column
    for row in ("uplink_seconds", "uplink_energy_j"):  # added in round order, as the run does
        total, rows = 0.0, []
        for value in first[f"rounds/{row}"].tolist():
            total += value
            rows.append(total)
        np.testing.assert_array_equal(first[f"rounds/cumulative_{row}"], rows)
    attrs = json.loads(str(first["checkpoint/slot_1.attrs_json"]))  # written after round 3
    assert attrs == {name: float(first[f"rounds/{name}"][3]) for name in attrs}
    assert set(attrs) == set(totals)


def test_existing_trace_is_not_overwritten(tmp_path, four_rounds):
    import shutil

    shutil.copy(four_rounds[1].trace_path, tmp_path)  # a finished trace where the run writes
    scenario = load_scenario(write_tiny(tmp_path, rounds=4, every=2))
    before = (tmp_path / "tiny-seed3.h5").read_bytes()
    with pytest.raises(Exception, match="exists"):
        run_scenario(scenario, progress=False)
    assert (tmp_path / "tiny-seed3.h5").read_bytes() == before


@pytest.mark.parametrize(("algorithm", "learning_rate"), [("bayes_aircomp", 0.05), ("fedavg", 0.3)])
def test_error_free_air_interface_learns(tmp_path, algorithm, learning_rate):
    """With the ideal (error-free) aggregation a few rounds lift accuracy well above chance
    (0.25). Twelve rounds: at eight this tiny task is still noisy (0.37-0.98 over seeds)."""
    path = write_tiny(
        tmp_path, rounds=12, every=12, algorithm=algorithm, hidden=32, learning_rate=learning_rate
    )
    scenario = load_scenario(path, ["power.control=\"ideal\""])
    engine = Engine(scenario)
    records = [record for _, record in engine.rounds(engine.initial_state())]
    assert records[-1].scalars["test_accuracy"] > 0.5


@pytest.mark.parametrize("algorithm", ["fedprox", "scaffold", "fedsmoo", "fedgmt"])
def test_every_baseline_runs_over_the_air_and_resumes(tmp_path, algorithm):
    """Each baseline goes through the same AirComp chain; its payload sets the uplink symbols."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, algorithm=algorithm))
    engine = Engine(scenario)
    summary = run_scenario(scenario, progress=False, engine=engine)
    assert summary.completed_rounds == 2
    phases = engine.algorithm.phases()
    with h5py.File(summary.trace_path, "r") as f:
        uplink = f["rounds/uplink_symbols"][()]
        for phase in phases:
            assert f[f"rounds/distortion_{phase.name}"].shape == (2,)
        assert np.isfinite(f["rounds/test_accuracy"][1])
        assert np.all(np.isnan(f["rounds/posterior_mean_accuracy"][()]))  # no posterior
    # d = 660 values per phase over F = 64 subcarriers -> 11 OFDM symbols each
    assert np.all(uplink == 11 * len(phases))
    assert np.isfinite(summary.final_accuracy)


def test_count_nonfinite_counts_nan_and_inf_and_survives_an_overflowing_sum():
    from cosim.engine import count_nonfinite

    values = np.zeros((4, 100), np.float32)
    assert count_nonfinite(tf.constant(values)) == 0
    values[0, 3], values[2, 7], values[3, 9] = np.nan, np.inf, -np.inf
    assert count_nonfinite(tf.constant(values)) == 3
    huge = np.full((4, 100), 3e38, np.float32)  # finite entries whose sum overflows
    assert count_nonfinite(tf.constant(huge)) == 0
    huge[1, 1] = np.nan
    assert count_nonfinite(huge) == 1


def test_round_metrics_write_unsuffixed_columns(tmp_path):
    """The proposed method's round_metrics(previous_state, state) land in /rounds under
    their own names (through its ``metrics``), called once per round with the round's
    start and end states."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4))
    engine = Engine(scenario)
    calls = []

    def round_metrics(previous_state, state):
        calls.append((previous_state, state))
        return {"precision_changed_fraction": np.float32(0.25), "posterior_std_p50": tf.constant(0.5),
                "precision_rel_change": 1e-3}

    engine.algorithm.round_metrics = round_metrics  # instance attribute over the method
    initial = engine.initial_state()
    states = [initial]
    for state, record in engine.rounds(initial):
        states.append(state)
        assert record.scalars["precision_changed_fraction"] == 0.25
        assert record.scalars["posterior_std_p50"] == 0.5
        assert record.scalars["precision_rel_change"] == 1e-3
        assert not [k for k in record.scalars if k.startswith("precision_changed_fraction_")]
    assert len(calls) == 2
    for (previous, new), before, after in zip(calls, states, states[1:]):
        assert previous is before and new is after

    summary = run_scenario(scenario, progress=False, engine=engine)
    with h5py.File(summary.trace_path, "r") as f:
        np.testing.assert_array_equal(f["rounds/precision_changed_fraction"][()], [0.25, 0.25])
        assert f["rounds/posterior_std_p50"].dtype == np.float64

    engine.algorithm.round_metrics = lambda previous, state: {"uplink_symbols": 1.0}
    with pytest.raises(ValueError, match="the column 'uplink_symbols' is written twice"):
        engine.run_round(0, initial)
    engine.algorithm.round_metrics = lambda previous, state: {"train_loss": 1.0}
    with pytest.raises(ValueError, match="round_metrics returned 'train_loss'"):
        engine.run_round(0, initial)
    engine.algorithm.round_metrics = lambda previous, state: {"posterior_std": np.ones(3)}
    with pytest.raises(ValueError, match=r"round_metrics\(\)\['posterior_std'\] must be a scalar"):
        engine.run_round(0, initial)


def test_fedavg_writes_no_posterior_metrics(tmp_path):
    """FedAvg has no round metrics of its own: its records hold none of the proposed
    method's columns (``precision_floor_hits`` is 0, as in every trace)."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, every=1, algorithm="fedavg", hidden=4))
    engine = Engine(scenario)
    assert engine.algorithm.predict_mean_probs(engine.initial_state(), None) is None
    _, record = engine.run_round(0, engine.initial_state())
    assert not [k for k in record.scalars if k.startswith(("precision_", "posterior_std"))
                and k != "precision_floor_hits"]


TIME_DOMAIN = time_domain(20.0, 0.02)


def test_a_time_domain_run_with_offsets_resumes_to_the_uninterrupted_trace(tmp_path):
    """The time-domain uplink over a 3GPP UMi cell with timing offsets past the prefix and
    CFOs: the offsets are traced per device and round, and a run cut after two rounds
    and resumed equals the uninterrupted one in every dataset."""

    class InterruptedEngine(Engine):
        def run_round(self, t, state):
            if t == 2:
                raise KeyboardInterrupt
            return super().run_round(t, state)

    overrides = [*TIME_DOMAIN, 'channel.model="umi"']
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    full_dir.mkdir()
    cut_dir.mkdir()
    full = load_scenario(write_tiny(full_dir, rounds=3), overrides)
    run_scenario(full, progress=False)
    cut = load_scenario(write_tiny(cut_dir, rounds=3), overrides)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(cut, progress=False, engine=InterruptedEngine(cut))
    run_scenario(cut, resume=True, progress=False)
    first, second = _arrays(full_dir / "tiny-seed3.h5"), _arrays(cut_dir / "tiny-seed3.h5")
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    timing = next(v for k, v in first.items() if k.endswith("timing_offset_samples"))
    assert timing.shape[-1] == K and 0.0 <= timing.min() and timing.max() <= 20.0
    assert np.isfinite(first["rounds/train_loss"]).all()


def test_a_3gpp_cell_sets_the_path_gain_and_the_time_domain_matches_the_frequency_domain():
    """With no offsets and the (i.i.d. Rayleigh delay line) channel inside the prefix the
    time-domain round equals the frequency-domain round computed on the same channel;
    with channel.model = "umi" the static path gain is the cell's (not r^-alpha)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        path = write_tiny(Path(directory), rounds=1)
        aligned = ['ofdm.domain="time"', "ofdm.cyclic_prefix_length=16", "channel.num_taps=4"]
        scenario = load_scenario(path, aligned)
        engine = Engine(scenario)
        state = engine.initial_state()
        _, uplink, offsets = engine.uplink.draw_channel(0)
        assert uplink.isi_free().all() and not np.any(offsets[0]) and not np.any(offsets[1])
        time_state, time_record = engine.run_round(0, state)

        frequency = Engine(scenario)  # the same channel, the frequency-domain uplink
        draw = frequency.uplink.draw_channel
        frequency.uplink.draw_channel = lambda t, *drop: (draw(t, *drop)[0], None, None)
        frequency_state, frequency_record = frequency.run_round(0, state)
        for key in ("distortion_rho", "delta_bar_rho", "train_loss"):
            assert time_record.scalars[key] == frequency_record.scalars[key], key
        compared = 0
        import dataclasses

        for field in dataclasses.fields(time_state):
            a = np.asarray(getattr(time_state, field.name))
            b = np.asarray(getattr(frequency_state, field.name))
            if a.dtype.kind == "f":
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
                compared += a.size
        assert compared > 0

        umi = Engine(load_scenario(path, ['channel.model="umi"']))
        distances = umi.world.deployment.distances_m
        assert not np.allclose(umi.world.path_gain, distances ** -4.0)
        assert np.all(umi.world.path_gain < 1e-5) and np.all(umi.world.path_gain > 1e-16)


@pytest.mark.parametrize("estimator", ["reparameterization", "local_reparameterization"])
def test_a_round_makes_no_host_copy_of_the_updates(tmp_path, estimator):
    """Issue 18's one array boundary per round: after the first round (which fills the
    Numba backend's buffer pool) a round allocates no NumPy array of the [K, d] updates'
    size: each phase's updates go from the kernels to TensorFlow and the PHY without a
    copy, on the host (NumPy's allocations, which tracemalloc sees) or in TensorFlow
    (its CPU allocator's statistics, kept with the BFC allocator that conftest.py
    and the `cosim` command select). 64 devices, so that the [d] vectors of the
    state and metrics stay small beside [K, d]; one local step of 2 Monte-Carlo samples
    per phase (the updates cross the boundary once per phase however many steps made
    them; the default 3 steps of 5 samples made the exact estimator's three rounds cost
    about 70 CPU seconds)."""
    import tracemalloc

    num_devices = 64
    scenario = load_scenario(
        write_tiny(tmp_path, rounds=5, every=100, hidden=512),
        [f"cell.num_devices={num_devices}", "data.synthetic_train_size=3000",
         f'algorithm.estimator="{estimator}"', "algorithm.local_steps=1",
         "algorithm.mc_samples=2"],
    )
    engine = Engine(scenario)
    assert engine.algorithm.trainer.backend.name == "numba"
    updates_bytes = num_devices * engine.num_params * 4
    state = engine.initial_state()
    state, _ = engine.run_round(0, state)
    host_peaks = []
    tracemalloc.start()
    try:
        for t in (1, 2):  # round 0 filled the pools: a copy would show in every later round
            tracemalloc.reset_peak()
            tf.config.experimental.reset_memory_stats("CPU:0")
            start = tracemalloc.get_traced_memory()[0]
            start_tf = tf.config.experimental.get_memory_info("CPU:0")["current"]
            state, _ = engine.run_round(t, state)
            host_peaks.append((tracemalloc.get_traced_memory()[1] - start) / updates_bytes)
            tf_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - start_tf
            assert tf_peak < 0.5 * updates_bytes, (t, tf_peak / updates_bytes)
    finally:
        tracemalloc.stop()
    # a copy per round shows in both rounds; Python's one-off allocations of round 1 in a
    # process that ran other tests first (2.16 x the updates, after the other tests of this
    # file from a cold Numba cache, 2026-11-28) do not recur
    assert min(host_peaks) < 0.5, host_peaks


def test_aggregate_nmse_is_zero_without_a_channel_and_grows_with_the_noise_power(tmp_path):
    """aggregate_error_<phase> = ||estimate - sum_k pi_k Delta_k||^2: float32 rounding alone
    under the ideal control; over the air with the budget slack (a fixed gamma, so that
    the power control never binds) it is the receiver noise, n values of variance
    noise_power_<phase> each, so it grows with power.noise_power_dbm (x100 for +20 dB)."""
    path = write_tiny(tmp_path, rounds=1, every=1)
    ideal = Engine(load_scenario(path, ['power.control="ideal"']))
    _, record = ideal.run_round(0, ideal.initial_state())
    phases = [phase.name for phase in ideal.algorithm.phases()]
    for phase in phases:
        assert 0.0 <= record.scalars[f"aggregate_nmse_{phase}"] < 1e-12, record.scalars
        assert record.scalars[f"aggregate_error_{phase}"] >= 0.0
    nmse = {}
    for dbm in (-100.0, -80.0):
        engine = Engine(load_scenario(path, ["power.gamma=1e-13", f"power.noise_power_dbm={dbm}"]))
        _, record = engine.run_round(0, engine.initial_state())
        nmse[dbm] = [record.scalars[f"aggregate_nmse_{phase}"] for phase in phases]
        for phase, spec in zip(phases, engine.algorithm.phases(), strict=True):
            assert record.scalars[f"distortion_{phase}"] == 0.0  # the budget never binds
            expected = spec.num_values * record.scalars[f"noise_power_{phase}"]
            np.testing.assert_allclose(record.scalars[f"aggregate_error_{phase}"], expected,
                                       rtol=0.3)
    for quiet, loud in zip(nmse[-100.0], nmse[-80.0], strict=True):
        assert 0.0 < quiet and 30.0 < loud / quiet < 300.0, nmse
