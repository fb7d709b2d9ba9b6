"""The time-domain uplink of moving devices: the waveform through a channel that changes
from sample to sample (issue 58), so that Doppler's inter-carrier interference appears.

:class:`phy.ofdm_time.TimeDomainUplink` holds each device's discrete-time channel
``g_k[l]`` constant over a phase. With a moving ``[mobility]`` model and
``ofdm.domain = "time"`` each device's paths are Jakes processes instead
(:class:`phy.moving_channel.MovingChannel` with a :class:`PathLayout`): path p of device
k has the coefficient ``a_kp(t) = sqrt(g_k s_p) z_kp(v_k t)``, ``s_p`` its power share and
``z`` unit-power sums of sinusoids (:class:`phy.doppler.SumOfSinusoids`), and its taps are
``g_kl(t) = sum_p a_kp(t) w_kpl`` with ``w_kpl`` the path's band-limited pulse at lag l,
delayed by the device's timing offset ``theta_k`` samples (:func:`phy.ofdm_time.discrete_taps`
at ``tau_p + theta_k``, a single tap for a path on the sample grid; a path later than
:func:`phy.limits.latest_kept_delay_samples` is cut, as at rest, :func:`cut_power_fraction`). A phase
that starts ``tau`` seconds after the round's start sends its N OFDM symbols as
:class:`MovingTimeDomainUplink` says:

1. each device's symbols ``X_k`` [N, F] through Sionna's
   :class:`~sionna.phy.ofdm.OFDMModulator` (unitary IFFT, a cyclic prefix of C samples):
   ``s_k[n]``, n < S = N (F + C), sample n at ``t_n = tau + n / B``, rotated by the
   device's carrier frequency offset of ``epsilon_k`` subcarrier spacings,
   ``s_k[n] exp(j 2 pi epsilon_k n / F)`` (as :class:`phy.ofdm_time.TimeDomainUplink`);
2. ``y[n] = sum_k sum_l g_kl(t_n) s_k[n - l]``: each tap at the time of the received
   sample (the paths' sinusoids stepped from sample to sample,
   :meth:`phy.doppler.SumOfSinusoids.along`);
3. Sionna's :class:`~sionna.phy.ofdm.OFDMDemodulator` (the FFT window ``-l_min`` samples
   into the prefix), as :meth:`phy.ofdm_time.TimeDomainUplink.reference`.

A channel constant over the phase gives :meth:`~phy.ofdm_time.TimeDomainUplink.reference`'s
grid for the same taps; a changing one leaks each subcarrier's power to the others
(:mod:`phy.doppler_ici`: for one path, ``P_ICI = 1 - (1/F^2) sum_{m,n} J0(2 pi f_D (m - n) / B)``
of the received power; tested through this uplink). The devices' CSI is the frequency
response at the phase's start (:meth:`frequency_response`), the path gain the one at the
phase's middle (a 4 ms phase moves a device 0.1 m at 30 m/s). The CSI leaves the timing
offset out (pre-compensating it, ``sync.precompensate = "timing"``, and receive antennas
are refused with motion, ``cosim/scenario/mobility_rules.py``).

Cost: K S P M complex multiplications for the taps (each sinusoid stepped once per
sample) and K S E for the convolution (E the nonzero path-lag entries of a device: P for
paths on the sample grid and integer offsets, some 13 per path for a fractional one),
devices a chunk at a time (memory O(chunk S P)).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from native.launch import LAUNCH
from phy.limits import first_tap_lag, last_tap_lag, latest_kept_delay_samples
from phy.ofdm_time import discrete_taps, frequency_response

_DEVICES_PER_PASS = 16
"""Devices whose sample-by-sample taps are held at once (``[16, S, P]`` complex64)."""


@dataclass(frozen=True, eq=False)
class PathLayout:
    """The paths of a time-domain channel as seen by the BS's receiver: P paths at delays
    ``delays_samples`` [P] (on or off the sample grid) with power shares ``power`` [P]
    (summing to one), their taps ``pulse`` [P, L] at the lags ``l_min .. l_min + L - 1``
    and their frequency responses ``responses`` [P, F] (:func:`phy.ofdm_time.frequency_response`
    of each path's taps: Sionna's subcarrier order, the window ``-l_min`` samples into the
    prefix)."""

    delays_samples: np.ndarray
    power: np.ndarray
    pulse: np.ndarray
    l_min: int
    responses: np.ndarray

    @classmethod
    def of(cls, delays_samples, power, *, num_subcarriers: int, cyclic_prefix_length: int) -> PathLayout:
        delays = np.asarray(delays_samples, np.float64).reshape(-1)
        share = np.asarray(power, np.float64).reshape(-1)
        if delays.shape != share.shape or delays.size < 1 or np.any(delays < 0) or np.any(share < 0):
            raise ValueError(f"delays_samples and power must be [P] >= 0 of one length, got {delays} and {share}")
        l_min, l_max = first_tap_lag(cyclic_prefix_length), last_tap_lag(float(delays.max()))
        pulse = discrete_taps(np.eye(delays.size), np.broadcast_to(delays, (delays.size, delays.size)), l_min, l_max)
        responses = frequency_response(pulse, l_min, num_subcarriers)
        return cls(delays, share / share.sum(), pulse, l_min, responses)

    @property
    def num_paths(self) -> int:
        return int(self.delays_samples.size)


@dataclass(frozen=True, eq=False)
class MovingTimeDomainUplink:
    """One phase of the time-domain uplink with moving devices (module docstring), the
    interface of :class:`phy.ofdm_time.TimeDomainUplink` that the schemes read.

    Parameters
    ----------
    moving : phy.moving_channel.MovingChannel
        With a :class:`PathLayout` (``moving.paths``); its clock at the round's start.
    start_s : float
        The phase's start, seconds after the round's.
    symbol_s : float
        An OFDM symbol with its prefix, ``(F + C) / B`` [s].
    cyclic_prefix_length : int
        C [samples].
    devices : [K'] int, optional
        The senders (:meth:`subset`; None: every device).
    cfo_subcarriers : [K] float, optional
        Every device's carrier frequency offset in subcarrier spacings (``[sync]``, drawn
        per round; None: none).
    timing_offset_samples : [K] float, optional
        Every device's timing offset in samples (``[sync]``, drawn per round, >= 0; None:
        none).

    Call
    ----
    x : [K, N, F], complex64 (Sionna's subcarrier order). Output: ``y`` [N, F] complex64,
    the demodulated sum without noise.
    """

    moving: object
    start_s: float
    symbol_s: float
    cyclic_prefix_length: int
    devices: np.ndarray | None = None
    cfo_subcarriers: np.ndarray | None = None
    timing_offset_samples: np.ndarray | None = None

    @property
    def cut_power_fraction(self) -> np.ndarray:
        """[K'] float64: each device's share of path power cut (a path its timing offset
        makes later than one OFDM symbol, :func:`cut_power_fraction`)."""
        return cut_power_fraction(self.moving.paths, self._timing(), self.num_subcarriers,
                                  int(self.cyclic_prefix_length))

    def _timing(self) -> np.ndarray:
        """[K'] the senders' timing offsets [samples] (zeros without)."""
        if self.timing_offset_samples is None:
            return np.zeros(self.num_devices)
        return np.asarray(self.timing_offset_samples, np.float64)[self.rows]

    @property
    def rows(self) -> np.ndarray:
        count = self.moving.doppler_hz.shape[0]
        return np.arange(count) if self.devices is None else np.asarray(self.devices, np.int64)

    @property
    def num_devices(self) -> int:
        return int(self.rows.size)

    @property
    def num_subcarriers(self) -> int:
        return int(self.moving.num_subcarriers)

    def subset(self, rows) -> MovingTimeDomainUplink:
        """The uplink of the devices ``rows`` [K'] (indices into this uplink's devices)."""
        return dataclasses.replace(self, devices=self.rows[np.asarray(rows, np.int64)])

    def frequency_response(self) -> np.ndarray:
        """[K, F] complex64: each device's response at the phase's start (what it estimates)."""
        return self.moving.at(self.start_s)[0][self.rows]

    def transmit(self, updates, precoder, mask, devices, symbols, row_amplitudes, num_symbols: int) -> np.ndarray:
        """:meth:`phy.ofdm_time.TimeDomainUplink.transmit`'s symbols (eq. ``Gen_x``: ``precoder
        mask Delta``, the listed rows ``precoder row_amplitudes``) through this uplink, formed
        a pass of devices at a time (no [K, N, F] grid)."""
        updates = np.asarray(updates, np.float32)
        precoder, mask = np.asarray(precoder, np.complex64), np.asarray(mask, np.float32)
        listed_devices, listed_symbols = np.asarray(devices, np.int64), np.asarray(symbols, np.int64)
        amplitudes = np.asarray(row_amplitudes, np.float32).reshape(-1, self.num_subcarriers)
        f, n = self.num_subcarriers, int(num_symbols)

        def symbols_of(part: slice) -> np.ndarray:
            rows = updates[part]
            grid = np.zeros((rows.shape[0], n * f), np.float32)
            grid[:, :rows.shape[1]] = rows
            grid = grid.reshape(rows.shape[0], n, f) * mask[part, None, :]
            listed = (listed_devices >= part.start) & (listed_devices < part.stop)
            grid[listed_devices[listed] - part.start, listed_symbols[listed]] = amplitudes[listed]
            return precoder[part, None, :] * grid

        return self._receive(symbols_of, updates.shape[0], n)

    def reference(self, x) -> np.ndarray:
        """The same map (there is one implementation here)."""
        return self(x)

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, np.complex64)
        if x.ndim != 3 or x.shape[0] != self.num_devices or x.shape[2] != self.num_subcarriers:
            raise ValueError(f"x must be [K={self.num_devices}, N, F={self.num_subcarriers}], got {x.shape}")
        return self._receive(lambda part: x[part], x.shape[0], x.shape[1])

    def _receive(self, symbols_of, num_devices: int, num_symbols: int) -> np.ndarray:
        """The demodulated grid [N, F] of the devices whose symbols ``symbols_of(part)``
        gives ([m, N, F] complex64 for the slice ``part`` of them), a pass at a time."""
        import tensorflow as tf
        from sionna.phy.ofdm import OFDMDemodulator, OFDMModulator

        if num_devices != self.num_devices:
            raise ValueError(f"{num_devices} devices' symbols for an uplink of {self.num_devices}")
        layout, moving, cp = self.moving.paths, self.moving, int(self.cyclic_prefix_length)
        f = self.num_subcarriers
        num_samples = num_symbols * (f + cp)
        sample_s = self.symbol_s / (f + cp)
        gain = moving.path_gain_at([self.start_s + 0.5 * num_samples * sample_s], self.rows)[0]  # [K]
        # output sample n is the received sample at time n + l_min (Sionna's convention)
        start = moving.motion.travelled_m(moving.motion.time_s + self.start_s + layout.l_min * sample_s)[self.rows]
        step = moving.motion.travelled_m(sample_s)[self.rows]
        path, lag, entries = device_taps(layout, self._timing(), f, cp)  # [K', E] each
        modulator, received = OFDMModulator(cp), np.zeros(num_samples, np.complex128)
        cfo = None if self.cfo_subcarriers is None else np.asarray(self.cfo_subcarriers, np.float64)[self.rows]
        for lo in range(0, self.num_devices, _DEVICES_PER_PASS):
            part = slice(lo, min(lo + _DEVICES_PER_PASS, self.num_devices))
            stream = modulator(tf.constant(symbols_of(part))).numpy()  # [m, S]
            if cfo is not None and np.any(cfo[part] != 0.0):  # exp(j 2 pi eps n / F), n from the stream's start
                rotation = np.exp(2j * np.pi * np.outer(cfo[part], np.arange(num_samples)) / f)
                stream = (stream * rotation).astype(np.complex64)
            amplitude = np.ascontiguousarray(np.broadcast_to(np.sqrt(gain[part]), (num_samples, stream.shape[0])))
            paths = moving.fading.along(start[part], step[part], num_samples, amplitude, self.rows[part])  # [m, S, P]
            with LAUNCH:
                _convolve(stream, paths, path[part], lag[part], entries[part], received)
        y = OFDMDemodulator(f, layout.l_min, cp)(tf.constant(received[None].astype(np.complex64)))
        return y.numpy()[0]


def _delays(layout: PathLayout, timing: np.ndarray, num_subcarriers: int, cyclic_prefix_length: int):
    """``(tau [K, P], late [K, P])``: each device's path delays with its timing offset
    [samples], a delay within 1e-4 samples of the grid on it, and the paths later than
    :func:`phy.limits.latest_kept_delay_samples` (as
    :meth:`phy.ofdm_time.TimeDomainUplink.from_paths`)."""
    tau = layout.delays_samples[None, :] + np.asarray(timing, np.float64)[:, None]
    snapped = np.round(tau)
    tau = np.where(np.abs(tau - snapped) < 1e-4, snapped, tau)
    return tau, tau > latest_kept_delay_samples(num_subcarriers, cyclic_prefix_length)


def cut_power_fraction(layout: PathLayout, timing, num_subcarriers: int, cyclic_prefix_length: int) -> np.ndarray:
    """[K] float64: the share of each device's path power that its timing offset ``timing``
    [K] (samples) makes later than :func:`phy.limits.latest_kept_delay_samples` (cut)."""
    _, late = _delays(layout, timing, num_subcarriers, cyclic_prefix_length)
    return np.sum(np.where(late, layout.power[None, :], 0.0), axis=1)


def device_taps(layout: PathLayout, timing, num_subcarriers: int, cyclic_prefix_length: int):
    """``(path, lag, entries)`` [K, E] (int64, int64, complex128): each device's nonzero
    path-lag weights ``sqrt(s_p) sinc(l_min + lag - tau_p - theta_k)`` (the paths' pulses
    delayed by its timing offset ``theta_k`` = ``timing[k]`` samples, late paths cut),
    padded with zero entries to the longest device's E. Without offsets every device has
    the layout's own entries, in its order."""
    timing = np.asarray(timing, np.float64)
    tau, late = _delays(layout, timing, num_subcarriers, cyclic_prefix_length)
    if not np.any(timing) and not np.any(late):  # the layout's pulses, shared
        weights = np.sqrt(layout.power)[:, None] * layout.pulse  # [P, L]
        path, lag = np.nonzero(weights)  # a path on the sample grid has one tap
        entries = weights[path, lag].astype(np.complex128)
        return tuple(np.ascontiguousarray(np.broadcast_to(v, (timing.size, v.size))) for v in (path, lag, entries))
    share = np.where(late, 0.0, layout.power[None, :])
    tau = np.where(late, 0.0, tau)
    num_devices, num_paths = tau.shape
    # every device's every path alone: rows k P + p of one discrete_taps call
    pulses = discrete_taps(np.tile(np.eye(num_paths), (num_devices, 1)), np.repeat(tau, num_paths, axis=0),
                           layout.l_min, last_tap_lag(float(tau.max())))
    weights = np.sqrt(share).reshape(-1, 1) * pulses  # [K P, L]
    row, lag = np.nonzero(weights)
    device, path = np.divmod(row, num_paths)
    counts = np.bincount(device, minlength=num_devices)
    slot = np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)  # entry index within its device
    width = max(1, int(counts.max(initial=0)))
    out = (np.zeros((num_devices, width), np.int64), np.zeros((num_devices, width), np.int64),
           np.zeros((num_devices, width), np.complex128))
    for array, values in zip(out, (path, lag, weights[row, lag])):
        array[device, slot] = values
    return out


@njit(parallel=True, nogil=True, cache=True)
def _convolve(stream, paths, path, lag, entries, out):
    """``out[n] += sum_k sum_j g_kj[n] stream[k, n - j]`` with ``g_kj[n] = sum_p paths[k, n, p]
    w_kpj`` over device k's nonzero pulse entries ``w_kpj`` = ``entries[k]`` at (``path[k]``,
    ``lag[k]``; zero entries are padding), tap j at lag ``l_min + j``: output sample n is the
    received sample at time ``n + l_min`` (as :meth:`phy.ofdm_time.TimeDomainUplink.reference`'s
    convolution), each device's taps evaluated then."""
    num_devices, num_samples = stream.shape
    for n in prange(num_samples):
        total = 0j
        for k in range(num_devices):
            for e in range(entries.shape[1]):
                weight = entries[k, e]
                if weight == 0:
                    continue
                source = n - lag[k, e]
                if 0 <= source < num_samples:
                    total += paths[k, n, path[k, e]] * weight * stream[k, source]
        out[n] += total
