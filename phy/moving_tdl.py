"""Sionna's 3GPP TDL channel with Doppler, evaluated at any time of the run.

With ``channel.model = "tdl"`` and a moving ``[mobility]`` model, every device's taps are
those of Sionna's :class:`sionna.phy.channel.tr38901.TDL` at the common speed v
(``min_speed = max_speed = v``, its own sum of sinusoids with its own Doppler spectrum
per tap, the LoS tap's Doppler of TDL-D/E included), drawn from one stateless seed per
run: each evaluation resets Sionna's generator from that seed
(:func:`phy.channel.sionna_rng_seeded`) and samples the process at the times 0 and t (two
time steps at the sampling frequency 1 / t), so the angles, phases and speeds Sionna
draws are the same at every call and the taps at time t are Sionna's own process at t
(tested against one Sionna call over a grid of times). Sionna runs in double precision
here, so t (seconds since the run's start) keeps float64's resolution. The taps become a
frequency response with the TDL's fixed tap responses (:attr:`phy.channel.TDL.tap_responses`),
the path gain scales them (:mod:`phy.moving_channel`).

Every device moves at the same speed (Sionna draws one speed per batch example from
``[min_speed, max_speed]``; a range of speeds would need one Sionna call per device and
evaluation), so ``mobility.speed_mps`` must be one value with TDL.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sionna.phy.channel.tr38901 import TDL as SionnaTDL

from phy.channel import TDL, sionna_rng_seeded

SIONNA_TDL_SINUSOIDS = 20
"""Sionna's TDL default number of sinusoids per tap (the cost of an evaluation)."""


class MovingTdl:
    """Unit-power TDL responses of K devices at one speed, at any travelled distance.

    Parameters
    ----------
    channel : phy.channel.TDL
        The scenario's TDL (profile, delay spread, carrier, subcarriers).
    num_devices : int
        K.
    speed_mps : float
        v >= 0, every device's.
    seed : [2], tf.int32
        The run's stateless seed of the process.

    Input (:meth:`at`)
    ------------------
    distance_m : [K], float
        The distance travelled (``v t``, equal for every device).

    Output
    ------
    h : [K, F], np.complex64
        ``a(t) @ tap_responses``, ``E|h_kf|^2 = 1``.
    """

    def __init__(self, channel: TDL, num_devices: int, speed_mps: float, seed):
        self.speed_mps = float(speed_mps)
        self.num_devices = int(num_devices)
        self.seed = tf.convert_to_tensor(seed, tf.int32)
        self._tdl = SionnaTDL(model=channel.profile, delay_spread=channel.delay_spread_s,
                              carrier_frequency=channel.carrier_frequency_hz, min_speed=self.speed_mps,
                              max_speed=self.speed_mps, precision="double")
        self.tap_responses = np.asarray(channel.tap_responses.numpy(), np.complex128)  # [L, F]
        self.shape = (self.num_devices, channel.num_subcarriers, SIONNA_TDL_SINUSOIDS)

    def paths_at(self, time_s: float) -> np.ndarray:
        """``[K, L]`` complex128: Sionna's taps at ``time_s`` seconds since the run's start."""
        count = tf.constant(self.num_devices, tf.int32)
        with sionna_rng_seeded(self.seed):
            if time_s > 0.0:
                a, _ = self._tdl(count, 2, 1.0 / float(time_s))  # samples at 0 and time_s
            else:
                a, _ = self._tdl(count, 1, 1.0)
        return np.reshape(a.numpy()[..., -1], (self.num_devices, -1))

    def _time_s(self, distance_m) -> float:
        distance = np.asarray(distance_m, np.float64)
        return float(distance.max() / self.speed_mps) if self.speed_mps > 0.0 else 0.0

    def at(self, distance_m) -> np.ndarray:
        """The responses ``[K, F]`` complex64 after ``distance_m`` [K] metres (module docstring)."""
        return (self.paths_at(self._time_s(distance_m)) @ self.tap_responses).astype(np.complex64)

    def at_pairs(self, distance_m, devices, coefficients) -> np.ndarray:
        """``[T, P]`` complex64: the responses of the pairs ``(devices [P], subcarriers [P])``
        at the distances ``distance_m`` [T, P] (one Sionna call per row)."""
        distance = np.atleast_2d(np.asarray(distance_m, np.float64))
        rows = [np.sum(self.paths_at(self._time_s(row))[devices] * self.tap_responses[:, coefficients].T, axis=1)
                for row in distance]
        return np.stack(rows).astype(np.complex64)
