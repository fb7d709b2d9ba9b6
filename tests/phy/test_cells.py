"""Tests of phy.cells: 3GPP TR 38.901 UMi / UMa / RMa cells built on Sionna.

The path-loss references below are written out from TR 38.901 Table 7.4.1-1 in
NumPy (not taken from Sionna), at the 3-D distance d3D and fc in GHz.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sionna.phy import config as sionna_config
from sionna.phy.channel import subcarrier_frequencies

from phy.cells import CELL_MODELS, SystemLevelCell

SPEED_OF_LIGHT_M_S = 299_792_458.0
FC_HZ = 3.5e9
SCS_HZ = 30e3


# --------------------------------------------------------------------------- #
# TR 38.901 Table 7.4.1-1 path loss [dB] (reference formulas)
# --------------------------------------------------------------------------- #
def _d3d(d2d_m, h_bs_m, h_ut_m):
    return np.hypot(d2d_m, h_bs_m - h_ut_m)


def _two_slope_los(d2d_m, fc_hz, h_bs_m, h_ut_m, intercept_db, near_slope, bp_weight):
    """The LoS formula UMi and UMa share (h_E = 1 m): ``intercept + near_slope log10(d3D)
    + 20 log10(fc)`` up to the breakpoint, then ``intercept + 40 log10(d3D) + 20 log10(fc)
    - bp_weight log10(d'_BP^2 + (h_BS - h_UT)^2)``."""
    d3d, fc = _d3d(d2d_m, h_bs_m, h_ut_m), fc_hz / 1e9
    d_bp = 4 * (h_bs_m - 1.0) * (h_ut_m - 1.0) * fc_hz / SPEED_OF_LIGHT_M_S
    pl1 = intercept_db + near_slope * np.log10(d3d) + 20 * np.log10(fc)
    pl2 = (intercept_db + 40 * np.log10(d3d) + 20 * np.log10(fc)
           - bp_weight * np.log10(d_bp**2 + (h_bs_m - h_ut_m) ** 2))
    return np.where(d2d_m <= d_bp, pl1, pl2)


def umi_pl_los(d2d_m, fc_hz=FC_HZ, h_bs_m=10.0, h_ut_m=1.5):
    """UMi-Street Canyon LoS."""
    return _two_slope_los(d2d_m, fc_hz, h_bs_m, h_ut_m, 32.4, 21, 9.5)


def umi_pl_nlos(d2d_m, fc_hz=FC_HZ, h_bs_m=10.0, h_ut_m=1.5):
    """UMi-Street Canyon NLoS: max(PL_LoS, PL'_NLoS)."""
    d3d, fc = _d3d(d2d_m, h_bs_m, h_ut_m), fc_hz / 1e9
    pl_prime = 35.3 * np.log10(d3d) + 22.4 + 21.3 * np.log10(fc) - 0.3 * (h_ut_m - 1.5)
    return np.maximum(umi_pl_los(d2d_m, fc_hz, h_bs_m, h_ut_m), pl_prime)


def uma_pl_los(d2d_m, fc_hz=FC_HZ, h_bs_m=25.0, h_ut_m=1.5):
    """UMa LoS, h_UT < 13 m so h_E = 1 m."""
    return _two_slope_los(d2d_m, fc_hz, h_bs_m, h_ut_m, 28.0, 22, 9)


def uma_pl_nlos(d2d_m, fc_hz=FC_HZ, h_bs_m=25.0, h_ut_m=1.5):
    d3d, fc = _d3d(d2d_m, h_bs_m, h_ut_m), fc_hz / 1e9
    pl_prime = 13.54 + 39.08 * np.log10(d3d) + 20 * np.log10(fc) - 0.6 * (h_ut_m - 1.5)
    return np.maximum(uma_pl_los(d2d_m, fc_hz, h_bs_m, h_ut_m), pl_prime)


def rma_pl_los(d2d_m, fc_hz=FC_HZ, h_bs_m=35.0, h_ut_m=1.5, h_m=5.0):
    """RMa LoS below the breakpoint d_BP = 2 pi h_BS h_UT fc / c (PL1)."""
    d3d, fc = _d3d(d2d_m, h_bs_m, h_ut_m), fc_hz / 1e9
    d_bp = 2 * np.pi * h_bs_m * h_ut_m * fc_hz / SPEED_OF_LIGHT_M_S
    assert np.all(d2d_m < d_bp)
    return (20 * np.log10(40 * np.pi * d3d * fc / 3)
            + min(0.03 * h_m**1.72, 10) * np.log10(d3d)
            - min(0.044 * h_m**1.72, 14.77) + 0.002 * np.log10(h_m) * d3d)


def rma_pl_nlos(d2d_m, fc_hz=FC_HZ, h_bs_m=35.0, h_ut_m=1.5, h_m=5.0, w_m=20.0):
    d3d, fc = _d3d(d2d_m, h_bs_m, h_ut_m), fc_hz / 1e9
    pl_prime = (161.04 - 7.1 * np.log10(w_m) + 7.5 * np.log10(h_m)
                - (24.37 - 3.7 * (h_m / h_bs_m) ** 2) * np.log10(h_bs_m)
                + (43.42 - 3.1 * np.log10(h_bs_m)) * (np.log10(d3d) - 3)
                + 20 * np.log10(fc) - (3.2 * np.log10(11.75 * h_ut_m) ** 2 - 4.97))
    return np.maximum(rma_pl_los(d2d_m, fc_hz, h_bs_m, h_ut_m, h_m), pl_prime)


def _ring(radius_m: float, count: int, offset_rad: float) -> np.ndarray:
    angles = offset_rad + 2 * np.pi * np.arange(count) / count
    return radius_m * np.stack([np.cos(angles), np.sin(angles)], axis=-1)


def _cell(model="umi", positions_m=None, seed=(1, 2), **kwargs) -> SystemLevelCell:
    if positions_m is None:
        positions_m = _ring(60.0, 6, 0.0)
    args = dict(carrier_frequency_hz=FC_HZ, subcarrier_spacing_hz=SCS_HZ, num_subcarriers=12)
    args.update(kwargs)
    return SystemLevelCell(model, positions_m, seed=tf.constant(seed, tf.int32), **args)


# --------------------------------------------------------------------------- #
# 1. UMi path loss and shadow fading against Table 7.4.1-1
# --------------------------------------------------------------------------- #
# Devices per cell at each distance, spread over a ring so that devices at the same
# distance are >= 34 m apart (see the docstring of test_umi_path_loss_statistics).
UMI_RINGS = ((20.0, 3, 0.3), (50.0, 6, 0.1), (150.0, 16, 0.0))
UMI_SF_STD_DB = {True: 4.0, False: 7.82}  # Table 7.5-6 part 1, UMi-Street Canyon
UMI_SF_CORR_DIST_M = {True: 10.0, False: 13.0}  # Table 7.5-6 part 1
NUM_UMI_CELLS = 24  # per LoS state, independent seeds


@pytest.fixture(scope="module")
def umi_cells():
    positions = np.concatenate([_ring(r, n, off) for r, n, off in UMI_RINGS])
    cells = {}
    for los in (True, False):
        cells[los] = [
            _cell("umi", positions, seed=(1000 + int(los), i), num_subcarriers=1, force_los=los)
            for i in range(NUM_UMI_CELLS)
        ]
    return positions, cells


@pytest.mark.parametrize("los", [True, False])
def test_umi_path_loss_exact(umi_cells, los):
    """The deterministic part PL_k is Table 7.4.1-1 at d3D (not d2D) exactly.

    UMi with h_UT = 1.5 m has no random path-loss term for outdoor devices, so
    ``path_loss_db`` must equal the formula up to float32 rounding (1e-3 dB; the
    d2D-for-d3D error of Sionna 1.2.2 would be 0.76 dB at 20 m LoS).
    """
    positions, cells = umi_cells
    d2d = np.hypot(positions[:, 0], positions[:, 1])
    expected = umi_pl_los(d2d) if los else umi_pl_nlos(d2d)
    for cell in cells[los]:
        assert np.all(cell.los == los) and not np.any(cell.indoor)
        np.testing.assert_allclose(cell.path_loss_db, expected, rtol=0, atol=1e-3)
        np.testing.assert_allclose(
            -10 * np.log10(cell.path_gain), cell.path_loss_db + cell.shadow_fading_db,
            rtol=0, atol=1e-9,
        )


@pytest.mark.parametrize("los", [True, False])
def test_umi_path_loss_statistics(umi_cells, los):
    """Mean and std of L_k = -10 log10(path_gain_k) at 20, 50 and 150 m (UMi).

    L_k = PL(d) + SF_k with SF_k ~ N(0, sigma^2), sigma = 4 dB (LoS) / 7.82 dB (NLoS).
    Samples: NUM_UMI_CELLS cells with independent seeds, each with 3 / 6 / 16 devices
    on rings of 20 / 50 / 150 m. Different cells are independent; inside a cell
    Sionna correlates the SF of devices in the same state as exp(-Delta/D), D = 10 m
    (LoS) / 13 m (NLoS) (Table 7.5-6), Delta >= 34 m between devices of one ring, so
    the correlation is <= 0.07. Tolerances:

    * mean at each distance: |mean(L) - PL(d)| <= 4 SE, where SE is the exact
      standard error of the sample mean under that correlation,
      ``sigma sqrt(1^T C 1) / N`` (at most 7 % above sigma / sqrt(N)); 4 SE is
      exceeded with probability 6e-5 if the model is right. At 20 m this is
      1.9 dB (LoS) / 3.7 dB (NLoS); the exact check of PL above is much tighter.
    * std of the residuals L_k - PL(d_k), pooled over the distances (N = 600):
      |std / sigma - 1| <= 4 / sqrt(2 (N - 1)) (the standard error of a Gaussian
      sample std, 12 %), widened by 2 % for the weak correlation.
    """
    positions, cells = umi_cells
    sigma, corr_dist = UMI_SF_STD_DB[los], UMI_SF_CORR_DIST_M[los]
    d2d = np.hypot(positions[:, 0], positions[:, 1])
    loss = np.stack([-10 * np.log10(cell.path_gain) for cell in cells[los]])  # [cells, K]
    expected = umi_pl_los(d2d) if los else umi_pl_nlos(d2d)

    for radius in (r for r, _, _ in UMI_RINGS):
        ring = np.flatnonzero(np.isclose(d2d, radius))
        spacing = np.linalg.norm(positions[ring, None] - positions[None, ring], axis=-1)
        corr_sum_per_cell = np.exp(-spacing / corr_dist).sum()
        num = loss.shape[0] * ring.size
        std_err = sigma * np.sqrt(loss.shape[0] * corr_sum_per_cell) / num
        assert std_err <= 1.07 * sigma / np.sqrt(num)
        mean = loss[:, ring].mean()
        assert abs(mean - expected[ring][0]) <= 4 * std_err, (radius, mean, expected[ring][0])

    residuals = (loss - expected).ravel()
    num = residuals.size
    assert abs(residuals.std(ddof=1) / sigma - 1) <= 4 / np.sqrt(2 * (num - 1)) + 0.02


def test_umi_los_probability():
    """LoS states follow Table 7.4.2-1: P_LoS = 1 (d <= 18 m), else
    18/d + exp(-d/36) (1 - 18/d) (UMi-Street Canyon, outdoor, d = d2D).

    Sionna draws the states independently per device (Bernoulli), so the number of
    LoS devices has mean sum(p_k) and variance sum(p_k (1 - p_k)); tolerance 4 std.
    """
    rng = np.random.default_rng(3)
    radius = np.sqrt(rng.uniform(10.0**2, 300.0**2, 300))
    angle = rng.uniform(0, 2 * np.pi, radius.size)
    cell = _cell("umi", np.stack([radius * np.cos(angle), radius * np.sin(angle)], -1),
                 seed=(4, 5))
    p = np.where(radius <= 18, 1.0, 18 / radius + np.exp(-radius / 36) * (1 - 18 / radius))
    assert abs(cell.los.sum() - p.sum()) <= 4 * np.sqrt(np.sum(p * (1 - p)))
    # LoS devices get the LoS formula, the others the NLoS one.
    expected = np.where(cell.los, umi_pl_los(radius), umi_pl_nlos(radius))
    np.testing.assert_allclose(cell.path_loss_db, expected, rtol=0, atol=1e-3)


def test_umi_indoor_o2i_loss():
    """Indoor devices: NLoS, PL = PL_NLoS(d3D) + PL_tw + 0.5 d2D-in + N(0, 4.4^2)
    (low-loss O2I model, Section 7.4.3.1; d2D-in uniform in [0, 25] m in Sionna).

    At 3.5 GHz PL_tw = 5 - 10 log10(0.3 10^(-L_glass/10) + 0.7 10^(-L_concrete/10))
    with L_glass = 2 + 0.2 fc, L_concrete = 5 + 4 fc. Each O2I loss must lie in
    [PL_tw - 5 * 4.4, PL_tw + 12.5 + 5 * 4.4] (5 std of the Gaussian part).
    """
    positions = _ring(120.0, 12, 0.0)
    cell = _cell("umi", positions, indoor_probability=1.0, seed=(8, 9))
    assert np.all(cell.indoor) and not np.any(cell.los)
    fc = FC_HZ / 1e9
    pl_tw = 5 - 10 * np.log10(0.3 * 10 ** (-(2 + 0.2 * fc) / 10)
                              + 0.7 * 10 ** (-(5 + 4 * fc) / 10))
    o2i = cell.path_loss_db - umi_pl_nlos(np.hypot(positions[:, 0], positions[:, 1]))
    assert np.all(o2i >= pl_tw - 5 * 4.4) and np.all(o2i <= pl_tw + 12.5 + 5 * 4.4)


# --------------------------------------------------------------------------- #
# 2. Small-scale normalisation
# --------------------------------------------------------------------------- #
def test_small_scale_normalisation():
    """E|H_kf|^2 = path_gain_k: the mean of |H_kf|^2 / path_gain_k over devices,
    subcarriers and T = 16 rounds is 1 within 4 standard errors.

    Given the fixed large-scale state, Y_kt = mean_f |H_ktf|^2 / path_gain_k are
    independent over devices k and rounds t, each with mean 1 (unit-power cluster
    powers, uniform ray phases), so the standard error of their mean is estimated
    from their sample std; it is checked to be < 0.05 so that the test has power.
    The cell mixes LoS, NLoS and indoor devices: an O2I loss re-drawn per round
    (as Sionna's own path loss would be) would give indoor devices a mean of
    exp((0.1 ln(10) 4.4)^2 / 2) = 1.67.
    """
    rng = np.random.default_rng(11)
    radius = np.sqrt(rng.uniform(10.0**2, 300.0**2, 40))
    angle = rng.uniform(0, 2 * np.pi, radius.size)
    cell = _cell("umi", np.stack([radius * np.cos(angle), radius * np.sin(angle)], -1),
                 seed=(12, 13), indoor_probability=0.3, num_subcarriers=64,
                 subcarrier_spacing_hz=60e3)
    assert cell.los.any() and cell.indoor.any() and (~cell.los & ~cell.indoor).any()
    samples = np.stack([
        np.mean(np.abs(cell(None, tf.constant([t, 99], tf.int32)).numpy()) ** 2, axis=1)
        / cell.path_gain
        for t in range(16)
    ])  # [T, K]
    std_err = samples.std(ddof=1) / np.sqrt(samples.size)
    assert std_err < 0.05
    assert abs(samples.mean() - 1) <= 4 * std_err, (samples.mean(), std_err)


# --------------------------------------------------------------------------- #
# 3. Determinism, shapes, dtypes, errors
# --------------------------------------------------------------------------- #
def test_shapes_dtypes_and_response_convention():
    positions = np.concatenate([_ring(30.0, 3, 0.0), _ring(200.0, 4, 0.5), [[40.0, 1.0]]])
    cell = _cell("umi", positions, indoor_probability=0.3, num_subcarriers=24)
    num_devices = positions.shape[0]
    assert cell.num_subcarriers == 24 and cell.num_devices == num_devices
    assert cell.path_gain.shape == (num_devices,) and cell.path_gain.dtype == np.float64
    assert cell.los.shape == (num_devices,) and cell.los.dtype == np.bool_
    assert np.all(np.isfinite(cell.path_gain)) and np.all(cell.path_gain > 0)

    seed = tf.constant([3, 4], tf.int32)
    a, tau = cell.cir(None, seed)
    assert a.dtype == tf.complex64 and tau.dtype == tf.float32
    assert a.shape == (num_devices, 23) and tau.shape == (num_devices, 23)
    a, tau = a.numpy(), tau.numpy()
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(tau)) and np.all(tau >= 0)
    # Non-existent clusters of LoS / O2I links (12 of UMi's 19 + 4 paths): a = tau = 0.
    assert np.all(tau[a == 0] == 0)
    assert np.all(np.sum(a != 0, axis=1) == np.where(cell.los | cell.indoor, 16, 23))

    h = cell(None, seed)
    assert h.dtype == tf.complex64 and h.shape == (num_devices, 24)
    # H_k(f) = sum_p a_kp exp(-j 2 pi f tau_kp) on Sionna's baseband subcarriers.
    freqs = subcarrier_frequencies(24, SCS_HZ, precision="double").numpy()
    reference = np.einsum(
        "kp,kpf->kf", a.astype(np.complex128),
        np.exp(-2j * np.pi * tau.astype(np.float64)[:, :, None] * freqs[None, None, :]),
    )
    np.testing.assert_allclose(h.numpy(), reference, rtol=0,
                               atol=1e-4 * np.sqrt(cell.path_gain.max()))
    # The path_gain argument is ignored.
    np.testing.assert_array_equal(cell(tf.ones([num_devices]), seed).numpy(), h.numpy())


