"""A phase streamed in chunks of senders (``open_stream``: ``add(lo, hi, updates)`` in
order, then ``finish()``) against the same phase sent whole (``send``), for the digital
OFDMA and the one-bit schemes.

Digital OFDMA: bit for bit for any chunking (each row's draws come from one generator in
device order, the float64 sum in the same order). One-bit: bit for bit from one chunk;
from several, the energies and the scheme's own scalars bit for bit, and the votes and the
vote error and tie rates equal (the received signal differs from ``send``'s within float32
rounding only, far from any entry's decision at these seeds).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from phy.moving_channel import straight
from phy.uplink.digital_ofdma import DigitalOfdma
from phy.uplink.moving_link import SlotChannel
from phy.uplink.one_bit import OneBit
from phy.uplink.participation import PhaseLink

SEED = tf.constant([5, 17], tf.int32)
UNEVEN = (3, 5)  # then the rest


def _chunks(num_rows, sizes):
    """[(lo, hi)]: ``sizes`` then the rest (one chunk of all rows for ``sizes`` None)."""
    bounds, lo = [], 0
    for size in sizes or ():
        bounds.append((lo, min(lo + size, num_rows)))
        lo = bounds[-1][1]
    if lo < num_rows or not bounds:
        bounds.append((lo, num_rows))
    return bounds


def _streamed(scheme, link, air, sizes, *, per_device=True, as_numpy=False):
    stream = scheme.open_stream(replace(link, updates=None), air, phase="delta",
                                seed=SEED, per_device=per_device)
    for lo, hi in _chunks(int(link.updates.shape[0]), sizes):
        rows = link.updates[lo:hi]
        stream.add(lo, hi, rows.numpy() if as_numpy else rows)
    return stream.finish()


def _sent(scheme, link, air, per_device=True):
    return scheme.send(link, air, phase="delta", seed=SEED, keep_signals=False, per_device=per_device)


def _assert_same(a, b):
    """Bit for bit: estimate, symbols, energies, every column (NaN equal to NaN)."""
    np.testing.assert_array_equal(a.estimate.numpy(), b.estimate.numpy())
    assert a.estimate.dtype == b.estimate.dtype and a.num_symbols == b.num_symbols
    np.testing.assert_array_equal(a.tx_energy_j, b.tx_energy_j)
    assert list(a.columns.scalars) == list(b.columns.scalars)
    for name, value in a.columns.scalars.items():
        assert value == b.columns.scalars[name] or (math.isnan(value) and math.isnan(b.columns.scalars[name])), name
    assert list(a.columns.per_device) == list(b.columns.per_device)
    for name, values in a.columns.per_device.items():
        np.testing.assert_array_equal(values, b.columns.per_device[name], err_msg=name)
    assert not a.columns.signals and not b.columns.signals


def _rayleigh(rng, num_devices, num_subcarriers, gain):
    shape = (num_devices, num_subcarriers)
    return np.sqrt(np.asarray(gain)[:, None] / 2) * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def _link(rng, num_devices, num_subcarriers, num_values, *, gain, h=None, slot=None, csi_error=0.3):
    h = _rayleigh(rng, num_devices, num_subcarriers, gain) if h is None else h
    h_hat = h + csi_error * _rayleigh(rng, num_devices, num_subcarriers, gain)  # imperfect CSI
    weights = rng.uniform(0.5, 2.0, num_devices)
    weights = tf.constant(weights / weights.sum(), tf.float32)
    updates = rng.standard_normal((num_devices, num_values)).astype(np.float32)
    updates[1, :7] = 0.0  # some entries vote 0
    return PhaseLink(tf.constant(updates), weights, weights, tf.constant(h, tf.complex64),
                     tf.constant(h_hat, tf.complex64), tf.constant(np.asarray(gain), tf.float32), None, None, 1.0,
                     None, slot=slot)


def _air(num_subcarriers, tx_power_w, noise_power_w):
    return SimpleNamespace(num_subcarriers=num_subcarriers, tx_power_w=tx_power_w, noise_power_w=noise_power_w,
                           symbol_duration_s=3.5e-5)


# --------------------------------------------------------------------------- one_bit


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
@pytest.mark.parametrize("per_device", [True, False])
def test_one_bit_from_one_chunk_is_send_bit_for_bit(rng, modulation, per_device):
    """K = 13, F = 16, n = 301 (a padded last symbol), imperfect CSI, threshold 0.5 (some
    subcarriers silent), noise loud enough that some votes miss."""
    gain = np.geomspace(1e-6, 1e-8, 13)
    link, air = _link(rng, 13, 16, 301, gain=gain), _air(16, 1e-3, 1e-9)
    scheme = OneBit(modulation, gain_threshold=0.5)
    sent = _sent(scheme, link, air, per_device)
    assert 0.0 < sent.columns.scalars["vote_error_rate_delta"] < 0.5
    assert 0.0 < sent.columns.scalars["silent_fraction_delta"] < 1.0
    _assert_same(_streamed(scheme, link, air, None, per_device=per_device), sent)


@pytest.mark.parametrize("modulation", ["bpsk", "qpsk"])
def test_one_bit_from_uneven_chunks_votes_as_send(rng, modulation):
    """Chunks of 3, 5 and 5 senders (NumPy rows): the same votes, energies and columns."""
    gain = np.geomspace(1e-6, 1e-8, 13)
    link, air = _link(rng, 13, 16, 301, gain=gain), _air(16, 1e-3, 1e-9)
    scheme = OneBit(modulation, gain_threshold=0.5)
    sent = _sent(scheme, link, air)
    assert 0.0 < sent.columns.scalars["vote_error_rate_delta"] < 0.5
    _assert_same(_streamed(scheme, link, air, UNEVEN, as_numpy=True), sent)


def test_one_bit_chunks_sum_the_received_signal_within_float32_rounding(rng):
    """The streamed sum over the senders (before the noise) is send's within float32
    rounding of the sum of the magnitudes it adds (K eps |terms|); the chunks do change
    the order of summation (not bit for bit on every entry at this shape)."""
    gain = np.geomspace(1e-6, 1e-8, 40)
    link, air = _link(rng, 40, 64, 2000, gain=gain), _air(64, 1e-3, 1e-9)
    scheme = OneBit("qpsk", gain_threshold=0.5)
    whole = scheme.open_stream(replace(link, updates=None), air, phase="delta", seed=SEED,
                               per_device=False)
    whole.add(0, 40, link.updates)
    chunked = scheme.open_stream(replace(link, updates=None), air, phase="delta",
                                 seed=SEED, per_device=False)
    for lo, hi in _chunks(40, (3, 5, 7, 11)):
        chunked.add(lo, hi, link.updates[lo:hi])
    magnitude = np.sum(np.abs(whole._precoder(0, 40) * link.h.numpy()), axis=0).max()
    for a, b in zip(whole.received, chunked.received):
        np.testing.assert_allclose(b, a, rtol=0.0, atol=40 * np.finfo(np.float32).eps * magnitude)
    assert any(not np.array_equal(a, b) for a, b in zip(whole.received, chunked.received))
    np.testing.assert_array_equal(whole.finish().estimate.numpy(), chunked.finish().estimate.numpy())


def test_one_bit_refuses_a_time_domain_uplink_and_chunks_out_of_order(rng):
    gain = np.full(6, 1e-7)
    link, air = _link(rng, 6, 16, 50, gain=gain), _air(16, 1e-3, 1e-9)
    scheme = OneBit("bpsk")
    with pytest.raises(NotImplementedError, match="time-domain"):
        scheme.open_stream(replace(link, updates=None, uplink=object()), air,
                           phase="delta", seed=SEED, per_device=False)
    stream = scheme.open_stream(replace(link, updates=None), air, phase="delta", seed=SEED,
                                per_device=False)
    with pytest.raises(ValueError, match="out of order"):
        stream.add(2, 4, link.updates[2:4])
    stream.add(0, 2, link.updates[:2])
    with pytest.raises(ValueError, match=r"shape \[2, 50\]"):
        stream.add(2, 4, link.updates[2:4, :10])
    with pytest.raises(ValueError, match="finished after row 2 of 6"):
        stream.finish()


# --------------------------------------------------------------------------- digital_ofdma


@pytest.mark.parametrize("sizes", [None, UNEVEN, (1,) * 12])
@pytest.mark.parametrize("keys", [dict(bits_per_value=4, rate_margin_db=3.0),
                                  dict(bits_per_value=2, allocation="max_min", rate_margin_db=6.0, slot_symbols=120),
                                  dict(bits_per_value=8, rate_model="nr_mcs")])
def test_digital_from_chunks_is_send_bit_for_bit(rng, sizes, keys):
    """K = 12, F = 64, n = 257 with imperfect CSI, some devices lost to outage (the rate
    margin, the slot budget): one chunk, chunks of 3, 5 and the rest, and one row at a
    time all give send's bits, per-device columns included."""
    gain = 10.0 ** (np.linspace(5.0, -15.0, 12) / 10.0)
    link, air = _link(rng, 12, 64, 257, gain=gain, csi_error=1.0), _air(64, 0.1, 1e-2)
    scheme = DigitalOfdma(**keys)
    sent = _sent(scheme, link, air)
    assert 0.0 < sent.columns.scalars["decoded_weight_delta"] < 1.0  # outages: the renormalised weights matter
    _assert_same(_streamed(scheme, link, air, sizes), sent)
    _assert_same(_streamed(scheme, link, air, sizes, per_device=False), _sent(scheme, link, air, False))


