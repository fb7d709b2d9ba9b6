"""Channel state information (CSI) at the devices.

Section III-A of the paper: in TDD each device knows its own channel (local CSI),
while the BS knows no per-device CSI. Device k pre-compensates the phase and the
gain of its channel with what it believes, ``h_hat_k`` (eq. ``Gen_x``); the true
channel ``h_k`` carries the signal (``phy.aircomp``). The paper assumes perfect
local CSI; the other models here let a study relax that:

* :class:`PerfectCSI` -- ``h_hat = h`` (the paper);
* :class:`GaussianCSI` -- additive estimation error at a given NMSE;
* :class:`LSPilotCSI` -- least-squares estimate from OFDM pilots at a given pilot SNR,
  with Sionna's pilot patterns and ``LSChannelEstimator``;
* :class:`OutdatedCSI` -- an earlier channel, correlated with the true one (aging).

Every model is called as ``csi(h, path_gain, seed)``:

Input: ``h`` [K, F] tf.complex64 (true channel), ``path_gain`` [K] tf.float32
(``E|h_kf|^2``), ``seed`` [2] tf.int32 (stateless). Output: ``h_hat`` [K, F]
tf.complex64. The same seed gives a bit-identical estimate.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sionna.phy.ofdm import LSChannelEstimator, PilotPattern, ResourceGrid, ResourceGridMapper

from native.streams import CSI_AGING
from phy.parameters import GaussianCsi, LsPilotCsi, OutdatedCsi
from phy.units import db_to_linear


def _check_inputs(h: tf.Tensor, path_gain: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    h = tf.convert_to_tensor(h, dtype=tf.complex64)
    path_gain = tf.convert_to_tensor(path_gain, dtype=tf.float32)
    if h.shape.rank != 2:
        raise ValueError(f"h must have shape [K, F], got {h.shape}")
    if path_gain.shape.rank != 1 or path_gain.shape[0] != h.shape[0]:
        raise ValueError(f"path_gain must have shape [{h.shape[0]}], got {path_gain.shape}")
    return h, path_gain


@tf.function(autograph=False)
def _complex_normal(shape: tf.Tensor, variance: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """``CN(0, variance)`` samples; ``variance`` [K] broadcast along the last axis."""
    parts = tf.random.stateless_normal(tf.concat([[2], shape], 0), seed, dtype=tf.float32)
    scale = tf.cast(tf.sqrt(variance / 2.0), tf.complex64)[:, None]
    return scale * tf.complex(parts[0], parts[1])


class PerfectCSI:
    """Perfect local CSI (the paper's assumption): ``h_hat = h``."""

    def __call__(self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        h, _ = _check_inputs(h, path_gain)
        return h


class GaussianCSI:
    """Additive Gaussian estimation error at a given normalised MSE.

    ``h_hat = h + e`` with ``e_kf ~ CN(0, 10^(nmse_db/10) path_gain_k)``, independent of
    h and across devices and subcarriers, so
    ``E|h_hat - h|^2 / E|h|^2 = 10^(nmse_db/10)``.

    Parameters
    ----------
    nmse_db : float
        Normalised mean squared error [dB], e.g. -20.
    """

    def __init__(self, nmse_db: float):
        self.nmse_db = GaussianCsi.check(nmse_db=nmse_db).nmse_db
        self.nmse = db_to_linear(self.nmse_db)

    def __call__(self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        h, path_gain = _check_inputs(h, path_gain)
        seed = tf.convert_to_tensor(seed, dtype=tf.int32)
        return h + _complex_normal(tf.shape(h), self.nmse * path_gain, seed)


class LSPilotCSI:
    """Least-squares channel estimate from one OFDM symbol of pilots.

    Each device receives one pilot OFDM symbol from the BS (TDD: the downlink pilot
    gives the uplink channel by reciprocity) on a Sionna
    :class:`~sionna.phy.ofdm.ResourceGrid` of F subcarriers and estimates its channel
    with :class:`~sionna.phy.ofdm.LSChannelEstimator`; the devices are the batch
    dimension (one receiver, one antenna, one transmitter, one stream each).
    Block fading makes one pilot symbol per round enough.

    * ``pilot_subcarrier_spacing = 1`` (default): pilots on every subcarrier, from
      Sionna's ``KroneckerPilotPattern`` (unit-modulus QPSK). The LS estimate is
      ``h_hat = y / x_p = h + n / x_p``, so the NMSE is exactly ``1 / SNR``.
    * ``pilot_subcarrier_spacing = s > 1``: comb pilots on subcarriers 0, s, 2s, ...
      and the last one (a custom ``PilotPattern`` of fixed unit-modulus QPSK values),
      and Sionna's linear interpolation in frequency in between; the NMSE then adds
      the interpolation error, which is small for frequency-correlated channels
      (TDL) and large for ``iid_rayleigh``.

    Pilot SNR (per device): ``SNR = E|h_kf|^2 E|x_p|^2 / N0_k = path_gain_k / N0_k``
    with unit-power pilots, i.e. every device sees the same pilot SNR whatever its
    distance (the noise variance used is ``N0_k = path_gain_k / SNR``). The noise
    ``n ~ CN(0, N0_k)`` is drawn statelessly from ``seed``.

    Parameters
    ----------
    pilot_snr_db : float
        Pilot SNR [dB].
    pilot_subcarrier_spacing : int
        Distance between pilot subcarriers (>= 1, default 1: all subcarriers).

    Notes
    -----
    :meth:`estimate` also returns Sionna's error variance ``N0_k / |x_p|^2`` per
    resource element (interpolated; it does not include the interpolation error).
    """

    def __init__(self, pilot_snr_db: float, pilot_subcarrier_spacing: int = 1):
        self.pilot_snr_db = LsPilotCsi.check(pilot_snr_db=pilot_snr_db).pilot_snr_db
        self.pilot_snr = db_to_linear(self.pilot_snr_db)
        if (
            isinstance(pilot_subcarrier_spacing, bool)
            or not isinstance(pilot_subcarrier_spacing, int | np.integer)
            or pilot_subcarrier_spacing < 1
        ):
            raise ValueError(
                f"pilot_subcarrier_spacing must be an integer >= 1, got {pilot_subcarrier_spacing!r}"
            )
        self.pilot_subcarrier_spacing = int(pilot_subcarrier_spacing)
        self._cache: dict[int, tuple[tf.Tensor, LSChannelEstimator]] = {}

    def resource_grid(self, num_subcarriers: int) -> ResourceGrid:
        """The pilot ``ResourceGrid`` (1 OFDM symbol, FFT size F) used for F subcarriers."""
        if self.pilot_subcarrier_spacing == 1:
            return ResourceGrid(
                num_ofdm_symbols=1, fft_size=num_subcarriers, subcarrier_spacing=15e3,
                pilot_pattern="kronecker", pilot_ofdm_symbol_indices=[0], precision="single",
            )
        mask = np.zeros([1, 1, 1, num_subcarriers], bool)
        mask[..., :: self.pilot_subcarrier_spacing] = True
        mask[..., -1] = True
        qpsk = np.random.default_rng(0).integers(0, 4, size=[1, 1, int(mask.sum())])
        pilots = np.exp(1j * np.pi / 4 * (2 * qpsk + 1)).astype(np.complex64)
        return ResourceGrid(
            num_ofdm_symbols=1, fft_size=num_subcarriers, subcarrier_spacing=15e3,
            pilot_pattern=PilotPattern(mask, pilots, precision="single"), precision="single",
        )

    def _setup(self, num_subcarriers: int) -> tuple[tf.Tensor, LSChannelEstimator]:
        if num_subcarriers not in self._cache:
            grid = self.resource_grid(num_subcarriers)
            mapper = ResourceGridMapper(grid, precision="single")
            no_data = tf.zeros([1, 1, 1, int(grid.num_data_symbols)], tf.complex64)
            pilot_symbol = tf.reshape(mapper(no_data), [num_subcarriers])  # x_p, zero off pilots
            interpolation = "nn" if self.pilot_subcarrier_spacing == 1 else "lin"
            estimator = LSChannelEstimator(grid, interpolation_type=interpolation,
                                           precision="single")
            self._cache[num_subcarriers] = (pilot_symbol, estimator)
        return self._cache[num_subcarriers]

    def estimate(
        self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """LS estimate and Sionna's error variance, both ``[K, F]`` (complex64, float32)."""
        h, path_gain = _check_inputs(h, path_gain)
        self._setup(int(h.shape[1]))
        return self._estimate(h, path_gain, tf.convert_to_tensor(seed, dtype=tf.int32))

    @tf.function(autograph=False)
    def _estimate(
        self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        num_devices, num_subcarriers = h.shape[0], h.shape[1]
        pilot_symbol, estimator = self._setup(num_subcarriers)
        noise_var = path_gain / self.pilot_snr  # [K]
        y = h * pilot_symbol[None, :] + _complex_normal(tf.shape(h), noise_var, seed)
        # y as the received grid [K, num_rx=1, num_rx_ant=1, num_ofdm_symbols=1, F]
        h_hat, err_var = estimator(
            tf.reshape(y, [num_devices, 1, 1, 1, num_subcarriers]), noise_var
        )  # [K, 1, 1, 1, 1, 1, F]
        shape = [num_devices, num_subcarriers]
        return tf.reshape(h_hat, shape), tf.reshape(err_var, shape)

    def __call__(self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        return self.estimate(h, path_gain, seed)[0]


class OutdatedCSI:
    """Outdated CSI: the device's estimate is an earlier channel (Gauss-Markov aging).

    ``h_hat = rho h + sqrt(1 - rho^2) w`` with ``w`` an independent channel of the same
    variance, so ``E|h_hat|^2 = E|h|^2`` and the correlation coefficient
    ``E[h_hat h^*] / E|h|^2 = rho``. This is the first-order Gauss-Markov model of
    channel aging; for Jakes' Doppler spectrum ``rho = J0(2 pi f_D tau)`` for a delay
    ``tau`` at maximum Doppler ``f_D``. The resulting NMSE is ``2 (1 - rho)``.

    Parameters
    ----------
    correlation : float, optional
        rho in [-1, 1].
    delay_s, speed_mps, carrier_frequency_hz : float, optional
        Instead of ``correlation``: the estimate's age tau [s], the device's speed v [m/s] and
        the carrier f_c [Hz], so ``rho = J0(2 pi f_D tau)``, ``f_D = v f_c / c``
        (:func:`phy.doppler.jakes_correlation`).
    channel : callable, optional
        A channel model of :mod:`phy.channel`; if given, ``w = channel(path_gain, seed)``
        is a fresh draw of that model (seed: ``stateless_fold_in(seed, CSI_AGING)``), so ``h_hat`` keeps the frequency structure of
        h (flat, TDL). By default ``w_kf ~ CN(0, path_gain_k)`` i.i.d., which is the
        same distribution as the paper's ``iid_rayleigh`` channel.
    """

    def __init__(self, correlation: float | None = None, channel=None, *, delay_s: float | None = None,
                 speed_mps: float | None = None, carrier_frequency_hz: float | None = None):
        self.correlation = OutdatedCsi.check(correlation=correlation, delay_s=delay_s, speed_mps=speed_mps,
                                             carrier_frequency_hz=carrier_frequency_hz).rho()
        self.channel = channel

    def __call__(self, h: tf.Tensor, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        h, path_gain = _check_inputs(h, path_gain)
        # A sub-seed, so that w differs from h even if the caller reuses the channel's seed.
        w_seed = tf.random.experimental.stateless_fold_in(
            tf.convert_to_tensor(seed, dtype=tf.int32), CSI_AGING
        )
        if self.channel is None:
            w = _complex_normal(tf.shape(h), path_gain, w_seed)
        else:
            w = self.channel(path_gain, w_seed)
        rho = self.correlation
        return tf.cast(rho, tf.complex64) * h + tf.cast(np.sqrt(1.0 - rho**2), tf.complex64) * w
