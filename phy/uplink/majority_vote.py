"""What the sign-carrying schemes share: the senders' weighted majority sign per entry and
how often the BS's vote misses it (``uplink.scheme = "one_bit"``,
:mod:`phy.uplink.one_bit`; ``"noncoherent_mv"``, :mod:`phy.uplink.noncoherent_mv`).

The true weighted majority of entry i is ``sign(m_i)``, ``m_i = sum_k pi_k sgn(u_ki)``
over the senders (``pi_k`` the BS's weights; a zero update entry votes 0). Entry i is a
*tie* when ``|m_i| <= TIE_TOLERANCE * sum_k pi_k |sgn(u_ki)|`` (float64): no vote is
right or wrong there, so a tie counts in ``vote_tie_rate_<phase>`` and is left out of
``vote_error_rate_<phase>``, the share of the other entries where the BS's vote in
{-1, 0, +1} differs from ``sign(m_i)`` (a vote of 0 on a strict majority is an error).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from native.columns import Columns
from phy.uplink.scheme import SchemeResult, energy_j

TIE_TOLERANCE = 1e-9
"""A tie: ``|m_i|`` at most this share of the entry's voting weight (float64 rounding of
equal weights that cancel)."""


def signs_of(updates) -> tf.Tensor:
    """``sgn(u)`` [K, n] tf.float32 in {-1, 0, +1} of ``updates`` [K, n] (NaN votes 0)."""
    u = tf.convert_to_tensor(updates, tf.float32)
    s = tf.sign(u)
    return tf.where(tf.math.is_nan(s), tf.constant(0.0, tf.float32), s)


MAJORITY_BLOCK_ENTRIES = 8192
""":func:`majority_sums` takes the entries this many at a time: its float64 copies of the
signs are [K, 8192] (two of 62.5 MiB at K = 1,000), not [K, n]."""


def majority_sums(signs, weights) -> tuple[np.ndarray, np.ndarray]:
    """``(margin, scale)`` [n] float64: ``m_i = sum_k pi_k s_ki`` and the entry's voting
    weight ``sum_k pi_k |s_ki|`` of ``signs`` [K, n] in {-1, 0, +1} with ``weights`` [K]
    (the BS's pi_k), :data:`MAJORITY_BLOCK_ENTRIES` entries at a time. Sums over disjoint
    groups of senders add up to the whole's (up to the float64 rounding of the sum's
    order)."""
    signs = tf.convert_to_tensor(signs)
    w = tf.constant(np.asarray(weights, np.float64))
    n = int(signs.shape[1])
    margin, scale = np.empty(n), np.empty(n)
    for lo in range(0, n, MAJORITY_BLOCK_ENTRIES):
        s = tf.cast(signs[:, lo: lo + MAJORITY_BLOCK_ENTRIES], tf.float64)
        margin[lo: lo + MAJORITY_BLOCK_ENTRIES] = tf.linalg.matvec(s, w, transpose_a=True).numpy()
        scale[lo: lo + MAJORITY_BLOCK_ENTRIES] = tf.linalg.matvec(tf.abs(s), w, transpose_a=True).numpy()
    return margin, scale


def majority_of(sums) -> tuple[np.ndarray, np.ndarray]:
    """``majority`` [n] float64 in {-1, 0, +1} (0 on a tie) and ``tie`` [n] bool from
    :func:`majority_sums`' ``(margin, scale)``."""
    margin, scale = sums
    tie = np.abs(margin) <= TIE_TOLERANCE * scale
    return np.where(tie, 0.0, np.sign(margin)), tie


def true_majority(signs, weights) -> tuple[np.ndarray, np.ndarray]:
    """The senders' weighted majority per entry.

    Input: ``signs`` [K, n] in {-1, 0, +1}, ``weights`` [K] (the BS's pi_k).
    Output: ``majority`` [n] float64 in {-1, 0, +1} (0 on a tie) and ``tie`` [n] bool.
    """
    return majority_of(majority_sums(signs, weights))


