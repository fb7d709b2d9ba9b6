"""A ray-traced cell whose devices move: each traced path turns with its own Doppler.

With ``channel.model = "ray_traced"`` and a moving ``[mobility]`` model, device k's
paths are those traced at its drop position ``p_k(0)`` (:class:`phy.ray_traced.RayTracedCell`,
its place built with ``arrivals=True``): coefficients ``a_knp`` at BS antenna n, delays
``tau_kp`` and the directions ``r_kp`` (the x, y of the unit vector towards where path p
arrives from, :func:`phy.ray_tracing.arrival_xy`). At time t the device is at ``p_k(t)``
(:mod:`phy.mobility`, the walls centred on the BS) and its channel is

``H_knf(t) = sum_p a_knp exp(j 2 pi r_kp . (p_k(t) - p_k(0)) / lambda) exp(-j 2 pi f tau_kp)``

the local-area (plane-wave) model: each path's length changes by ``-r_kp . dp``, its
power and delay do not. Moving at a constant velocity ``v_k`` the phase of path p turns
at ``f_kp = v_k . r_kp / lambda`` [Hz], Sionna RT's own Doppler of the path
(:attr:`sionna.rt.Paths.doppler` for a receiver at ``v_k`` in a still scene, tested), so
within a phase each path has its own Doppler shift in ``[-f_D, f_D]``, ``f_D = v f_c / c``,
and across rounds the channel is correlated as the paths' phases say rather than as
Jakes' ``J0``. The correlation this module reports for an estimate ``Delta`` seconds old is
the paths' power-weighted one, ``Re(sum_p P_kp exp(j 2 pi f_kp Delta)) / sum_p P_kp``
(``P_kp`` the path's power averaged over the BS antennas; it is ``J0(2 pi f_D Delta)`` for
a continuum of equal paths from every direction), the coherent gain left to a precoder
built from the estimate.

The path gain is the traced one, ``sum_p |a_kp|^2``, at every position: the model holds
while a device stays within some metres of where it was traced (the paths' geometry is
not re-traced as it moves; scatterers tens of metres away change their delays by
centimetres). docs/choices.md states the choice; ``channel.retrace_every_m`` traces the
paths again as the devices walk (:mod:`phy.retraced_rays`), and ``channel.redrop_every_rounds``
(devices placed and traced anew) is another way to see a changing place.

No TensorFlow: NumPy (complex64 channels, float64 positions).
"""

from __future__ import annotations

import numpy as np

from phy.doppler import SPEED_OF_LIGHT_MPS
from phy.moving_channel import MovingChannel
from phy.path_cache import TracedPaths


