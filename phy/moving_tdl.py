"""Sionna's 3GPP TDL channel with Doppler, evaluated at each device's own distance travelled.

With ``channel.model = "tdl"`` and a moving ``[mobility]`` model, every device's taps are
those of Sionna's :class:`sionna.phy.channel.tr38901.TDL`, its own sum of sinusoids
(Xiao, Zheng, Beaulieu) with its own Doppler spectrum per tap and the LoS tap's specular
component of TDL-D/E:

``a_krl(d) = sqrt(P_l / M) sum_m exp(j (k d cos(alpha_klm) + phi_krlm))`` (+ the LoS term
``sqrt(P_LoS) exp(j (k d cos(theta_LoS) + phi_0k))`` on tap 0 of TDL-D/E)

with ``k = 2 pi f_c / c`` and d the distance the device has travelled. Sionna writes the
argument as ``omega_D t cos(alpha) + phi`` with ``omega_D = 2 pi v f_c / c`` and one speed
per call; ``omega_D t`` is ``k d``, so a device at its own speed is the same process at its
own distance. The angles ``alpha`` and phases ``phi`` are Sionna's draws: drawn once per run
from Sionna's generator reset to the run's stateless seed (:func:`phy.channel.sionna_rng_seeded`),
in the order and shapes of Sionna's call, and the process is then evaluated here in NumPy
(float64), held to Sionna's own call at every device's speed (tested, to 1e-9). So each
device may have its own speed (a range of ``mobility.speed_mps``), and N_r BS antennas
have their own phases ``phi`` per antenna (Sionna's ``num_rx_ant``, uncorrelated; the LoS
term is common to them, as Sionna's). The taps become a frequency response with the
TDL's fixed tap responses (:attr:`phy.channel.TDL.tap_responses`); the path gain scales
them (:mod:`phy.moving_channel`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sionna.phy import config as sionna_config
from sionna.phy.channel.tr38901 import TDL as SionnaTDL

from phy.channel import TDL, sionna_rng_seeded
from phy.doppler import SPEED_OF_LIGHT_MPS, SumOfSinusoids


def _sionna_draws(tdl: SionnaTDL, num_devices: int, seed) -> tuple[np.ndarray, ...]:
    """``(alpha [K, L, M], phi [K, N_r, L, M], phi_0 [K] or None)`` as Sionna's TDL call draws
    them for a batch of K from its generator at ``seed`` (the Doppler draw first, unused)."""
    uniform = sionna_config.tf_rng.uniform
    lanes, sinusoids = int(tdl._num_clusters), int(tdl._num_sinusoids)
    pi, double = np.pi, tf.float64
    with sionna_rng_seeded(tf.convert_to_tensor(seed, tf.int32)):
        uniform([num_devices, 1, 1, 1, 1, 1, 1, 1], tdl._min_doppler, tdl._max_doppler, double)
        theta = uniform([num_devices, 1, 1, 1, 1, lanes, 1, sinusoids], -pi / sinusoids, pi / sinusoids, double)
        phi = uniform([num_devices, 1, tdl._num_rx_ant, 1, tdl._num_tx_ant, lanes, 1, sinusoids], -pi, pi, double)
        phi_0 = uniform([num_devices, 1, 1, 1, 1, 1, 1], -pi, pi, double) if tdl._los else None
    alpha = np.reshape((tdl._alpha_const + theta).numpy(), (num_devices, lanes, sinusoids))
    phi = np.reshape(phi.numpy(), (num_devices, tdl._num_rx_ant, lanes, sinusoids))
    return alpha, phi, None if phi_0 is None else np.reshape(phi_0.numpy(), (num_devices,))


class MovingTdl:
    """Unit-power TDL responses of K devices, each at its own travelled distance.

    Parameters
    ----------
    channel : phy.channel.TDL
        The scenario's TDL (profile, delay spread, carrier, subcarriers).
    num_devices : int
        K.
    seed : [2], int
        The run's stateless seed of the process.
    num_antennas : int
        N_r BS antennas (default 1).

    Input (:meth:`at`)
    ------------------
    distance_m : [K], float
        Each device's distance travelled.

    Output
    ------
    h : [K, N_r F], np.complex64
        ``a(d) @ tap_responses`` antenna by antenna (antenna r's subcarriers are columns
        r F .. (r + 1) F - 1), ``E|h|^2 = 1``.
    """

    def __init__(self, channel: TDL, num_devices: int, seed, num_antennas: int = 1):
        self.num_devices, self.num_antennas = int(num_devices), int(num_antennas)
        tdl = SionnaTDL(model=channel.profile, delay_spread=channel.delay_spread_s,
                        carrier_frequency=channel.carrier_frequency_hz, num_rx_ant=self.num_antennas,
                        precision="double")
        self.alpha, self.phi, self.phi_0 = _sionna_draws(tdl, self.num_devices, seed)
        self.wavenumber = 2.0 * np.pi * float(channel.carrier_frequency_hz) / SPEED_OF_LIGHT_MPS
        powers = np.real(tdl._mean_powers.numpy())  # Sionna keeps them complex
        self.tap_amplitude = np.sqrt(powers.astype(np.float64) / self.alpha.shape[2])
        self.los_amplitude = float(np.sqrt(np.real(tdl._los_power.numpy()))) if self.phi_0 is not None else 0.0
        self.los_cosine = float(np.cos(tdl._los_angle_of_arrival.numpy()))
        self.tap_responses = np.asarray(channel.tap_responses.numpy(), np.complex128)  # [L, F]
        self.num_subcarriers = self.tap_responses.shape[1]
        self.shape = (self.num_devices, self.num_antennas * self.num_subcarriers, self.alpha.shape[2])

    def path_processes(self):
        """The taps as unit-power sums of sinusoids for the time-domain uplink
        (:mod:`phy.moving_time`, one BS antenna): a :class:`phy.doppler.SumOfSinusoids`
        [K, L, M (+1)] whose process l is ``a_kl(d) / sqrt(s_l)`` (:meth:`paths_at`), with
        ``s`` [L] the taps' powers (tap 0's with the LoS term of TDL-D/E, an extra sinusoid
        at ``k cos(theta_LoS)``); ``sqrt(s_l)`` times it is the tap."""
        if self.num_antennas != 1:
            raise ValueError(f"the time-domain TDL takes one BS antenna, got {self.num_antennas}")
        num_devices, taps, sinusoids = self.alpha.shape
        los = self.phi_0 is not None
        wavenumber = np.zeros((num_devices, taps, sinusoids + los))
        gains = np.zeros((num_devices, taps, sinusoids + los), np.complex128)
        wavenumber[:, :, :sinusoids] = self.wavenumber * np.cos(self.alpha)
        gains[:, :, :sinusoids] = self.tap_amplitude[None, :, None] * np.exp(1j * self.phi[:, 0])
        power = sinusoids * self.tap_amplitude ** 2
        if los:  # the specular component of tap 0
            wavenumber[:, 0, sinusoids] = self.wavenumber * self.los_cosine
            gains[:, 0, sinusoids] = self.los_amplitude * np.exp(1j * self.phi_0)
            power[0] += self.los_amplitude ** 2
        return SumOfSinusoids.of(wavenumber, gains / np.sqrt(power)[None, :, None])

    def paths_at(self, distance_m, devices=None) -> np.ndarray:
        """``[k, N_r, L]`` complex128: the taps of ``devices`` (every device) at their
        distances ``distance_m`` [k]."""
        rows = slice(None) if devices is None else np.asarray(devices)
        d = np.asarray(distance_m, np.float64)[:, None, None]
        doppler = self.wavenumber * d * np.cos(self.alpha[rows])  # [k, L, M]
        taps = np.sum(np.exp(1j * (doppler[:, None] + self.phi[rows])), axis=-1) * self.tap_amplitude
        if self.phi_0 is not None:  # the specular component on tap 0
            specular = np.exp(1j * (self.wavenumber * d[:, 0, 0] * self.los_cosine + self.phi_0[rows]))
            taps[:, :, 0] += self.los_amplitude * specular[:, None]
        return taps

    def at(self, distance_m, rows=slice(None)) -> np.ndarray:
        """The responses ``[k, N_r F]`` complex64 of the devices ``rows`` after ``distance_m``
        [k] metres (module docstring)."""
        devices = np.arange(self.num_devices)[rows]
        h = self.paths_at(distance_m, devices) @ self.tap_responses  # [k, N_r, F]
        return h.reshape(h.shape[0], -1).astype(np.complex64)

    def at_pairs(self, distance_m, devices, coefficients) -> np.ndarray:
        """``[T, P]`` complex64: the responses of the pairs ``(devices [P], coefficients [P])``
        (coefficient ``r F + f``: antenna r, subcarrier f) at the distances ``distance_m`` [T, P]."""
        distance = np.atleast_2d(np.asarray(distance_m, np.float64))
        antenna, subcarrier = np.divmod(np.asarray(coefficients), self.num_subcarriers)
        rows = []
        for row in distance:
            taps = self.paths_at(row, devices)[np.arange(len(devices)), antenna]  # [P, L]
            rows.append(np.sum(taps * self.tap_responses[:, subcarrier].T, axis=1))
        return np.stack(rows).astype(np.complex64)
