"""The time-domain OFDM uplink: modulation with a cyclic prefix, per-device channels and
offsets, superposition, demodulation.

The paper's uplink (Section III-A, eq. ``ReceivedSignal``) is written per subcarrier,
``y[n] = sum_k h_k o x_k[n] + z[n]``, which holds when every device's OFDM symbols
arrive inside the BS's FFT window and on the BS's carrier. This module simulates the
waveform instead. Device k's frequency-domain symbols ``X_k[n]`` (``[N, F]``, subcarrier
f at baseband frequency ``(f - floor(F/2)) Delta_f`` as in Sionna's resource grid) are

1. modulated by Sionna's :class:`~sionna.phy.ofdm.OFDMModulator`: unitary IFFT and a
   cyclic prefix of ``C`` samples, so the device's stream is ``N (F + C)`` samples at
   the sampling rate ``B = F Delta_f``;
2. rotated by its carrier frequency offset (CFO) of ``epsilon_k`` subcarrier spacings,
   ``s_k(t) exp(j 2 pi epsilon_k t / F)`` (t in samples from the start of its stream);
3. filtered by its discrete-time channel ``g_k[l]``, ``l_min <= l <= l_max``: the taps of
   the band-limited channel impulse response ``sum_p a_kp delta(t - tau_kp)`` delayed by
   the device's timing offset ``theta_k`` samples, ``g_k[l] = sum_p a_kp
   sinc(l - tau_kp B - theta_k)`` (Sionna's :func:`~sionna.phy.channel.cir_to_time_channel`,
   :func:`discrete_taps`), so a fractional offset is a band-limited delay;
4. summed over the devices at the BS; noise is added and
   :class:`~sionna.phy.ofdm.OFDMDemodulator` cuts each symbol's window ``-l_min`` samples
   into its cyclic prefix (Sionna's convention, which keeps the sinc precursors inside
   it; ``l_min = max(-6, -C)``), takes the unitary FFT and undoes the window's phase
   ramp. Paths that arrive more than a symbol late (delay plus offset beyond
   ``F + C - 7`` samples) are cut, and the share of the power cut is kept
   (:attr:`TimeDomainUplink.cut_power_fraction`).

With no CFO and every tap in ``[l_min, l_min + C]`` this is exactly
``Y_k[n, f] = G_k(f) X_k[n, f]`` with
``G_k(f) = sum_l g_k[l] exp(-j 2 pi (f - floor(F/2)) l / F)``
(the cyclic prefix turns the linear convolution into a circular one): the paper's model,
with the timing offset a phase ramp over the subcarriers. A tap outside that range
reaches into the neighbouring symbol (inter-symbol and inter-carrier interference); a
CFO rotates each symbol by ``2 pi epsilon (n (F + C) + C + l_min) / F`` and leaks power
to the other subcarriers (inter-carrier interference).

Two implementations of the same map, held to each other by the tests:

* :meth:`TimeDomainUplink.reference`: the Sionna blocks, the waveform of every device
  materialised (``[K, N (F + C)]``), the convolution a direct one of each device's
  stream (Sionna's :class:`~sionna.phy.channel.ApplyTimeChannel` computes the same sum
  with a ``[T + L - 1, L]`` Toeplitz gather per device, which a test compares on a small
  grid; at the paper's size it would need tens of GiB);
* :meth:`TimeDomainUplink.__call__`: the same received grid from one unitary IFFT per
  impaired device and OFDM symbol, the circular part of the channel applied on the
  subcarriers, the samples a tap beyond the cyclic prefix reads from the previous symbol
  added back, the CFO applied to the window samples, and one FFT per OFDM
  symbol of the sum. Devices without CFO or inter-symbol taps are summed on the
  subcarriers first (the transforms are linear). Devices with a CFO and no inter-symbol
  taps are summed through a series instead of one IFFT each: with ``w`` the window
  sample,

  ``exp(j 2 pi eps w / F) = exp(j pi eps) sum_p (2 pi eps)^p / p! (j (w / F - 1/2))^p``,

  so the sum over devices ``sum_i exp(j 2 pi eps_i w / F) IFFT(Z_i)[w]`` is
  ``sum_p (j (w / F - 1/2))^p IFFT(sum_i c_ip Z_i)[w]`` with
  ``c_ip = exp(j pi eps_i) (2 pi eps_i)^p / p!`` (times the symbol's start phase): P
  IFFTs per OFDM symbol whatever the number of devices, P the first order whose Taylor
  remainder ``(pi max|eps|)^P / P!`` is at most 1e-8 (:func:`series_terms`; 5 terms
  for ``|eps| <= 0.02``, 16 for 0.68; beyond 16 the devices take their own IFFTs). The
  series agrees with the per-device transforms to float32 rounding (a test). Its cost:
  ``benchmarks/README.md``.

Units: samples at the rate ``B = F Delta_f``; CFO in subcarrier spacings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numba
import numpy as np
import scipy.fft
from numba import njit, prange

from native.launch import LAUNCH, LAUNCH_ENDING_TEAM, read_only
from phy.limits import first_tap_lag, last_tap_lag, latest_kept_delay_samples

_CHUNK_DEVICES = 8
"""Devices transformed at a time (their buffers are reused from chunk to chunk)."""


def _workers() -> int:
    """FFT threads: Numba's thread count (which a study caps per run), not every core."""
    return max(1, numba.get_num_threads())


