"""``uplink.scheme = "digital_ofdma"`` (phy/uplink/digital_ofdma.py): the quantizer is
unbiased and on its grid, the symbols are the bits over the per-symbol payload, the
estimate is the exact weighted sum of the decoded quantized updates, and outage drops
exactly the devices whose rate is short."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from phy.uplink.digital_ofdma import (
    SCALE_BITS,
    DigitalOfdma,
    allocate,
    decoded_weights,
    plan,
    stochastic_quantize,
)

P_W, NOISE_W, SYMBOL_S = 0.1, 1e-3, 3.5e-5
SEED = tf.constant([11, 42], tf.int32)


def _channel(rng, num_devices, num_subcarriers, gain_db):
    """[K, F] complex128 Rayleigh subcarriers at per-device mean gains ``gain_db`` [K]."""
    small = (rng.standard_normal((num_devices, num_subcarriers))
             + 1j * rng.standard_normal((num_devices, num_subcarriers))) / math.sqrt(2.0)
    return small * np.sqrt(10.0 ** (np.asarray(gain_db, np.float64)[:, None] / 10.0))


def _link_and_block(rng, h, h_hat, num_values, weights, *, per_device=True):
    updates = rng.standard_normal((h.shape[0], num_values)).astype(np.float32)
    link = SimpleNamespace(updates=tf.constant(updates), weights=tf.constant(np.asarray(weights, np.float32)),
                           h=tf.constant(h.astype(np.complex64)), h_hat=tf.constant(h_hat.astype(np.complex64)))
    block = SimpleNamespace(tx_power_w=P_W, noise_power_w=NOISE_W, symbol_duration_s=SYMBOL_S,
                            per_device=per_device, num_subcarriers=h.shape[1])
    return link, block


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_the_quantizer_is_unbiased_and_on_its_grid(rng, bits):
    """M = 4000 independent quantizations of one vector (the rows of one call): every
    value on the grid -s + j 2s / (2^b - 1), and per entry the mean within 6 standard
    errors of x (the entry's draw is a two-point law, std Delta sqrt(p (1 - p)); 6 sigma
    over the 64 entries fails by chance with probability < 1e-7)."""
    draws, n = 4000, 64
    x = rng.standard_normal(n)
    x[3] = -np.max(np.abs(x)) * 1.0  # an entry at -s: on the grid exactly
    q, scale = stochastic_quantize(np.tile(x, (draws, 1)), bits, SEED)
    s = np.max(np.abs(x))
    np.testing.assert_array_equal(scale, s)
    step = 2.0 * s / (2.0**bits - 1.0)
    index = (q + s) / step
    np.testing.assert_allclose(index, np.round(index), atol=1e-9)
    assert index.min() > -1e-9 and index.max() < 2.0**bits - 1.0 + 1e-9
    np.testing.assert_array_equal(q[:, 3], -s)
    assert np.all(np.abs(q - x) < step * (1.0 + 1e-12))  # one of the two neighbours
    p = (x + s) / step - np.floor((x + s) / step)
    sigma = step * np.sqrt(p * (1.0 - p)) / math.sqrt(draws)
    z = np.abs(q.mean(axis=0) - x) / np.maximum(sigma, 1e-300)
    assert np.all((z < 6.0) | (sigma == 0.0)), z.max()


@pytest.mark.parametrize("bits", [16, 32])
def test_fine_grids_stay_within_a_step(rng, bits):
    x = rng.standard_normal((3, 500)).astype(np.float32)
    q, scale = stochastic_quantize(x, bits, SEED)
    step = 2.0 * scale / (2.0**bits - 1.0)
    assert np.all(np.abs(q - x) <= step[:, None] * (1.0 + 1e-6))
    index = (q + scale[:, None]) / step[:, None]
    np.testing.assert_allclose(index, np.round(index), atol=1e-4 if bits == 32 else 1e-8)


def test_the_quantizer_replays_from_its_seed_and_keeps_zero_rows(rng):
    x = rng.standard_normal((4, 100))
    x[2] = 0.0
    first, _ = stochastic_quantize(x, 2, SEED)
    again, _ = stochastic_quantize(x, 2, SEED)
    other, _ = stochastic_quantize(x, 2, tf.constant([11, 43], tf.int32))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(first[2], 0.0)


def test_the_symbols_are_the_bits_over_the_per_symbol_payload(rng):
    """N_k = ceil(B_k / R_k) with B_k = n b + 32 and R_k = sum over device k's subcarriers
    of log2(1 + (P / F_k) |h_kf|^2 / (sigma_z^2 Gamma)), recomputed here by hand; the
    equal split interleaves (F = 19 over K = 5: 4, 4, 4, 4, 3 subcarriers)."""
    num_devices, num_subcarriers, n, bits = 5, 19, 1000, 4
    h = _channel(rng, num_devices, num_subcarriers, [-10.0, 0.0, 5.0, 10.0, 20.0])
    result = plan(h, h, n, bits_per_value=bits, allocation="equal", tx_power_w=P_W, noise_power_w=NOISE_W,
                  snr_gap_db=3.0)
    np.testing.assert_array_equal(result.owner, np.arange(num_subcarriers) % num_devices)
    np.testing.assert_array_equal(result.subcarriers, [4, 4, 4, 4, 3])
    gap = 10.0**0.3
    for k in range(num_devices):
        own = np.flatnonzero(result.owner == k)
        rate = np.sum(np.log2(1.0 + (P_W / own.size) * np.abs(h[k, own]) ** 2 / (NOISE_W * gap)))
        assert result.rate[k] == pytest.approx(rate, rel=1e-12)
        assert result.bits[k] == n * bits + SCALE_BITS
        assert result.symbols[k] == math.ceil(result.bits[k] / rate)
        assert (result.symbols[k] - 1) * rate < result.bits[k] <= result.symbols[k] * rate
    assert result.decoded.all()  # perfect CSI: R_k = C_k
    assert result.num_symbols == result.symbols.max()


def test_with_rates_below_capacity_the_estimate_is_the_weighted_sum_of_the_quantized_updates(rng):
    """A 3 dB rate margin with perfect CSI: every rate below capacity, every device decoded,
    and the estimate is sum_k w_k q_k of the quantized updates drawn from the phase's seed
    (up to the float32 rounding of the float64 sum); the slot is the slowest device and
    each device's energy P N_k T_sym."""
    num_devices, num_subcarriers, n = 6, 24, 777
    h = _channel(rng, num_devices, num_subcarriers, rng.uniform(-5.0, 25.0, num_devices))
    weights = rng.dirichlet(np.ones(num_devices))
    link, block = _link_and_block(rng, h, h, n, weights)
    scheme = DigitalOfdma(bits_per_value=4, rate_margin_db=3.0)
    result = scheme.send(link, block, phase="delta", seed=SEED, keep_signals=False,
                         per_device=block.per_device)
    schedule = scheme.plan(link, block, n)
    assert np.all(schedule.rate < schedule.capacity) and schedule.decoded.all()
    q, _ = stochastic_quantize(link.updates, 4, SEED)
    expected = np.sum(np.asarray(link.weights, np.float64)[:, None] * q, axis=0)
    estimate = result.estimate.numpy()
    assert estimate.dtype == np.float32 and estimate.shape == (n,)
    np.testing.assert_allclose(estimate, expected, rtol=2.0**-23, atol=1e-30)
    assert result.num_symbols == int(schedule.symbols.max())
    np.testing.assert_allclose(result.tx_energy_j, P_W * schedule.symbols * SYMBOL_S, rtol=1e-15)
    scalars = result.columns.scalars
    assert scalars["outage_devices_delta"] == 0.0
    assert scalars["bits_sent_delta"] == num_devices * (n * 4 + SCALE_BITS)
    assert scalars["symbols_needed_delta"] == result.num_symbols
    assert scalars["decoded_weight_delta"] == 1.0


