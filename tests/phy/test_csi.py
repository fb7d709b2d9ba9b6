"""Tests of phy.csi: NMSE of the Gaussian and LS-pilot estimates, aging correlation."""

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import j0

from phy.channel import TDL, FlatRayleigh, IidRayleigh
from phy.csi import GaussianCSI, LSPilotCSI, OutdatedCSI, PerfectCSI
from phy.parameters import CSI_MODELS

K, F = 200, 512
PATH_GAIN = tf.constant(np.logspace(-10, -3, K), tf.float32)
H = IidRayleigh(F)(PATH_GAIN, tf.constant([1, 2], tf.int32))
SEED = tf.constant([5, 6], tf.int32)


def _nmse(h_hat, h=H, path_gain=PATH_GAIN):
    """Measured NMSE per device and overall (each device normalised by its path gain)."""
    err = np.abs(h_hat.numpy() - h.numpy()) ** 2 / path_gain.numpy()[:, None]
    return err.mean(axis=1), err.mean()


def test_perfect_is_h():
    np.testing.assert_array_equal(PerfectCSI()(H, PATH_GAIN, SEED).numpy(), H.numpy())


@pytest.mark.parametrize("nmse_db", [-20.0, -10.0, 0.0])
def test_gaussian_nmse(nmse_db):
    h_hat = GaussianCSI(nmse_db)(H, PATH_GAIN, SEED)
    assert h_hat.shape == (K, F)
    assert h_hat.dtype == tf.complex64
    per_device, overall = _nmse(h_hat)
    # K F = 102400 exponential samples: relative std 0.3 % (0.014 dB); allow 0.1 dB overall.
    assert abs(10 * np.log10(overall) - nmse_db) < 0.1
    # Per device (512 samples, relative std 4.4 %): allow 25 % (~5.6 sigma), at every
    # path gain from 1e-10 to 1e-3.
    np.testing.assert_allclose(per_device, 10 ** (nmse_db / 10), rtol=0.25)
    # The error is independent of the channel: normalised E[e h^*] ~ 0 (std ~ 0.003).
    e = (h_hat - H).numpy() / np.sqrt(PATH_GAIN.numpy())[:, None]
    hn = H.numpy() / np.sqrt(PATH_GAIN.numpy())[:, None]
    assert abs(np.mean(e * np.conj(hn))) < 5 * np.sqrt(10 ** (nmse_db / 10) / e.size)


@pytest.mark.parametrize("snr_db", [0.0, 10.0, 20.0])
def test_ls_pilots_full_band_nmse_is_inverse_snr(snr_db):
    csi = LSPilotCSI(snr_db)
    h_hat, err_var = csi.estimate(H, PATH_GAIN, SEED)
    assert h_hat.shape == (K, F)
    assert h_hat.dtype == tf.complex64
    _, overall = _nmse(h_hat)
    assert abs(10 * np.log10(overall) + snr_db) < 0.1
    # Sionna's error variance is N0_k / |x_p|^2 = path_gain_k / SNR (unit-modulus pilots).
    np.testing.assert_allclose(
        err_var.numpy(),
        np.broadcast_to(PATH_GAIN.numpy()[:, None] / 10 ** (snr_db / 10), (K, F)),
        rtol=1e-5,
    )
    np.testing.assert_array_equal(csi(H, PATH_GAIN, SEED).numpy(), h_hat.numpy())


def test_ls_pilots_noiseless_limit_is_exact():
    _, overall = _nmse(LSPilotCSI(200.0)(H, PATH_GAIN, SEED))
    assert overall < 1e-12


def test_ls_comb_pilots_interpolate_correlated_channels_only():
    pg = PATH_GAIN[:100]
    tdl = TDL("A", 30e-9, 30e3, 256)(pg, tf.constant([3, 4], tf.int32))
    iid = IidRayleigh(256)(pg, tf.constant([3, 4], tf.int32))
    comb = LSPilotCSI(20.0, pilot_subcarrier_spacing=4)
    _, nmse_tdl = _nmse(comb(tdl, pg, SEED), tdl, pg)
    _, nmse_iid = _nmse(comb(iid, pg, SEED), iid, pg)
    # Smooth channel: linear interpolation between noisy pilots is at most about as
    # noisy as a full-band pilot (-20 dB); the independent subcarriers of iid_rayleigh
    # cannot be interpolated (3 of 4 subcarriers guessed: NMSE ~ 0 dB).
    assert 10 * np.log10(nmse_tdl) < -19.0
    assert 10 * np.log10(nmse_iid) > -3.0


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9, 0.99])
def test_outdated_correlation_and_power(rho):
    h_hat = OutdatedCSI(rho)(H, PATH_GAIN, SEED)
    scale = np.sqrt(PATH_GAIN.numpy())[:, None]
    hn, hh = H.numpy() / scale, h_hat.numpy() / scale
    corr = np.mean(hh * np.conj(hn)) / np.sqrt(np.mean(np.abs(hh) ** 2) * np.mean(np.abs(hn) ** 2))
    # Sample correlation of 102400 pairs: std <= 1/sqrt(n) = 0.003; allow 0.015.
    assert abs(corr - rho) < 0.015
    assert abs(np.mean(np.abs(hh) ** 2) / np.mean(np.abs(hn) ** 2) - 1.0) < 0.02
    # NMSE of the aged estimate is 2 (1 - rho).
    _, overall = _nmse(h_hat)
    assert abs(overall - 2 * (1 - rho)) < 0.02


