"""A multi-antenna BS (issue 31 item 2): N_r = 1 is today's path bit for bit, N_r > 1 runs
through every domain, and the scenario refuses what it cannot simulate."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from test_engine import _arrays
from tiny_scenario import time_domain, write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import ScenarioError, load_scenario
from phy.combiner import CombinedUplink, effective_channel
from phy.ofdm_time import TimeDomainUplink


def test_one_antenna_reproduces_the_default_trace_bit_for_bit(tmp_path):
    runs = {}
    for label, overrides in {"default": [], "explicit": ["bs.num_antennas=1"],
                             "explicit_maxmin": ["bs.num_antennas=1", 'bs.combiner="maxmin"'],
                             "explicit_mrc": ["bs.num_antennas=1", 'bs.combiner="mrc_strongest"']}.items():
        directory = tmp_path / label
        directory.mkdir()
        summary = run_scenario(load_scenario(write_tiny(directory, rounds=2), overrides),
                               progress=False)
        runs[label] = _arrays(summary.trace_path)
    reference = runs.pop("default")
    assert "rounds/aggregate_nmse_rho" in reference
    for label, arrays in runs.items():
        assert arrays.keys() == reference.keys(), label
        for name in reference:
            np.testing.assert_array_equal(arrays[name], reference[name], err_msg=f"{label}: {name}")


_TDL = ['channel.model="tdl"', 'channel.tdl_profile="C"', "channel.delay_spread_s=1e-7"]
_UMI = ['channel.model="umi"']


@pytest.mark.parametrize("overrides", [[], time_domain(3.0, 0.05),
                                       ['channel.model="flat_rayleigh"'], _TDL,
                                       [*_TDL, *time_domain(2.0, 0.0)[:2]], _UMI],
                         ids=["frequency", "time", "flat", "tdl", "tdl-time", "umi"])
def test_antenna_path_at_one_antenna_is_todays_channel(tmp_path, overrides):
    """The multi-antenna draw with N_r = 1 (forced) gives today's channel and uplink exactly."""
    engine = Engine(load_scenario(write_tiny(tmp_path, rounds=1), overrides))
    h, uplink, offsets = engine.uplink.draw_channel(0)
    h1, uplink1, offsets1 = engine.uplink.draw_antennas(0, 1)
    np.testing.assert_array_equal(h1.numpy(), h.numpy())
    if uplink is not None:
        np.testing.assert_array_equal(uplink1.uplinks[0].taps, uplink.taps)
        np.testing.assert_array_equal(offsets1[0], offsets[0])
        x = (np.random.default_rng(0).normal(size=(8, 2, 64, 2)) @ [1, 1j]).astype(np.complex64)
        np.testing.assert_array_equal(uplink1(x), uplink(x))


@pytest.mark.parametrize("overrides", [[], time_domain(0.0, 0.0)], ids=["frequency", "time"])
def test_four_antennas_run_and_raise_the_weakest_gain(tmp_path, overrides):
    """N_r = 4 runs (finite trace, the per-phase NMSE columns) and the max-min combiner
    gives the weakest device more gain than one antenna does, in every round."""
    traces = {}
    for n in (1, 4):
        directory = tmp_path / f"n{n}"
        directory.mkdir()
        scenario = load_scenario(write_tiny(directory, rounds=2),
                                 [*overrides, f"bs.num_antennas={n}", 'bs.combiner="maxmin"'])
        traces[n] = _arrays(run_scenario(scenario, progress=False).trace_path)
    for name in ("rounds/aggregate_nmse_rho", "rounds/aggregate_nmse_nu", "rounds/test_accuracy"):
        assert np.all(np.isfinite(traces[4][name][-1:])), name
    gain1 = traces[1]["rounds/per_device/mean_channel_gain"]
    gain4 = traces[4]["rounds/per_device/mean_channel_gain"]
    assert np.all(gain4.min(axis=1) > gain1.min(axis=1))