class TracedPathFading:
    """The frequency responses of K devices displaced from where their paths were traced.

    Parameters
    ----------
    paths : phy.path_cache.TracedPaths
        With :attr:`~phy.path_cache.TracedPaths.arrival_xy` (a place built with ``arrivals=True``).
    frequencies_hz : np.ndarray
        ``[F]`` float64: the subcarriers' baseband frequencies.
    carrier_frequency_hz : float
        f_c, the traced carrier.

    Input (:meth:`at`)
    ------------------
    displacement_m : [..., k, 2], float64
        ``p(t) - p(0)`` of the devices ``rows`` (leading axes: several times at once).

    Output
    ------
    h : [..., k, N_r, F], np.complex64
    """

    def __init__(self, paths: TracedPaths, frequencies_hz: np.ndarray, carrier_frequency_hz: float):
        if paths.arrival_xy is None:
            raise ValueError("moving devices in a ray-traced cell need the paths' directions of arrival "
                             "(a place built with arrivals=True)")
        self._set(paths.a, paths.arrival_xy, paths.tau_s, frequencies_hz, carrier_frequency_hz, paths.path_gain)

    def _set(self, a, arrival_xy, tau_s, frequencies_hz, carrier_frequency_hz: float, path_gain) -> None:
        """The attributes from the coefficients ``a`` [K, N_r, P], the directions [K, P, 2],
        the delays ``tau_s`` [K, D] (D = P, or one per group of paths), the grid, the
        carrier and the path gains [K]."""
        self.a = a  # [K, N_r, P] complex64
        self.arrival_xy = np.asarray(arrival_xy, np.float64)  # [K, P, 2]
        self.wavenumber = 2.0 * np.pi * float(carrier_frequency_hz) / SPEED_OF_LIGHT_MPS  # [rad/m]
        self.carrier_frequency_hz = float(carrier_frequency_hz)
        frequencies = np.asarray(frequencies_hz, np.float64)
        self.delay_phase = np.exp(-2j * np.pi * np.asarray(tau_s, np.float64)[:, :, None]
                                  * frequencies[None, None, :]).astype(np.complex64)  # [K, D, F]
        self.power = np.mean(np.abs(self.a.astype(np.complex128)) ** 2, axis=1)  # [K, P]
        self.path_gain = np.asarray(path_gain, np.float64)  # [K], the cell's
        self.shape = self.a.shape

    def turns(self, displacement_m: np.ndarray, rows=slice(None)) -> np.ndarray:
        """``[..., P]`` complex64: ``exp(j k r_p . dp)`` of the devices ``rows`` displaced by
        ``displacement_m`` [..., k, 2]."""
        phase = self.wavenumber * np.einsum("...kc,kpc->...kp", displacement_m, self.arrival_xy[rows])
        return np.exp(1j * phase).astype(np.complex64)

    def at(self, displacement_m: np.ndarray, rows=slice(None)) -> np.ndarray:
        """``[..., k, N_r, F]`` complex64 (module docstring)."""
        coefficients = self.a[rows] * self.turns(np.asarray(displacement_m, np.float64), rows)[..., None, :]
        return np.matmul(coefficients, self.delay_phase[rows])

    def at_pairs(self, displacement_m: np.ndarray, devices: np.ndarray, subcarriers: np.ndarray,
                 weights: np.ndarray | None = None) -> np.ndarray:
        """``[T, P]`` complex64: device ``devices[i]``'s response on ``subcarriers[i]`` when
        displaced by ``displacement_m`` [T, P, 2], at BS antenna 0, or combined over the
        antennas with ``weights`` [N_r, P] (``sum_n w_ni H_n``)."""
        turns = self.turns(np.asarray(displacement_m, np.float64), devices)  # [T, P, paths]
        tap = self.delay_phase[devices, :, subcarriers]  # [P, paths]
        a = self.a[devices]  # [P, N_r, paths]
        per_antenna = a[:, 0, :] if weights is None else np.einsum("np,pnq->pq", weights, a)
        return np.sum(turns * (per_antenna * tap)[None], axis=-1).astype(np.complex64)

    def doppler_hz(self, velocity_mps: np.ndarray, rows=slice(None)) -> np.ndarray:
        """``[k, P]``: each path's Doppler shift ``v_k . r_kp / lambda`` of the devices
        ``rows`` at velocities [k, 2]."""
        return np.einsum("kc,kpc->kp", velocity_mps, self.arrival_xy[rows]) * self.wavenumber / (2.0 * np.pi)

    def correlation(self, velocity_mps: np.ndarray, lag_s, rows=slice(None)) -> np.ndarray:
        """``[k]``: ``Re(sum_p P_kp exp(j 2 pi f_kp lag)) / sum_p P_kp`` of the devices
        ``rows`` at velocities [k, 2] (module docstring); ``lag_s`` one value or one per device."""
        shift, power = self.doppler_hz(velocity_mps, rows), self.power[rows]
        lag = np.broadcast_to(np.asarray(lag_s, np.float64), power.shape[:1])[:, None]
        total = np.sum(power, axis=1)
        return np.sum(power * np.cos(2.0 * np.pi * shift * lag), axis=1) / np.where(total > 0, total, 1.0)


