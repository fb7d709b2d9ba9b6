"""Tests of phy.channel: power, subcarrier (in)dependence, TDL correlation, determinism."""

import numpy as np
import pytest
import sionna.phy
import tensorflow as tf
from sionna.phy.channel import cir_to_ofdm_channel, subcarrier_frequencies

from phy.channel import TDL, FlatRayleigh, IidRayleigh, sionna_rng_seeded
from phy.parameters import CHANNEL_MODELS

SEED = tf.constant([11, 22], tf.int32)


def _models(num_subcarriers):
    return {
        "iid_rayleigh": IidRayleigh(num_subcarriers),
        "flat_rayleigh": FlatRayleigh(num_subcarriers),
        "tdl": TDL("A", 100e-9, 30e3, num_subcarriers),
    }


def _path_gain(num_devices):
    """Path gains over 8 decades (the paper's r^-4 for r in ~3 m ... 300 m)."""
    return tf.constant(np.logspace(-10, -2, num_devices), tf.float32)


def _normalised(model, num_devices, seed=SEED):
    pg = _path_gain(num_devices)
    h = model(pg, seed).numpy()
    return h / np.sqrt(pg.numpy())[:, None]


@pytest.mark.parametrize("name", ["iid_rayleigh", "flat_rayleigh", "tdl"])
def test_shape_dtype_and_determinism(name):
    model = _models(48)[name]
    pg = _path_gain(7)
    h = model(pg, SEED)
    assert h.shape == (7, 48)
    assert h.dtype == tf.complex64
    np.testing.assert_array_equal(h.numpy(), model(pg, SEED).numpy())
    other = model(pg, tf.constant([11, 23], tf.int32)).numpy()
    assert not np.any(np.isclose(h.numpy(), other))
    # A fresh model object with the same seed draws the same channel.
    np.testing.assert_array_equal(h.numpy(), _models(48)[name](pg, SEED).numpy())


@pytest.mark.parametrize("name", ["iid_rayleigh", "flat_rayleigh", "tdl"])
def test_scales_with_path_gain_exactly(name):
    """Same seed: h(c * path_gain) = sqrt(c) h(path_gain) (float32 rounding only)."""
    model = _models(32)[name]
    pg = _path_gain(5)
    h1 = model(pg, SEED).numpy()
    h2 = model(pg * 16.0, SEED).numpy()
    np.testing.assert_allclose(h2, 4.0 * h1, rtol=1e-6)


@pytest.mark.parametrize("name", ["flat_rayleigh", "tdl"])
def test_sionna_global_rng_untouched(name):
    """Drawing a channel neither depends on nor advances Sionna's global generator."""
    model = _models(16)[name]
    pg = _path_gain(3)
    sionna.phy.config.seed = 5
    reference = sionna.phy.config.tf_rng.normal([4]).numpy()
    sionna.phy.config.seed = 5
    h_a = model(pg, SEED).numpy()
    after = sionna.phy.config.tf_rng.normal([4]).numpy()
    np.testing.assert_array_equal(after, reference)
    sionna.phy.config.seed = 99
    np.testing.assert_array_equal(model(pg, SEED).numpy(), h_a)


def test_iid_rayleigh_power_per_device():
    # K = 200 devices x F = 1024: per device the mean of |h|^2 / r^-alpha has relative
    # standard deviation 1/32 (exponential samples); allow 5 sigma = 16 %. Over all
    # K F samples the relative standard deviation is 0.22 %; allow 1 %.
    g = np.abs(_normalised(IidRayleigh(1024), 200)) ** 2
    np.testing.assert_allclose(g.mean(axis=1), 1.0, rtol=0.16)
    assert abs(g.mean() - 1.0) < 0.01


def test_iid_rayleigh_independent_and_circular():
    h = _normalised(IidRayleigh(1024), 200)
    n = h[:, 1:].size
    # Sample correlation of adjacent subcarriers and of adjacent devices: std 1/sqrt(n).
    adjacent_f = np.mean(h[:, 1:] * np.conj(h[:, :-1])) / np.mean(np.abs(h) ** 2)
    adjacent_k = np.mean(h[1:] * np.conj(h[:-1])) / np.mean(np.abs(h) ** 2)
    assert abs(adjacent_f) < 5 / np.sqrt(n)
    assert abs(adjacent_k) < 5 / np.sqrt(n)
    # Circular symmetry: E[h^2] = 0, real and imaginary parts each carry half the power.
    assert abs(np.mean(h**2)) < 5 / np.sqrt(h.size)
    assert abs(np.mean(h.real**2) - 0.5) < 0.01


def test_flat_rayleigh_constant_over_subcarriers_and_power():
    h = _normalised(FlatRayleigh(8), 20000)
    np.testing.assert_array_equal(h, np.broadcast_to(h[:, :1], h.shape))
    g = np.abs(h[:, 0]) ** 2
    # Exponential(1): mean std 1/sqrt(K) = 0.7 %; allow 3 %. P(|h|^2 > 1) = exp(-1).
    assert abs(g.mean() - 1.0) < 0.03
    assert abs(np.mean(g > 1.0) - np.exp(-1.0)) < 0.02