def test_combined_uplink_without_offsets_is_the_effective_channel():
    """No ISI, no CFO: the combined time-domain uplink equals sum_k (m^H h_k) x_k per
    subcarrier, and Sionna's reference equals the fast map."""
    rng = np.random.default_rng(1)
    num_devices, num_antennas, num_subcarriers = 3, 2, 32
    a = (rng.normal(size=(num_devices, num_antennas, 4, 2)) @ [1, 1j]) / 2
    tau = np.broadcast_to(np.arange(4) / 1e6, (num_devices, 4))
    uplinks = [TimeDomainUplink.from_paths(a[:, r], tau, bandwidth_hz=1e6, num_subcarriers=num_subcarriers,
                                           cyclic_prefix_length=16) for r in range(num_antennas)]
    m = rng.normal(size=(num_antennas, num_subcarriers, 2)) @ [1, 1j]
    m = (m / np.linalg.norm(m, axis=0)).astype(np.complex64)
    uplink = CombinedUplink(uplinks, m)
    assert np.all(uplink.isi_free())
    x = (rng.normal(size=(num_devices, 2, num_subcarriers, 2)) @ [1, 1j]).astype(np.complex64)
    g = effective_channel(uplink.frequency_responses(), m)
    np.testing.assert_allclose(uplink(x), np.einsum("kf,knf->nf", g, x), atol=1e-5)
    np.testing.assert_allclose(uplink.reference(x), uplink(x), atol=1e-4)
    np.testing.assert_array_equal(uplink.frequency_response(), g)


@pytest.mark.parametrize("override, message", [
    ("bs.num_antennas=0", "bs.num_antennas: must be >= 1 (got 0)"),
    ("bs.num_antennas=2.5", "bs.num_antennas: must be an integer (got 2.5)"),
    ('bs.combiner="zero_forcing"', "bs.combiner: must be one of"),
])
def test_bad_bs_keys_name_the_key_and_value(tmp_path, override, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(write_tiny(tmp_path), [override])


def test_effective_channel_keeps_the_noise_power(tmp_path):
    """A unit-norm combiner leaves the noise m^H z at sigma_z^2 per subcarrier."""
    engine = Engine(load_scenario(write_tiny(tmp_path, rounds=1), ["bs.num_antennas=3"]))
    h = engine.uplink.channel.antennas(engine.uplink.path_gain, tf.constant([1, 2], tf.int32), 3).numpy()
    m = engine.uplink.air.combiner(h)
    z = (np.random.default_rng(2).normal(size=(20000, 3, 64, 2)) @ [1, 1j]) / np.sqrt(2)
    combined = np.einsum("rf,nrf->nf", np.conj(m), z)
    assert abs(np.mean(np.abs(combined) ** 2) - 1.0) < 0.01


@pytest.mark.parametrize("overrides", [_TDL, [*_TDL, *time_domain(2.0, 0.05)[:2]], _UMI,
                                       [*_UMI, *time_domain(0.0, 0.0)[:2]]],
                         ids=["tdl", "tdl-time", "umi", "umi-time"])
def test_other_channels_with_three_antennas_run_a_round(tmp_path, overrides):
    engine = Engine(load_scenario(write_tiny(tmp_path, rounds=1),
                                  [*overrides, "bs.num_antennas=3", 'bs.combiner="centroid"']))
    h, uplink, _ = engine.uplink.draw_channel(0)
    assert h.shape == (8, 64)
    if uplink is not None:
        assert isinstance(uplink, CombinedUplink) and len(uplink.uplinks) == 3
        np.testing.assert_allclose(uplink.frequency_response(), h.numpy(), rtol=1e-5, atol=1e-7)
    _, record = engine.run_round(0, engine.initial_state())
    assert np.isfinite(record.scalars["aggregate_nmse_rho"])
    assert np.isfinite(record.scalars["aggregate_nmse_nu"])


def test_combined_uplink_with_offsets_matches_sionna_reference():
    """Timing offsets past the prefix and CFOs: each antenna's fast map, combined, equals the
    combination of Sionna's modulator / demodulator per antenna."""
    rng = np.random.default_rng(3)
    num_devices, num_antennas, num_subcarriers = 3, 3, 32
    a = (rng.normal(size=(num_devices, num_antennas, 4, 2)) @ [1, 1j]) / 2
    tau = np.broadcast_to(np.arange(4) / 1e6, (num_devices, 4))
    offsets = dict(timing_offset_samples=np.array([0.0, 5.5, 12.0]),
                   cfo_subcarriers=np.array([0.0, 0.1, -0.2]))
    uplinks = [TimeDomainUplink.from_paths(a[:, r], tau, bandwidth_hz=1e6, num_subcarriers=num_subcarriers,
                                           cyclic_prefix_length=8, **offsets) for r in range(num_antennas)]
    m = rng.normal(size=(num_antennas, num_subcarriers, 2)) @ [1, 1j]
    uplink = CombinedUplink(uplinks, (m / np.linalg.norm(m, axis=0)).astype(np.complex64))
    assert not np.all(uplink.isi_free())
    x = (rng.normal(size=(num_devices, 3, num_subcarriers, 2)) @ [1, 1j]).astype(np.complex64)
    np.testing.assert_allclose(uplink(x), uplink.reference(x), atol=2e-4)