class TracedMovingChannel(MovingChannel):
    """:class:`phy.moving_channel.MovingChannel` of a ray-traced cell (module docstring):
    the same clock, motion (in coordinates centred on the BS at ``bs_xy_m``) and
    interface, its channels from :class:`TracedPathFading`, its path gains the traced ones."""

    def __init__(self, motion, fading: TracedPathFading, num_subcarriers: int, compute_seconds_per_round: float,
                 bs_xy_m: np.ndarray):
        self.bs_xy_m = np.asarray(bs_xy_m, np.float64)
        self.origins_m = np.array(motion.positions_m, np.float64)  # p_k(0), centred on the BS
        super().__init__(motion, fading, num_subcarriers, 0.0, fading.carrier_frequency_hz,
                         compute_seconds_per_round, num_antennas=fading.shape[1])  # reads fading.shape only
        self.coefficients, self.flat = int(num_subcarriers), False
        self._gain = fading.path_gain

    def path_gain_at(self, offsets_s, devices=None) -> np.ndarray:
        """``[T, K]`` (``[T, P]`` with ``devices``): the traced path gains at every time."""
        gain = self._gain if devices is None else self._gain[devices]
        return np.broadcast_to(gain, (np.size(offsets_s), gain.size)).copy()

    def _displacement(self, offsets_s, devices=None) -> np.ndarray:
        origins = self.origins_m if devices is None else self.origins_m[devices]
        return self.motion.positions_at(offsets_s, devices) - origins  # [T, k, 2]

    def _antennas(self, h: np.ndarray) -> np.ndarray:
        return h[..., 0, :] if self.num_antennas == 1 else h

    def at(self, offset_s: float, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """``(h [k, F] ([k, N_r, F] with N_r > 1), path_gain [k])`` at ``offset_s`` after the round's start."""
        devices = np.arange(self.doppler_hz.shape[0])[rows]
        h = self.fading.at(self._displacement([offset_s], devices)[0], devices)
        return self._antennas(h), self._gain[devices].copy()

    def per_symbol(self, start_s: float, symbol_s: float, num_symbols: int, rows: slice = slice(None)) -> np.ndarray:
        """``[k, N, F]`` ([k, N, N_r, F]): the channel at each OFDM symbol's middle."""
        devices = np.arange(self.doppler_hz.shape[0])[rows]
        offsets = float(start_s) + (np.arange(int(num_symbols)) + 0.5) * float(symbol_s)
        h = self.fading.at(self._displacement(offsets, devices), devices)  # [N, k, N_r, F], every symbol at once
        return np.ascontiguousarray(self._antennas(np.moveaxis(h, 0, 1)))

    def owned_at(self, offsets_s, devices, subcarriers, combiner=None) -> np.ndarray:
        """``[T, P]``: the pairs' channels at ``offsets_s`` (through ``combiner`` with N_r > 1)."""
        offsets = np.atleast_1d(np.asarray(offsets_s, np.float64))
        needed, index = np.unique(devices, return_inverse=True)
        moved = self._displacement(offsets, needed)[:, index]  # [T, P, 2]
        weights = None
        if self.num_antennas > 1:
            if combiner is None:
                raise ValueError(f"owned_at with {self.num_antennas} antennas needs the combiner [N_r, F]")
            weights = np.conj(np.asarray(combiner, np.complex128))[:, subcarriers]
        return self.fading.at_pairs(moved, np.asarray(devices), np.asarray(subcarriers), weights)

    def aging_correlation(self, lag_s, devices=None, at_s: float = 0.0) -> np.ndarray:
        """``[k]``: ``Re(sum_p P_kp exp(j 2 pi f_kp lag)) / sum_p P_kp`` with the devices'
        velocities now (module docstring); ``lag_s`` one value or one per device; the
        paths are the same at any ``at_s``."""
        devices = np.arange(self.doppler_hz.shape[0]) if devices is None else np.asarray(devices)
        return self.fading.correlation(self.motion.velocities_mps[devices], lag_s, devices)

    def state_columns(self) -> dict[str, np.ndarray]:
        """As :meth:`MovingChannel.state_columns`, the positions in scene coordinates, and
        ``traced_displacement_m``: each device's distance from where its paths were traced."""
        columns = super().state_columns()
        moved = self.motion.positions_m - self.origins_m
        columns["traced_displacement_m"] = np.hypot(moved[:, 0], moved[:, 1])
        columns["position_x_m"] += self.bs_xy_m[0]
        columns["position_y_m"] += self.bs_xy_m[1]
        return columns

