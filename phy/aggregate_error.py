"""The over-the-air aggregation error of one phase: the estimate against the error-free sum.

The standard diagnostic of over-the-air FL: with ``s = sum_k pi_k Delta_k`` the
error-free weighted sum of the devices' update vectors (what eq. ``delta_n``'s receiver
estimates) and ``s_hat`` the BS's estimate (:attr:`phy.aircomp.AirCompResult.estimate`,
already rescaled by ``sqrt(delta_bar / gamma)``, so it estimates ``s`` itself)::

    error = ||s_hat - s||^2,        nmse = error / ||s||^2

over the phase's n values. It holds every cause at once: receiver noise, the power
control's distortion (the traced ``distortion_<phase>`` is this part alone), CSI
error, timing and frequency offsets.

Cost: one pass over the ``[K, n]`` updates (K n multiply-adds, 47 M at the paper's
size), in a parallel Numba kernel over blocks of values that reads the updates where
they lie (float32) and accumulates ``s``, the error and ``||s||^2`` in float64, so
that an estimate equal to ``s`` up to float32 rounding (the ideal control) gives an
error at float32's rounding level, not the cancellation noise of a float32 sum. The
blocks' partial sums are added in block order: the result does not depend on the
thread count.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from native.launch import LAUNCH, read_only

BLOCK = 4096
"""Values per block (its float64 partial sum, 32 kB, stays in cache while the K rows'
stretches stream past)."""


@njit(parallel=True, nogil=True, cache=True)
def _aggregate_error(updates, weights, estimate, out):
    num_devices, num_values = updates.shape
    num_blocks = out.shape[0]
    for b in prange(num_blocks):
        lo = b * BLOCK
        hi = min(lo + BLOCK, num_values)
        exact = np.zeros(hi - lo, np.float64)
        for k in range(num_devices):
            weight = np.float64(weights[k])
            if weight == 0.0:  # pi_k = 0: the device sends nothing
                continue
            row = updates[k]
            for j in range(lo, hi):
                exact[j - lo] += weight * row[j]
        error = 0.0
        power = 0.0
        for j in range(lo, hi):
            s = exact[j - lo]
            e = np.float64(estimate[j]) - s
            error += e * e
            power += s * s
        out[b, 0] = error
        out[b, 1] = power


def aggregate_error(updates, weights, estimate) -> tuple[float, float]:
    """``(||estimate - sum_k pi_k Delta_k||^2, ||sum_k pi_k Delta_k||^2)`` of one phase.

    Input: ``updates`` [K, n] float32 (the devices' Delta_k, read in place: a TF eager
    tensor's memory is not copied), ``weights`` [K] (pi_k), ``estimate`` [n] (the BS's
    estimate of the weighted sum). Output: two Python floats, accumulated in float64
    (devices with pi_k = 0 left out, as they send nothing).
    """
    updates = read_only(updates)
    weights = read_only(weights, np.float64)
    estimate = read_only(estimate)
    num_devices, num_values = updates.shape
    if weights.shape != (num_devices,) or estimate.shape != (num_values,):
        raise ValueError(f"weights must be [{num_devices}] and estimate [{num_values}], got "
                         f"{weights.shape} and {estimate.shape}")
    out = np.zeros((max(-(-num_values // BLOCK), 1), 2), np.float64)
    with LAUNCH:
        _aggregate_error(updates, weights, estimate, out)
    return float(out[:, 0].sum()), float(out[:, 1].sum())


@njit(parallel=True, nogil=True, cache=True)
def _accumulate(updates, weights, out):
    num_devices, num_values = updates.shape
    num_blocks = -(-num_values // BLOCK)
    for b in prange(num_blocks):
        lo = b * BLOCK
        hi = min(lo + BLOCK, num_values)
        for k in range(num_devices):
            weight = np.float64(weights[k])
            if weight == 0.0:
                continue
            row = updates[k]
            for j in range(lo, hi):
                out[j] += weight * row[j]


class StreamedError:
    """:func:`aggregate_error` with the updates added in chunks: ``add(updates, weights)``
    accumulates ``s = sum_k pi_k Delta_k`` in float64 ([n]: the only memory it holds),
    ``error(estimate)`` returns the same pair. Over the same rows it agrees with
    :func:`aggregate_error` to float64 rounding (the devices' order within a value is the
    same; the chunks only split it)."""

    def __init__(self, num_values: int):
        self.exact = np.zeros(int(num_values), np.float64)

    def add(self, updates, weights) -> None:
        """Rows [C, n] float32 of the senders with their weights pi_k [C]."""
        updates, weights = read_only(updates), read_only(weights, np.float64)
        if updates.shape != (weights.shape[0], self.exact.shape[0]):
            raise ValueError(f"updates must be [{weights.shape[0]}, {self.exact.shape[0]}], got {updates.shape}")
        with LAUNCH:
            _accumulate(updates, weights, self.exact)

    def error(self, estimate) -> tuple[float, float]:
        """``(||estimate - s||^2, ||s||^2)`` in float64."""
        difference = read_only(estimate).astype(np.float64) - self.exact
        return float(np.dot(difference, difference)), float(np.dot(self.exact, self.exact))


def normalised_error(error: float, power: float) -> float:
    """``error / power`` (the NMSE); 0 when both are 0 (all updates zero, zero estimate),
    inf for a nonzero error against an exactly zero sum, NaN when either is NaN."""
    if math.isnan(error) or math.isnan(power):
        return math.nan
    if power > 0.0:
        return error / power
    return 0.0 if error == 0.0 else float("inf")
