"""The channel of moving devices at any time of the run, and the run's clock.

``[mobility]`` with a moving model (:data:`phy.parameters.MOBILITY_MODELS`) replaces the
block fading of :mod:`phy.channel` (one independent draw per round) by channels that are
functions of time: device k at time t (seconds since the run's start) is at
``p_k(t)`` (:class:`phy.mobility.StraightMotion`), has the path gain
``g_k(t) = |p_k(t)|^-alpha`` (:func:`phy.geometry.path_gain`) and the channel

``h_kf(t) = sqrt(g_k(t)) z_kf(v_k t)``

with ``z`` the unit-power Jakes processes of :class:`phy.doppler.SumOfSinusoids`: F
independent ones per device for ``channel.model = "iid_rayleigh"``, one repeated on every
subcarrier for ``"flat_rayleigh"``. So ``h_kf(t) ~ CN(0, g_k(t))`` at every t (the
block-fading models' marginal) and two times tau apart are correlated as
``J0(2 pi f_D,k tau)``, ``f_D,k = v_k f_c / c``. With N_r > 1 BS antennas each antenna
has processes of its own (``h_krf(t)``, N_r F_c per device, independent across antennas
as the block-fading draw's, all at the device's speed): the channel is ``[K, N_r, F]``,
and the round link combines it (:mod:`phy.uplink.moving_link`).

**The round's timeline** (:meth:`MovingChannel.start_round`, :meth:`MovingChannel.end_round`):
round t starts at ``T_t``; the devices compute for ``compute_seconds_per_round``; each
uplink phase then starts with the devices' channel estimate and occupies its symbols
(``N T_sym``, ``T_sym = (F + C) / B``); the BS then multicasts the model (the round's
downlink symbols); round t + 1 starts at ``T_{t+1} = T_t + compute + sum of the phases'
seconds + downlink seconds``. The round's start times are kept, so the uplink of any
earlier round can be replayed; a run resumed at round t is told ``T_t``
(:meth:`MovingChannel.resume`, with every earlier round's start).

No TensorFlow: NumPy (complex64 channels, float64 times and positions).
"""

from __future__ import annotations

import numpy as np

from native.host_arrays import BufferPool
from phy.doppler import SumOfSinusoids, doppler_hz, jakes_correlation
from phy.geometry import path_gain
from phy.mobility import RandomWaypoint, StraightMotion, speeds_mps


