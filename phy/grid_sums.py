"""One pass over the devices' update vectors for the AirComp fast path.

:func:`phy.aircomp.aggregate`'s fast path needs, from the ``[K, d]`` updates seen as
the ``[K, N, F]`` grid of the grouping rule (:class:`phy.grid.GroupingRule`), only

* three weighted energies per (device k, OFDM symbol n), ``sum_f Delta_knf^2 a_kf``
  for ``a`` = the screening scale, 1 and one minus the transmit mask (the power
  screen, ``||Delta||^2`` for eq. ``rho_avg`` and the distortion of the regular rows:
  the energy left off the air, summed directly so that it is exactly zero when every
  subcarrier is on and never negative), and
* the noise-free over-the-air sum of the regular rows, ``sum_k G_kf Delta_knf``
  (``G`` = the per-subcarrier estimate gain times the mask, eq. ``y_rho`` with
  ``v = m |Delta|``),

plus the few budget-bound rows themselves. Formed in TensorFlow this is a padded
``[K, N, F]`` copy of the updates, its square, a batched product and a weighted sum,
some five passes over 187 MB at the paper's size (K = 100, d = 466,698); here it is
one parallel pass (Numba, over blocks of OFDM symbols) that reads the updates where
they are. Float32 throughout, as the TF form (the summation order differs).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from native.launch import LAUNCH, read_only

LANES = 16
"""Partial sums per row energy, one per lane ``f mod LANES``, added up in lane order at
the end: the summation order is written out, so the sums are the same bits whether the
kernel was compiled in this process or loaded from Numba's cache (with ``reassoc`` the
vectoriser's choices differed between the two, by one float32 ulp)."""

_NO_REASSOCIATION = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}


@njit(inline="always", fastmath=_NO_REASSOCIATION)
def _add(lanes, lane, f, row, scale_k, mask_k, coeff_k, out):
    value = row[f]
    square = value * value
    lanes[0, lane] += square * scale_k[f]
    lanes[1, lane] += square
    lanes[2, lane] += square * (np.float32(1.0) - mask_k[f])
    out[f] += value * coeff_k[f]


@njit(parallel=True, nogil=True, cache=True, fastmath=_NO_REASSOCIATION)
def _grid_sums(updates, scale, mask, coeff, num_symbols, sums, linear):
    num_devices, num_values = updates.shape
    width_full = scale.shape[1]
    for n in prange(num_symbols):
        lo = n * width_full
        width = min(width_full, num_values - lo)
        out = linear[n]
        for f in range(width_full):
            out[f] = np.float32(0.0)
        lanes = np.empty((3, LANES), np.float32)
        symbol = min(np.int64(n), coeff.shape[1] - 1)  # coeff [K, 1, F]: one per device
        for k in range(num_devices):
            row = updates[k, lo : lo + width]
            scale_k, mask_k, coeff_k = scale[k, :width], mask[k, :width], coeff[k, symbol, :width]
            lanes[:] = np.float32(0.0)
            body = width - width % LANES
            for start in range(0, body, LANES):
                for lane in range(LANES):
                    _add(lanes, lane, start + lane, row, scale_k, mask_k, coeff_k, out)
            for f in range(body, width):  # the last symbol's tail, lanes 0, 1, ...
                _add(lanes, f - body, f, row, scale_k, mask_k, coeff_k, out)
            for c in range(3):
                total = np.float32(0.0)
                for lane in range(LANES):
                    total += lanes[c, lane]
                sums[k, n, c] = total


def grid_sums(updates, scale, mask, coeff):
    """Row energies and the linear over-the-air sum of the grid, in one pass.

    Input: ``updates`` [K, d] float32 (read in place); ``scale``, ``mask`` [K, F] float32;
    ``coeff`` [K, F] float32, or [K, N, F] (a coefficient per OFDM symbol: the channel
    changes from symbol to symbol). Output: ``sums`` [K, N, 3] float32 with
    ``sum_f Delta^2 scale``, ``sum_f Delta^2`` and ``sum_f Delta^2 (1 - mask)`` per (k, n),
    and ``linear`` [N, F] float32 ``= sum_k coeff_kf Delta_knf`` (``coeff_knf``),
    N = ceil(d / F) (the last symbol's padding counts as zeros). Both forms of ``coeff``
    run one kernel, in the same order: equal coefficients give the same bits.
    """
    updates = read_only(updates)
    scale, mask, coeff = (read_only(a) for a in (scale, mask, coeff))
    num_devices, num_values = updates.shape
    num_subcarriers = scale.shape[1]
    num_symbols = -(-num_values // num_subcarriers)
    if coeff.ndim == 2:
        coeff = coeff[:, None, :]
    elif coeff.shape != (num_devices, num_symbols, num_subcarriers):
        raise ValueError(f"coeff must be [K, F] or [K, N={num_symbols}, F], got {coeff.shape}")
    sums = np.empty((num_devices, num_symbols, 3), np.float32)
    linear = np.empty((num_symbols, num_subcarriers), np.float32)
    with LAUNCH:
        _grid_sums(updates, scale, mask, coeff, num_symbols, sums, linear)
    return sums, linear


@njit(nogil=True, cache=True)
def _gather(updates, devices, symbols, out):
    width_full = out.shape[1]
    num_values = updates.shape[1]
    for r in range(devices.size):
        lo = symbols[r] * width_full
        width = min(width_full, num_values - lo)
        row = out[r]
        for f in range(width):
            row[f] = updates[devices[r], lo + f]
        for f in range(width, width_full):
            row[f] = np.float32(0.0)


def gather_rows(updates, devices, symbols, num_subcarriers):
    """Rows ``(devices[r], symbols[r])`` of the ``[K, N, F]`` grid of ``updates`` [K, d]:
    ``[R, F]`` float32 (zeros past d), without forming the grid."""
    updates = read_only(updates)
    devices = np.ascontiguousarray(devices, np.int64)  # one layout: the kernel compiles once
    out = np.empty((devices.size, int(num_subcarriers)), np.float32)
    _gather(updates, devices, np.ascontiguousarray(symbols, np.int64), out)
    return out
