"""The streamed AirComp chain (phy/aircomp_stream.py) against the one-call chain
(phy/aircomp.py): the same phase with the devices added in chunks."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from phy.aircomp import aggregate
from phy.aircomp_stream import AggregateStream
from phy.power import FullInversion, IdealAggregation, OptimalPower, TruncatedInversion

NOISE_W = 10 ** (-7.4) / 1e3  # -74 dBm
SEED = tf.constant([7, 11], tf.int32)
CONTROLS = {"optimal": OptimalPower(), "tci": TruncatedInversion(0.3), "full": FullInversion(),
            "ideal": IdealAggregation()}


def _setup(k=40, d=700, f=64, seed=3, csi_error=0.0):
    """K devices at 30-300 m (i.i.d. Rayleigh, r^-4), Gaussian updates of mixed sizes."""
    rng = np.random.default_rng(seed)
    std = np.sqrt(rng.uniform(30.0, 300.0, k) ** -4.0 / 2.0)
    h = (rng.standard_normal((k, f)) + 1j * rng.standard_normal((k, f))) * std[:, None]
    h_hat = h + csi_error * (rng.standard_normal((k, f)) + 1j * rng.standard_normal((k, f))) * std[:, None]
    updates = rng.standard_normal((k, d)) * rng.uniform(1e-4, 1e-2, k)[:, None]
    weights = rng.dirichlet(np.ones(k))
    return (tf.constant(updates, tf.float32), tf.constant(weights, tf.float32),
            tf.constant(h, tf.complex64), tf.constant(h_hat, tf.complex64))


def _both(control, chunks, tx_power_w, **setup):
    updates, weights, h, h_hat = _setup(**setup)
    args = {"power_control": CONTROLS[control], "tx_power_w": tx_power_w, "noise_power_w": NOISE_W,
            "gamma_w": NOISE_W, "seed": SEED}
    whole = aggregate(updates, weights, h, h_hat, **args)
    stream = AggregateStream(int(updates.shape[1]), weights, h, h_hat, **args)
    edges = [0, *np.cumsum(chunks)]
    for lo, hi in itertools.pairwise(edges):
        stream.add(int(lo), int(hi), updates[lo:hi])
    return whole, stream.finish(), stream


def _assert_same_result(streamed, whole):
    """The estimate to float32 rounding of the sum, the per-device columns and the
    aggregated distortion to float32 rounding of their own values."""
    scale = float(tf.reduce_max(tf.abs(whole.estimate)))
    np.testing.assert_allclose(streamed.estimate.numpy(), whole.estimate.numpy(), rtol=0, atol=2e-5 * scale)
    for field in ("local_distortion", "tx_power_mean_w", "tx_power_max_w", "attenuated_fraction"):
        np.testing.assert_allclose(getattr(streamed, field).numpy(), getattr(whole, field).numpy(),
                                   rtol=1e-4, atol=1e-12, err_msg=field)
    assert float(streamed.aggregated_distortion) == pytest.approx(float(whole.aggregated_distortion),
                                                                  rel=1e-4, abs=1e-12)


@pytest.mark.parametrize("control", sorted(CONTROLS))
@pytest.mark.parametrize("tx_power_w", [0.1, 3e-4])
def test_the_streamed_chain_is_the_one_call_chain(control, tx_power_w):
    """Chunks of 7, 1, 13 and 19 devices give the one-call chain's result: per-device
    columns, delta_bar and the noise power to float32 rounding of their own values, the
    estimate to float32 rounding of the sum (a small budget makes rows bind)."""
    whole, streamed, _ = _both(control, [7, 1, 13, 19], tx_power_w, csi_error=0.05)
    assert float(streamed.delta_bar) == pytest.approx(float(whole.delta_bar), rel=1e-6)
    _assert_same_result(streamed, whole)
    assert float(streamed.noise_power) == pytest.approx(float(whole.noise_power), rel=1e-6)
    assert streamed.num_symbols == whole.num_symbols


def test_the_budget_binds_and_only_candidate_rows_are_kept():
    """With a small budget rows bind (the case the kept rows exist for), and the stream
    kept fewer rows than the phase has: rows far from the budget are never held."""
    whole, streamed, stream = _both("optimal", [10, 10, 10, 10], 3e-4)
    budget_bound = float(tf.reduce_sum(tf.cast(whole.attenuated_fraction > 0.0, tf.int32)))
    assert budget_bound > 0
    kept = sum(len(rows) for rows in stream.kept_rows)
    assert 0 < kept < 40 * streamed.num_symbols
    np.testing.assert_allclose(streamed.attenuated_fraction.numpy(), whole.attenuated_fraction.numpy(), rtol=1e-4)


def test_one_chunk_holds_the_chain_bits_of_every_device():
    """One chunk of every device: per-device columns and delta_bar bit for bit."""
    whole, streamed, _ = _both("optimal", [40], 0.1)
    assert float(streamed.delta_bar) == float(whole.delta_bar)
    np.testing.assert_array_equal(streamed.tx_power_mean_w.numpy(), whole.tx_power_mean_w.numpy())


def test_rows_out_of_order_are_refused():
    updates, weights, h, h_hat = _setup(k=4)
    stream = AggregateStream(int(updates.shape[1]), weights, h, h_hat, power_control=OptimalPower(),
                             tx_power_w=0.1, noise_power_w=NOISE_W, gamma_w=NOISE_W, seed=SEED)
    with pytest.raises(ValueError, match="out of order"):
        stream.add(1, 3, updates[1:3])
    stream.add(0, 2, updates[:2])
    with pytest.raises(ValueError, match="after row 2 of 4"):
        stream.finish()


class _Rows:
    """A channel per symbol read a slice of devices at a time (as a SymbolChannel)."""

    def __init__(self, h):
        self.h, self.shape, self.reads = np.asarray(h), tuple(h.shape), []

    def __getitem__(self, rows):
        self.reads.append((rows.start, rows.stop))
        return self.h[rows]


def _per_symbol(h, h_hat, change, seed=5):
    """``h`` [K, F] varied from OFDM symbol to symbol by ``change`` (0: h_hat itself on
    every symbol): [K, N, F] complex64 for the setup's N = 11."""
    rng = np.random.default_rng(seed)
    k, f = h.shape
    if change == 0.0:
        return tf.constant(np.broadcast_to(h_hat.numpy()[:, None, :], (k, 11, f)).copy())
    wobble = 1.0 + change * (rng.standard_normal((k, 11, f)) + 1j * rng.standard_normal((k, 11, f)))
    return tf.constant((h.numpy()[:, None, :] * wobble).astype(np.complex64))


