"""3GPP TR 38.901 system-level cells (UMi, UMa, RMa) for single-antenna devices.

A :class:`SystemLevelCell` puts K single-antenna devices around one single-antenna
base station (BS) at the origin and models the uplink (devices transmit, the BS
receives) with Sionna's system-level channel models
:class:`sionna.phy.channel.tr38901.UMi`, ``UMa`` and ``RMa``:

* **Large scale, fixed for the run** (drawn once from the constructor's seed): the
  indoor/outdoor state, the LoS/NLoS state (TR 38.901 Section 7.4.2, Table 7.4.2-1),
  the path loss (Table 7.4.1-1, plus the O2I penetration loss of Section 7.4.3 for
  indoor devices) and the large-scale parameters (LSPs) of Table 7.5-6: delay and
  angle spreads, Rician K-factor and the shadow fading (SF), cross-correlated and
  spatially correlated as in Section 7.5, step 4. The linear large-scale gain of
  device k is ``path_gain_k = 10^(-(PL_k + SF_k)/10)``.
* **Small scale, one draw per round** (block fading; :meth:`SystemLevelCell.cir` and
  :meth:`SystemLevelCell.__call__` take the round's stateless seed): the clusters of
  Section 7.5, steps 5-11 (delays, powers, angles, ray coupling, cross-polarisation
  ratios, random initial phases), from the fixed LSPs. Zero speed, so no Doppler.

What Sionna 1.x computes, and what this module changes
------------------------------------------------------
(Read from ``sionna/phy/channel/tr38901``, Sionna 1.2.2.)

* Sionna's path coefficients ``a`` *include* path loss and shadow fading by default:
  step 12 of ``SystemLevelChannel`` multiplies the unit-power small-scale
  coefficients by ``10^(-PL/20) sqrt(sf)``, where ``sf = 10^(SF_dB/10)`` is the SF
  LSP. The small-scale part has unit mean power: the cluster powers are normalised
  to sum 1 (step 6), each cluster is the sum of 20 rays of power ``P_n/20`` with
  independent uniform initial phases (step 10), the LoS ray gets the weight
  ``K/(K+1)`` and the clusters ``1/(K+1)`` (step 11), and a vertically polarised
  omnidirectional element has unit field gain in every direction. Hence
  ``E|H_k(f)|^2 = 10^(-PL_k/10) sf_k`` on every subcarrier, the expectation being
  over the small-scale draw with the LSPs fixed.
* With ``always_generate_lsp=False`` (used here) the LSPs are drawn once, in
  ``set_topology``; every call re-draws the rays only. But step 12 calls
  ``LSPGenerator.sample_pathloss()`` on *every* call, which re-draws the Gaussian
  O2I loss component (``sigma_P`` = 4.4 dB, low-loss model) of indoor devices, so
  their large-scale gain would change from round to round.
* ``SystemLevelScenario.distance_3d`` returns the 2-D distance in Sionna 1.2.2
  (NVlabs/sionna issue #1100, acknowledged as a bug), so the path-loss formulas
  are evaluated at ``d2D`` instead of ``d3D`` (0.76 dB too little LoS loss in UMi
  at 20 m).
* LoS/NLoS: ``set_topology`` draws a Bernoulli LoS state per outdoor device with
  the probability of Table 7.4.2-1 evaluated at ``d2D-out``, or forces it for all
  outdoor devices (``los=True/False``). Indoor devices are always NLoS in Sionna:
  they get the O2I LSP parameters and the NLoS basic path loss (TR 38.901 would
  draw their LoS state from ``d2D-out`` too). Sionna draws the indoor distance
  ``d2D-in`` from one uniform variable (TR 38.901 Section 7.4.3.1: the minimum of
  two).

This module therefore builds the channel as ``UMi``/``UMa``/``RMa`` do
(``SystemLevelChannel(<Model>Scenario(...), always_generate_lsp=False)``), with a
scenario subclass whose ``distance_3d`` is the true 3-D distance, and with Sionna's
path loss and shadow fading **disabled**: ``a`` is then the unit-power small-scale
part, and this module scales it by ``sqrt(path_gain_k)``, where ``path_gain`` is
computed once from *Sionna's own* large-scale draw: its path loss
(``LSPGenerator.sample_pathloss()``, called once under the constructor's seed) and
its SF LSP (the one that is cross-correlated with the delay spread and K-factor
used for the rays). So ``E|H_kf|^2 = path_gain_k`` and ``path_gain`` is the same
in every round.

Sionna draws from its global generator ``sionna.phy.config.tf_rng``;
:func:`phy.channel.sionna_rng_seeded` makes every draw depend on a stateless
``[2] tf.int32`` seed only. Call the cell eagerly (not inside a ``tf.function``);
it is not thread-safe.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sionna.phy import config as sionna_config
from sionna.phy.channel import cir_to_ofdm_channel, subcarrier_frequencies
from sionna.phy.channel.tr38901 import (
    Antenna,
    LSPGenerator,
    PanelArray,
    RMaScenario,
    SystemLevelChannel,
    UMaScenario,
    UMiScenario,
)

from phy.channel import _check_num_subcarriers, sionna_rng_seeded
from phy.limits import (
    CELL_MODELS,  # re-exported: phy.cells is their public home
    MIN_DISTANCE_M,
    check_cell_parameters,
)
from phy.parameters import CHANNEL_MODELS


def _with_3d_distance(scenario_class: type) -> type:
    """Subclass of a Sionna scenario whose ``distance_3d`` is the 3-D distance.

    Sionna 1.2.2's ``SystemLevelScenario.distance_3d`` returns ``_distance_2d``
    (NVlabs/sionna#1100); the path loss, the indoor 3-D distances and the LoS phase
    use it. The 3-D distance ``_distance_3d`` is computed by the same scenario.
    """

    class Scenario(scenario_class):
        @property
        def distance_3d(self):
            return self._distance_3d

    Scenario.__name__ = Scenario.__qualname__ = f"{scenario_class.__name__}3d"
    return Scenario


_SCENARIOS = {
    "umi": _with_3d_distance(UMiScenario),
    "uma": _with_3d_distance(UMaScenario),
    "rma": _with_3d_distance(RMaScenario),
}


def _check_positive(name: str, value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float | np.integer | np.floating)
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _check_positions(positions_m: np.ndarray) -> np.ndarray:
    positions = np.array(positions_m, dtype=np.float64)
    if positions.ndim != 2 or positions.shape[1] != 2 or positions.shape[0] < 1:
        raise ValueError(f"positions_m must have shape [K, 2] with K >= 1, got {positions.shape}")
    if not np.all(np.isfinite(positions)):
        raise ValueError("positions_m must be finite, got non-finite entries")
    distances = np.hypot(positions[:, 0], positions[:, 1])
    too_close = np.flatnonzero(distances < MIN_DISTANCE_M)
    if too_close.size:
        raise ValueError(
            f"positions_m: devices {too_close.tolist()} are closer than "
            f"{MIN_DISTANCE_M} m to the BS (distances {distances[too_close].tolist()})"
        )
    _, first, counts = np.unique(positions, axis=0, return_index=True, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(
            "positions_m: devices must be at distinct positions (the LSP spatial "
            "correlation matrix of co-located devices is singular), got duplicates of "
            f"devices {np.sort(first[counts > 1]).tolist()}"
        )
    return positions


class SystemLevelCell:
    r"""3GPP TR 38.901 UMi / UMa / RMa cell: K single-antenna devices, one BS, uplink.

    Sionna's system-level model of ``model`` ("umi": UMi-Street Canyon, "uma": UMa,
    "rma": RMa) with one vertically polarised omnidirectional antenna at each device
    and at the BS (no sectorisation, no antenna gain), direction "uplink", devices at
    zero speed, O2I low-loss model (TR 38.901 Section 7.4.3.1) for indoor devices.
    The BS is at ``(0, 0, bs_height_m)``, device k at
    ``(x_k, y_k, ut_height_m)``.

    The constructor draws the large-scale state from ``seed``: indoor states
    (Bernoulli ``indoor_probability``), LoS states (Table 7.4.2-1, or forced by
    ``force_los``), UMa's effective environment height ``h_E`` (only random for
    ``ut_height_m`` > 13 m), indoor distances and O2I losses, and the LSPs of
    Table 7.5-6 including the SF (std, LoS / NLoS / indoor: UMi 4 / 7.82 / 7 dB,
    UMa 4 / 6 / 7 dB, RMa 4 (6 beyond the breakpoint) / 8 / 8 dB), spatially
    correlated between devices in the same state with the correlation distances of
    Table 7.5-6. They stay fixed for the life of the cell;
    each :meth:`cir` call re-draws the small-scale fading only (see the module
    docstring for what Sionna computes).

    Validation: ``positions_m`` must be finite, ``[K, 2]``, every device at least
    ``MIN_DISTANCE_M`` = 10 m from the BS in the plane (the smallest distance of
    Table 7.4.1-1; devices closer raise ``ValueError``, they are not clipped), no two
    devices at the same position. Distances beyond the validity of Table 7.4.1-1
    (5 km; 10 km for RMa LoS) are accepted and the formulas extrapolated. Every
    invalid argument raises ``ValueError`` naming the argument and its value.

    Parameters
    ----------
    model : str
        One of :data:`CELL_MODELS`: "umi", "uma" or "rma".
    positions_m : np.ndarray
        ``[K, 2]``, float64: device x/y coordinates [m], the BS at the origin.
    carrier_frequency_hz : float
        Carrier frequency [Hz], in [0.5, 100] GHz ([0.5, 30] GHz for RMa).
    subcarrier_spacing_hz : float
        Subcarrier spacing [Hz] (> 0).
    num_subcarriers : int
        F >= 1.
    seed : tf.Tensor
        ``[2]``, tf.int32, stateless seed of the large-scale draw. Use seeds
        different from those of the rounds.
    bs_height_m : float | None
        BS height [m]; `None` (default): TR 38.901 default of the model (UMi 10,
        UMa 25, RMa 35). Must exceed ``ut_height_m``; in [10, 150] for RMa.
    ut_height_m : float
        Device height [m] (default 1.5), in [1.5, 22.5] (UMi, UMa) or [1, 10] (RMa).
    indoor_probability : float
        Probability that a device is indoor (O2I), in [0, 1] (default 0).
    force_los : bool | None
        `None` (default): LoS states drawn from the LoS probability of TR 38.901
        Table 7.4.2-1; `True` / `False`: all outdoor devices in LoS / NLoS. Indoor
        devices are always NLoS.
    num_bs_antennas : int
        N_r >= 1 (default 1): with N_r > 1 the BS is a uniform linear array of N_r
        vertically polarised omni elements at half-wavelength spacing (Sionna's
        ``PanelArray`` with one row of N_r columns) and :meth:`antennas` /
        :meth:`cir_antennas` give the channel to every element; N_r = 1 is the single
        ``Antenna`` (the call and :meth:`cir`).

    Attributes
    ----------
    path_gain : np.ndarray
        ``[K]``, float64: linear large-scale gain ``10^(-(PL_k + SF_k)/10)``, fixed.
    path_loss_db : np.ndarray
        ``[K]``, float64: ``PL_k`` [dB], Table 7.4.1-1 at the 3-D distance for the
        device's LoS/NLoS state, plus the O2I loss for indoor devices.
    shadow_fading_db : np.ndarray
        ``[K]``, float64: ``SF_k`` [dB], zero-mean Gaussian (``SF_k > 0`` is extra
        loss).
    los : np.ndarray
        ``[K]``, bool: LoS state.
    indoor : np.ndarray
        ``[K]``, bool: indoor (O2I) state.
    distances_m, distances_3d_m : np.ndarray
        ``[K]``, float64: 2-D and 3-D device-BS distances [m].
    num_subcarriers : int
        F.

    Input (``__call__``)
    --------------------
    path_gain : any
        Ignored (accepted for compatibility with the models of :mod:`phy.channel`);
        the cell's own :attr:`path_gain` applies.
    seed : [2], tf.int32
        Stateless seed of the round.

    Output (``__call__``)
    ---------------------
    h : [K, F], tf.complex64
        Frequency response ``H_k(f) = sum_p a_kp exp(-j 2 pi f tau_kp)`` at the
        baseband subcarrier frequencies of
        :func:`sionna.phy.channel.subcarrier_frequencies`
        (:func:`sionna.phy.channel.cir_to_ofdm_channel`, ``normalize=False``), with
        ``E|h_kf|^2 = path_gain_k`` on every subcarrier.
    """

    def __init__(
        self,
        model: str,
        positions_m: np.ndarray,
        *,
        carrier_frequency_hz: float,
        subcarrier_spacing_hz: float,
        num_subcarriers: int,
        seed: tf.Tensor,
        bs_height_m: float | None = None,
        ut_height_m: float = 1.5,
        indoor_probability: float = 0.0,
        force_los: bool | None = None,
        num_bs_antennas: int = 1,
    ):
        if not isinstance(model, str) or model not in CELL_MODELS:
            raise ValueError(f"model must be one of {CELL_MODELS}, got {model!r}")
        # the model's parameters and Table 7.4.1-1's ranges (phy.parameters, phy.limits)
        checked = CHANNEL_MODELS[model].parameters.check(
            carrier_frequency_hz=carrier_frequency_hz, bs_height_m=bs_height_m,
            ut_height_m=ut_height_m, indoor_probability=indoor_probability)
        carrier_frequency_hz, ut_height_m = checked.carrier_frequency_hz, checked.ut_height_m
        indoor_probability = checked.indoor_probability
        bs_height_m = check_cell_parameters(model, carrier_frequency_hz=carrier_frequency_hz,
                                            bs_height_m=checked.bs_height_m, ut_height_m=ut_height_m)
        subcarrier_spacing_hz = _check_positive("subcarrier_spacing_hz", subcarrier_spacing_hz)
        self.num_subcarriers = _check_num_subcarriers(num_subcarriers)
        if force_los is not None and not isinstance(force_los, bool | np.bool_):
            raise ValueError(f"force_los must be None, True or False, got {force_los!r}")
        positions = _check_positions(positions_m)
        if isinstance(num_bs_antennas, bool) or not isinstance(num_bs_antennas, int | np.integer) \
                or num_bs_antennas < 1:
            raise ValueError(f"num_bs_antennas must be an integer >= 1, got {num_bs_antennas!r}")

        self.model = model
        self.carrier_frequency_hz = carrier_frequency_hz
        self.subcarrier_spacing_hz = subcarrier_spacing_hz
        self.bs_height_m = bs_height_m
        self.ut_height_m = ut_height_m
        self.indoor_probability = float(indoor_probability)
        self.num_bs_antennas = int(num_bs_antennas)
        self._scenario, self._channel = self._sionna_channel()
        indoor, path_loss_db, shadow_fading = self._draw_large_scale(positions, seed, force_los)
        self._keep_large_scale(positions, indoor, path_loss_db, shadow_fading)

        self._amplitude = tf.constant(np.sqrt(self.path_gain)[:, None], tf.complex64)
        self.bs_xy_m = np.zeros(2)  # the BS at the origin (the moving devices' walls are centred on it)
        self._frequencies = subcarrier_frequencies(
            self.num_subcarriers, subcarrier_spacing_hz, precision="single"
        )

    def _sionna_channel(self):
        """Sionna's TR 38.901 scenario of :attr:`model` (uplink, path loss and shadow
        fading off: the cell applies its own, drawn once) with its antennas, and the
        ``SystemLevelChannel`` over it; ``(scenario, channel)``."""
        antenna = Antenna(
            polarization="single", polarization_type="V", antenna_pattern="omni",
            carrier_frequency=self.carrier_frequency_hz, precision="single",
        )
        bs_array = antenna if self.num_bs_antennas == 1 else PanelArray(
            num_rows_per_panel=1, num_cols_per_panel=self.num_bs_antennas, polarization="single",
            polarization_type="V", antenna_pattern="omni",
            carrier_frequency=self.carrier_frequency_hz, precision="single")
        scenario_args = dict(
            carrier_frequency=self.carrier_frequency_hz, ut_array=antenna, bs_array=bs_array,
            direction="uplink", enable_pathloss=False, enable_shadow_fading=False,
            precision="single",
        )
        if self.model != "rma":  # RMa has the low-loss O2I model built in
            scenario_args["o2i_model"] = "low"
        scenario = _SCENARIOS[self.model](**scenario_args)
        return scenario, SystemLevelChannel(scenario, always_generate_lsp=False)

    def _draw_large_scale(self, positions: np.ndarray, seed: tf.Tensor,
                          force_los: bool | None) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Set the topology (device k at ``(x_k, y_k, ut_height_m)``, the BS at the
        origin) and draw, from ``seed``, the indoor and LoS states, the LSPs and the
        path loss with its O2I loss, once.

        Input
        -----
        positions : [K, 2], float64
        seed : [2], tf.int32

        Output
        ------
        indoor : [1, K], tf.bool
        path_loss_db : [1, 1, K], tf.float32
        shadow_fading : [1, 1, K], tf.float32, linear (Sionna's SF LSP)
        """
        num_devices = positions.shape[0]
        ut_loc = np.concatenate([positions, np.full((num_devices, 1), self.ut_height_m)], axis=1)
        zeros_ut = tf.zeros([1, num_devices, 3], tf.float32)
        with sionna_rng_seeded(seed):
            indoor = (
                sionna_config.tf_rng.uniform([1, num_devices], dtype=tf.float32)
                < self.indoor_probability
            )
            self._channel.set_topology(
                ut_loc=tf.constant(ut_loc[None], tf.float32),
                bs_loc=tf.constant([[[0.0, 0.0, self.bs_height_m]]], tf.float32),
                ut_orientations=zeros_ut,
                bs_orientations=tf.zeros([1, 1, 3], tf.float32),
                ut_velocities=zeros_ut,
                in_state=indoor,
                los=None if force_los is None else bool(force_los),
            )
            # Once: Sionna would re-draw the O2I loss on every call (module docstring).
            path_loss_db = LSPGenerator(self._scenario).sample_pathloss()
        # The SF LSP of Sionna's own draw, [batch 1, BS 1, K], linear.
        shadow_fading = self._channel._lsp.sf
        return indoor, path_loss_db, shadow_fading

    def _keep_large_scale(self, positions: np.ndarray, indoor: tf.Tensor,
                          path_loss_db: tf.Tensor, shadow_fading: tf.Tensor) -> None:
        """Store the geometry and the large-scale draw of :meth:`_draw_large_scale` as the
        read-only ``[K]`` attributes of the class docstring (``positions_m``,
        ``distances_m``, ``distances_3d_m``, ``los``, ``indoor``, ``path_loss_db``,
        ``shadow_fading_db``, ``path_gain``); ``ValueError`` when the draw is not finite
        (devices too close to each other)."""
        num_devices = positions.shape[0]
        self.positions_m = positions
        self.distances_m = np.hypot(positions[:, 0], positions[:, 1])
        self.distances_3d_m = np.hypot(self.distances_m, self.bs_height_m - self.ut_height_m)
        self.los = np.reshape(self._scenario.los.numpy(), [num_devices])
        self.indoor = np.reshape(indoor.numpy(), [num_devices])
        self.path_loss_db = np.reshape(path_loss_db.numpy(), [num_devices]).astype(np.float64)
        self.shadow_fading_db = -10.0 * np.log10(
            np.reshape(shadow_fading.numpy(), [num_devices]).astype(np.float64)
        )
        self.path_gain = 10.0 ** (-(self.path_loss_db + self.shadow_fading_db) / 10.0)
        if not np.all(np.isfinite(self.path_gain)):
            raise ValueError(
                "positions_m: the large-scale draw is not finite; devices are too close "
                "to each other (the LSP spatial correlation matrix is numerically "
                f"singular), minimum distance between devices {self._min_spacing_m():.3g} m"
            )
        for array in (self.positions_m, self.distances_m, self.distances_3d_m, self.los,
                      self.indoor, self.path_loss_db, self.shadow_fading_db, self.path_gain):
            array.flags.writeable = False

    @property
    def num_devices(self) -> int:
        """K, the number of devices."""
        return int(self.path_gain.shape[0])

    def _min_spacing_m(self) -> float:
        diff = self.positions_m[:, None, :] - self.positions_m[None, :, :]
        spacing = np.hypot(diff[..., 0], diff[..., 1])
        np.fill_diagonal(spacing, np.inf)
        return float(np.min(spacing))

    def moving_channel(self, motion, compute_seconds_per_round: float, rng: np.random.Generator):
        """The cell's devices moved by ``motion`` (centred on the BS at the origin): the rays
        of one small-scale draw at a seed from ``rng``, each turning with its own Doppler
        (:mod:`phy.moving_tr38901`), in a :class:`phy.moving_rays.TracedMovingChannel`."""
        from phy.moving_rays import TracedMovingChannel
        from phy.moving_tr38901 import ray_fading

        seed = rng.integers(0, 2 ** 31 - 1, size=2).astype(np.int32)
        return TracedMovingChannel(motion, ray_fading(self, seed), self.num_subcarriers,
                                   compute_seconds_per_round, self.bs_xy_m)

    def cir(self, path_gain, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Small-scale draw of one round (block fading): the channel impulse response.

        Input
        -----
        path_gain : ignored
            For the interface of :mod:`phy.channel`'s models (the cell's own
            ``path_gain`` applies).
        seed : [2], tf.int32
            Stateless seed of the round; the same seed gives bit-identical outputs.

        Output
        ------
        a : [K, P], tf.complex64
            Path coefficients including ``sqrt(path_gain_k)``:
            ``E[sum_p |a_kp|^2] = path_gain_k``. P is the largest number of
            clusters over the LoS, NLoS and O2I states plus 4 (the two strongest
            clusters are split into three sub-clusters, TR 38.901 Section 7.5
            step 11): 23 (UMi), 24 (UMa), 15 (RMa). Paths that do not exist for
            a device (its state has fewer clusters) have ``a = 0``.
        tau : [K, P], tf.float32
            Path delays [s], >= 0, relative to the first path (no propagation
            delay); 0 for the paths that do not exist.
        """
        with sionna_rng_seeded(seed):
            # One time sample, zero speed: the sampling frequency is irrelevant.
            a, tau = self._channel(1, 1.0)
        a = tf.reshape(a, [self.num_devices, -1])  # [1, 1, 1, K, 1, P, 1] -> [K, P]
        tau = tf.reshape(tau, [self.num_devices, -1])  # [1, 1, K, P] -> [K, P]
        # Sionna gives non-existent clusters zero power and a 1 s placeholder delay.
        tau = tf.where(tf.abs(a) > 0, tau, tf.zeros_like(tau))
        return a * self._amplitude, tau

    def cir_antennas(self, path_gain, seed: tf.Tensor, num_antennas: int) -> tuple[tf.Tensor, tf.Tensor]:
        """:meth:`cir` at every BS element: ``a`` [K, N_r, P] complex64 (with
        ``sqrt(path_gain_k)``), ``tau`` [K, P] float32 [s]; ``num_antennas`` must be the
        cell's ``num_bs_antennas``."""
        if num_antennas != self.num_bs_antennas:
            raise ValueError(f"num_antennas must be the cell's num_bs_antennas = "
                             f"{self.num_bs_antennas}, got {num_antennas!r}")
        with sionna_rng_seeded(seed):
            a, tau = self._channel(1, 1.0)  # [1, 1, N_r, K, 1, P, 1], [1, 1, K, P]
        a = tf.transpose(tf.reshape(a, [num_antennas, self.num_devices, -1]), [1, 0, 2])
        tau = tf.reshape(tau, [self.num_devices, -1])
        tau = tf.where(tf.reduce_any(tf.abs(a) > 0, axis=1), tau, tf.zeros_like(tau))
        return a * self._amplitude[:, :, None], tau

    def antennas(self, path_gain, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """``[K, N_r, F]`` complex64: :meth:`cir_antennas`' frequency response at every BS
        element (``cir_to_ofdm_channel``, ``normalize=False``)."""
        a, tau = self.cir_antennas(path_gain, seed, num_antennas)
        num_paths = int(a.shape[2])
        response = cir_to_ofdm_channel(
            self._frequencies,
            tf.reshape(a, [self.num_devices, 1, num_antennas, 1, 1, num_paths, 1]),
            tf.reshape(tau, [self.num_devices, 1, 1, num_paths]),
            normalize=False,
        )  # [K, 1, N_r, 1, 1, 1, F]
        return tf.reshape(response, [self.num_devices, num_antennas, self.num_subcarriers])

    def __call__(self, path_gain: tf.Tensor | None, seed: tf.Tensor) -> tf.Tensor:
        """``[K, F]`` complex64 frequency response of the round drawn from ``seed``.

        ``cir_to_ofdm_channel(subcarrier_frequencies(F, subcarrier_spacing_hz), a,
        tau, normalize=False)`` of :meth:`cir` ``(seed)``, as :class:`phy.channel.TDL`.
        ``path_gain`` is ignored (see the class docstring).
        """
        del path_gain  # the cell's own large-scale gain applies
        a, tau = self.cir(None, seed)
        num_paths = int(a.shape[1])
        response = cir_to_ofdm_channel(
            self._frequencies,
            tf.reshape(a, [self.num_devices, 1, 1, 1, 1, num_paths, 1]),
            tf.reshape(tau, [self.num_devices, 1, 1, num_paths]),
            normalize=False,
        )  # [K, 1, 1, 1, 1, 1, F]
        return tf.reshape(response, [self.num_devices, self.num_subcarriers])
