"""The sign-carrying schemes (``uplink.scheme = "one_bit"`` and ``"noncoherent_mv"``):
the vote against the senders' weighted majority, exactly where it must hold and against
the closed-form error rate elsewhere.

Statistical tolerance: the number of missed entries is a sum of independent Bernoulli
variables with the closed-form probabilities p_i (independent given the channel: the
noise, and for the non-coherent scheme the fading and phases of distinct tones, are
independent), so it must lie within 5 standard deviations sqrt(sum p_i (1 - p_i)) of
sum p_i (a false failure about once in 1.7 million runs; seeds are fixed anyway).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erfc

from phy.grid import GroupingRule
from phy.uplink.majority_vote import true_majority
from phy.uplink.noncoherent_mv import NoncoherentMajorityVote
from phy.uplink.one_bit import OneBit
from phy.uplink.participation import PhaseLink

SIGMAS = 5.0


def _link(signs, weights, h, h_hat=None, path_gain=None):
    w = tf.constant(np.asarray(weights), tf.float32)
    return PhaseLink(tf.constant(signs, tf.float32), w, w, tf.constant(h, tf.complex64),
                     tf.constant(h if h_hat is None else h_hat, tf.complex64),
                     tf.constant(np.asarray(path_gain), tf.float32), None, None, 1.0, None)


def _block(num_subcarriers, noise_power_w, tx_power_w=1e-3):
    return SimpleNamespace(num_subcarriers=num_subcarriers, noise_power_w=noise_power_w,
                           tx_power_w=tx_power_w, symbol_duration_s=1e-3, per_device=True)


def _rayleigh(rng, path_gain, num_subcarriers):
    g = np.asarray(path_gain)[:, None]
    shape = (len(path_gain), num_subcarriers)
    return np.sqrt(g / 2) * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def _q(x):
    return 0.5 * erfc(np.asarray(x) / math.sqrt(2.0))


def _seed(i):
    return tf.constant([7, i], tf.int32)


def _within(errors, p):
    mean, std = p.sum(), math.sqrt((p * (1 - p)).sum())
    assert abs(errors - mean) <= SIGMAS * std, (errors, mean, std)


# --------------------------------------------------------------------------- one_bit


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_one_bit_vote_is_the_weighted_majority_at_high_snr_with_perfect_csi(rng, modulation):
    """Threshold 0 (no subcarrier silent), perfect CSI, noise 1e-30 W: the vote equals
    sign(sum_k pi_k s_k) on every entry, also where the weights overturn the head count."""
    k, f, n = 5, 64, 1000
    weights = np.array([0.35, 0.1, 0.1, 0.1, 0.35])
    signs = rng.choice([-1.0, 1.0], size=(k, n))
    path_gain = np.geomspace(1e-6, 1e-9, k)
    h = _rayleigh(rng, path_gain, f)
    scheme = OneBit(modulation, gain_threshold=0.0)
    result = scheme.send(_link(signs, weights, h, path_gain=path_gain), _block(f, 1e-30),
                         phase="delta", seed=_seed(0), keep_signals=False, per_device=True)
    majority, tie = true_majority(signs, weights)
    assert not tie.any()
    assert np.any(majority != np.sign(signs.sum(0)))  # the weights matter on some entries
    np.testing.assert_array_equal(result.estimate.numpy(), majority)
    assert result.columns.scalars["vote_error_rate_delta"] == 0.0
    per = 2 if modulation == "qpsk" else 1
    assert result.num_symbols == math.ceil(n / (per * f)) == scheme.nominal_symbols(GroupingRule(n, f))


def _one_bit_margins(signs, weights, h, path_gain, threshold, f, per, tx_power_w):
    """The closed form's ingredients, computed here from the model: ``sqrt(eta)`` and the
    noiseless real (and imaginary) part per entry ``m_i = sqrt(eta) sum_{k on} pi_k s_ki``."""
    n = signs.shape[1]
    elements = -(-n // per)
    gain = np.abs(h) ** 2
    on = gain >= threshold * path_gain[:, None]
    used = min(f, elements)
    load = weights**2 * per * np.where(on, 1 / gain, 0)[:, :used].sum(1)
    eta = tx_power_w / load.max()
    subcarrier = (np.arange(n) // per) % f
    return math.sqrt(eta) * (weights[:, None] * signs * on[:, subcarrier]).sum(0)


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_one_bit_vote_error_rate_matches_the_closed_form_at_three_snrs(rng, modulation):
    """Per entry: margin m_i of the equalised amplitudes (truncation t = 0.5 silences
    about 39 % of the subcarriers, so some entries lose their majority), missed with
    Q(|m_i| / sigma) when m_i has the majority's sign, 1 - Q when the truncation turned
    it, 1/2 when it is 0; sigma = sqrt(sigma_z^2 / 2). The count of missed entries lies
    within 5 binomial standard deviations of the sum, at three noise powers (error rates
    about 3 %, 12 % and 30 %)."""
    k, f, n, threshold, tx_power_w = 5, 128, 128 * 60, 0.5, 1e-3
    per = 2 if modulation == "qpsk" else 1
    weights = np.array([0.34, 0.26, 0.21, 0.12, 0.07])
    path_gain = np.geomspace(1e-6, 1e-8, k)
    signs = rng.choice([-1.0, 1.0], size=(k, n))
    h = _rayleigh(rng, path_gain, f)
    margin = _one_bit_margins(signs, weights, h, path_gain, threshold, f, per, tx_power_w)
    majority, tie = true_majority(signs, weights)
    assert not tie.any()
    scale = np.median(np.abs(margin[margin != 0]))
    rates = []
    for i, snr in enumerate([4.0, 1.0, 0.25]):  # (median margin / sigma)^2
        noise_power_w = 2 * scale**2 / snr
        result = OneBit(modulation, threshold).send(
            _link(signs, weights, h, path_gain=path_gain), _block(f, noise_power_w, tx_power_w),
            phase="delta", seed=_seed(i), keep_signals=False, per_device=True)
        sigma = math.sqrt(noise_power_w / 2)
        q = _q(np.abs(margin) / sigma)
        p = np.where(margin == 0, 0.5, np.where(np.sign(margin) == majority, q, 1 - q))
        errors = int(np.count_nonzero(result.estimate.numpy() != majority))
        _within(errors, p)
        assert result.columns.scalars["vote_error_rate_delta"] == errors / n
        rates.append(errors / n)
    assert rates[0] < rates[1] < rates[2]


def test_one_bit_budget_binds_for_the_neediest_device_and_energy_counts_the_symbols(rng):
    """The device that needs the most power sends P in every full OFDM symbol, the others
    less; its energy is N P times the symbol duration."""
    k, f, n = 4, 32, 32 * 5
    weights = np.full(k, 0.25)
    path_gain = np.geomspace(1e-6, 1e-8, k)
    signs = rng.choice([-1.0, 1.0], size=(k, n))
    block = _block(f, 1e-15, tx_power_w=2e-3)
    result = OneBit("bpsk", 0.1).send(_link(signs, weights, _rayleigh(rng, path_gain, f), path_gain=path_gain),
                                      block, phase="delta", seed=_seed(0), keep_signals=True, per_device=True)
    power = result.columns.per_device["tx_power_w_delta"]
    np.testing.assert_allclose(power.max(), 2e-3, rtol=1e-5)
    assert np.all(power <= 2e-3 * (1 + 1e-5))
    np.testing.assert_allclose(result.tx_energy_j, power * 5 * 1e-3, rtol=1e-12)
    assert result.columns.signals["y_delta"].shape == (5, f)


# --------------------------------------------------------------------------- noncoherent_mv


def test_noncoherent_vote_is_the_majority_without_noise_when_the_senders_agree(rng):
    """No receiver noise, every entry unanimous among the devices that vote on it (some
    devices vote 0 on some entries): the other tone receives nothing, so the vote is the
    majority exactly, whatever the fading and the random phases; an entry nobody votes on
    gets 0."""
    k, f, n = 6, 64, 500
    weights = rng.dirichlet(np.ones(k))
    entry_sign = rng.choice([-1.0, 1.0], size=n)
    voting = rng.random((k, n)) < 0.7
    signs = np.where(voting, entry_sign, 0.0)
    signs[:, :3] = 0.0  # nobody votes
    path_gain = np.geomspace(1e-6, 1e-9, k)
    scheme = NoncoherentMajorityVote("path_gain_inversion")
    result = scheme.send(_link(signs, weights, _rayleigh(rng, path_gain, f), path_gain=path_gain),
                         _block(f, 0.0), phase="delta", seed=_seed(0), keep_signals=False, per_device=True)
    majority, _ = true_majority(signs, weights)
    np.testing.assert_array_equal(result.estimate.numpy(), majority)
    assert result.num_symbols == math.ceil(n / (f // 2)) == scheme.nominal_symbols(GroupingRule(n, f))


@pytest.mark.parametrize("power", ["path_gain_inversion", "full_power"])
def test_noncoherent_vote_error_rate_matches_the_closed_form_at_three_snrs(rng, power):
    """Energies of the two tones exponential with means mu_+ = sum_{k: +} p_k g_k +
    sigma_z^2 and mu_- (Rayleigh fading, random phases), so a +1 majority is missed with
    mu_- / (mu_+ + mu_-). One OFDM symbol per draw (its pairs see independent fading),
    40 draws of 64 pairs with fresh channels, at three noise powers; the count of missed
    entries lies within 5 binomial standard deviations."""
    k, f, draws = 5, 128, 40
    m = f // 2
    weights = np.array([0.34, 0.26, 0.21, 0.12, 0.07])
    path_gain = np.geomspace(1e-6, 1e-8, k)
    tone_w = 1e-3 / m
    if power == "full_power":
        p = np.full(k, tone_w)
    else:
        c = np.min(tone_w * path_gain / weights)
        p = c * weights / path_gain
    received = p * path_gain  # mean received power per device on its tone
    for i, snr in enumerate([10.0, 1.0, 0.1]):  # mean received power of a device / sigma_z^2
        noise_power_w = received.mean() / snr
        errors, probabilities = 0, []
        for draw in range(draws):
            signs = rng.choice([-1.0, 1.0], size=(k, m))
            link = _link(signs, weights, _rayleigh(rng, path_gain, f), path_gain=path_gain)
            result = NoncoherentMajorityVote(power).send(link, _block(f, noise_power_w), phase="delta",
                                                         seed=_seed(100 * i + draw), keep_signals=False, per_device=True)
            majority, tie = true_majority(signs, weights)
            mu_plus = received @ (signs > 0) + noise_power_w
            mu_minus = received @ (signs < 0) + noise_power_w
            wrong = np.where(majority > 0, mu_minus, mu_plus)
            probabilities.append((wrong / (mu_plus + mu_minus))[~tie])
            errors += int(np.count_nonzero((result.estimate.numpy() != majority)[~tie]))
        _within(errors, np.concatenate(probabilities))


def test_noncoherent_energy_is_the_tone_power_times_the_active_tones(rng):
    """``"full_power"``: every device spends P / M per active tone (a zero sign spends
    nothing), so its energy is P / M x its nonzero signs x the symbol duration."""
    k, f, n = 3, 16, 40
    signs = rng.choice([-1.0, 0.0, 1.0], size=(k, n))
    path_gain = np.full(k, 1e-7)
    result = NoncoherentMajorityVote("full_power").send(
        _link(signs, np.full(k, 1 / 3), _rayleigh(rng, path_gain, f), path_gain=path_gain),
        _block(f, 1e-15, tx_power_w=8e-3), phase="delta", seed=_seed(0), keep_signals=False, per_device=True)
    expected = 8e-3 / (f // 2) * np.count_nonzero(signs, axis=1) * 1e-3
    np.testing.assert_allclose(result.tx_energy_j, expected, rtol=1e-5)


@pytest.mark.parametrize("scheme", [OneBit("qpsk", 0.1), NoncoherentMajorityVote("path_gain_inversion")],
                         ids=["one_bit", "noncoherent_mv"])
def test_the_time_domain_waveform_without_offsets_gives_the_frequency_domain_vote(rng, scheme):
    """A 4-tap channel inside the cyclic prefix, no timing or frequency offset: the
    waveform (OFDM modulation, convolution, demodulation) delivers what the per-subcarrier
    model does, so with the same noise draw the two votes agree on every entry."""
    from phy.ofdm_time import TimeDomainUplink

    k, f, n, cp = 4, 32, 200, 8
    path_gain = np.geomspace(1e-6, 1e-8, k)
    taps = np.sqrt(path_gain[:, None] / 8) * (rng.standard_normal((k, 4)) + 1j * rng.standard_normal((k, 4)))
    uplink = TimeDomainUplink(taps, 0, np.zeros(k), cp, f)
    h = uplink.frequency_response()
    signs = rng.choice([-1.0, 1.0], size=(k, n))
    weights = np.full(k, 0.25)
    frequency = _link(signs, weights, h, path_gain=path_gain)
    time = dataclasses.replace(frequency, uplink=uplink)
    block = _block(f, 1e-16)
    a = scheme.send(frequency, block, phase="delta", seed=_seed(3), keep_signals=True, per_device=True)
    b = scheme.send(time, block, phase="delta", seed=_seed(3), keep_signals=True, per_device=True)
    np.testing.assert_allclose(b.columns.signals["y_delta"], a.columns.signals["y_delta"],
                               rtol=0, atol=1e-5 * np.abs(a.columns.signals["y_delta"]).max())
    np.testing.assert_array_equal(b.estimate.numpy(), a.estimate.numpy())


def test_the_majority_sums_cover_every_entry_block_by_block(rng):
    """Entries past several blocks of ``MAJORITY_BLOCK_ENTRIES``: the margin and the voting
    weight are the float64 sums of every entry (a block left out or shifted fails)."""
    from phy.uplink.majority_vote import MAJORITY_BLOCK_ENTRIES, majority_sums

    n = 2 * MAJORITY_BLOCK_ENTRIES + 5
    signs = np.sign(rng.standard_normal((7, n))).astype(np.float32)
    signs[2, ::3] = 0.0
    weights = rng.uniform(0.1, 1.0, 7)
    margin, scale = majority_sums(tf.constant(signs), weights)
    np.testing.assert_allclose(margin, weights @ signs.astype(np.float64), rtol=0, atol=1e-12)
    np.testing.assert_allclose(scale, weights @ np.abs(signs).astype(np.float64), rtol=0, atol=1e-12)