def test_outage_drops_exactly_the_devices_whose_rate_is_short(rng):
    """Devices 1 and 4 overestimate their channel (h_hat = 2 h: a rate above what h
    carries), device 2 underestimates it (h_hat = h / 2: decoded), and the slot budget
    is one symbol short of device 5's need: exactly 1, 4 and 5 are in outage; the estimate
    is the weighted sum over 0, 2, 3 with their weights renormalised to the senders' total;
    the budget's outage does not transmit (no energy), the rate's does."""
    num_devices, num_subcarriers, n = 6, 30, 500
    h = _channel(rng, num_devices, num_subcarriers, [10.0, 10.0, 10.0, 10.0, 10.0, -15.0])
    h_hat = h.copy()
    h_hat[[1, 4]] *= 2.0
    h_hat[2] *= 0.5
    weights = rng.dirichlet(np.ones(num_devices))
    link, block = _link_and_block(rng, h, h_hat, n, weights)
    free = DigitalOfdma(bits_per_value=2).plan(link, block, n)
    budget = int(free.symbols[5]) - 1
    assert budget >= free.symbols[[0, 1, 2, 3, 4]].max()  # device 5 alone is over it
    scheme = DigitalOfdma(bits_per_value=2, slot_symbols=budget)
    result = scheme.send(link, block, phase="rho", seed=SEED, keep_signals=False,
                         per_device=block.per_device)
    schedule = scheme.plan(link, block, n)
    np.testing.assert_array_equal(np.flatnonzero(schedule.outage), [1, 4, 5])
    np.testing.assert_array_equal(schedule.transmits, [True, True, True, True, True, False])

    w = np.asarray(link.weights, np.float64)
    kept = np.array([0, 2, 3])
    renormalised = np.zeros(num_devices)
    renormalised[kept] = w[kept] * w.sum() / w[kept].sum()
    np.testing.assert_allclose(decoded_weights(w, schedule.decoded), renormalised, rtol=1e-15)
    q, _ = stochastic_quantize(link.updates, 2, SEED)
    np.testing.assert_allclose(result.estimate.numpy(), renormalised @ q, rtol=2.0**-23, atol=1e-30)

    columns = result.columns
    assert columns.scalars["outage_devices_rho"] == 3.0
    assert columns.scalars["decoded_weight_rho"] == pytest.approx(w[kept].sum() / w.sum(), rel=1e-6)
    assert columns.scalars["bits_sent_rho"] == 5 * (n * 2 + SCALE_BITS)
    np.testing.assert_array_equal(columns.per_device["outage_rho"], [0, 1, 0, 0, 1, 1])
    assert result.num_symbols == int(schedule.symbols[:5].max()) <= budget
    assert result.tx_energy_j[5] == 0.0 and np.all(result.tx_energy_j[:5] > 0.0)