# UMa with h_UT = 16 m also draws the effective environment height h_E at random.
@pytest.mark.parametrize(
    ("model", "kwargs"), [("umi", {}), ("uma", {"ut_height_m": 16.0}), ("rma", {})]
)
def test_determinism(model, kwargs):
    """The large-scale state depends on the constructor's seed only, each round on
    its seed only (bit-identical repeats), and Sionna's global generator is left
    untouched."""
    cell = _cell(model, indoor_probability=0.5, seed=(5, 6), **kwargs)
    twin = _cell(model, indoor_probability=0.5, seed=(5, 6), **kwargs)
    other = _cell(model, indoor_probability=0.5, seed=(5, 7), **kwargs)
    for name in ("path_gain", "los", "indoor", "path_loss_db", "shadow_fading_db"):
        np.testing.assert_array_equal(getattr(cell, name), getattr(twin, name))
    assert not np.array_equal(cell.path_gain, other.path_gain)

    state = sionna_config.tf_rng.state.numpy().copy()
    s1, s2 = tf.constant([7, 8], tf.int32), tf.constant([7, 9], tf.int32)
    a1, tau1 = cell.cir(None, s1)
    h1 = cell(None, s1)
    cell(None, s2)
    a1_again, tau1_again = cell.cir(None, s1)
    np.testing.assert_array_equal(a1.numpy(), a1_again.numpy())
    np.testing.assert_array_equal(tau1.numpy(), tau1_again.numpy())
    np.testing.assert_array_equal(h1.numpy(), cell(None, s1).numpy())
    np.testing.assert_array_equal(h1.numpy(), twin(None, s1).numpy())
    assert not np.array_equal(h1.numpy(), cell(None, s2).numpy())
    # Sionna's global generator is left as it was.
    np.testing.assert_array_equal(sionna_config.tf_rng.state.numpy(), state)
    # The large-scale state is fixed and read-only.
    np.testing.assert_array_equal(cell.path_gain, twin.path_gain)
    with pytest.raises(ValueError):
        cell.path_gain[0] = 1.0


