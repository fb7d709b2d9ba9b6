"""The AirComp fast path's estimate gain when the channel changes from OFDM symbol to symbol.

With moving devices (:mod:`phy.uplink.moving_link`) the analog phase's true channel is
``h`` [K, N, F], one per OFDM symbol, while the devices precode every symbol with their
estimate ``h_hat`` [K, F] from the phase's start. Their transmission depends on ``h_hat``
only; the channel enters the BS's estimate through the estimate gain

``G_knf = pi_k Re(h_knf conj(sgn h_hat_kf)) / |h_hat_kf|``

(0 where the device is dead, exactly ``pi_k`` when ``h`` equals ``h_hat`` on every symbol
and every subcarrier is live), which :func:`phy.aircomp.chain` forms for a constant
channel as four TensorFlow operations on [K, F]. On [K, N, F] (95 MB of channel at the
quickstart's K = 100, N = 116, F = 1024) those passes, and the test of ``h == h_hat``,
made the phase's chain take 0.24 s against 0.085 s with this (2026-12-02, under load):
here they are one parallel Numba pass with the same float32
operations in the same order (``Re(h c)`` as ``h_re c_re - h_im c_im``, each product
rounded, as TensorFlow's complex product; then the weight, then the division), so equal
channels on every symbol give the [K, F] chain's bits (``tests/phy/test_aircomp_per_symbol.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from native.host_arrays import BufferPool
from native.launch import LAUNCH, aligned_empty, read_only

_BUFFERS = BufferPool(max_buffers=2)
"""The whole phase's gains G and G m, handed out again once the chain has let them go
(the process's, as the compiled chain that asks for them): 95 MB per phase at the
quickstart, whose fresh pages cost more than the pass on a busy machine."""


@njit(nogil=True, cache=True)
def _equal(h, h_hat):
    """Whether every symbol of ``h`` [K, N, F] equals ``h_hat`` [K, F] (stops at the first
    difference: with moving devices, at once)."""
    num_devices, num_symbols, num_subcarriers = h.shape
    for k in range(num_devices):
        for n in range(num_symbols):
            for f in range(num_subcarriers):
                if h[k, n, f] != h_hat[k, f]:
                    return False
    return True


@njit(parallel=True, nogil=True, cache=True)
def _gains(h, phase, magnitude, weights, dead, mask, exact, gain, coeff):
    num_devices, num_symbols, num_subcarriers = h.shape
    for k in prange(num_devices):
        w = weights[k]
        for n in range(num_symbols):
            for f in range(num_subcarriers):
                if exact:
                    g = w
                elif dead[k, f]:
                    g = np.float32(0.0)
                else:
                    c, p = h[k, n, f], phase[k, f]
                    real = c.real * p.real - c.imag * p.imag
                    g = w * real / magnitude[k, f] if magnitude[k, f] != 0.0 else np.float32(0.0)
                gain[k, n, f] = g
                coeff[k, n, f] = g * mask[k, f]


def symbol_gains(h, h_hat, phase, magnitude, weights, dead, mask, exact: bool | None = None,
                 reuse: bool = False):
    """``(G, G m)``: the estimate gain per (device, OFDM symbol, subcarrier) and its product
    with the regular rows' amplitude mask, [K, N, F] float32 each.

    Input: ``h`` [K, N, F] complex64, ``h_hat`` [K, F] complex64, the precoder's phase
    ``conj(sgn h_hat)`` [K, F] complex64 and ``|h_hat|`` [K, F] float32 (as the chain
    computes them), the weights pi [K] float32, ``dead`` [K, F] bool, the mask m [K, F]
    float32 (module docstring). ``exact``: whether G is pi exactly (None: these devices'
    own test, every symbol equal to ``h_hat`` and every subcarrier live; a streamed phase
    gives the test over all its devices, :func:`channel_is_estimate`). ``reuse``: write
    them to the memory of an earlier call's once nothing refers to it (:data:`_BUFFERS`;
    the whole phase's gains, once per phase), else to new arrays.
    """
    h = read_only(h, np.complex64)
    h_hat = read_only(h_hat, np.complex64)
    mask = read_only(mask)
    if exact is None:
        exact = channel_is_estimate(h, h_hat, mask)
    # aligned: tf.numpy_function takes them as tensors without a copy
    if reuse:
        gain, coeff = _BUFFERS.take(h.shape), _BUFFERS.take(h.shape)
    else:
        gain, coeff = aligned_empty(h.shape, np.float32), aligned_empty(h.shape, np.float32)
    with LAUNCH:
        _gains(h, read_only(phase, np.complex64), read_only(magnitude), read_only(weights),
               read_only(dead, np.bool_), mask, exact, gain, coeff)
    return gain, coeff


def channel_is_estimate(h, h_hat, mask) -> bool:
    """Whether every symbol of ``h`` [K, N, F] equals ``h_hat`` [K, F] and every entry of
    ``mask`` [K, F] is positive: the estimate gain is then pi exactly."""
    return bool(_equal(read_only(h, np.complex64), read_only(h_hat, np.complex64))) and bool(
        np.all(np.asarray(mask) > 0.0))