def vote_columns(vote, sums, phase: str) -> dict[str, float]:
    """``vote_error_rate_<phase>`` (the share of the entries with a strict majority whose
    ``vote`` [n] differs from it; NaN when every entry is a tie) and
    ``vote_tie_rate_<phase>`` (the share of tied entries) for the senders'
    :func:`majority_sums` ``sums``."""
    majority, tie = majority_of(sums)
    v = np.asarray(vote, np.float64)
    strict = int(np.count_nonzero(~tie))
    errors = int(np.count_nonzero((v != majority) & ~tie))
    return {f"vote_error_rate_{phase}": errors / strict if strict else math.nan,
            f"vote_tie_rate_{phase}": float(np.count_nonzero(tie)) / max(tie.size, 1)}


def complex_noise(seed, shape, noise_power_w: float) -> tf.Tensor:
    """CN(0, ``noise_power_w``) per element, ``shape`` tf.complex64, from the stateless
    ``seed`` [2] int32 (real and imaginary parts each of variance sigma_z^2 / 2)."""
    z = tf.random.stateless_normal([*shape, 2], seed, dtype=tf.float32) * math.sqrt(noise_power_w / 2.0)
    return tf.complex(z[..., 0], z[..., 1])


def superpose(c_re, c_im, precoder, h, uplink=None) -> tf.Tensor:
    """The BS's noiseless grid ``y`` [N, F] tf.complex64 of the devices' symbols
    ``x_k[n, f] = (c_re + j c_im)[k, n, f] precoder[k, f]``: ``sum_k h_kf x_k[n, f]`` (eq.
    ``ReceivedSignal`` per subcarrier, in real arithmetic: no ``[K, N, F]`` complex
    tensor), or through the time-domain ``uplink`` (:class:`phy.ofdm_time.TimeDomainUplink`)
    when given.

    Input: ``c_re``, ``c_im`` [K, N, F] tf.float32 (``c_im`` None: real symbols),
    ``precoder`` [K, F] complex, ``h`` [K, F] complex, or [K, N, F] (a channel per OFDM
    symbol: ``sum_k h_knf x_k[n, f]``; the frequency domain only). A [K, N, F] ``h`` equal
    to a [K, F] one on every symbol gives the same ``y`` bit for bit (the same complex64
    products, summed over the same [K, N, F] terms).
    """
    precoder = tf.cast(precoder, tf.complex64)
    h = tf.cast(h, tf.complex64)
    if uplink is not None:
        if h.shape.rank == 3:
            raise NotImplementedError("the time-domain uplink takes one channel per phase, not h [K, N, F] "
                                      "per OFDM symbol")
        c = tf.complex(c_re, c_im if c_im is not None else tf.zeros_like(c_re))
        return tf.constant(uplink(np.asarray(c * precoder[:, None, :])))
    # what one unit symbol of device k brings on (n, f): [K, 1, F], or [K, N, F] per symbol
    a = precoder[:, None, :] * h if h.shape.rank == 3 else (precoder * h)[:, None, :]
    a_re, a_im = tf.math.real(a), tf.math.imag(a)
    del a  # per symbol: only the [K, N, F] real and imaginary parts stay

    def total(values):  # sum over the devices (5x faster than tf.einsum's "knf,kf->nf" here)
        return tf.reduce_sum(values, axis=0)

    if c_im is None:
        return tf.complex(total(c_re * a_re), total(c_re * a_im))
    return tf.complex(total(c_re * a_re - c_im * a_im), total(c_re * a_im + c_im * a_re))


def vote_result(vote, sums, *, phase: str, power_w, num_symbols: int, y, air,
                per_device: bool, keep_signals: bool, scalars: dict[str, float] | None = None):
    """A sign-carrying phase's :class:`phy.uplink.scheme.SchemeResult`: the ``vote`` [n]
    as the estimate, :func:`vote_columns` of the senders' :func:`majority_sums` ``sums``
    and the scheme's own ``scalars``, per sender
    ``tx_power_w_<phase>`` (``power_w`` [K], the mean per-symbol power, with
    ``per_device``), the signals ``y_<phase>`` and ``estimate_<phase>`` (when kept),
    and the senders' energies over ``num_symbols`` symbols."""
    columns = Columns(scalars={**vote_columns(vote, sums, phase), **(scalars or {})})
    if per_device:
        columns.per_device[f"tx_power_w_{phase}"] = power_w
    if keep_signals:
        columns.signals[f"y_{phase}"] = y.numpy()
        columns.signals[f"estimate_{phase}"] = vote.numpy()
    return SchemeResult(vote, num_symbols, energy_j(power_w, num_symbols, air.symbol_duration_s), columns)