def test_outdated_takes_its_correlation_from_speed_and_delay():
    """rho = J0(2 pi f_D tau): 30 km/h at 3.5 GHz (f_D = 97.3 Hz) and 1 ms gives
    J0(0.611) = 0.9087, as ``correlation = 0.9087...`` gives; giving both ways, or only
    part of the second, is refused naming the key."""
    aged = OutdatedCSI(delay_s=1e-3, speed_mps=30 / 3.6, carrier_frequency_hz=3.5e9)
    f_d = 30 / 3.6 * 3.5e9 / 299_792_458.0
    assert aged.correlation == pytest.approx(float(j0(2 * np.pi * f_d * 1e-3)), rel=1e-12)
    assert aged.correlation == pytest.approx(0.9087, abs=1e-4)
    np.testing.assert_array_equal(aged(H, PATH_GAIN, SEED).numpy(),
                                  OutdatedCSI(aged.correlation)(H, PATH_GAIN, SEED).numpy())
    with pytest.raises(ValueError, match="correlation: required, or delay_s"):
        OutdatedCSI(delay_s=1e-3, speed_mps=1.0)
    with pytest.raises(ValueError, match="two ways"):
        OutdatedCSI(0.5, delay_s=1e-3, speed_mps=1.0, carrier_frequency_hz=3.5e9)


def test_outdated_with_channel_model_keeps_structure():
    flat = FlatRayleigh(16)
    pg = PATH_GAIN[:8]
    h = flat(pg, SEED)
    # Even with the channel's own seed, the earlier channel w is a different draw.
    h_hat = OutdatedCSI(0.8, channel=flat)(h, pg, SEED).numpy()
    np.testing.assert_array_equal(h_hat, np.broadcast_to(h_hat[:, :1], h_hat.shape))
    w = flat(pg, tf.random.experimental.stateless_fold_in(SEED, 1)).numpy()
    assert not np.any(np.isclose(w, h.numpy()))
    np.testing.assert_allclose(h_hat, 0.8 * h.numpy() + 0.6 * w, rtol=1e-5)


@pytest.mark.parametrize(
    "csi", [GaussianCSI(-10.0), LSPilotCSI(10.0), LSPilotCSI(10.0, 8), OutdatedCSI(0.5)]
)
def test_deterministic_for_a_seed(csi):
    a = csi(H, PATH_GAIN, SEED).numpy()
    np.testing.assert_array_equal(a, csi(H, PATH_GAIN, SEED).numpy())
    b = csi(H, PATH_GAIN, tf.constant([5, 7], tf.int32)).numpy()
    assert not np.any(a == b)


def test_the_registry_builds_each_csi_model():
    """``CSI_MODELS[name].build(table, **extras)``, the one way to build a model by name
    (as ``cosim.world`` does): a table holding every model's keys builds each, with the
    model's bounds."""
    table = {"nmse_db": -15.0, "pilot_snr_db": 5.0, "correlation": 0.3}
    assert isinstance(CSI_MODELS["perfect"].build(table), PerfectCSI)
    assert CSI_MODELS["gaussian"].build(table).nmse_db == -15.0
    ls = CSI_MODELS["ls_pilots"].build(table, pilot_subcarrier_spacing=2)
    assert (ls.pilot_snr_db, ls.pilot_subcarrier_spacing) == (5.0, 2)
    assert CSI_MODELS["outdated"].build(table).correlation == 0.3
    with pytest.raises(ValueError, match="nmse_db"):
        CSI_MODELS["gaussian"].build({})
    with pytest.raises(ValueError, match="pilot_snr_db"):
        CSI_MODELS["ls_pilots"].build({"pilot_snr_db": float("nan")})
    with pytest.raises(ValueError, match="correlation"):
        CSI_MODELS["outdated"].build({"correlation": 1.5})


def test_bad_inputs():
    with pytest.raises(ValueError, match="pilot_subcarrier_spacing"):
        LSPilotCSI(10.0, 0)
    with pytest.raises(ValueError, match="path_gain"):
        GaussianCSI(-10.0)(H, PATH_GAIN[:3], SEED)
    with pytest.raises(ValueError, match="h must"):
        PerfectCSI()(tf.zeros([2, 3, 4], tf.complex64), tf.ones([2]), SEED)
