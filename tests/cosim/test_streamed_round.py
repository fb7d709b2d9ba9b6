"""A round with its devices in chunks (cosim/streamed_round.py) against the one-call round
(cosim/round.py) on the tiny scenario: the same trace to float32 rounding, for the
proposed method (whose phase 2 trains phase 1 again per chunk), FedAvg, signSGD and the
algorithms with per-device tables, which a streamed round keeps on disk
(learning/device_table.py)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.run import run_scenario
from cosim.scenario import ScenarioError, load_scenario
from cosim.scenario.derived import devices_in_memory
from cosim.streamed_round import chunk_bounds


def _trace(tmp_path, algorithm: str, overrides: list[str], tag: str) -> dict:
    path = write_tiny(tmp_path, rounds=3, every=3, algorithm=algorithm,
                      learning_rate=0.02 if algorithm == "bayes_aircomp" else 0.1,
                      trace_dir=tmp_path / tag, file_name=f"{tag}.toml")
    scenario = load_scenario(path, overrides)
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        out = {name: rounds[name][()] for name in rounds if isinstance(rounds[name], h5py.Dataset)}
        out.update({f"per_device/{name}": rounds["per_device"][name][()] for name in rounds["per_device"]})
    return out


MOVING = ['mobility.model="straight"', "mobility.speed_mps=[1.0, 30.0]", "mobility.compute_seconds_per_round=0.25"]
COMPARED = ("train_loss", "delta_bar_rho", "delta_bar_nu", "delta_bar_delta", "test_accuracy",
            "delta_bar_control", "delta_bar_perturbation", "aggregate_nmse_control",
            "aggregate_nmse_perturbation",
            "per_device/tx_power_w_rho", "per_device/tx_power_w_delta", "per_device/tx_energy_j",
            "uplink_energy_j", "aggregate_nmse_rho", "aggregate_nmse_nu", "aggregate_nmse_delta",
            "vote_error_rate_delta", "per_device/bits_per_symbol_delta", "bits_sent_delta",
            "round_seconds", "per_device/position_x_m", "per_device/aging_correlation_rho",
            "per_device/aging_correlation_delta", "outage_devices_delta")


@pytest.mark.parametrize("algorithm, scheme, more", [
    ("bayes_aircomp", "analog", []), ("fedavg", "analog", []), ("fedavg", "digital_ofdma", []),
    ("fedavg", "digital_ofdma", ["ofdm.num_subcarriers=3"]),  # K = 8 > F: slot groups of 2, 3, 3
    ("signsgd", "one_bit", []),
    ("bayes_aircomp", "analog", MOVING),  # the channel at each phase's middle
    ("bayes_aircomp", "analog", [*MOVING, 'mobility.channel_within_phase="per_symbol"', "bs.num_antennas=2"]),
    ("fedavg", "digital_ofdma", [*MOVING, 'uplink.rate_adaptation="coherence_block"', "ofdm.num_subcarriers=3"]),
    ("signsgd", "one_bit", [*MOVING, 'mobility.channel_within_phase="per_symbol"']),
    ("scaffold", "analog", []), ("fedsmoo", "analog", []), ("fedgmt", "analog", []),
    ("signsgd", "one_bit", ["algorithm.signsgd.error_feedback=true"])])
def test_a_streamed_round_writes_the_one_call_rounds_trace(tmp_path, algorithm, scheme, more):
    """Chunks of 3 devices (3, 3, 2 of K = 8) against every device at once: the same
    columns, every compared column within float32 rounding over three rounds."""
    scheme_set = [f'uplink.scheme="{scheme}"', *more]
    whole = _trace(tmp_path, algorithm, scheme_set, "whole")
    streamed = _trace(tmp_path, algorithm, [*scheme_set, "runtime.devices_in_memory=3"], "streamed")
    assert set(streamed) == set(whole)
    compared = [name for name in COMPARED if name in whole]
    assert len(compared) >= 4
    for name in compared:
        np.testing.assert_allclose(streamed[name], whole[name], rtol=2e-4, atol=1e-9, err_msg=name)
    np.testing.assert_array_equal(streamed["uplink_symbols"], whole["uplink_symbols"])


def test_the_streamed_round_runs_in_chunks(tmp_path, monkeypatch):
    """The engine takes the streamed round with devices_in_memory below K, and every
    phase's stream sees the chunks in order."""
    from phy.uplink.phase_stream import PhaseStream

    seen = []
    original = PhaseStream.add

    def spy(self, lo, hi, updates):
        seen.append((self.phase, lo, hi, tuple(updates.shape)))
        return original(self, lo, hi, updates)

    monkeypatch.setattr(PhaseStream, "add", spy)
    path = write_tiny(tmp_path, rounds=1, every=1)
    run_scenario(load_scenario(path, ["runtime.devices_in_memory=5"]), progress=False)
    assert [(phase, lo, hi) for phase, lo, hi, _ in seen] == [
        ("rho", 0, 5), ("rho", 5, 8), ("nu", 0, 5), ("nu", 5, 8)]
    assert seen[0][3][0] == 5


