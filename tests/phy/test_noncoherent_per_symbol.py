"""The non-coherent vote with a true channel per OFDM symbol (``h`` [K, N, F], moving
devices under ``mobility.channel_within_phase = "per_symbol"``): tone f of symbol n received
through symbol n's channel; equal channels on every symbol give the [K, F] result bit for
bit."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import tensorflow as tf

from phy.parameters import UPLINK_SCHEMES
from phy.uplink.noncoherent_mv import NoncoherentMajorityVote
from phy.uplink.participation import PhaseLink

K, F, D = 9, 16, 121  # M = 8 pairs: N = 16 symbols, the last one partial
N = math.ceil(D / (F // 2))
SEED = tf.constant([3, 11], tf.int32)


def _cn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * math.sqrt(0.5)


def _link(rng, h):
    gain = np.geomspace(1e-6, 1e-8, K)
    updates = rng.standard_normal((K, D)).astype(np.float32)
    updates[2, :5] = 0.0  # some entries send no tone
    weights = rng.uniform(0.5, 2.0, K)
    w = tf.constant(weights / weights.sum(), tf.float32)
    h_hat = np.zeros((K, F), np.complex64)  # no CSI is used
    return PhaseLink(tf.constant(updates), w, w, tf.constant(h, tf.complex64), tf.constant(h_hat),
                     tf.constant(gain, tf.float32), None, None, 1.0, None)


def _sent(link, noise_power_w):
    air = SimpleNamespace(num_subcarriers=F, tx_power_w=1e-3, noise_power_w=noise_power_w, symbol_duration_s=3.5e-5)
    return NoncoherentMajorityVote().send(link, air, phase="delta", seed=SEED, keep_signals=True, per_device=True)


def _channel(rng):
    return _cn(rng, K, F) * np.sqrt(np.geomspace(1e-6, 1e-8, K))[:, None]


def test_equal_channels_on_every_symbol_give_the_one_channel_result_bit_for_bit(rng):
    h = _channel(rng)
    one = _sent(_link(np.random.default_rng(1), h), 1e-12)
    every = _sent(_link(np.random.default_rng(1), np.repeat(h[:, None, :], N, axis=1)), 1e-12)
    np.testing.assert_array_equal(every.estimate.numpy(), one.estimate.numpy())
    np.testing.assert_array_equal(every.columns.signals["y_delta"], one.columns.signals["y_delta"])
    assert every.columns.scalars == one.columns.scalars


def test_each_symbol_is_received_through_its_own_channel(rng):
    """Symbol 4's channel zero for every device, noise off: its tones hold nothing (every
    vote there a tie), the other symbols' do; the symbol before or after would fail."""
    h = np.repeat(_channel(rng)[:, None, :], N, axis=1)
    h[:, 4, :] = 0.0
    result = _sent(_link(np.random.default_rng(2), h), 0.0)
    y = result.columns.signals["y_delta"]
    assert np.all(y[4] == 0.0)
    assert np.all(np.abs(y[[3, 5], :]).max(axis=1) > 0.0)
    vote = result.estimate.numpy().reshape(-1)
    pairs = F // 2
    assert np.all(vote[4 * pairs: 5 * pairs] == 0.0)
    assert np.count_nonzero(vote[3 * pairs: 4 * pairs]) > 0 and np.count_nonzero(vote[5 * pairs: 6 * pairs]) > 0


def test_the_scheme_asks_for_a_channel_per_symbol():
    parameters = UPLINK_SCHEMES["noncoherent_mv"].parameters
    assert parameters.channel_per_symbol and NoncoherentMajorityVote.channel_per_symbol
