"""The KKT power control (eq. ``Opt_v``) of the budget-bound rows, in Numba.

:func:`phy.aircomp.aggregate`'s fast path sends every (device k, OFDM symbol n) row
whose budget does not bind as ``v = |Delta|`` and needs the optimal amplitudes only
for the other rows (at the paper's size with P = 20 dBm: some 6,000 rows per phase,
from about 85 of the 100 devices). For each such row it then needs only what the row
changes in the estimate and its diagnostics, not v itself. Here that is two parallel
passes that read the updates ``[K, d]`` and the per-device ``[K, F]`` arrays (G also
per (device, symbol), ``[K N, F]``, when the channel changes from symbol to symbol) where they
lie (no ``[R, F]`` gathers of u, G or the updates):

1. **Multiplier**, rows of one device in turn (one device per work item): lambda >= 0
   with ``S(lambda) = sum_f u_f a_f^2 / (1 + lambda u_f)^2 = P`` (eq. ``Opt_v``),
   ``a = |Delta|``, by safeguarded Newton in float64 on ``phi = S^-1/2 - P^-1/2``
   (concave and increasing, as :func:`phy.power.optimal_amplitudes` argues: from any
   point one step lands at or left of the root, after which the iterates climb
   monotonically and quadratically), kept inside the bracket ``[lo, hi]`` with
   ``hi = (sum_f a_f^2/u_f / P)^1/2`` and bisection as the fallback. A row starts from
   the multiplier of the device's previous row (a warm start: the rows of one device
   share u and differ only in a). It stops at a relative Newton correction of 1e-13.
2. **Corrections**, one OFDM symbol per work item (so no two items add into the same
   place): ``v = a / (1 + lambda u)``, and per row its deviation from the linear part
   ``sgn(Delta) v - Delta`` weighted by the estimate gain G (for the estimate) and by
   pi (for the aggregated distortion), summed over the symbol's rows; the row's
   transmit power ``sum_f u v^2``, distortion ``sum_f (v - a)^2`` and number of
   attenuated values (``v < a (1 - 1e-6)`` in float32, as the full chain decides).

Subcarriers with ``u = inf`` (no channel estimate) send ``v = 0``. The result equals
:func:`phy.power.optimal_amplitudes` up to float rounding (both solve lambda to
float64 resolution; a test holds the fast path to the full chain).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from native.launch import LAUNCH, read_only

_MAX_ITERATIONS = 100
_TOLERANCE = 1e-13
_ATTENUATION_TOLERANCE = 1e-6


_REASSOCIATE = {"reassoc", "contract", "arcp", "nsz"}
"""fastmath flags of the Newton sums: reordered (vectorised) float64 sums, no
assumption that values are finite (u is +inf on a dead subcarrier)."""


@njit(nogil=True, cache=True, fastmath=_REASSOCIATE, error_model="numpy")
def _power_sums(u_live, a2, lam):
    """``S(lambda) = sum_f u a^2 r^2`` and ``dS/dlambda = -2 sum_f u^2 a^2 r^3``,
    ``r = 1 / (1 + lambda u)`` (one vectorised pass)."""
    s = 0.0
    ds = 0.0
    for f in range(u_live.size):
        uf = u_live[f]
        r = 1.0 / (1.0 + lam * uf)
        term = uf * a2[f] * r * r
        s += term
        ds += term * uf * r
    return s, -2.0 * ds


@njit(nogil=True, cache=True, fastmath=_REASSOCIATE, error_model="numpy")
def _row_multiplier(row, u_live, budget, start, a2):
    """lambda of one row: ``row`` [width] float32 updates, ``u_live`` [F] float64 (0
    where dead), ``budget`` P, ``start`` a first guess (>= 0), ``a2`` [F] float64
    scratch. Returns 0 when the row fits."""
    width = row.size
    s0 = 0.0
    bound = 0.0
    for f in range(width):
        value = np.float64(row[f])
        a2[f] = value * value
        s0 += u_live[f] * a2[f]
        bound += a2[f] / u_live[f] if u_live[f] > 0.0 else 0.0
    for f in range(width, a2.size):
        a2[f] = 0.0
    if not s0 > budget:
        return 0.0
    lo, hi = 0.0, math.sqrt(bound / budget)
    lam = min(max(start, 0.0), hi)
    for _ in range(_MAX_ITERATIONS):
        s, ds = _power_sums(u_live[:width], a2[:width], lam)
        if s > budget:
            lo = lam
        else:
            hi = lam
        if ds < 0.0:
            step = 2.0 * s * (1.0 - math.sqrt(s / budget)) / ds
            newton = lam + step
            if lo <= newton <= hi:
                if abs(step) <= _TOLERANCE * newton:
                    return newton
                lam = newton
                continue
        if hi - lo <= _TOLERANCE * hi:
            return hi
        lam = 0.5 * (lo + hi)
    return lam


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _multipliers(updates, devices, symbols, starts, u_live, budget, lam):
    num_subcarriers = u_live.shape[1]
    num_values = updates.shape[1]
    for item in prange(starts.size - 1):
        a2 = np.empty(num_subcarriers, np.float64)
        previous = 0.0
        for r in range(starts[item], starts[item + 1]):
            lo = symbols[r] * num_subcarriers
            row = updates[devices[r], lo : min(lo + num_subcarriers, num_values)]
            previous = _row_multiplier(row, u_live[devices[r]], budget, previous, a2)
            lam[r] = previous


@njit(nogil=True, cache=True, fastmath=_REASSOCIATE, error_model="numpy")
def _row_correction(row, u_live, live, est_gain, weight, lam, g_out, w_out):
    """Adds one row's ``G (sgn(Delta) v - Delta)`` and ``pi (sgn(Delta) v - Delta)``
    into ``g_out``, ``w_out`` (0 on dead subcarriers: they send nothing, and the
    linear part left them out too); returns its power, distortion and attenuated count."""
    power, distortion, count = 0.0, 0.0, 0
    threshold = np.float32(1.0 - _ATTENUATION_TOLERANCE)
    for f in range(row.size):
        delta = row[f]
        a32 = abs(delta)
        a = np.float64(a32)
        v = np.float32(a / (1.0 + lam * u_live[f])) * live[f]
        corr = (np.copysign(v, delta) - delta) * live[f]
        power += u_live[f] * np.float64(v) * np.float64(v)
        distortion += (np.float64(v) - a) ** 2
        count += v < a32 * threshold
        g_out[f] += est_gain[f] * corr
        w_out[f] += weight * corr
    return power, distortion, count


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _corrections(updates, devices, order, starts, u_live, live, est_gain, gain_rows, weights, lam,
                 g_corr, w_corr, power, distortion, attenuated):
    num_subcarriers = u_live.shape[1]
    num_values = updates.shape[1]
    for n in prange(starts.size - 1):
        g_corr[n] = np.float32(0.0)
        w_corr[n] = np.float32(0.0)
        lo = n * num_subcarriers
        width = min(num_subcarriers, num_values - lo)
        for i in range(starts[n], starts[n + 1]):
            r = order[i]
            k = devices[r]
            power[r], distortion[r], attenuated[r] = _row_correction(
                updates[k, lo : lo + width], u_live[k, :width], live[k, :width],
                est_gain[gain_rows[r], :width], weights[k], lam[r], g_corr[n, :width], w_corr[n, :width])


def optimal_rows(updates, devices, symbols, u, est_gain, weights, budget_w, gain_rows=None, *,
                 with_multipliers=False):
    """Eq. ``Opt_v`` on rows of the ``[K, N, F]`` grid of the updates, reduced to what
    the AirComp fast path needs.

    Input: ``updates`` [K, d] float32 (the grid's rows read in place, zeros past d);
    ``devices``, ``symbols`` [R] int (row r = (device, OFDM symbol)), in any order;
    ``u`` [K, F] float64 (eq. ``PowerAlloc_1``, +inf on a dead subcarrier);
    ``est_gain`` [K, F] float32 (G, 0 where dead); ``weights`` [K] float32 (pi);
    ``budget_w`` P; ``gain_rows`` [R] int, the row of ``est_gain`` each row's G is
    (default ``devices``; with a G per (device, symbol), ``est_gain`` [K N, F] and
    ``gain_rows = devices N + symbols``).
    Output: ``g_corr``, ``w_corr`` [N, F] float32, ``sum_r G (sgn(Delta) v - Delta)``
    and ``sum_r pi (sgn(Delta) v - Delta)`` over the rows of each symbol; per row
    ``power`` (``sum_f u v^2``, W), ``distortion`` (``sum_f (v - |Delta|)^2``) and
    ``attenuated`` (values with ``v < |Delta| (1 - 1e-6)``), [R] float32 each.
    With ``with_multipliers`` a sixth output: the rows' multipliers lambda [R] float64
    (for :func:`optimal_row_amplitudes` on the same rows).
    """
    updates, devices, symbols, u, u_live, live = _rows_in(updates, devices, symbols, u)
    est_gain = read_only(est_gain)
    gain_rows = devices if gain_rows is None else np.asarray(gain_rows, np.int64)
    weights = np.asarray(weights, np.float32)
    num_subcarriers = u.shape[1]
    num_symbols = -(-updates.shape[1] // num_subcarriers)
    # pass 1 runs the rows device by device (warm starts), pass 2 symbol by symbol
    with LAUNCH:
        lam = _solved_multipliers(updates, devices, symbols, u_live, budget_w)
    by_symbol = np.argsort(symbols, kind="stable")
    symbol_starts = np.searchsorted(symbols[by_symbol], np.arange(num_symbols + 1))
    g_corr = np.empty((num_symbols, num_subcarriers), np.float32)
    w_corr = np.empty((num_symbols, num_subcarriers), np.float32)
    power = np.empty(devices.size, np.float64)
    distortion = np.empty(devices.size, np.float64)
    attenuated = np.empty(devices.size, np.int64)
    with LAUNCH:
        _corrections(updates, devices, by_symbol, symbol_starts, u_live, live, est_gain, gain_rows,
                     weights, lam, g_corr, w_corr, power, distortion, attenuated)
    out = (g_corr, w_corr, power.astype(np.float32), distortion.astype(np.float32),
           attenuated.astype(np.float32))
    return (*out, lam) if with_multipliers else out


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _amplitudes(updates, devices, symbols, u_live, live, lam, out):
    num_subcarriers = u_live.shape[1]
    num_values = updates.shape[1]
    for r in prange(devices.size):
        k = devices[r]
        lo = symbols[r] * num_subcarriers
        for f in range(num_subcarriers):
            delta = updates[k, lo + f] if lo + f < num_values else np.float32(0.0)
            v = np.float32(np.float64(abs(delta)) / (1.0 + lam[r] * u_live[k, f])) * live[k, f]
            out[r, f] = np.copysign(v, delta)


def optimal_row_amplitudes(updates, devices, symbols, u, budget_w, multipliers=None):
    """The signed amplitudes ``sgn(Delta) v`` of eq. ``Opt_v`` on the given rows.

    Input as :func:`optimal_rows` (``updates`` [K, d] f32, ``devices``, ``symbols`` [R],
    ``u`` [K, F] f64 with +inf where dead, the budget P), and optionally the rows'
    multipliers [R] f64 that :func:`optimal_rows` found for them (``with_multipliers``),
    which are then not solved again. Output: [R, F] float32, the row's values past d and
    its dead subcarriers 0: the same float32 amplitude as :func:`optimal_rows` uses for
    the row's corrections.
    """
    updates, devices, symbols, u, u_live, live = _rows_in(updates, devices, symbols, u)
    out = np.empty((devices.size, u.shape[1]), np.float32)
    with LAUNCH:
        if multipliers is None or np.shape(multipliers) != devices.shape:
            multipliers = _solved_multipliers(updates, devices, symbols, u_live, budget_w)
        _amplitudes(updates, devices, symbols, u_live, live,
                    read_only(multipliers, np.float64), out)
    return out


def _rows_in(updates, devices, symbols, u) -> tuple:
    """The kernels' inputs: ``updates`` f32, ``devices``, ``symbols`` int64, ``u`` f64, and
    ``u_live`` (u, 0 where dead) and ``live`` (1.0 where u is finite, f32)."""
    u = np.asarray(u, np.float64)
    dead = np.isinf(u)
    return (read_only(updates), np.asarray(devices, np.int64),
            np.asarray(symbols, np.int64), u, np.where(dead, 0.0, u),
            (~dead).astype(np.float32))


def _solved_multipliers(updates, devices, symbols, u_live, budget_w) -> np.ndarray:
    """lambda [R] f64 of every row, solved device by device (warm starts); the caller
    holds the launch lock."""
    by_device = np.argsort(devices, kind="stable")
    device_starts = np.searchsorted(devices[by_device], np.arange(u_live.shape[0] + 1))
    lam_sorted = np.empty(devices.size, np.float64)
    _multipliers(updates, devices[by_device], symbols[by_device], device_starts, u_live,
                 float(budget_w), lam_sorted)
    lam = np.empty_like(lam_sorted)
    lam[by_device] = lam_sorted
    return lam