@pytest.mark.parametrize(
    ("model", "positions", "kwargs", "match"),
    [
        ("UMi", None, {}, "model"),
        ("tdl", None, {}, "model"),
        ("umi", None, {"carrier_frequency_hz": 0.0}, "carrier_frequency_hz"),
        ("umi", None, {"carrier_frequency_hz": -3.5e9}, "carrier_frequency_hz"),
        ("umi", None, {"carrier_frequency_hz": float("nan")}, "carrier_frequency_hz"),
        ("rma", None, {"carrier_frequency_hz": 60e9}, "carrier_frequency_hz"),
        ("umi", None, {"subcarrier_spacing_hz": 0.0}, "subcarrier_spacing_hz"),
        ("umi", None, {"num_subcarriers": 0}, "num_subcarriers"),
        ("umi", np.zeros((4, 3)) + 50.0, {}, "positions_m"),
        ("umi", np.zeros((0, 2)), {}, "positions_m"),
        ("umi", [[50.0, 0.0], [5.0, 5.0]], {}, "positions_m"),
        ("umi", [[50.0, 0.0], [np.nan, 20.0]], {}, "positions_m"),
        ("umi", [[50.0, 0.0], [80.0, 0.0], [50.0, 0.0]], {}, "positions_m"),
        ("umi", None, {"bs_height_m": 1.0}, "bs_height_m"),
        ("umi", None, {"ut_height_m": 0.0}, "ut_height_m"),
        ("rma", None, {"ut_height_m": 15.0}, "ut_height_m"),
        ("rma", None, {"bs_height_m": 200.0}, "bs_height_m"),
        ("umi", None, {"indoor_probability": 1.5}, "indoor_probability"),
        ("umi", None, {"force_los": "yes"}, "force_los"),
        ("umi", None, {"seed": tf.constant([1, 2, 3], tf.int32)}, "seed"),
    ],
)
def test_value_errors(model, positions, kwargs, match):
    args = dict(carrier_frequency_hz=FC_HZ, subcarrier_spacing_hz=SCS_HZ, num_subcarriers=12,
                seed=tf.constant([1, 2], tf.int32))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        SystemLevelCell(model, _ring(60.0, 6, 0.0) if positions is None else positions, **args)


