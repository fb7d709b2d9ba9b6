"""The ray-traced channel: ``channel.model = "ray_traced"``, the paths of a real place.

:class:`RayTracedCell` takes the uplink paths of its K devices, traced once per drop
by Sionna RT in a scene (:class:`phy.ray_tracing.RayTracedPlace`, cached by
:class:`phy.path_cache.PathCache`), and gives the models' interface of
:mod:`phy.channel` and :mod:`phy.cells`: the frequency response ``[K, F]`` (``__call__``),
the paths (``cir``) for the time-domain uplink, and both per BS antenna (``antennas``,
``cir_antennas``). The path gains are the tracer's, absolute (free-space spreading,
reflection and diffraction losses, the isotropic antennas' apertures): they replace
``r^-alpha``, and ``path_gain`` (``sum_p |a_kp|^2``, averaged over the BS antennas) is
the large-scale gain the rest of the chain (CSI, power control, schemes, combiner,
privacy) reads.

Round to round (``channel.variation``):

* ``"phase"`` (the default): each path's phase is redrawn every round, uniform on
  [0, 2 pi), independently per device and path and the same at every BS antenna, from
  the round's stateless seed; the delays and powers stay the traced ones. This is what
  a move of a fraction of a wavelength does to a multipath channel (each path's length
  changes by an unknown fraction of a wavelength; its delay and power do not change
  measurably), so the rounds see independent small-scale fading with the place's
  power-delay profile, and the BS array's response per path is kept.
* ``"static"``: the traced channel, the same every round (the seed is not used).

Output convention (as :class:`phy.cells.SystemLevelCell`): ``H_kf = sum_p a_kp
exp(-j 2 pi f tau_kp)`` at the baseband subcarrier frequencies of
:func:`sionna.phy.channel.subcarrier_frequencies`. The phase factors
``exp(-j 2 pi f tau_kp)`` are computed once (float64, then complex64), so a round is
one ``[K, N_r, P] x [K, P, F]`` product.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sionna.phy.channel import subcarrier_frequencies

from phy.parameters import RayTracedChannel


class RayTracedCell:
    r"""K devices in a ray-traced scene, one BS with N_r antennas, uplink.

    Parameters
    ----------
    scene, bs_position_m, carrier_frequency_hz, ut_height_m, bs_antenna_spacing_wavelengths,
    max_depth, samples_per_source, interactions, variation, cache_dir, retrace_every_m
        ``[channel]``'s keys (:class:`phy.parameters.RayTracedChannel`); unset keys
        (None) take their defaults there.
    positions_m : np.ndarray
        ``[K, 2]``, float64: the devices' x, y in scene coordinates [m].
    subcarrier_spacing_hz : float
        Subcarrier spacing [Hz] (> 0).
    num_subcarriers : int
        F >= 1.
    num_bs_antennas : int
        N_r >= 1.
    place : phy.ray_tracing.RayTracedPlace, optional
        The scene with the BS (built from the keys when not given); its cache gives the
        paths when it holds them.

    Attributes
    ----------
    paths : phy.path_cache.TracedPaths
        ``a`` [K, N_r, P] complex64, ``tau_s`` [K, P] float32 [s] (and ``arrival_xy``
        from a place built with ``arrivals=True``, for devices that move: :mod:`phy.moving_rays`).
    frequencies_hz : np.ndarray
        ``[F]`` float64: the subcarriers' baseband frequencies.
    carrier_frequency_hz : float
    bs_xy_m : np.ndarray
        ``[2]``: the BS's x, y in scene coordinates [m].
    path_gain : np.ndarray
        ``[K]``, float64, linear: ``sum_p |a_knp|^2`` averaged over n.
    trace_attrs : dict
        ``{"ray_traced_paths": "<entry>.npz sha256:<checksum>"}``: the cache entry of the
        drop, recorded in the run's trace.

    Input (``__call__``)
    --------------------
    path_gain : any
        Ignored (the traced gains apply).
    seed : [2], tf.int32
        The round's stateless seed.

    Output (``__call__``)
    ---------------------
    h : [K, F], tf.complex64
        The round's frequency response at BS antenna 0.
    """

    def __init__(self, scene: str, bs_position_m, *, positions_m: np.ndarray, subcarrier_spacing_hz: float,
                 num_subcarriers: int, num_bs_antennas: int = 1, place=None, **keys):
        parameters = RayTracedChannel.check(scene=scene, bs_position_m=bs_position_m, **keys)
        if place is None:
            from phy.ray_tracing import RayTracedPlace

            place = RayTracedPlace(parameters, num_bs_antennas)
        self.variation = parameters.resolved("variation")
        self.retrace_every_m = parameters.retrace_every_m
        self._place = place
        self.num_subcarriers = int(num_subcarriers)
        self.num_bs_antennas = int(num_bs_antennas)
        self.paths = place.paths(np.asarray(positions_m, np.float64))
        if self.paths.a.shape[1] != self.num_bs_antennas:
            raise ValueError(f"the traced paths have {self.paths.a.shape[1]} BS antennas, "
                             f"num_bs_antennas = {self.num_bs_antennas}")
        missing = np.flatnonzero(~self.paths.has_path)
        if missing.size:
            raise ValueError(f"cell.positions_m: devices {missing.tolist()} have no traced path to the BS")
        self.path_gain = self.paths.path_gain
        self.path_gain.flags.writeable = False
        self.trace_attrs = {"ray_traced_paths": place.entry}
        frequencies = np.asarray(subcarrier_frequencies(self.num_subcarriers, float(subcarrier_spacing_hz),
                                                        precision="double"), np.float64)
        tau = self.paths.tau_s.astype(np.float64)
        self.frequencies_hz = frequencies
        self.carrier_frequency_hz = float(parameters.carrier_frequency_hz)
        self.bs_xy_m = np.asarray(place.bs_xy_m, np.float64)
        self._phase_factors = tf.constant(  # [K, P, F]
            np.exp(-2j * np.pi * tau[:, :, None] * frequencies[None, None, :]).astype(np.complex64))
        self._a = tf.constant(self.paths.a)
        self._tau = tf.constant(self.paths.tau_s)

    @property
    def num_devices(self) -> int:
        """K."""
        return self.paths.num_devices

    def moving_channel(self, motion, compute_seconds_per_round: float, rng=None):
        """This drop's paths turned as ``motion`` (centred on the BS) moves the devices:
        a :class:`phy.moving_rays.TracedMovingChannel`, or with ``retrace_every_m`` a
        :class:`phy.retraced_rays.RetracedMovingChannel` that traces them anew in this
        cell's place (the paths need their directions of arrival: a place built with
        ``arrivals=True``); ``rng`` is not drawn from."""
        from phy.moving_rays import TracedMovingChannel, TracedPathFading

        if self.retrace_every_m is not None:
            from phy.retraced_rays import RetracedMovingChannel

            return RetracedMovingChannel(motion, self.paths, self.frequencies_hz, self.carrier_frequency_hz,
                                         self.num_subcarriers, compute_seconds_per_round, self.bs_xy_m, self._place,
                                         self.retrace_every_m)
        fading = TracedPathFading(self.paths, self.frequencies_hz, self.carrier_frequency_hz)
        return TracedMovingChannel(motion, fading, self.num_subcarriers, compute_seconds_per_round, self.bs_xy_m)

    def _round_paths(self, seed: tf.Tensor) -> tf.Tensor:
        """``[K, N_r, P]`` complex64: the traced coefficients, each path's phase redrawn
        from ``seed`` (``variation = "phase"``) or as traced (``"static"``)."""
        if self.variation == "static":
            return self._a
        num_devices, _, num_paths = self.paths.a.shape
        phases = tf.random.stateless_uniform([num_devices, num_paths], tf.convert_to_tensor(seed, tf.int32),
                                             minval=0.0, maxval=2.0 * np.pi, dtype=tf.float32)
        return self._a * tf.exp(tf.complex(tf.zeros_like(phases), phases))[:, None, :]

    def _check_antennas(self, num_antennas: int) -> None:
        if num_antennas != self.num_bs_antennas:
            raise ValueError(f"num_antennas must be the cell's num_bs_antennas = "
                             f"{self.num_bs_antennas}, got {num_antennas!r}")

    def cir_antennas(self, path_gain, seed: tf.Tensor, num_antennas: int) -> tuple[tf.Tensor, tf.Tensor]:
        """The round's paths at every BS antenna: ``a`` [K, N_r, P] complex64, ``tau``
        [K, P] float32 [s] (the first path of each device at 0). ``path_gain`` is ignored."""
        self._check_antennas(num_antennas)
        return self._round_paths(seed), self._tau

    def cir(self, path_gain, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The round's paths at BS antenna 0: ``a`` [K, P] complex64, ``tau`` [K, P]
        float32 [s]. ``path_gain`` is ignored."""
        return self._round_paths(seed)[:, 0, :], self._tau

    def antennas(self, path_gain, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """``[K, N_r, F]`` complex64: the round's frequency response at every BS antenna,
        ``H_knf = sum_p a_knp exp(-j 2 pi f tau_kp)``. ``path_gain`` is ignored."""
        self._check_antennas(num_antennas)
        return tf.matmul(self._round_paths(seed), self._phase_factors)

    def __call__(self, path_gain, seed: tf.Tensor) -> tf.Tensor:
        """``[K, F]`` complex64: :meth:`antennas` at antenna 0 (bit for bit)."""
        return self.antennas(path_gain, seed, self.num_bs_antennas)[:, 0, :]
