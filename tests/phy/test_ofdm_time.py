"""The time-domain uplink (phy/ofdm_time.py, phy/sync.py): the fast map held to Sionna's
blocks, the frequency-domain path recovered without offsets, and the textbook effects of
timing and frequency offsets."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from conformance import assert_conforms
from sionna.phy.channel import ApplyTimeChannel, cir_to_time_channel

from phy.aircomp import aggregate
from phy.limits import L_MIN
from phy.ofdm_time import TimeDomainUplink, discrete_taps, series_terms
from phy.parameters import POWER_CONTROLS
from phy.sync import UniformOffsets

F, CP = 64, 16
SPACING_HZ = 30e3
BANDWIDTH_HZ = F * SPACING_HZ


def _symbols(rng, num_devices, num_symbols, num_subcarriers=F):
    shape = (num_devices, num_symbols, num_subcarriers)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _paths(rng, num_devices, num_paths, max_delay_samples, on_grid=False):
    a = (rng.standard_normal((num_devices, num_paths))
         + 1j * rng.standard_normal((num_devices, num_paths))) / np.sqrt(2 * num_paths)
    if on_grid:
        delays = np.tile(np.arange(num_paths, dtype=float), (num_devices, 1))
    else:
        delays = np.sort(rng.uniform(0.0, max_delay_samples, (num_devices, num_paths)), axis=1)
    return a, delays / BANDWIDTH_HZ


def _uplink(a, tau, timing=None, cfo=None, cp=CP, num_subcarriers=F):
    return TimeDomainUplink.from_paths(
        a, tau, bandwidth_hz=num_subcarriers * SPACING_HZ, num_subcarriers=num_subcarriers,
        cyclic_prefix_length=cp, timing_offset_samples=timing, cfo_subcarriers=cfo)


@pytest.mark.parametrize("case", ["aligned", "inside_cp", "fractional", "beyond_cp", "cfo",
                                  "everything"])
def test_the_fast_map_equals_sionnas_blocks(case):
    """:meth:`TimeDomainUplink.__call__` against the waveform through OFDMModulator, CFO,
    convolution and OFDMDemodulator, under the conformance suites' tolerance policy
    (real and imaginary parts; measured worst 1.2e-6 of the scale)."""
    rng = np.random.default_rng(7)
    num_devices = 5
    a, tau = _paths(rng, num_devices, 3, 4.0)
    timing = {"aligned": np.zeros(num_devices), "inside_cp": np.array([0, 3, 5, 2, 1.0]),
              "fractional": np.array([0.5, 3.3, 5.0, 2.7, 1.0]),
              "beyond_cp": np.array([0, 20, 25.5, 40, 1.0]), "cfo": np.zeros(num_devices),
              "everything": np.array([0, 30, 5.2, 40.5, 1.0])}[case]
    cfo = (rng.uniform(-0.3, 0.3, num_devices) if case in ("cfo", "everything")
           else np.zeros(num_devices))
    uplink = _uplink(a, tau, timing, cfo)
    x = _symbols(rng, num_devices, 4)
    fast, reference = uplink(x), uplink.reference(x)
    assert fast.shape == reference.shape == (4, F) and fast.dtype == np.complex64
    assert_conforms(np.stack([fast.real, fast.imag]), np.stack([reference.real, reference.imag]),
                    "array", f"received symbols ({case})")
    if case == "beyond_cp":
        assert not uplink.isi_free()[1:4].any()


def test_without_offsets_the_waveform_is_the_frequency_domain_model():
    """Taps inside the prefix and no CFO: ``Y = sum_k G_k o X_k`` (eq. ``ReceivedSignal``)."""
    rng = np.random.default_rng(3)
    a, tau = _paths(rng, 4, 6, 3.0)
    uplink = _uplink(a, tau)
    assert uplink.isi_free().all()
    x = _symbols(rng, 4, 3)
    expected = np.sum(uplink.frequency_response()[:, None, :] * x, axis=0)
    for y in (uplink(x), uplink.reference(x)):
        np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("offset", [1, 7, CP + L_MIN - 2])
def test_an_integer_timing_offset_inside_the_prefix_is_exactly_a_phase_ramp(offset):
    """One flat path delayed by theta whole samples, theta + channel inside the prefix:
    ``Y[f] = exp(-j 2 pi (f - F/2) theta / F) X[f]`` on every subcarrier (float32 rounding)."""
    rng = np.random.default_rng(11)
    a, tau = np.ones((1, 1)), np.zeros((1, 1))
    uplink = _uplink(a, tau, timing=np.array([float(offset)]))
    assert uplink.isi_free().all()
    nonzero = np.flatnonzero(uplink.taps[0])
    assert list(uplink.lags()[nonzero]) == [offset]  # a shift, not a sinc
    x = _symbols(rng, 1, 5)
    ramp = np.exp(-2j * np.pi * (np.arange(F) - F // 2) * offset / F)
    for y in (uplink(x), uplink.reference(x)):
        np.testing.assert_allclose(y, ramp * x[0], rtol=0, atol=2e-6 * np.abs(x).max())


@pytest.mark.parametrize("epsilon", [0.05, 0.2, 0.4])
def test_a_cfo_leaks_the_power_the_standard_formula_predicts(epsilon):
    """CFO epsilon (subcarrier spacings), one device, flat unit channel, i.i.d. unit-power
    symbols on all F subcarriers. Each received subcarrier is the wanted symbol times
    ``S(eps) = sin(pi eps) / (F sin(pi eps / F))`` (and the symbol's common phase) plus
    inter-carrier interference of power ``1 - |S(eps)|^2`` (Pollet et al., 1995; Moose,
    1994). The ICI power is measured as the residual after removing the wanted term
    with the known S and phase, averaged over 200 symbols x 64 subcarriers: its relative
    standard error is about 1/sqrt(12,800) = 0.9 %, and the test allows 5 %."""
    rng = np.random.default_rng(5)
    num_symbols = 200
    uplink = _uplink(np.ones((1, 1)), np.zeros((1, 1)), cfo=np.array([epsilon]))
    x = _symbols(rng, 1, num_symbols) / np.sqrt(2)
    y = uplink(x)
    attenuation = np.sin(np.pi * epsilon) / (F * np.sin(np.pi * epsilon / F))
    # the common phase of symbol n: the CFO's phase at the window centre
    start = np.arange(num_symbols) * (F + CP) + CP + L_MIN
    phase = np.exp(2j * np.pi * epsilon * (start + (F - 1) / 2) / F)[:, None]
    residual = y - attenuation * phase * x[0]
    measured = np.mean(np.abs(residual) ** 2)
    predicted = 1.0 - attenuation**2
    assert measured == pytest.approx(predicted, rel=0.05)
    # and the wanted term is what is left: the correlation with x recovers S
    estimated = np.mean(y * np.conj(phase * x[0])) / np.mean(np.abs(x[0]) ** 2)
    assert abs(estimated) == pytest.approx(attenuation, abs=0.02)


@pytest.mark.parametrize("cfo_max", [0.02, 0.3, 0.6, 2.0])
def test_the_cfo_series_equals_a_transform_per_device(cfo_max, monkeypatch):
    """The devices with a CFO and no inter-symbol taps are summed through the CFO series
    (:func:`series_terms` IFFTs per symbol); the same map with one IFFT per device
    (``max_series_terms=0``) gives the same grid to float32 rounding (measured worst
    2.5e-7 of the scale). Mixed with clean devices and devices beyond the prefix. Above
    16 terms (|epsilon| > 0.68) every CFO device takes its own IFFT."""
    rng = np.random.default_rng(11)
    num_devices = 8
    # on the sample grid, so that the sinc tails of the late devices' taps do not reach
    # past the prefix for every device
    a, tau = _paths(rng, num_devices, 3, 4.0, on_grid=True)
    timing = np.array([0, 3, 0, 30, 2, 0, 40, 1.0])  # devices 3 and 6 beyond the prefix
    cfo = rng.uniform(-cfo_max, cfo_max, num_devices)
    cfo[[0, 5]] = 0.0  # clean
    uplink = _uplink(a, tau, timing, cfo)
    direct = dataclasses.replace(uplink, max_series_terms=0)
    calls = []
    series_window = TimeDomainUplink._series_window
    monkeypatch.setattr(TimeDomainUplink, "_series_window",
                        lambda self, *args: calls.append(args[3]) or series_window(self, *args))
    x = _symbols(rng, num_devices, 6)
    fast, slow = uplink(x), direct(x)
    assert list(np.flatnonzero(~uplink.isi_free())) == [3, 6]
    terms = series_terms(np.abs(cfo[uplink.isi_free()]).max())
    assert calls == ([terms] if terms <= 16 else [])
    scale = np.max(np.abs(slow))
    assert np.max(np.abs(fast - slow)) <= 1e-6 * scale
    reference = uplink.reference(x)
    assert np.max(np.abs(fast - reference)) <= 1e-5 * scale


def test_the_series_is_truncated_where_its_remainder_is_below_the_tolerance():
    for epsilon in [1e-4, 0.02, 0.1, 0.5, 0.68, 2.0]:
        terms = series_terms(epsilon)
        x = np.pi * epsilon
        assert x**terms / math.factorial(terms) <= 1e-8 < x ** (terms - 1) / math.factorial(
            terms - 1) or terms == 1
    assert series_terms(0.02) == 5 and series_terms(0.68) == 16 and series_terms(0.69) == 17


def test_the_taps_are_sionnas_cir_to_time_channel():
    rng = np.random.default_rng(2)
    a, tau = _paths(rng, 3, 4, 9.0)
    l_min, l_max = L_MIN, 20
    ours = discrete_taps(a, tau * BANDWIDTH_HZ, l_min, l_max)
    theirs = cir_to_time_channel(
        BANDWIDTH_HZ, tf.constant(a.reshape(3, 1, 1, 1, 1, 4, 1), tf.complex64),
        tf.constant(tau.reshape(3, 1, 1, 4), tf.float32), l_min, l_max).numpy().reshape(3, -1)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)


def test_the_reference_convolution_is_sionnas_apply_time_channel():
    """The reference's stream convolution against Sionna's ApplyTimeChannel (its Toeplitz
    gather), one device, static taps."""
    rng = np.random.default_rng(4)
    a, tau = _paths(rng, 1, 3, 5.0)
    uplink = _uplink(a, tau, timing=np.array([2.5]))
    stream = _symbols(rng, 1, 1, 200)[0]
    length = uplink.taps.shape[1]
    h_time = np.broadcast_to(uplink.taps[0], (stream.shape[1] + length - 1, length))
    sionna = ApplyTimeChannel(stream.shape[1], length)(
        tf.constant(stream.reshape(1, 1, 1, -1)),
        tf.constant(h_time.reshape(1, 1, 1, 1, 1, *h_time.shape).astype(np.complex64)))
    ours = np.convolve(stream[0], uplink.taps[0])
    np.testing.assert_allclose(sionna.numpy().ravel(), ours, rtol=0, atol=1e-5)


def _aggregate_inputs(rng, num_devices=6, num_values=1000):
    path_gain = rng.uniform(0.5, 2.0, num_devices) * 1e-8
    num_taps = 8
    a = (rng.standard_normal((num_devices, num_taps))
         + 1j * rng.standard_normal((num_devices, num_taps))) * np.sqrt(path_gain[:, None] / (2 * num_taps))
    tau = np.tile(np.arange(num_taps) / BANDWIDTH_HZ, (num_devices, 1)).astype(np.float32)
    updates = tf.constant(rng.standard_normal((num_devices, num_values)).astype(np.float32) * 1e-3)
    weights = tf.constant(np.full(num_devices, 1.0 / num_devices, np.float32))
    return a, tau, updates, weights, tf.constant(path_gain, tf.float32)


@pytest.mark.parametrize(("control", "budget_w"), [
    ("optimal", 0.1), ("optimal", 1e-4), ("truncated_inversion", 1e-4), ("full_inversion", 1e-4)])
def test_the_time_domain_aggregate_equals_the_frequency_domain_one_without_offsets(control,
                                                                                   budget_w):
    """``aggregate(..., uplink=...)`` with no offsets and the channel inside the prefix gives
    the frequency-domain path's estimate (the same noise draw), to float32 rounding, and
    the same diagnostics; at 1e-4 W many rows bind their budget."""
    rng = np.random.default_rng(9)
    a, tau, updates, weights, path_gain = _aggregate_inputs(rng)
    uplink = _uplink(a, tau)
    h = tf.constant(uplink.frequency_response())
    noise_w = 10 ** (-10.4)
    common = dict(power_control=POWER_CONTROLS[control].build({"tci_gain_threshold": 0.1}), tx_power_w=budget_w,
                  noise_power_w=noise_w, gamma_w=noise_w, seed=tf.constant([1, 2]),
                  path_gain=path_gain)
    frequency = aggregate(updates, weights, h, h, **common)
    time = aggregate(updates, weights, h, h, uplink=uplink, **common)
    scale = np.abs(frequency.estimate.numpy()).max()
    np.testing.assert_allclose(time.estimate.numpy(), frequency.estimate.numpy(), rtol=0,
                               atol=2e-6 * scale)
    for name in ("local_distortion", "tx_power_max_w", "aggregated_distortion"):
        np.testing.assert_array_equal(getattr(time, name).numpy(), getattr(frequency, name).numpy())
    if budget_w == 1e-4 and control != "full_inversion":
        assert float(tf.reduce_max(frequency.attenuated_fraction)) > 0.0


def test_timing_offsets_and_cfo_change_the_time_domain_aggregate():
    """With timing offsets beyond the prefix and CFOs the estimate moves away from the
    aligned one (the fast path's conformance to Sionna's blocks, with these offsets, is
    tests/phy/test_phy_conformance.py)."""
    rng = np.random.default_rng(10)
    a, tau, updates, weights, path_gain = _aggregate_inputs(rng)
    uplink = _uplink(a, tau, timing=rng.uniform(0, 25, 6), cfo=rng.uniform(-0.05, 0.05, 6))
    h = tf.constant(_uplink(a, tau).frequency_response())
    noise_w = 10 ** (-10.4)
    common = dict(power_control=POWER_CONTROLS["optimal"].build({}), tx_power_w=1e-4,
                  noise_power_w=noise_w, gamma_w=noise_w, seed=tf.constant([1, 2]),
                  path_gain=path_gain, uplink=uplink)
    fast = aggregate(updates, weights, h, h, **common).estimate.numpy()
    scale = np.abs(fast).max()
    aligned = aggregate(updates, weights, h, h, **{**common, "uplink": None}).estimate.numpy()
    assert np.abs(fast - aligned).max() > 0.05 * scale


def test_offsets_are_seeded_uniform_and_precompensated():
    offsets = UniformOffsets(10.0, 0.2, "none")
    timing, cfo = offsets(10_000, tf.constant([1, 2]))
    again = offsets(10_000, tf.constant([1, 2]))
    np.testing.assert_array_equal(timing, again[0])
    assert 0.0 <= timing.min() and timing.max() <= 10.0 and abs(timing.mean() - 5.0) < 0.2
    assert -0.2 <= cfo.min() and cfo.max() <= 0.2 and abs(cfo.mean()) < 0.01
    kept, residual_cfo = UniformOffsets(10.0, 0.2, "both")(10_000, tf.constant([1, 2]))
    np.testing.assert_array_equal(kept, timing)  # "timing" changes the precoder, not the arrival
    assert not residual_cfo.any()
    assert UniformOffsets(1.0, 0.0, "timing").precodes_timing
    assert not UniformOffsets(1.0, 0.0, "cfo").precodes_timing
    kept_timing, _ = UniformOffsets(10.0, 0.2, "cfo")(10_000, tf.constant([1, 2]))
    np.testing.assert_array_equal(kept_timing, timing)
    with pytest.raises(ValueError, match="precompensate"):
        UniformOffsets(1.0, 0.0, "sometimes")
    with pytest.raises(ValueError, match="timing_offset_max_samples"):
        UniformOffsets(float("nan"))


def test_paths_more_than_a_symbol_late_are_cut_and_counted():
    """from_paths cuts paths later than F + C - 1 - 6 samples and reports the power share
    it cut; taps that long given directly are refused."""
    a = np.array([[1.0, 1.0]])
    tau = np.array([[0.0, (F + CP) / BANDWIDTH_HZ]])
    uplink = _uplink(a, tau)
    assert uplink.cut_power_fraction[0] == pytest.approx(0.5)
    assert uplink.lags()[-1] <= F + CP - 1
    x = _symbols(np.random.default_rng(1), 1, 3)
    np.testing.assert_allclose(uplink(x), x[0], atol=1e-5)  # the path at delay 0 only
    with pytest.raises(ValueError, match="shorter than one OFDM symbol"):
        TimeDomainUplink(np.ones((1, F + CP + 1)), 0, np.zeros(1), CP, F)
    with pytest.raises(ValueError, match="l_min"):
        TimeDomainUplink(np.ones((1, 3)), -5, np.zeros(1), 4, F)


@pytest.mark.parametrize("cp", [0, 2, 4, 5])
def test_short_prefixes_and_late_taps_still_equal_sionnas_blocks(cp):
    """C < 6: the window starts -C samples into the prefix (no precursor taps before it),
    an ideal channel is free of interference, and taps late enough to reach two symbols
    back on a window at -6 are handled (review of issue 21)."""
    rng = np.random.default_rng(cp)
    x = _symbols(rng, 2, 4, 16)
    ideal = _uplink(np.ones((2, 1)), np.zeros((2, 1)), cp=cp, num_subcarriers=16)
    assert ideal.isi_free().all()
    np.testing.assert_allclose(ideal(x), x.sum(0), atol=1e-5)
    for lag in range(16 + cp - 7, 16 + cp - 1 - 5):
        late = _uplink(np.ones((2, 1)), np.array([[lag], [1.0]]) / (16 * SPACING_HZ), cp=cp,
                       cfo=np.array([0.1, -0.2]), num_subcarriers=16)
        fast, reference = late(x), late.reference(x)
        assert np.max(np.abs(fast - reference)) <= 1e-5 * np.max(np.abs(reference)), lag
    l_min = max(L_MIN, -cp)
    for lag in range(l_min, 16 + cp):  # a unit tap at every lag the constructor allows
        taps = np.zeros((2, lag - l_min + 1), complex)
        taps[:, -1] = 1.0
        uplink = TimeDomainUplink(taps, l_min, np.array([0.05, 0.0]), cp, 16)
        fast, reference = uplink(x), uplink.reference(x)
        assert np.max(np.abs(fast - reference)) <= 1e-5 * np.max(np.abs(reference)), lag