def test_chunk_bounds_cover_the_population_in_order():
    assert chunk_bounds(8, 3) == [(0, 3), (3, 6), (6, 8)]
    assert chunk_bounds(4, 10) == [(0, 4)]


@pytest.mark.parametrize("override, key", [
    ("participation.fraction=0.5", "[participation]"),
    ("trace.signals=true", "trace.signals"),
    ('power.gamma="joint"', "power.gamma"),
])
def test_a_round_that_cannot_stream_is_refused_naming_the_key(tmp_path, override, key):
    path = write_tiny(tmp_path)
    scenario = load_scenario(path, ["runtime.devices_in_memory=3", override])
    with pytest.raises(ScenarioError, match=r"runtime\.devices_in_memory") as info:
        devices_in_memory(scenario, 1000)
    assert key in str(info.value)


def test_auto_streams_only_a_round_that_does_not_fit(tmp_path):
    """``"auto"``: every device while the round fits in three quarters of the machine's
    memory (the one-call round, bit for bit); chunks sized to half of it when it does not;
    a number at or above K is every device."""
    scenario = load_scenario(write_tiny(tmp_path), [])
    assert devices_in_memory(scenario, 1000, memory_bytes=2**34) is None
    # d = 10^7: the round needs 4.2 GiB (14 float32 d-vectors per device, 560 MB) beside
    # the runtime; on a machine of 4 GiB, half of it holds the runtime, two or three
    # devices' steps and the per-device stream terms
    chunk = devices_in_memory(scenario, 10**7, memory_bytes=4 * 2**30)
    assert chunk is not None and 1 < chunk < 8
    assert devices_in_memory(load_scenario(write_tiny(tmp_path), ["runtime.devices_in_memory=8"]), 10) is None


def test_devices_in_memory_refuses_what_is_not_a_count(tmp_path):
    for bad in ("0", "-2", "true", '"all"', "2.5"):
        with pytest.raises(ScenarioError, match=r"runtime\.devices_in_memory"):
            load_scenario(write_tiny(tmp_path), [f"runtime.devices_in_memory={bad}"])


def test_a_chunk_trains_its_carry_again_to_the_bit(tmp_path):
    """The proposed method's phase 2 per chunk: the chunk's phase-1 updates trained again
    from the same streams are the rows it sent, and its phase-2 updates are the rows of
    the one-call phase 2 (the Numba steps, device by device: bit for bit)."""
    import tensorflow as tf

    from cosim import rng as rngs
    from cosim.streamed_round import _chunk_carry
    from cosim.world import build_world

    world = build_world(load_scenario(write_tiny(tmp_path, learning_rate=0.02), []))
    algorithm, data, state = world.algorithm, world.device_data, world.initial_state()
    seeds = [rngs.stream_seed(3, 0, rngs.local_purpose(name)) for name in ("rho", "nu")]
    first, carry, _ = algorithm.local_update(0, state, None, data, seeds[0])
    first = np.array(first)
    estimate = tf.constant(first.T @ np.asarray(data.weights), tf.float32)
    after, round_carry, _ = algorithm.server_update(0, state, carry, estimate)
    second = np.array(algorithm.local_update(1, after, round_carry, data, seeds[1])[0])
    for lo, hi in chunk_bounds(data.num_devices, 3):
        rows = data.rows(lo, hi)
        chunk = _chunk_carry(algorithm, 1, [state, after], [round_carry], rows, seeds)
        np.testing.assert_array_equal(np.asarray(chunk.delta_rho_k), first[lo:hi])
        np.testing.assert_array_equal(np.asarray(algorithm.local_update(1, after, chunk, rows, seeds[1])[0]),
                                      second[lo:hi])


def test_a_scheme_says_it_streams_exactly_when_it_has_a_stream():
    """The registry's fact (read by validate without TensorFlow) and the class agree, and a
    scheme that streams states its memory term."""
    from phy.scheme_parameters import UPLINK_SCHEMES

    for name, variant in UPLINK_SCHEMES.items():
        parameters = variant.parameters
        assert parameters.streams == hasattr(variant.target(), "open_stream"), name
        if parameters.streams:
            assert parameters().stream_bytes_per_device(118_282, 1024) > 0, name