def test_no_device_decoded_gives_a_zero_estimate(rng):
    h = _channel(rng, 3, 6, [0.0, 0.0, 0.0])
    link, block = _link_and_block(rng, h, 3.0 * h, 40, [0.2, 0.3, 0.5])
    result = DigitalOfdma(bits_per_value=8).send(link, block, phase="delta", seed=SEED, keep_signals=True,
                         per_device=block.per_device)
    np.testing.assert_array_equal(result.estimate.numpy(), 0.0)
    assert result.columns.scalars["outage_devices_delta"] == 3.0
    assert result.columns.scalars["decoded_weight_delta"] == 0.0
    assert "estimate_delta" in result.columns.signals


def test_max_min_gives_every_subcarrier_once_and_the_weak_device_more(rng):
    """Rhee and Cioffi's greedy: every subcarrier has one owner, every device at least one,
    and a device 20 dB below the others gets the most subcarriers; its rate is at least
    the equal split's."""
    num_devices, num_subcarriers = 4, 64
    gain = np.abs(_channel(rng, num_devices, num_subcarriers, [20.0, 20.0, 20.0, 0.0])) ** 2
    owner = allocate(gain, "max_min", P_W, NOISE_W)
    counts = np.bincount(owner, minlength=num_devices)
    assert counts.sum() == num_subcarriers and counts.min() >= 1
    assert counts[3] == counts.max() and counts[3] > num_subcarriers // num_devices
    h = np.sqrt(gain).astype(np.complex128)
    fair = plan(h, h, 100, bits_per_value=8, allocation="max_min", tx_power_w=P_W, noise_power_w=NOISE_W)
    equal = plan(h, h, 100, bits_per_value=8, allocation="equal", tx_power_w=P_W, noise_power_w=NOISE_W)
    assert fair.rate.min() >= equal.rate.min()
    assert fair.num_symbols <= equal.num_symbols


def test_bad_keys_name_themselves():
    with pytest.raises(ValueError, match="bits_per_value"):
        DigitalOfdma(bits_per_value=3)
    with pytest.raises(ValueError, match="slot_symbols"):
        DigitalOfdma(slot_symbols=0)
    with pytest.raises(ValueError, match="allocation"):
        DigitalOfdma(allocation="best")
    with pytest.raises(ValueError, match="rate_model"):
        DigitalOfdma(rate_model="lte")
    with pytest.raises(ValueError, match="target_bler"):
        DigitalOfdma(target_bler=1.0)


def test_the_nr_mcs_table_is_ts_38214_table_1_with_thresholds_from_the_bler_curves():
    """MCS 10 of TS 38.214 Table 5.1.3.1-1 is 16-QAM at R = 340/1024; the usable MCSs
    rise in efficiency and threshold, and a lower target BLER needs at least as much SNR."""
    from phy.uplink.digital_ofdma import nr_mcs_table

    index, efficiency, threshold = nr_mcs_table(0.1)
    assert efficiency[list(index).index(10)] == pytest.approx(4 * 340 / 1024, rel=1e-6)
    assert np.all(np.diff(efficiency) > 0) and np.all(np.diff(threshold) >= 0)
    strict_index, _, strict = nr_mcs_table(0.01)
    for i, mcs in enumerate(strict_index):
        if mcs in index:
            assert strict[i] >= threshold[list(index).index(mcs)]