def discrete_taps(a, tau_samples, l_min: int, l_max: int) -> np.ndarray:
    """Taps ``g[l] = sum_p a_p sinc(l - tau_p)`` of a band-limited channel, ``l_min <= l <= l_max``.

    The function of Sionna's :func:`~sionna.phy.channel.cir_to_time_channel` (sinc pulse
    shaping, no normalisation), in float64, with ``sinc`` exactly 1 and 0 at integer
    lags (so a path on the sample grid gives a single tap and an integer timing offset
    is an exact shift).

    Input
    -----
    a : [K, P], complex
        Path coefficients.
    tau_samples : [K, P], float
        Path delays in samples (delay [s] times the bandwidth, plus any timing offset).
    l_min, l_max : int
        The lags kept.

    Output
    ------
    g : [K, l_max - l_min + 1], np.complex128
    """
    a = np.asarray(a, np.complex128)
    tau = np.asarray(tau_samples, np.float64)
    if a.ndim != 2 or a.shape != tau.shape:
        raise ValueError(f"a and tau_samples must both be [K, P], got {a.shape} and {tau.shape}")
    if l_max < l_min:
        raise ValueError(f"l_max must be >= l_min, got l_min={l_min}, l_max={l_max}")
    lags = np.arange(l_min, l_max + 1, dtype=np.float64)
    x = lags[None, None, :] - tau[:, :, None]
    pulse = np.sinc(x)
    on_grid = x == np.round(x)
    pulse[on_grid] = (x[on_grid] == 0.0).astype(np.float64)
    return np.einsum("kp,kpl->kl", a, pulse)


def frequency_response(taps, l_min: int, num_subcarriers: int) -> np.ndarray:
    """``G(f) = sum_l g[l] exp(-j 2 pi (f - floor(F/2)) l / F)`` on Sionna's subcarrier order.

    Input
    -----
    taps : [K, L], complex
        ``g[l]`` for ``l = l_min, ..., l_min + L - 1``.

    Output
    ------
    : [K, F], np.complex128
    """
    taps = np.asarray(taps, np.complex128)
    lags = np.arange(l_min, l_min + taps.shape[1], dtype=np.float64)
    freqs = np.arange(num_subcarriers, dtype=np.float64) - num_subcarriers // 2
    return taps @ np.exp(-2j * np.pi * np.outer(lags, freqs) / num_subcarriers)