def _tdl_theory(model, lags):
    """Frequency correlation sum_l p_l exp(-j 2 pi lag df tau_l) of a Sionna TDL."""
    tdl = model._tdl
    powers = tdl.mean_powers.numpy()
    delays = tdl.delays.numpy()
    df = np.asarray(lags)[:, None] * model.subcarrier_spacing_hz
    return np.sum(powers * np.exp(-2j * np.pi * df * delays), axis=-1)


@pytest.mark.parametrize("profile", ["A", "D"])
def test_tdl_power_and_correlation_match_theory(profile):
    model = TDL(profile, 100e-9, 30e3, 64)
    h = _normalised(model, 4000)
    # Per-subcarrier power 1 (total power of the normalised PDP): 4000 devices,
    # a few independent looks each -> std below 1.5 %; allow 5 %.
    assert abs(np.mean(np.abs(h) ** 2) - 1.0) < 0.05
    lags = [1, 4, 16]
    measured = [np.mean(h[:, lag:] * np.conj(h[:, :-lag])) for lag in lags]
    theory = _tdl_theory(model, lags)
    # Sample correlations from 4000 devices: std <= 1/sqrt(4000) per device-average.
    np.testing.assert_allclose(np.abs(measured), np.abs(theory), atol=0.06)
    assert np.abs(measured[0]) > 0.9  # neighbouring subcarriers nearly equal at 100 ns


@pytest.mark.parametrize("profile", ["B", "E"])
def test_tdl_equals_sionna_cir_to_ofdm_channel(profile):
    """The precomputed tap responses give Sionna's own frequency response of the draw."""
    model = TDL(profile, 300e-9, 15e3, 72)
    pg = _path_gain(6)
    with sionna_rng_seeded(SEED):
        a, tau = model._tdl(6, 1, 1.0)
    reference = cir_to_ofdm_channel(subcarrier_frequencies(72, 15e3), a, tau, normalize=False)
    reference = np.reshape(reference.numpy(), [6, 72]) * np.sqrt(pg.numpy())[:, None]
    h = model(pg, SEED).numpy()
    np.testing.assert_allclose(h, reference, rtol=1e-4, atol=1e-5 * np.abs(reference).max())


def test_tdl_correlation_falls_with_delay_spread_and_separation():
    """TDL-C at 30 kHz spacing; theory |R| at lag 16: 0.996 (30 ns), 0.58 (1 us);
    at 1 us: 0.98 (lag 1), 0.89 (lag 4), 0.58 (lag 16), 0.37 (lag 48)."""

    def corr(delay_spread_s, lags):
        h = _normalised(TDL("C", delay_spread_s, 30e3, 128), 2000)
        power = np.mean(np.abs(h) ** 2)
        return [np.abs(np.mean(h[:, lag:] * np.conj(h[:, :-lag]))) / power for lag in lags]

    (short,) = corr(30e-9, [16])
    near, mid, far, farther = corr(1e-6, [1, 4, 16, 48])
    assert short > 0.95
    assert short > far + 0.2
    assert near > mid > far > farther
    assert near > 0.9
    assert farther > 0.2  # still clearly correlated, unlike iid_rayleigh


def test_the_registry_builds_each_channel_model():
    """``CHANNEL_MODELS[name].build(table, **grid)``, the one way to build a model by name
    (as ``cosim.world`` does), with the scenario's defaults and bounds."""
    grid = {"num_subcarriers": 4, "subcarrier_spacing_hz": 15e3}
    assert isinstance(CHANNEL_MODELS["iid_rayleigh"].build({}, **grid), IidRayleigh)
    assert isinstance(CHANNEL_MODELS["flat_rayleigh"].build({}, **grid), FlatRayleigh)
    tdl = CHANNEL_MODELS["tdl"].build(
        {"tdl_profile": "E", "delay_spread_s": 50e-9, "carrier_frequency_hz": 2.6e9,
         "path_loss_exponent": 4.0}, **grid)  # the table's other keys are left out
    assert isinstance(tdl, TDL)
    assert tdl.profile == "E"
    # the defaults are the scenario's, declared once in phy.parameters
    assert CHANNEL_MODELS["tdl"].build({}, **grid).delay_spread_s == 100e-9
    with pytest.raises(ValueError, match="delay_spread_s"):
        CHANNEL_MODELS["tdl"].build({"delay_spread_s": -1.0}, **grid)
    with pytest.raises(ValueError, match="subcarrier_spacing_hz"):
        CHANNEL_MODELS["tdl"].build({}, num_subcarriers=4, subcarrier_spacing_hz=None)


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_subcarriers"):
        IidRayleigh(0)
    with pytest.raises(ValueError, match="num_subcarriers"):
        FlatRayleigh(2.0)
    with pytest.raises(ValueError, match="profile"):
        TDL("Z", 1e-7, 30e3, 8)
    with pytest.raises(ValueError, match="path_gain"):
        IidRayleigh(4)(tf.ones([2, 3]), SEED)
    with pytest.raises(ValueError, match="seed"):
        FlatRayleigh(4)(tf.ones([2]), tf.constant([1, 2, 3]))