def _moving_link(rng, num_values, speed_mps=120 / 3.6, num_subcarriers=32):
    positions = [[50.0, 0.0], [0.0, 60.0], [-70.0, 0.0], [0.0, -80.0], [30.0, 30.0], [-20.0, 40.0],
                 [60.0, -10.0], [-45.0, -45.0], [15.0, -90.0], [80.0, 20.0]]
    moving = straight(speed_mps, 0.0, 3.5e9, 8, positions_m=positions, radius_m=100.0, inner_m=10.0,
                      num_subcarriers=num_subcarriers, flat=False, path_loss_exponent=4.0,
                      rng=np.random.default_rng(3))
    moving.start_round(0)
    h, _ = moving.at(0.0)
    slot = SlotChannel(moving, 0.0, np.arange(len(positions)), moving.doppler_hz)
    gain = np.mean(np.abs(h) ** 2, axis=1)
    return _link(rng, len(positions), num_subcarriers, num_values, gain=gain, h=h, slot=slot)


@pytest.mark.parametrize("rate_adaptation", ["slot", "coherence_block"])
@pytest.mark.parametrize("sizes", [None, UNEVEN])
def test_digital_with_moving_devices_from_chunks_is_send_bit_for_bit(rng, rate_adaptation, sizes):
    """K = 10 devices at 120 km/h (the slot's channel per coherence block: the rate held or
    adapted per block), with their aging columns: streamed as sent, bit for bit."""
    link = _moving_link(rng, 3000)
    air = SimpleNamespace(num_subcarriers=32, tx_power_w=0.1, noise_power_w=1e-11, symbol_duration_s=1e-4)
    scheme = DigitalOfdma(bits_per_value=8, rate_margin_db=1.0, rate_adaptation=rate_adaptation)
    sent = _sent(scheme, link, air)
    assert "aging_outage_devices_delta" in sent.columns.scalars
    assert "aging_correlation_delta" in sent.columns.per_device
    _assert_same(_streamed(scheme, link, air, sizes), sent)


def test_digital_send_keeps_its_signal_and_refuses_no_sender(rng):
    gain = np.full(4, 1.0)
    link, air = _link(rng, 4, 8, 20, gain=gain), _air(8, 0.1, 1e-2)
    result = DigitalOfdma().send(link, air, phase="delta", seed=SEED, keep_signals=True, per_device=False)
    np.testing.assert_array_equal(result.columns.signals["estimate_delta"], result.estimate.numpy())
    empty = replace(link, updates=None, weights=tf.zeros([0]), h=tf.zeros([0, 8]),
                    h_hat=tf.zeros([0, 8]))
    with pytest.raises(ValueError, match="needs 1 to F"):
        DigitalOfdma().open_stream(empty, air, phase="delta", seed=SEED, per_device=False).finish()
