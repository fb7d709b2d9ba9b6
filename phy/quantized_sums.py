"""Digital OFDMA's quantized rows added to the phase's sum, a block of senders at a time.

:class:`phy.uplink.digital_ofdma.DigitalStream` quantizes every sender's update with
:func:`phy.uplink.digital_ofdma.quantize_row` (stochastic, unbiased, ``b`` bits on the
grid ``-s + j 2 s / (2^b - 1)``, ``s = max |x|``) and adds ``pi_k q_k`` to a float64 sum.
:func:`add_quantized` does that for a block of rows in one Numba launch, given the rows'
uniform draws ``u`` (drawn by the caller from the phase's generator in device order:
``rng.random((rows, n))`` is the same stream as ``rows`` calls of ``rng.random(n)``), with
the same float64 operations in the same order per entry (``(x + s) / step``, clipped,
floored, rounded up where ``u`` is below the fraction, ``* step - s``; each column's sum
taken over the rows in order), so the sum is the row-by-row one bit for bit, including a
row of zeros (adds 0) and a non-finite row (sent as it is, so the sum propagates it).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from native.launch import LAUNCH, read_only


@njit(nogil=True, cache=True, parallel=True)
def _add_quantized(x, u, levels, weights, total):
    """``total[i] += sum_r weights[r] q_ri`` over the rows with a nonzero weight, in row order."""
    num_rows, num_values = x.shape
    scales, steps = np.empty(num_rows), np.empty(num_rows)
    for r in prange(num_rows):
        scale, undefined = 0.0, False
        for i in range(num_values):
            magnitude = abs(np.float64(x[r, i]))
            if magnitude != magnitude:
                undefined = True
            elif magnitude > scale:
                scale = magnitude
        scales[r] = np.nan if undefined else scale
        steps[r] = 2.0 * scales[r] / levels
    for i in prange(num_values):
        accumulated = total[i]
        for r in range(num_rows):
            weight = weights[r]
            if weight == 0.0:
                continue
            value, scale = np.float64(x[r, i]), scales[r]
            if scale == 0.0:
                quantized = 0.0
            elif not np.isfinite(scale):
                quantized = value
            else:
                step = steps[r]
                position = (value + scale) / step
                if position > levels:
                    position = levels
                low = np.floor(position)
                if u[r, i] < position - low:
                    low += 1.0
                quantized = low * step - scale
            accumulated += weight * quantized
        total[i] = accumulated


def add_quantized(rows, draws: np.ndarray, bits_per_value: int, weights: np.ndarray, total: np.ndarray) -> None:
    """Add ``sum_r weights[r] quantize_row(rows[r], b, draws[r])`` to ``total`` in place.

    Input: ``rows`` [R, n] float32 or float64 (read only), ``draws`` [R, n] float64 uniform
    on [0, 1), ``bits_per_value`` b, ``weights`` [R] float64, ``total`` [n] float64.
    """
    x = np.asarray(rows)
    x = read_only(x, np.float64 if x.dtype == np.float64 else np.float32)
    with LAUNCH:
        _add_quantized(x, read_only(draws, np.float64), 2.0 ** int(bits_per_value) - 1.0,
                       read_only(weights, np.float64), total)