def test_indexed_data_pads_a_chunk_as_the_whole_population(tmp_path):
    """A chunk of the indexed data (what a streamed round trains on) is the same tensors
    as those rows of the padded population: inputs, labels, mask, weights and ids."""
    from cosim.local_data import scenario_dataset, scenario_partition
    from learning.data.partition import IndexedDeviceData, to_device_data

    scenario = load_scenario(write_tiny(tmp_path), [])
    dataset = scenario_dataset(scenario)
    partition = scenario_partition(scenario, dataset)
    whole, indexed = to_device_data(dataset, partition), IndexedDeviceData.of(dataset, partition)
    assert indexed.num_devices == whole.num_devices == 8
    for lo, hi in ((0, 3), (3, 8)):
        a, b = indexed.rows(lo, hi), whole.rows(lo, hi)
        for field in ("x", "y", "mask", "weights", "devices"):
            np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)), err_msg=field)


def test_validate_says_when_the_round_streams(tmp_path, capsys):
    from cosim.cli import main

    path = write_tiny(tmp_path)
    assert main(["validate", str(path), "--set", "runtime.devices_in_memory=3"]) == 0
    assert "the round streams its devices, 3 at a time" in capsys.readouterr().out


def test_validate_says_how_much_disk_the_device_tables_take(tmp_path, capsys):
    from cosim.cli import main

    path = write_tiny(tmp_path, algorithm="fedsmoo")
    assert main(["validate", str(path), "--set", "runtime.devices_in_memory=3"]) == 0
    out = capsys.readouterr().out
    assert "tables    ~" in out and "tiny-seed3-device-tables (2 per-device table(s) x 2 versions" in out
    assert main(["validate", str(path)]) == 0
    assert "tables    " not in capsys.readouterr().out


def test_the_cost_estimate_counts_the_training_a_streamed_round_repeats(tmp_path):
    """The proposed method's streamed round trains phase 1 twice: 1.5 times the local
    training of the round that holds every device; SCAFFOLD's second phase trains its
    first again: twice; FedAvg's single phase: the same (the analog scheme adds no cost
    term of its own)."""
    from cosim.study.cost import run_cost

    for algorithm, factor in (("bayes_aircomp", 1.5), ("scaffold", 2.0), ("fedavg", 1.0)):
        path = write_tiny(tmp_path, algorithm=algorithm)
        whole = run_cost(load_scenario(path, []))
        streamed = run_cost(load_scenario(path, ["runtime.devices_in_memory=3"]))
        assert whole.known and whole.round_core_s > 0
        assert streamed.round_core_s == pytest.approx(factor * whole.round_core_s, rel=1e-12)


def test_a_chunk_trains_after_the_last_chunks_carry_is_gone(tmp_path, monkeypatch):
    """The streamed round lets go of a chunk's carry (the proposed method's: its updates,
    a [chunk, d] buffer) before the next chunk trains, so a phase holds one chunk's
    updates, not two; measured, one [500, d] buffer (0.22 GiB) less at K = 10,000."""
    import weakref

    from learning.algorithms.bayes_aircomp import BayesAirComp

    returned, alive = [], []
    original = BayesAirComp.local_update

    def spy(self, phase, state, carry, data, seed):
        alive.append(sum(ref() is not None for ref in returned))
        out = original(self, phase, state, carry, data, seed)
        returned.append(weakref.ref(out[1]))
        return out

    monkeypatch.setattr(BayesAirComp, "local_update", spy)
    path = write_tiny(tmp_path, rounds=1, every=1)
    run_scenario(load_scenario(path, ["runtime.devices_in_memory=3"]), progress=False)
    assert len(alive) == 3 + 2 * 3  # rho in 3 chunks; nu trains rho again in each
    assert alive == [0] * len(alive), alive  # no earlier chunk's carry when a chunk trains


def test_the_round_keeps_no_chunks_rows_of_an_earlier_phase(tmp_path, monkeypatch):
    """Of phase 1's carry the streamed round keeps only what ``chunk_carry`` reads (the
    proposed method's applied ``delta_rho``), not the last chunk's ``delta_rho_k`` (a
    [chunk, d] buffer that phase 2's chunks could not reuse): when phase 2 trains, no
    update of phase 1's chunks is alive but the one its chunk trained again."""
    import weakref

    from learning.algorithms.bayes_aircomp import BayesAirComp

    first_pass, alive_at_phase_two = [], []
    original = BayesAirComp.local_update

    def spy(self, phase, state, carry, data, seed):
        if phase == 1:
            alive_at_phase_two.append(sum(ref() is not None for ref in first_pass))
        out = original(self, phase, state, carry, data, seed)
        if phase == 0 and len(first_pass) < 3:  # phase 1's three chunks, before phase 2 trains them again
            first_pass.append(weakref.ref(out[1].delta_rho_k))
        return out

    monkeypatch.setattr(BayesAirComp, "local_update", spy)
    path = write_tiny(tmp_path, rounds=1, every=1)
    run_scenario(load_scenario(path, ["runtime.devices_in_memory=3"]), progress=False)
    assert len(first_pass) == 3 and len(alive_at_phase_two) == 3
    assert alive_at_phase_two == [0, 0, 0], alive_at_phase_two