@pytest.mark.parametrize("control", sorted(CONTROLS))
@pytest.mark.parametrize("tx_power_w", [0.1, 3e-4])
@pytest.mark.parametrize("change", [0.0, 0.2])
def test_a_channel_per_symbol_streams_as_the_one_call_chain(control, tx_power_w, change):
    """h [K, N, F] (moving devices, a channel per OFDM symbol) read a chunk's rows at a
    time: the one-call chain's result to float32 rounding, the budget-bound rows solved
    with their own symbols' gains; an unchanging channel equal to the estimate takes G = pi
    exactly, as the one-call chain."""
    updates, weights, h, h_hat = _setup(csi_error=0.0 if change == 0.0 else 0.05)
    h_symbols = _per_symbol(h, h_hat, change)
    args = {"power_control": CONTROLS[control], "tx_power_w": tx_power_w, "noise_power_w": NOISE_W,
            "gamma_w": NOISE_W, "seed": SEED}
    whole = aggregate(updates, weights, h_symbols, h_hat, **args)
    rows = _Rows(h_symbols.numpy())
    stream = AggregateStream(int(updates.shape[1]), weights, rows, h_hat, **args)
    for lo, hi in itertools.pairwise([0, 7, 8, 21, 40]):
        stream.add(lo, hi, updates[lo:hi])
    streamed = stream.finish()
    assert stream.exact_gain == (change == 0.0 and control in ("optimal", "full"))
    _assert_same_result(streamed, whole)
    if CONTROLS[control].over_the_air:  # the ideal sum reads no channel
        assert rows.reads[-1] == (21, 40) and {(0, 7), (7, 8), (8, 21)} <= set(rows.reads)
    if tx_power_w == 3e-4 and control == "optimal":
        assert sum(len(r) for r in stream.kept_rows) > 0 and len(stream.kept_gains) == len(stream.kept_rows)


@pytest.mark.parametrize("csi_error", [0.0, 0.1])
def test_the_exact_gain_flag_does_not_depend_on_the_prologues_step(monkeypatch, csi_error):
    """The flag over all K is the same in steps of 7 devices as in one (each device's is
    its own); the step bounds what TensorFlow's allocator keeps (``_OPEN_CHUNK``)."""
    import phy.aircomp_stream as stream_module

    _, weights, h, h_hat = _setup(k=40, csi_error=csi_error)
    flags = []
    for step in (7, 512):
        monkeypatch.setattr(stream_module, "_OPEN_CHUNK", step)
        flags.append(AggregateStream(700, weights, h, h_hat, power_control=OptimalPower(), tx_power_w=0.1,
                                     noise_power_w=NOISE_W, gamma_w=NOISE_W, seed=SEED).exact_gain)
    assert flags == [csi_error == 0.0] * 2