class MovingChannel:
    """Channels of moving devices as functions of time (module docstring).

    Parameters
    ----------
    motion : phy.mobility.StraightMotion
    fading : phy.doppler.SumOfSinusoids
        K x N_r F_c unit-power processes (F_c = F, or 1 for a flat channel; antenna r's
        are coefficients r F_c .. (r + 1) F_c - 1).
    num_subcarriers : int
        F.
    path_loss_exponent : float
        alpha.
    carrier_frequency_hz : float
        f_c.
    compute_seconds_per_round : float
        The devices' local computation before the round's first phase [s].
    num_antennas : int
        N_r (default 1: the channel is [K, F]; else [K, N_r, F]).
    paths : phy.moving_time.PathLayout, optional
        The time-domain uplink's paths (``ofdm.domain = "time"``): the fading's processes
        are the P paths' coefficients, and the channel is their frequency response
        ``sum_p sqrt(s_p) z_kp R_pf`` (:mod:`phy.moving_time`); None: the processes are
        the subcarriers' (or one flat one).
    """

    def __init__(self, motion: StraightMotion, fading: SumOfSinusoids, num_subcarriers: int,
                 path_loss_exponent: float, carrier_frequency_hz: float, compute_seconds_per_round: float,
                 num_antennas: int = 1, paths=None):
        self.motion, self.fading, self.paths = motion, fading, paths
        self.num_subcarriers, self.num_antennas = int(num_subcarriers), int(num_antennas)
        if fading.shape[1] % self.num_antennas:
            raise ValueError(f"the fading's {fading.shape[1]} processes per device are not "
                             f"{self.num_antennas} antennas' worth")
        self.coefficients = fading.shape[1] // self.num_antennas  # F_c per antenna
        self.flat = self.coefficients == 1 and self.num_subcarriers > 1 and paths is None
        if paths is not None and (self.num_antennas != 1 or fading.shape[1] != paths.num_paths):
            raise ValueError(f"a time-domain path layout of {paths.num_paths} paths needs one antenna and "
                             f"that many processes per device, got {self.num_antennas} and {fading.shape[1]}")
        self.path_loss_exponent = float(path_loss_exponent)
        self.carrier_frequency_hz = float(carrier_frequency_hz)
        self.compute_seconds_per_round = float(compute_seconds_per_round)
        self.doppler_hz = doppler_hz(motion.speed_mps, carrier_frequency_hz)  # [K]
        self._starts = {0: 0.0}
        self._symbol_buffers = BufferPool(max_buffers=1)  # every device's channel per symbol
        self.channel_per_symbol = False
        """``mobility.channel_within_phase = "per_symbol"``: a scheme that receives symbol by
        symbol (the analog, one-bit and non-coherent ones) gets :meth:`per_symbol`'s channel of each OFDM symbol
        instead of the one at the phase's middle (set by the run)."""

    # ------------------------------------------------------------------ the clock
    def start_round(self, t: int) -> float:
        """``T_t`` [s], the start of round t; the motion's state moved there."""
        if t not in self._starts:
            raise ValueError(f"the start time of round {t} is unknown: rounds run in order from 0, "
                             "or a resumed run is told its first round's start (resume)")
        self.motion.move_to(self._starts[t])
        return self._starts[t]

    def end_round(self, t: int, seconds: float) -> None:
        """Round t lasted ``seconds``: round t + 1 starts at ``T_t + seconds``."""
        self._starts[t + 1] = self._starts[t] + float(seconds)

    def resume(self, starts_s) -> None:
        """A run resumed at round t = ``len(starts_s) - 1``: ``starts_s`` the start times of
        rounds 0 .. t [s]. The motion steps through them as the run did, so its positions
        are the uninterrupted run's bit for bit (one advance over the sum would round
        differently)."""
        for t, start in enumerate(np.asarray(starts_s, np.float64)):
            self._starts[t] = float(start)
            self.motion.move_to(float(start))

    # ------------------------------------------------------------------ the channel
    def path_gain_at(self, offsets_s, devices=None) -> np.ndarray:
        """``[T, K]`` float64 path gains ``max(|p_k|, r_min)^-alpha`` at ``offsets_s`` [T]
        (ascending) after the round's start (:meth:`start_round`); r_min the exclusion radius,
        which a random waypoint's leg may cut (a straight path never does). With
        ``devices`` [P]: theirs only, ``[T, P]``."""
        positions = self.motion.positions_at(offsets_s, devices)
        distance = np.maximum(np.hypot(positions[..., 0], positions[..., 1]), self.motion.inner_m)
        return path_gain(distance, self.path_loss_exponent)

    def _by_antenna(self, z: np.ndarray) -> np.ndarray:
        """Processes ``[..., N_r F_c]`` as the channel's last axes: ``[..., F]`` with one
        antenna, else ``[..., N_r, F]`` (a flat channel's one process per antenna
        repeated on every subcarrier)."""
        if self.num_antennas > 1:
            z = z.reshape(*z.shape[:-1], self.num_antennas, self.coefficients)
        if self.flat:
            z = np.broadcast_to(z, (*z.shape[:-1], self.num_subcarriers))
        return z

    def at(self, offset_s: float, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """``(h [K, F] complex64 ([K, N_r, F] with N_r > 1 antennas), path_gain [K]
        float64)`` at ``offset_s`` seconds after the round's start; with ``rows`` (a slice
        of the devices) theirs only, each the same as in the whole evaluation."""
        devices = None if rows == slice(None) else np.arange(self.doppler_hz.shape[0])[rows]
        gain = self.path_gain_at([offset_s], devices)[0]
        distance = self.motion.travelled_m(self.motion.time_s + float(offset_s))[rows]
        z = self.fading.at(distance) if devices is None else self.fading.at(distance, rows)
        if self.paths is not None:  # the paths' frequency response (phy.moving_time)
            z = (z * np.sqrt(self.paths.power)) @ self.paths.responses
        z = self._by_antenna(z)
        amplitude = np.sqrt(gain).reshape(-1, *([1] * (z.ndim - 1)))
        return (amplitude * z).astype(np.complex64), gain

    def per_symbol(self, start_s: float, symbol_s: float, num_symbols: int, rows: slice = slice(None)) -> np.ndarray:
        """``h`` [K, N, F] complex64 ([K, N, N_r, F] with N_r > 1 antennas): the channel of
        OFDM symbol n < N = ``num_symbols`` at its middle, ``t_n = start_s + (n + 1/2) symbol_s`` seconds after the round's start
        (each device's path gain at its position then). Equal to :meth:`at` (t_n) up to
        float rounding: the Jakes processes are stepped from symbol to symbol
        (:meth:`phy.doppler.SumOfSinusoids.along`); a TDL's are evaluated per symbol. A
        device at rest (speed 0) has :meth:`at`'s channel on every symbol, bit for bit.
        With ``rows`` (a slice of the devices) theirs only, each device's channel the same
        as in the whole evaluation (a streamed phase takes a chunk's at a time)."""
        offsets = float(start_s) + (np.arange(int(num_symbols)) + 0.5) * float(symbol_s)
        devices = None if rows == slice(None) else np.arange(self.doppler_hz.shape[0])[rows]
        amplitude = np.sqrt(self.path_gain_at(offsets, devices))  # [N, K]
        along = getattr(self.fading, "along", None)
        if along is None:  # phy.moving_tdl.MovingTdl
            z = np.stack([self.fading.at(self.motion.travelled_m(self.motion.time_s + offset)[rows], rows)
                          for offset in offsets], axis=1)
            h = (amplitude.T[:, :, None] * z).astype(np.complex64)
        else:
            # every device's channel: in the memory of an earlier phase's once it is free
            out = self._symbol_buffers.take((amplitude.shape[1], offsets.size, self.fading.shape[1]),
                                            np.complex64) if devices is None else None
            h = along(self.motion.travelled_m(self.motion.time_s + offsets[0])[rows],
                      self.motion.travelled_m(float(symbol_s))[rows], offsets.size, amplitude, rows, out)
        if self.num_antennas > 1 or self.flat:  # antennas apart; a flat channel on every subcarrier
            h = np.ascontiguousarray(self._by_antenna(h))
        still = np.asarray(self.motion.speed_mps)[rows] == 0.0
        if still.any():  # a device at rest: its channel at any time, :meth:`at`'s bits
            h[still] = self.at(offsets[0], rows)[0][still][:, None]
        return h

    def owned_at(self, offsets_s, devices, subcarriers, combiner=None) -> np.ndarray:
        """``[T, P]`` complex64: the channel of the pairs ``(devices [P], subcarriers [P])``
        at ``offsets_s`` [T] (ascending) after the round's start, each at its device's
        position then (what a digital slot's coherence blocks need: one pair per subcarrier,
        its owner). With N_r > 1 antennas the effective channel through ``combiner``
        [N_r, F] (``sum_r conj(m_rf) h_krf``, :func:`phy.combiner.effective_channel`)."""
        offsets = np.atleast_1d(np.asarray(offsets_s, np.float64))
        needed, index = np.unique(devices, return_inverse=True)  # each device's position once
        gain = self.path_gain_at(offsets, needed)[:, index]  # [T, P]
        distance = self.motion.travelled_m(self.motion.time_s + offsets)[:, devices]
        coefficient = np.zeros_like(subcarriers) if self.coefficients == 1 else subcarriers
        if self.num_antennas == 1:
            z = self.fading.at_pairs(distance, devices, coefficient)
        else:
            if combiner is None:
                raise ValueError(f"owned_at with {self.num_antennas} antennas needs the combiner [N_r, F]")
            weights = np.conj(np.asarray(combiner, np.complex128))[:, subcarriers]  # [N_r, P]
            z = sum(weights[r] * self.fading.at_pairs(distance, devices, r * self.coefficients + coefficient)
                    for r in range(self.num_antennas))
        return (np.sqrt(gain) * z).astype(np.complex64)

    def aging_correlation(self, lag_s, devices=None, at_s: float = 0.0) -> np.ndarray:
        """``[k]``: the correlation between a device's channel at ``at_s`` seconds after the
        round's start and itself ``lag_s`` seconds later (one value, or one per device),
        Jakes' ``J0(2 pi f_D,k lag)`` (stationary: ``at_s`` does not enter); of ``devices``
        (population ids), or of every device."""
        shift = self.doppler_hz if devices is None else self.doppler_hz[np.asarray(devices)]
        return jakes_correlation(shift, lag_s)

    def state_columns(self) -> dict[str, np.ndarray]:
        """Per device at the round's start: ``position_x_m``, ``position_y_m``, ``speed_mps``,
        ``doppler_hz``."""
        p = self.motion.positions_m
        return {"position_x_m": p[:, 0].copy(), "position_y_m": p[:, 1].copy(),
                "speed_mps": self.motion.speed_mps.copy(), "doppler_hz": np.asarray(self.doppler_hz).copy()}


def static(**_) -> None:
    """``mobility.model = "static"``: no moving channel (block fading)."""
    return None


def _build(motion_of, speed_mps, compute_seconds_per_round: float, carrier_frequency_hz: float,
           num_sinusoids: int, positions_m, radius_m: float, inner_m: float, num_subcarriers: int, flat: bool,
           path_loss_exponent: float, rng: np.random.Generator, channel=None, num_antennas: int = 1,
           paths=None) -> MovingChannel:
    """From ``rng``: the K speeds (:func:`phy.mobility.speeds_mps`), the motion's own draws
    (``motion_of(positions, speeds, rng)``), then the Jakes processes' angles and gains, or
    with a :class:`phy.channel.TDL` ``channel`` the seed of Sionna's TDL process
    (:class:`phy.moving_tdl.MovingTdl`, at the TDL's carrier, each device at its own distance),
    or with a :class:`phy.ray_traced.RayTracedCell` its traced paths turning with the
    displacement (:class:`phy.moving_rays.TracedMovingChannel`, at the traced carrier, the
    motion centred on the BS; nothing more drawn), or with a
    :class:`phy.cells.SystemLevelCell` the rays of one draw at a seed from ``rng``
    (:mod:`phy.moving_tr38901`, the cell's carrier)."""
    positions = np.asarray(positions_m, np.float64)
    speeds = speeds_mps(speed_mps, positions.shape[0], rng)
    traced = hasattr(channel, "moving_channel")  # a phy.ray_traced.RayTracedCell
    if traced:  # the walls are centred on the BS
        positions = positions - channel.bs_xy_m[None, :]
    motion = motion_of(positions, speeds, rng)
    if traced:
        return channel.moving_channel(motion, compute_seconds_per_round, rng)
    if getattr(channel, "tap_responses", None) is not None:  # a phy.channel.TDL
        from phy.moving_tdl import MovingTdl  # Sionna's TDL: only a moving TDL run builds it

        carrier_frequency_hz = channel.carrier_frequency_hz
        seed = rng.integers(0, 2 ** 31 - 1, size=2).astype(np.int32)
        fading = MovingTdl(channel, positions.shape[0], seed, int(num_antennas))
        if paths is not None:  # the time-domain uplink: the taps' processes, stepped sample by sample
            fading = fading.path_processes()
    else:
        per_antenna = paths.num_paths if paths is not None else 1 if flat else int(num_subcarriers)
        fading = SumOfSinusoids(positions.shape[0], int(num_antennas) * per_antenna, int(num_sinusoids),
                                carrier_frequency_hz, rng)
    return MovingChannel(motion, fading, num_subcarriers, path_loss_exponent, carrier_frequency_hz,
                         compute_seconds_per_round, num_antennas, paths)


def straight(speed_mps, compute_seconds_per_round: float, carrier_frequency_hz: float, num_sinusoids: int, *,
             positions_m, radius_m: float, inner_m: float, num_subcarriers: int, flat: bool,
             path_loss_exponent: float, rng: np.random.Generator, channel=None, num_antennas: int = 1,
             paths=None) -> MovingChannel:
    """``mobility.model = "straight"``: K headings uniform in [0, 2 pi) after the speeds."""
    def motion_of(positions, speeds, rng):
        heading = rng.uniform(0.0, 2.0 * np.pi, size=positions.shape[0])
        return StraightMotion(positions, speeds, heading, radius_m, inner_m)

    return _build(motion_of, speed_mps, compute_seconds_per_round, carrier_frequency_hz, num_sinusoids,
                  positions_m, radius_m, inner_m, num_subcarriers, flat, path_loss_exponent, rng, channel, num_antennas,
                  paths)


def random_waypoint(speed_mps, compute_seconds_per_round: float, carrier_frequency_hz: float,
                    num_sinusoids: int, *, positions_m, radius_m: float, inner_m: float, num_subcarriers: int,
                    flat: bool, path_loss_exponent: float, rng: np.random.Generator, channel=None,
                    num_antennas: int = 1, paths=None) -> MovingChannel:
    """``mobility.model = "random_waypoint"``: the waypoints' key drawn after the speeds."""
    def motion_of(positions, speeds, rng):
        return RandomWaypoint(positions, speeds, int(rng.integers(2 ** 62)), radius_m, inner_m)

    return _build(motion_of, speed_mps, compute_seconds_per_round, carrier_frequency_hz, num_sinusoids,
                  positions_m, radius_m, inner_m, num_subcarriers, flat, path_loss_exponent, rng, channel, num_antennas,
                  paths)