def _natural_index(num_subcarriers: int) -> np.ndarray:
    """FFT bin of each subcarrier of Sionna's order: ``(f - floor(F/2)) mod F``."""
    return (np.arange(num_subcarriers) - num_subcarriers // 2) % num_subcarriers


@njit(nogil=True, cache=True, inline="always")
def _symbol_row(x, updates, mask, row_of, row_amplitudes, precoder, k, n, out):
    """Device k's symbols on OFDM symbol n into ``out`` [F]: ``x[k, n]``, or, when ``x`` is
    empty, ``precoder[k]`` times the amplitudes of eq. ``Gen_x``: ``row_amplitudes[r]`` on
    a listed row ``r = row_of[k, n] >= 0``, else ``mask[k] Delta`` (0 past d)."""
    num_subcarriers = out.size
    if x.size:
        for f in range(num_subcarriers):
            out[f] = x[k, n, f]
        return
    r = row_of[k, n]
    if r >= 0:
        for f in range(num_subcarriers):
            out[f] = precoder[k, f] * row_amplitudes[r, f]
        return
    lo = n * num_subcarriers
    width = min(num_subcarriers, updates.shape[1] - lo)
    for f in range(width):
        out[f] = precoder[k, f] * (mask[k, f] * updates[k, lo + f])
    for f in range(width, num_subcarriers):
        out[f] = 0.0


@njit(nogil=True, cache=True, inline="always")
def _to_fft_order(values, half, target):
    """``target = ifftshift(values)``: subcarrier f (Sionna's order) to FFT bin
    ``(f - half) mod F``, ``half = floor(F/2)``."""
    upper = values.size - half
    for f in range(upper):
        target[f] = values[half + f]
    for f in range(half):
        target[upper + f] = values[f]


@njit(parallel=True, nogil=True, cache=True)
def _precode(x, updates, mask, row_of, row_amplitudes, precoder, response, devices, isi_slot,
             half, a_out, b_out):
    """Per device ``k = devices[i]``: ``a_out[i, n] = ifftshift(G_k X_k[n])`` and, when
    ``isi_slot[i] >= 0``, ``b_out[isi_slot[i], n] = ifftshift(X_k[n])`` (FFT order:
    subcarrier f at bin ``(f - half) mod F``, ``half = floor(F/2)``). ``X`` from
    :func:`_symbol_row`."""
    num_subcarriers = response.shape[1]
    num_symbols = a_out.shape[1]
    upper = num_subcarriers - half  # subcarriers f >= half go to bins 0 .. upper - 1
    for i in prange(devices.size):
        k = devices[i]
        slot = isi_slot[i]
        row = np.empty(num_subcarriers, np.complex64)
        for n in range(num_symbols):
            _symbol_row(x, updates, mask, row_of, row_amplitudes, precoder, k, n, row)
            target = a_out[i, n]
            for f in range(upper):
                target[f] = response[k, half + f] * row[half + f]
            for f in range(half):
                target[upper + f] = response[k, f] * row[f]
            if slot >= 0:
                _to_fft_order(row, half, b_out[slot, n])


@njit(parallel=True, nogil=True, cache=True)
def _clean_sum(x, updates, mask, row_of, row_amplitudes, precoder, response, devices, out):
    """``out[n] = sum_{k in devices} G_k X_k[n]`` on the subcarriers (one symbol per work
    item)."""
    num_symbols, num_subcarriers = out.shape
    for n in prange(num_symbols):
        row = np.empty(num_subcarriers, np.complex64)
        total = out[n]
        for f in range(num_subcarriers):
            total[f] = 0.0
        for i in range(devices.size):
            k = devices[i]
            _symbol_row(x, updates, mask, row_of, row_amplitudes, precoder, k, n, row)
            for f in range(num_subcarriers):
                total[f] += response[k, f] * row[f]


@njit(parallel=True, nogil=True, cache=True)
def _combine(a_time, b_time, isi_slot, cfo_start, cfo_step, isi_taps, isi_lags, l_min, cp,
             out):
    """Adds the window samples of every OFDM symbol, summed over a chunk of devices, into
    ``out``.

    ``a_time[i, n, m]`` is the circular convolution of the chunk's device i's symbol
    with its taps at index ``m``, which is window sample ``w = (m - l_min) mod F``. A tap
    at lag ``l > l_min + cp`` reads, for the window samples ``w < l - l_min - cp``, the
    previous symbol's stream instead of this symbol's cyclic extension (taps start at
    ``l_min``, so none reads the next symbol): that difference is added from ``b_time``
    (the unfiltered symbols, slot ``isi_slot[i]``; nothing precedes the first). Then the
    CFO phase ``cfo_start[i, n] * cfo_step[i, m]`` (``cfo_step`` indexed like ``a_time``)
    and the sum over devices.
    """
    num_symbols, num_subcarriers = out.shape
    period = num_subcarriers + cp
    for n in prange(num_symbols):
        row = out[n]
        values = np.empty(num_subcarriers, np.complex64)
        for i in range(a_time.shape[0]):
            slot = isi_slot[i]
            start = cfo_start[i, n]
            if slot < 0:
                for m in range(num_subcarriers):
                    row[m] += start * cfo_step[i, m] * a_time[i, n, m]
                continue
            for m in range(num_subcarriers):
                values[m] = a_time[i, n, m]
            for j in range(isi_taps.shape[1]):
                tap = isi_taps[slot, j]
                excess = isi_lags[slot, j] - l_min - cp
                if tap == 0 or excess <= 0:
                    continue
                for w in range(min(excess, num_subcarriers)):
                    pos = l_min + w - isi_lags[slot, j]  # < -cp: the previous symbol
                    other = np.complex64(0.0)
                    if n > 0:
                        other = b_time[slot, n - 1, (pos + period) % num_subcarriers]
                    own = b_time[slot, n, pos % num_subcarriers]
                    values[(w + l_min) % num_subcarriers] += tap * (other - own)
            for m in range(num_subcarriers):
                row[m] += start * cfo_step[i, m] * values[m]


_SERIES_TOLERANCE = 1e-8
"""Truncation bound of the CFO series, relative to a device's received amplitude (a sixth
of float32's unit roundoff, 6e-8)."""

_MAX_SERIES_TERMS = 16
"""Above this many terms a CFO device goes through its own IFFT instead (16 terms cover
``|epsilon| <= 0.68``)."""


def series_terms(max_abs_cfo_subcarriers: float, tolerance: float = _SERIES_TOLERANCE) -> int:
    """Terms P of the CFO series for ``|epsilon| <= max_abs_cfo_subcarriers``: the smallest P
    with ``(pi max|epsilon|)^P / P! <= tolerance`` (the Taylor remainder of
    ``exp(j 2 pi epsilon (w / F - 1/2))``, whose argument is at most ``pi |epsilon|``)."""
    x = np.pi * abs(float(max_abs_cfo_subcarriers))
    terms, bound = 1, x
    while bound > tolerance:
        terms += 1
        bound *= x / terms
    return terms


@njit(parallel=True, nogil=True, cache=True)
def _cfo_series(x, updates, mask, row_of, row_amplitudes, precoder, response, devices, weight,
                rate, half, out):
    """The CFO series' coefficients: ``out[p, n] = ifftshift(sum_i weight[i, n]
    rate[i]^p / p! G_k X_k[n])`` for ``k = devices[i]``, ``p < out.shape[0]`` (FFT order as
    :func:`_precode`; one symbol per work item)."""
    num_terms, num_symbols, num_subcarriers = out.shape
    for n in prange(num_symbols):
        row = np.empty(num_subcarriers, np.complex64)
        term = np.empty(num_subcarriers, np.complex64)
        total = np.zeros((num_terms, num_subcarriers), np.complex64)
        for i in range(devices.size):
            k = devices[i]
            _symbol_row(x, updates, mask, row_of, row_amplitudes, precoder, k, n, row)
            w = weight[i, n]
            for f in range(num_subcarriers):
                term[f] = w * response[k, f] * row[f]
                total[0, f] += term[f]
            for p in range(1, num_terms):
                step = np.float32(rate[i] / p)
                for f in range(num_subcarriers):
                    term[f] *= step
                    total[p, f] += term[f]
        for p in range(num_terms):
            _to_fft_order(total[p], half, out[p, n])


@dataclass(frozen=True)
class TimeDomainUplink:
    """The uplink of one round in the time domain: K devices' channels, offsets and the CP.

    Parameters
    ----------
    taps : [K, L], complex
        Discrete-time channel of each device, ``g_k[l]`` for ``l = l_min, ..., l_min + L - 1``
        (timing offset included), e.g. from :meth:`from_paths`.
    l_min : int
        The first lag (<= 0); the BS's FFT window starts ``-l_min`` samples into the CP.
    cfo_subcarriers : [K], float
        Carrier frequency offset of each device [subcarrier spacings].
    cyclic_prefix_length : int
        C >= 0 [samples].
    num_subcarriers : int
        F, the FFT size.
    cut_power_fraction : [K], float, optional
        Set by :meth:`from_paths`.

    Call
    ----
    x : [K, N, F], complex64
        The devices' frequency-domain symbols (Sionna's subcarrier order).

    Output
    ------
    y : [N, F], complex64
        The BS's demodulated grid without noise, ``sum_k`` of each device's received
        symbols.
    """

    taps: np.ndarray
    l_min: int
    cfo_subcarriers: np.ndarray
    cyclic_prefix_length: int
    num_subcarriers: int
    cut_power_fraction: np.ndarray | None = None
    """[K]: the share of each device's path power :meth:`from_paths` cut (paths more than a
    symbol late); None when built from taps."""
    max_series_terms: int = _MAX_SERIES_TERMS
    """The most terms of the CFO series (:meth:`__call__`) before the devices with a CFO
    go through their own IFFTs instead; 0: always their own IFFTs."""

    def __post_init__(self):
        taps = np.array(self.taps, np.complex128)
        cfo = np.array(self.cfo_subcarriers, np.float64)
        if taps.ndim != 2 or cfo.shape != (taps.shape[0],):
            raise ValueError(f"taps must be [K, L] and cfo_subcarriers [K], got {taps.shape} "
                             f"and {cfo.shape}")
        if not 0 <= int(self.cyclic_prefix_length) <= int(self.num_subcarriers):
            raise ValueError(f"cyclic_prefix_length must be in [0, F = {self.num_subcarriers}], "
                             f"got {self.cyclic_prefix_length}")
        if not -int(self.cyclic_prefix_length) <= int(self.l_min) <= 0:
            raise ValueError(f"l_min must be in [-cyclic_prefix_length, 0] = "
                             f"[{-int(self.cyclic_prefix_length)}, 0] (the FFT window starts "
                             f"inside the prefix), got {self.l_min}")
        if taps.shape[1] + int(self.l_min) - 1 >= int(self.num_subcarriers) + int(
                self.cyclic_prefix_length):
            raise ValueError("the channel (timing offset included) must be shorter than one "
                             f"OFDM symbol with its prefix, F + C = "
                             f"{self.num_subcarriers + self.cyclic_prefix_length} samples; "
                             f"got taps up to lag {taps.shape[1] + self.l_min - 1}")
        if not np.all(np.isfinite(cfo)) or not np.all(np.isfinite(taps)):
            raise ValueError("taps and cfo_subcarriers must be finite")
        object.__setattr__(self, "taps", taps)
        object.__setattr__(self, "cfo_subcarriers", cfo)

    def subset(self, rows) -> TimeDomainUplink:
        """The uplink of the devices ``rows`` [K'] only (their taps, offsets and cut power,
        the same lags and prefix): the devices that send in a phase of a partial round."""
        rows = np.asarray(rows, np.int64)
        cut = None if self.cut_power_fraction is None else np.asarray(self.cut_power_fraction)[rows]
        return dataclasses.replace(self, taps=self.taps[rows], cfo_subcarriers=self.cfo_subcarriers[rows],
                                   cut_power_fraction=cut)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_paths(cls, a, tau_s, *, bandwidth_hz: float, num_subcarriers: int,
                   cyclic_prefix_length: int, timing_offset_samples=None,
                   cfo_subcarriers=None) -> TimeDomainUplink:
        """From a channel impulse response ``a`` [K, P], ``tau_s`` [K, P] (seconds) and the
        devices' timing offsets [K] (samples, may be fractional or negative) and CFOs [K].

        The taps span ``l_min = max(-6, -C)`` to ``ceil(latest delay + offset) + 6``
        (:mod:`phy.limits`: Sionna's lags; precursors before ``l_min`` are cut, as Sionna cuts
        them), at most ``F + C - 1``: a path later than ``F + C - 7``
        samples (more than a symbol late) is cut, and the share of the device's path power
        cut is :attr:`cut_power_fraction`. A delay within 1e-4 samples of the sample grid
        is taken as on it.
        """
        a = np.asarray(a, np.complex128)
        tau = np.asarray(tau_s, np.float64) * float(bandwidth_hz)
        num_devices = a.shape[0]
        offsets = np.zeros(num_devices) if timing_offset_samples is None else np.asarray(
            timing_offset_samples, np.float64)
        cfo = np.zeros(num_devices) if cfo_subcarriers is None else np.asarray(
            cfo_subcarriers, np.float64)
        tau = tau + offsets[:, None]
        # a delay within 1e-4 samples of the sample grid is on it (float32 delays l / B of
        # a tapped delay line come back as l +- 2e-7): one tap, not a sinc
        snapped = np.round(tau)
        tau = np.where(np.abs(tau - snapped) < 1e-4, snapped, tau)
        cp = int(cyclic_prefix_length)
        late = tau > latest_kept_delay_samples(num_subcarriers, cp)
        power = np.sum(np.abs(a) ** 2, axis=1)
        cut = np.sum(np.where(late, np.abs(a) ** 2, 0.0), axis=1)
        cut_fraction = np.divide(cut, power, out=np.zeros_like(cut), where=power > 0)
        a = np.where(late, 0.0, a)
        tau = np.where(late, 0.0, tau)
        l_min = first_tap_lag(cp)
        l_max = last_tap_lag(float(tau.max()))
        return cls(discrete_taps(a, tau, l_min, l_max), l_min, cfo, cp, int(num_subcarriers),
                   cut_fraction)

    # ------------------------------------------------------------------ properties
    @property
    def num_devices(self) -> int:
        return int(self.taps.shape[0])

    def lags(self) -> np.ndarray:
        """[L] int: the lag of each tap."""
        return np.arange(self.l_min, self.l_min + self.taps.shape[1])

    def isi_free(self) -> np.ndarray:
        """[K] bool: every nonzero tap inside ``[l_min, l_min + C]`` (no inter-symbol
        interference)."""
        outside = (self.lags() > self.l_min + self.cyclic_prefix_length)[None, :]
        return ~np.any((self.taps != 0) & outside, axis=1)

    def frequency_response(self) -> np.ndarray:
        """[K, F] complex64: ``G_k(f)``, what device k's symbols see on subcarrier f when
        they are free of inter-symbol interference and CFO."""
        return frequency_response(self.taps, self.l_min, self.num_subcarriers).astype(
            np.complex64)

    # ------------------------------------------------------------------ the fast map
    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[0] != self.num_devices or x.shape[2] != self.num_subcarriers:
            raise ValueError(f"x must be [K={self.num_devices}, N, F={self.num_subcarriers}], "
                             f"got {x.shape}")
        empty = np.zeros((0, 0), np.float32)
        return self._receive(np.ascontiguousarray(x, np.complex64), empty, empty,
                             np.zeros((0, 0), np.int64), empty, np.zeros((0, 0), np.complex64),
                             x.shape[1])

    def transmit(self, updates, precoder, mask, devices, symbols, row_amplitudes,
                 num_symbols: int) -> np.ndarray:
        """The same map with the devices' symbols read from their updates where they lie
        (eq. ``Gen_x``, no ``[K, N, F]`` symbol tensor): ``X_k[n, f] = precoder[k, f]
        mask[k, f] Delta_k[n F + f]`` (0 past d), except the rows ``(devices[r],
        symbols[r])``, which send ``precoder[k, f] row_amplitudes[r, f]``.

        Input: ``updates`` [K, d] f32, ``precoder`` [K, F] c64, ``mask`` [K, F] f32,
        ``devices``, ``symbols`` [R] int, ``row_amplitudes`` [R, F] f32, N.
        Output: ``y`` [N, F] complex64, as the call.
        """
        num_devices, num_subcarriers = self.num_devices, self.num_subcarriers
        row_of = np.full((num_devices, int(num_symbols)), -1, np.int64)
        row_of[np.asarray(devices, np.int64), np.asarray(symbols, np.int64)] = np.arange(
            len(devices))
        return self._receive(
            np.zeros((0, 0, 0), np.complex64), np.ascontiguousarray(updates, np.float32),
            np.ascontiguousarray(mask, np.float32), row_of,
            np.ascontiguousarray(row_amplitudes, np.float32).reshape(-1, num_subcarriers),
            np.ascontiguousarray(precoder, np.complex64), int(num_symbols))

    def _receive(self, x, updates, mask, row_of, row_amplitudes, precoder, num_symbols):
        num_subcarriers = self.num_subcarriers
        cp, l_min = self.cyclic_prefix_length, self.l_min
        source = tuple(read_only(a, a.dtype) for a in (x, updates, mask, row_of, row_amplitudes, precoder))
        isi = ~self.isi_free()
        has_cfo = self.cfo_subcarriers != 0.0
        series = has_cfo & ~isi
        terms = series_terms(np.max(np.abs(self.cfo_subcarriers[series]))) if series.any() else 0
        if terms > int(self.max_series_terms):
            series[:] = False
        # with a CFO, the taps act on the rotated stream: g[l] exp(-j 2 pi eps l / F)
        lags = self.lags()
        rotated = self.taps * np.exp(
            -2j * np.pi * np.outer(self.cfo_subcarriers, lags) / num_subcarriers)
        response = frequency_response(rotated, l_min, num_subcarriers).astype(np.complex64)
        y = np.empty((num_symbols, num_subcarriers), np.complex64)
        with LAUNCH:
            _clean_sum(*source, response, np.flatnonzero(~(isi | has_cfo)).astype(np.int64), y)
        impaired = np.flatnonzero((isi | has_cfo) & ~series).astype(np.int64)
        if impaired.size == 0 and not series.any():
            return y
        # CFO phase at window sample w of symbol n: exp(j 2 pi eps (n (F + C) + C + l_min + w) / F);
        # the circular convolution's index m holds window sample w = (m - l_min) mod F
        symbol_start = np.arange(num_symbols) * (num_subcarriers + cp) + cp + l_min
        window_sample = (np.arange(num_subcarriers) - l_min) % num_subcarriers
        window = np.zeros((num_symbols, num_subcarriers), np.complex64)
        if series.any():
            window = self._series_window(source, response, np.flatnonzero(series), terms,
                                          symbol_start, window_sample, num_symbols)
        outside = lags > l_min + cp
        width = max(int(outside.sum()), 1)
        chunk = max(min(impaired.size, _CHUNK_DEVICES), 1)
        a_freq = np.empty((chunk, num_symbols, num_subcarriers), np.complex64)
        b_freq = np.empty((chunk, num_symbols, num_subcarriers), np.complex64)
        for first in range(0, impaired.size, chunk):  # chunks of devices: buffers stay warm
            devices = impaired[first:first + chunk]
            slots = np.cumsum(isi[devices]) - 1
            slots[~isi[devices]] = -1
            num_isi = int(isi[devices].sum())
            with LAUNCH_ENDING_TEAM:  # its spinning worker would hold a core from the FFTs
                _precode(*source, response, devices, slots, num_subcarriers // 2,
                         a_freq[: devices.size], b_freq[:num_isi])
            a_time = scipy.fft.ifft(a_freq[: devices.size], axis=-1, norm="ortho", workers=_workers(),
                                    overwrite_x=True)
            b_time = scipy.fft.ifft(b_freq[:num_isi], axis=-1, norm="ortho", workers=_workers(),
                                    overwrite_x=True)
            isi_devices = devices[isi[devices]]
            isi_taps = np.zeros((num_isi, width), np.complex64)
            isi_lags = np.zeros((num_isi, width), np.int64)
            isi_taps[:, : outside.sum()] = rotated[isi_devices][:, outside]
            isi_lags[:, : outside.sum()] = lags[outside]
            eps = self.cfo_subcarriers[devices]
            cfo_start = np.exp(2j * np.pi * np.outer(eps, symbol_start) / num_subcarriers)
            cfo_step = np.exp(2j * np.pi * np.outer(eps, window_sample) / num_subcarriers)
            with LAUNCH_ENDING_TEAM:  # (the next chunk's FFTs, or the window's)
                _combine(a_time, b_time, slots, cfo_start.astype(np.complex64),
                         cfo_step.astype(np.complex64), isi_taps, isi_lags, l_min, cp, window)
        order = _natural_index(num_subcarriers)
        return y + scipy.fft.fft(window, axis=-1, norm="ortho", workers=_workers())[:, order]

    def _series_window(self, source, response, devices, terms, symbol_start, window_sample,
                       num_symbols):
        """The window samples ``sum_i cfo_i(n, w) IFFT(G_i X_i[n])[m]`` of the devices with a
        CFO and no inter-symbol taps, from ``terms`` IFFTs per OFDM symbol instead of one per
        device: ``exp(j 2 pi eps w / F) = exp(j pi eps) sum_p (2 pi eps)^p / p! (j (w / F -
        1/2))^p``, truncated where :func:`series_terms` bounds the remainder."""
        num_subcarriers = self.num_subcarriers
        eps = self.cfo_subcarriers[devices]
        weight = (np.exp(2j * np.pi * np.outer(eps, symbol_start) / num_subcarriers)
                  * np.exp(1j * np.pi * eps)[:, None]).astype(np.complex64)
        coefficients = np.empty((terms, num_symbols, num_subcarriers), np.complex64)
        with LAUNCH_ENDING_TEAM:  # the FFTs follow
            _cfo_series(*source, response, devices.astype(np.int64), weight,
                        2.0 * np.pi * eps, num_subcarriers // 2, coefficients)
        powers = scipy.fft.ifft(coefficients, axis=-1, norm="ortho", workers=_workers(),
                                overwrite_x=True)
        offset = 1j * (window_sample / num_subcarriers - 0.5)
        window = np.zeros((num_symbols, num_subcarriers), np.complex64)
        for p in range(terms):
            window += powers[p] * (offset ** p).astype(np.complex64)
        return window

    # ------------------------------------------------------------------ the reference
    def reference(self, x) -> np.ndarray:
        """The same map with Sionna's blocks and every device's waveform materialised:
        ``OFDMModulator`` -> CFO -> convolution with the taps -> sum -> ``OFDMDemodulator``.

        Input ``x`` [K, N, F] complex64; output ``y`` [N, F] complex64 (no noise).
        """
        import tensorflow as tf
        from sionna.phy.ofdm import OFDMDemodulator, OFDMModulator

        x = tf.convert_to_tensor(x, tf.complex64)
        num_devices, _, num_subcarriers = x.shape
        stream = OFDMModulator(self.cyclic_prefix_length)(x).numpy().astype(np.complex128)
        t = np.arange(stream.shape[1])
        stream *= np.exp(2j * np.pi * np.outer(self.cfo_subcarriers, t) / num_subcarriers)
        length = stream.shape[1] + self.taps.shape[1] - 1
        received = np.zeros(length, np.complex128)
        for k in range(num_devices):  # y[b] = sum_l g[l] s[b - l], b from l_min
            received += np.convolve(stream[k], self.taps[k])
        demodulator = OFDMDemodulator(num_subcarriers, self.l_min, self.cyclic_prefix_length)
        received = received[: stream.shape[1]]  # the N symbols' windows; the rest trails
        y = demodulator(tf.constant(received[None].astype(np.complex64)))
        return y.numpy()[0]