def test_nr_mcs_rates_are_one_mcs_per_device_from_its_effective_snr(rng):
    """Device k's rate is F_k times the efficiency of the most efficient MCS whose threshold
    is at most 2^(mean_f log2(1 + SNR_kf)) - 1 (recomputed here); a device below the lowest
    threshold does not transmit; one whose CSI is 6 dB high picks an MCS its channel does
    not carry and is lost."""
    from phy.uplink.digital_ofdma import nr_mcs_table

    num_devices, num_subcarriers, n = 4, 32, 300
    # per-subcarrier SNR = (P / 8) g / sigma^2: mean gains for about -20, 4, 8 and 8 dB
    base = 10.0 * np.log10(8 * NOISE_W / P_W)
    h = _channel(rng, num_devices, num_subcarriers, base + np.array([-20.0, 4.0, 8.0, 8.0]))
    h_hat = h.copy()
    h_hat[3] *= 2.0
    result = plan(h_hat, h, n, bits_per_value=4, allocation="equal", tx_power_w=P_W, noise_power_w=NOISE_W,
                  rate_model="nr_mcs", target_bler=0.1)
    _, efficiency, threshold = nr_mcs_table(0.1)
    for k in range(num_devices):
        own = np.flatnonzero(result.owner == k)
        snr = (P_W / own.size) * np.abs(h_hat[k, own]) ** 2 / NOISE_W
        effective = 2.0 ** np.mean(np.log2(1.0 + snr)) - 1.0
        usable = np.flatnonzero(threshold <= effective)
        expected = own.size * efficiency[usable[-1]] if usable.size else 0.0
        assert result.rate[k] == pytest.approx(expected, rel=1e-12)
        if expected:
            assert result.symbols[k] == math.ceil((n * 4 + SCALE_BITS) / expected)
    assert result.rate[0] == 0.0 and not result.transmits[0]
    assert result.rate[3] > result.capacity[3]
    np.testing.assert_array_equal(result.decoded, [False, True, True, False])


def test_a_sender_at_rate_zero_is_in_outage_and_the_phase_columns_stay_finite(rng):
    """A device with no channel (h = 0) has rate 0: it does not transmit, it is in outage,
    its symbols are inf per device, and the phase's symbols_needed is the others' max (a
    non-finite scalar would stop the run as diverged)."""
    h = _channel(rng, 3, 12, [10.0, 10.0, 10.0])
    h[1] = 0.0
    link, block = _link_and_block(rng, h, h, 50, [0.3, 0.3, 0.4])
    result = DigitalOfdma(bits_per_value=4).send(link, block, phase="delta", seed=SEED, keep_signals=False,
                         per_device=block.per_device)
    columns = result.columns
    assert columns.per_device["symbols_delta"][1] == np.inf
    np.testing.assert_array_equal(columns.per_device["outage_delta"], [0.0, 1.0, 0.0])
    symbols = columns.per_device["symbols_delta"][[0, 2]]
    assert columns.scalars["symbols_needed_delta"] == symbols.max() == result.num_symbols
    assert all(math.isfinite(value) for value in columns.scalars.values())
    assert result.tx_energy_j[1] == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_blocks_quantized_sum_is_the_row_by_row_one_bit_for_bit(dtype):
    """:func:`phy.quantized_sums.add_quantized` over a block equals adding
    ``w_k quantize_row(x_k)`` row by row from the same generator: rows of every size of
    value, a row of zeros, one with an infinity and one with a NaN (sent as they are),
    senders of weight 0 (drawn, not added)."""
    from phy.quantized_sums import add_quantized
    from phy.uplink.digital_ofdma import quantize_row

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((9, 257)) * np.logspace(-6, 3, 9)[:, None]).astype(dtype)
    x[2] = 0.0
    x[5, 7] = np.inf
    x[7, 100] = np.nan
    weights = rng.random(9)
    weights[[1, 4]] = 0.0
    for bits in (1, 4, 8):
        wanted = np.full(257, 0.25)
        draws = np.random.default_rng(11)
        for row, weight in zip(x, weights, strict=True):
            q, _ = quantize_row(row, bits, draws)
            if weight != 0.0:
                wanted += weight * q
        got = np.full(257, 0.25)
        block = np.random.default_rng(11)
        add_quantized(x[:4], block.random((4, 257)), bits, weights[:4], got)
        add_quantized(x[4:], block.random((5, 257)), bits, weights[4:], got)
        np.testing.assert_array_equal(got, wanted)
    assert np.isnan(got[100]) and np.isinf(got[7])
