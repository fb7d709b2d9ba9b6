"""The one-bit phase with a true channel per OFDM symbol (``h`` [K, N, F], moving devices
under ``mobility.channel_within_phase = "per_symbol"``): element (n, f) received through
symbol n's channel, the precoders from ``h_hat``; equal channels on every symbol give the
[K, F] result bit for bit; the stream in chunks of senders gives ``send``'s result."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from phy.parameters import UPLINK_SCHEMES
from phy.uplink import majority_vote, one_bit
from phy.uplink.majority_vote import true_majority
from phy.uplink.one_bit import OneBit
from phy.uplink.participation import PhaseLink

K, F, D = 13, 16, 301  # BPSK: N = 19 symbols, the last one partial
SEED = tf.constant([5, 17], tf.int32)
UNEVEN = ((0, 3), (3, 8), (8, K))


def _cn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * math.sqrt(0.5)


def _symbols(modulation: str) -> int:
    elements = math.ceil(D / (2 if modulation == "qpsk" else 1))
    return math.ceil(elements / F)


def _inputs(rng, modulation: str, csi_error: float = 0.3):
    """Updates (some entries 0), weights, path gains, the channel at the phase's start h0
    [K, F], an imperfect estimate of it and a channel per symbol drifting away from h0."""
    gain = np.geomspace(1e-6, 1e-8, K)
    amplitude = np.sqrt(gain)[:, None]
    h0 = _cn(rng, K, F) * amplitude
    n = _symbols(modulation)
    drift = np.linspace(0.0, 0.8, n)[None, :, None]
    h = h0[:, None, :] * np.sqrt(1 - drift**2) + _cn(rng, K, n, F) * amplitude[:, :, None] * drift
    h_hat = h0 + csi_error * _cn(rng, K, F) * amplitude
    updates = rng.standard_normal((K, D)).astype(np.float32)
    updates[1, :7] = 0.0
    weights = rng.uniform(0.5, 2.0, K)
    return updates, (weights / weights.sum()).astype(np.float32), gain, h0, h, h_hat


def _link(updates, weights, gain, h, h_hat):
    w = tf.constant(weights, tf.float32)
    return PhaseLink(tf.constant(updates), w, w, tf.constant(h, tf.complex64), tf.constant(h_hat, tf.complex64),
                     tf.constant(gain, tf.float32), None, None, 1.0, None)


def _air(noise_power_w=1e-9):
    return SimpleNamespace(num_subcarriers=F, tx_power_w=1e-3, noise_power_w=noise_power_w,
                           symbol_duration_s=3.5e-5)


def _sent(scheme, link, air, keep_signals=False):
    return scheme.send(link, air, phase="delta", seed=SEED, keep_signals=keep_signals, per_device=True)


def _streamed(scheme, link, air, chunks):
    stream = scheme.open_stream(replace(link, updates=None), air, phase="delta", seed=SEED, per_device=True)
    for lo, hi in chunks:
        stream.add(lo, hi, link.updates[lo:hi])
    return stream.finish()


def _assert_same(a, b, signals=()):
    np.testing.assert_array_equal(a.estimate.numpy(), b.estimate.numpy())
    assert a.num_symbols == b.num_symbols
    np.testing.assert_array_equal(a.tx_energy_j, b.tx_energy_j)
    assert a.columns.scalars.keys() == b.columns.scalars.keys()
    for name, value in a.columns.scalars.items():
        assert value == b.columns.scalars[name] or (math.isnan(value) and math.isnan(b.columns.scalars[name])), name
    for name, values in a.columns.per_device.items():
        np.testing.assert_array_equal(values, b.columns.per_device[name], err_msg=name)
    for name in signals:
        np.testing.assert_array_equal(a.columns.signals[name], b.columns.signals[name], err_msg=name)


def test_the_one_bit_scheme_takes_the_channel_per_symbol():
    """The scheme fact the moving link reads (phy.uplink.moving_link.phase_channels)."""
    assert OneBit.channel_per_symbol is True
    assert UPLINK_SCHEMES["one_bit"].parameters.channel_per_symbol is True


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_equal_channels_per_symbol_give_the_constant_channel_bits(rng, modulation):
    """h [K, N, F] with h0 on every symbol is the phase with h0 [K, F], bit for bit: the
    vote, the energies, every column and the received signal."""
    updates, weights, gain, h0, _, h_hat = _inputs(rng, modulation)
    n = _symbols(modulation)
    scheme, air = OneBit(modulation, gain_threshold=0.5), _air()
    want = _sent(scheme, _link(updates, weights, gain, h0, h_hat), air, keep_signals=True)
    tiled = np.repeat(h0[:, None, :], n, axis=1)
    got = _sent(scheme, _link(updates, weights, gain, tiled, h_hat), air, keep_signals=True)
    assert 0.0 < want.columns.scalars["vote_error_rate_delta"] < 0.5  # noisy: the bits are tested
    _assert_same(got, want, signals=("y_delta", "estimate_delta"))


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_the_values_on_symbol_n_go_through_symbol_ns_channel(rng, modulation):
    """Perfect CSI h_hat = h0, no noise, and the channel -h0 on symbols 3, 4 and 11 (h0 on
    the others): exactly the values those symbols carry (BPSK: value i on symbol i // F;
    QPSK: i // (2 F)) are voted against the majority; every other vote is the majority.
    A channel one symbol off flips other entries."""
    updates, weights, gain, h0, _, _ = _inputs(rng, modulation)
    n, per = _symbols(modulation), (2 if modulation == "qpsk" else 1)
    flipped = np.isin(np.arange(n), [3, 4, 11])
    h = np.where(flipped[None, :, None], -h0[:, None, :], h0[:, None, :])
    scheme = OneBit(modulation, gain_threshold=0.0)
    result = _sent(scheme, _link(updates, weights, gain, h, h0), _air(noise_power_w=1e-30))
    majority, tie = true_majority(np.sign(updates), weights)
    assert not tie.any()
    on_flipped = flipped[np.arange(D) // (per * F)]
    np.testing.assert_array_equal(result.estimate.numpy(), np.where(on_flipped, -majority, majority))


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_the_received_signal_is_each_symbols_superposition(rng, modulation):
    """y[n, f] = sum_k h_knf x_k[n, f] with the precoders from h_hat (the noise at 1e-30 W),
    against NumPy in complex128; the channel of the neighbouring symbol gives another y."""
    updates, weights, gain, _, h, h_hat = _inputs(rng, modulation)
    n, per = _symbols(modulation), (2 if modulation == "qpsk" else 1)
    scheme = OneBit(modulation, gain_threshold=0.5)
    link = _link(updates, weights, gain, h, h_hat)
    stream = one_bit.OneBitStream(scheme, link, _air(1e-30), phase="delta", seed=SEED, per_device=False)
    stream.add(0, K, link.updates)
    precoder = stream._precoder(0, K)  # [K, F] complex128, from h_hat only
    signs = np.sign(updates).astype(np.float64)
    grid = np.pad(signs, [[0, 0], [0, n * F * per - D]]).reshape(K, n, F, per)
    c = grid[..., 0] + (1j * grid[..., 1] if per == 2 else 0.0)
    want = np.einsum("knf,kf,knf->nf", h.astype(np.complex64).astype(np.complex128), precoder, c)
    off_by_one = np.einsum("knf,kf,knf->nf", np.roll(h, 1, axis=1).astype(np.complex64), precoder, c)
    got = _sent(scheme, link, _air(1e-30), keep_signals=True).columns.signals["y_delta"]
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0.0, atol=1e-5 * scale)
    assert np.abs(off_by_one - want).max() > 0.1 * scale


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_the_stream_gives_sends_result_with_a_channel_per_symbol(rng, modulation, monkeypatch):
    """One chunk: ``send``'s result bit for bit; chunks of 3, 5 and 5 senders: the same
    votes, energies and columns, each chunk's superposition formed over its own rows of
    h [K, N, F] only."""
    updates, weights, gain, _, h, h_hat = _inputs(rng, modulation)
    scheme, air = OneBit(modulation, gain_threshold=0.5), _air()
    link = _link(updates, weights, gain, h, h_hat)
    sent = _sent(scheme, link, air)
    assert 0.0 < sent.columns.scalars["vote_error_rate_delta"] < 0.5
    _assert_same(_streamed(scheme, link, air, [(0, K)]), sent)
    rows = []
    superpose = majority_vote.superpose

    def spy(c_re, c_im, precoder, h, uplink=None):
        rows.append(tuple(h.shape))
        return superpose(c_re, c_im, precoder, h, uplink)

    monkeypatch.setattr(one_bit, "superpose", spy)
    _assert_same(_streamed(scheme, link, air, UNEVEN), sent)
    assert rows == [(hi - lo, _symbols(modulation), F) for lo, hi in UNEVEN]


def test_a_channel_per_symbol_changes_the_vote_and_bad_shapes_are_refused(rng):
    """The drifting channel gives another received signal than h0 (same estimate, same
    precoders and energies); h with a symbol too few, and h [K, N, F] over the
    time-domain uplink, are refused."""
    updates, weights, gain, h0, h, h_hat = _inputs(rng, "bpsk")
    scheme, air = OneBit("bpsk", gain_threshold=0.5), _air()
    moving = _sent(scheme, _link(updates, weights, gain, h, h_hat), air, keep_signals=True)
    still = _sent(scheme, _link(updates, weights, gain, h0, h_hat), air, keep_signals=True)
    assert not np.allclose(moving.columns.signals["y_delta"], still.columns.signals["y_delta"], rtol=1e-2)
    np.testing.assert_array_equal(moving.tx_energy_j, still.tx_energy_j)
    with pytest.raises(ValueError, match=r"\[K, N, F\] = \[13, 19, 16\].*got \[13, 18, 16\]"):
        _sent(scheme, _link(updates, weights, gain, h[:, :-1], h_hat), air)
    with pytest.raises(NotImplementedError, match="time-domain"):
        _sent(scheme, replace(_link(updates, weights, gain, h, h_hat), uplink=lambda x: x), air)