def test_cir_seed_error():
    with pytest.raises(ValueError, match="seed"):
        _cell().cir(None, tf.constant([1, 2, 3], tf.int32))


# --------------------------------------------------------------------------- #
# 4. UMa and RMa
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    ("model", "los", "formula", "sigma_db", "num_paths"),
    [
        ("uma", True, uma_pl_los, 4.0, 24),
        ("uma", False, uma_pl_nlos, 6.0, 24),
        ("rma", True, rma_pl_los, 4.0, 15),  # sigma_SF1, below the breakpoint (3.8 km)
        ("rma", False, rma_pl_nlos, 8.0, 15),
    ],
)
def test_uma_rma_at_200_m(model, los, formula, sigma_db, num_paths):
    """At 200 m: PL_k equals Table 7.4.1-1 (default heights, h_UT = 1.5 m), every
    -10 log10(path_gain_k) is within PL +- 5 sigma_SF (Table 7.5-6), and the
    responses are finite and non-zero."""
    positions = _ring(200.0, 8, 0.2)
    cell = _cell(model, positions, force_los=los, seed=(21, int(los)))
    assert np.all(cell.los == los)
    expected = formula(np.full(8, 200.0))
    np.testing.assert_allclose(cell.path_loss_db, expected, rtol=0, atol=1e-3)
    assert np.all(np.abs(-10 * np.log10(cell.path_gain) - expected) <= 5 * sigma_db)
    a, _ = cell.cir(None, tf.constant([1, 1], tf.int32))
    assert a.shape == (8, num_paths)
    h = cell(None, tf.constant([1, 1], tf.int32)).numpy()
    assert h.shape == (8, 12) and np.all(np.isfinite(h)) and np.all(np.abs(h) > 0)


def test_cell_models_constant():
    assert CELL_MODELS == ("umi", "uma", "rma")
