"""Small-scale fading of the device-to-BS links, one draw per round (block fading).

Section III-A of the paper (the channel ``h_{t,k}`` of eq. ``ReceivedSignal``): the
channel of device k in round t is constant over the N OFDM symbols of the round and varies independently across rounds, with
``h_{t,k} ~ CN(0, r_k^-alpha I_F)``. A channel model here therefore returns one
``[K, F]`` complex64 tensor per round (never ``[K, N, F]``), with
``E|h_kf|^2 = path_gain_k`` for every model:

* :class:`IidRayleigh` -- i.i.d. ``CN(0, r_k^-alpha)`` per subcarrier (the paper);
* :class:`FlatRayleigh` -- Sionna's ``RayleighBlockFading``: one coefficient for all
  subcarriers of a device;
* :class:`TDL` -- Sionna's 3GPP TR 38.901 tapped-delay-line models A-E (static),
  turned into a frequency response on the subcarriers, so neighbouring subcarriers
  are correlated as in a real channel.

Every model is called as ``model(path_gain, seed)`` with ``seed`` a stateless
``[2] tf.int32`` seed: the same seed gives a bit-identical channel.

Sionna's channel blocks draw from Sionna's global generator
``sionna.phy.config.tf_rng`` (a ``tf.random.Generator``) and take no seed.
:func:`sionna_rng_seeded` makes them stateless: it resets that generator from the
stateless seed, lets the block draw, and restores the generator's previous state,
so the draw depends on the seed only and the global stream is left as it was. It
needs the seed's value, so :class:`FlatRayleigh` and :class:`TDL` run eagerly (not
inside a ``tf.function``) and are not thread-safe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from sionna.phy import config as sionna_config
from sionna.phy.channel import RayleighBlockFading, cir_to_ofdm_channel, subcarrier_frequencies
from sionna.phy.channel.tr38901 import TDL as SionnaTDL

from phy.parameters import IidRayleighChannel, TdlChannel


@contextlib.contextmanager
def sionna_rng_seeded(seed: tf.Tensor) -> Iterator[None]:
    """Run Sionna blocks that draw from ``sionna.phy.config.tf_rng`` from a stateless seed.

    Parameters
    ----------
    seed : tf.Tensor
        ``[2]``, tf.int32, an eager (concrete) stateless seed.

    Notes
    -----
    On entry the generator is reset from the 62-bit integer
    ``(seed[0] mod 2^31) * 2^31 + (seed[1] mod 2^31)``; on exit its previous state is
    restored (also on error). Sionna's Python and NumPy generators are not touched.
    """
    try:
        words = np.asarray(tf.get_static_value(tf.convert_to_tensor(seed)), dtype=np.int64)
    except TypeError as err:  # pragma: no cover - symbolic tensors only
        raise ValueError(f"seed must be a concrete [2] tensor (eager mode), got {seed!r}") from err
    if words.shape != (2,):
        raise ValueError(f"seed must have shape [2], got {words.shape}")
    value = (int(words[0]) & 0x7FFFFFFF) << 31 | (int(words[1]) & 0x7FFFFFFF)
    generator = sionna_config.tf_rng
    saved_state = tf.identity(generator.state)
    generator.reset_from_seed(value)
    try:
        yield
    finally:
        generator.reset(saved_state)


def _check_num_subcarriers(num_subcarriers: int) -> int:
    if (
        isinstance(num_subcarriers, bool)
        or not isinstance(num_subcarriers, int | np.integer)
        or num_subcarriers < 1
    ):
        raise ValueError(f"num_subcarriers must be an integer >= 1, got {num_subcarriers!r}")
    return int(num_subcarriers)


def _amplitude(path_gain: tf.Tensor) -> tf.Tensor:
    """``[K]`` float32 path gain -> ``[K, 1]`` complex64 amplitude sqrt(path_gain)."""
    path_gain = tf.convert_to_tensor(path_gain, dtype=tf.float32)
    if path_gain.shape.rank != 1:
        raise ValueError(f"path_gain must have shape [K], got {path_gain.shape}")
    return tf.cast(tf.sqrt(path_gain), tf.complex64)[:, None]


@tf.function(autograph=False)
def _iid_rayleigh(amplitude: tf.Tensor, num_subcarriers: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    shape = tf.stack([2, tf.shape(amplitude)[0], num_subcarriers])
    parts = tf.random.stateless_normal(shape, seed, stddev=np.sqrt(0.5), dtype=tf.float32)
    return amplitude * tf.complex(parts[0], parts[1])


@tf.function(autograph=False)
def _iid_rayleigh_antennas(amplitude: tf.Tensor, num_antennas: tf.Tensor, num_subcarriers: tf.Tensor,
                           seed: tf.Tensor) -> tf.Tensor:
    shape = tf.stack([2, tf.shape(amplitude)[0], num_antennas, num_subcarriers])
    parts = tf.random.stateless_normal(shape, seed, stddev=np.sqrt(0.5), dtype=tf.float32)
    return amplitude[:, :, None] * tf.complex(parts[0], parts[1])


def _check_num_antennas(num_antennas: int) -> int:
    if isinstance(num_antennas, bool) or not isinstance(num_antennas, int | np.integer) or num_antennas < 1:
        raise ValueError(f"num_antennas must be an integer >= 1, got {num_antennas!r}")
    return int(num_antennas)


class IidRayleigh:
    """I.i.d. Rayleigh fading per subcarrier, the paper's channel (Section III-A).

    ``h_kf ~ CN(0, path_gain_k)``, independent over devices k and subcarriers f.

    For the time-domain uplink (:meth:`cir`) the same per-subcarrier statistics come
    from a tapped delay line: ``num_taps`` taps on the sample grid (delays ``l / B``,
    ``B = F Delta_f``), i.i.d. ``CN(0, path_gain_k / L)``, so every subcarrier's response
    is ``CN(0, path_gain_k)``; subcarriers ``F / L`` apart are uncorrelated (``L = F``
    would make all of them independent, as above, but would need a cyclic prefix of a
    whole symbol).

    Parameters
    ----------
    num_subcarriers : int
        F >= 1.
    num_taps : int
        L >= 1, for :meth:`cir` (default 1).
    sample_period_s : float, optional
        ``1 / B`` [s], required by :meth:`cir`.

    Input
    -----
    path_gain : [K], tf.float32
        Large-scale gain ``r_k^-alpha`` (linear).
    seed : [2], tf.int32
        Stateless seed.

    Output
    ------
    h : [K, F], tf.complex64
    """

    def __init__(self, num_subcarriers: int, num_taps: int = 1, sample_period_s: float | None = None):
        self.num_subcarriers = _check_num_subcarriers(num_subcarriers)
        self.num_taps = IidRayleighChannel.check(num_taps=num_taps).num_taps
        self.sample_period_s = sample_period_s

    def __call__(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        seed = tf.convert_to_tensor(seed, dtype=tf.int32)
        return _iid_rayleigh(_amplitude(path_gain), tf.constant(self.num_subcarriers), seed)

    def cir(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The tapped delay line of one round.

        Output: ``a`` [K, L] complex64 (``CN(0, path_gain_k / L)`` each), ``tau`` [K, L]
        float32 delays ``l / B`` [s].
        """
        if self.sample_period_s is None or not self.sample_period_s > 0:
            raise ValueError(f"cir needs a positive sample_period_s, got {self.sample_period_s!r}")
        seed = tf.convert_to_tensor(seed, dtype=tf.int32)
        amplitude = _amplitude(path_gain) / np.sqrt(self.num_taps)
        a = _iid_rayleigh(amplitude, tf.constant(self.num_taps), seed)
        delays = tf.range(self.num_taps, dtype=tf.float32) * float(self.sample_period_s)
        return a, tf.broadcast_to(delays, tf.shape(a, tf.int32))

    def antennas(self, path_gain: tf.Tensor, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """The channels to N_r BS antennas: ``h`` [K, N_r, F] complex64, i.i.d.
        ``CN(0, path_gain_k)`` over devices, antennas and subcarriers (N_r = 1: the
        call's draw, ``h[:, 0]``)."""
        seed = tf.convert_to_tensor(seed, dtype=tf.int32)
        return _iid_rayleigh_antennas(_amplitude(path_gain), tf.constant(_check_num_antennas(num_antennas)),
                                      tf.constant(self.num_subcarriers), seed)

    def cir_antennas(self, path_gain: tf.Tensor, seed: tf.Tensor,
                     num_antennas: int) -> tuple[tf.Tensor, tf.Tensor]:
        """The tapped delay line of each BS antenna: ``a`` [K, N_r, L] complex64 (i.i.d.
        ``CN(0, path_gain_k / L)``), ``tau`` [K, L] float32 delays ``l / B`` [s], the same on
        every antenna (N_r = 1: :meth:`cir`'s draw)."""
        if self.sample_period_s is None or not self.sample_period_s > 0:
            raise ValueError(f"cir needs a positive sample_period_s, got {self.sample_period_s!r}")
        seed = tf.convert_to_tensor(seed, dtype=tf.int32)
        amplitude = _amplitude(path_gain) / np.sqrt(self.num_taps)
        a = _iid_rayleigh_antennas(amplitude, tf.constant(_check_num_antennas(num_antennas)),
                                   tf.constant(self.num_taps), seed)
        delays = tf.range(self.num_taps, dtype=tf.float32) * float(self.sample_period_s)
        return a, tf.broadcast_to(delays, [a.shape[0], self.num_taps])


class FlatRayleigh:
    """Frequency-flat Rayleigh block fading: Sionna's ``RayleighBlockFading``.

    One ``CN(0, 1)`` coefficient per device from
    :class:`sionna.phy.channel.RayleighBlockFading` (the devices are the batch, one
    transmitter and receiver antenna, one time step), scaled by ``sqrt(path_gain_k)``
    and repeated on all F subcarriers. Deterministic in ``seed`` through
    :func:`sionna_rng_seeded`; call it eagerly.

    Parameters
    ----------
    num_subcarriers : int
        F >= 1.

    Input
    -----
    path_gain : [K], tf.float32
    seed : [2], tf.int32

    Output
    ------
    h : [K, F], tf.complex64, constant along F.
    """

    def __init__(self, num_subcarriers: int):
        self.num_subcarriers = _check_num_subcarriers(num_subcarriers)
        self._block = RayleighBlockFading(
            num_rx=1, num_rx_ant=1, num_tx=1, num_tx_ant=1, precision="single"
        )
        self._blocks = {}  # N_r -> the draw of cir_antennas

    @tf.function(autograph=False)
    def _draw(self, num_devices: tf.Tensor) -> tf.Tensor:
        a, _ = self._block(num_devices, 1)  # [K, 1, 1, 1, 1, 1 path, 1 step]
        return tf.reshape(a, [num_devices, 1])

    def __call__(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        a, _ = self.cir(path_gain, seed)
        return tf.broadcast_to(a, [a.shape[0], self.num_subcarriers])

    def cir(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One path at delay 0: ``a`` [K, 1] complex64, ``tau`` [K, 1] float32 zeros [s]."""
        amplitude = _amplitude(path_gain)
        num_devices = int(amplitude.shape[0])
        with sionna_rng_seeded(seed):
            coefficient = self._draw(tf.constant(num_devices, tf.int32))
        return amplitude * coefficient, tf.zeros([num_devices, 1], tf.float32)

    def antennas(self, path_gain: tf.Tensor, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """The channels to N_r BS antennas: ``h`` [K, N_r, F] complex64, one ``CN(0,
        path_gain_k)`` coefficient per device and antenna (Sionna's ``RayleighBlockFading``
        with ``num_rx_ant = N_r``), constant along F."""
        a, _ = self.cir_antennas(path_gain, seed, num_antennas)
        return tf.broadcast_to(a, [a.shape[0], a.shape[1], self.num_subcarriers])

    def cir_antennas(self, path_gain: tf.Tensor, seed: tf.Tensor,
                     num_antennas: int) -> tuple[tf.Tensor, tf.Tensor]:
        """One path at delay 0 per antenna: ``a`` [K, N_r, 1] complex64, ``tau`` [K, 1] float32
        zeros [s] (N_r = 1: :meth:`cir`'s draw)."""
        num_antennas = _check_num_antennas(num_antennas)
        amplitude = _amplitude(path_gain)
        num_devices = int(amplitude.shape[0])
        if num_antennas not in self._blocks:
            block = RayleighBlockFading(num_rx=1, num_rx_ant=num_antennas, num_tx=1, num_tx_ant=1,
                                        precision="single")

            @tf.function(autograph=False)
            def draw(count, block=block):
                a, _ = block(count, 1)  # [K, 1, N_r, 1, 1, 1 path, 1 step]
                return tf.reshape(a, [count, num_antennas, 1])

            self._blocks[num_antennas] = draw
        with sionna_rng_seeded(seed):
            coefficient = self._blocks[num_antennas](tf.constant(num_devices, tf.int32))
        return amplitude[:, :, None] * coefficient, tf.zeros([num_devices, 1], tf.float32)


class TDL:
    """3GPP TR 38.901 TDL channel (Sionna), static, as a frequency response per subcarrier.

    Sionna's :class:`sionna.phy.channel.tr38901.TDL` (zero speed, so no Doppler; the
    devices are the batch) gives path coefficients ``a_kl`` and delays ``tau_l`` with
    a power-delay profile normalised to total power 1 (including the LoS component
    of TDL-D/E). :func:`sionna.phy.channel.cir_to_ofdm_channel` evaluates
    ``H_k(f) = sum_l a_kl exp(-j 2 pi f tau_l)`` at the baseband subcarrier
    frequencies of :func:`sionna.phy.channel.subcarrier_frequencies`, *without*
    per-realisation normalisation (the delays are fixed by the profile, so the tap
    responses ``exp(-j 2 pi f tau_l)`` are computed once with it and each draw is a
    ``[K, L] x [L, F]`` product), so ``E|H_k(f)|^2 = 1`` on every subcarrier while
    the power of a realisation fluctuates as in a real channel. The result is scaled
    by ``sqrt(path_gain_k)``. The correlation between subcarriers f and f' is
    ``sum_l p_l exp(-j 2 pi (f - f') tau_l)``: it falls with the delay spread and the
    frequency separation. Deterministic in ``seed`` through
    :func:`sionna_rng_seeded`; call it eagerly.

    Parameters
    ----------
    profile : str
        "A", "B", "C" (NLoS) or "D", "E" (LoS).
    delay_spread_s : float
        RMS delay spread [s] (> 0), e.g. 100e-9.
    subcarrier_spacing_hz : float
        Subcarrier spacing [Hz] (> 0).
    num_subcarriers : int
        F >= 1.
    carrier_frequency_hz : float
        Carrier frequency [Hz] (> 0); only enters through the Doppler shift, which is
        zero here.

    Input
    -----
    path_gain : [K], tf.float32
    seed : [2], tf.int32

    Output
    ------
    h : [K, F], tf.complex64
    """

    def __init__(
        self,
        profile: str,
        delay_spread_s: float,
        subcarrier_spacing_hz: float,
        num_subcarriers: int,
        carrier_frequency_hz: float = 3.5e9,
    ):
        TdlChannel.check(tdl_profile=profile, delay_spread_s=delay_spread_s,
                         carrier_frequency_hz=carrier_frequency_hz)
        if subcarrier_spacing_hz is None or not np.isfinite(subcarrier_spacing_hz) or subcarrier_spacing_hz <= 0:
            raise ValueError(f"subcarrier_spacing_hz must be a positive finite number, got "
                             f"{subcarrier_spacing_hz!r}")
        self.num_subcarriers = _check_num_subcarriers(num_subcarriers)
        self.profile = profile
        self.delay_spread_s = float(delay_spread_s)
        self.subcarrier_spacing_hz = float(subcarrier_spacing_hz)
        self._tdl = SionnaTDL(
            model=profile,
            delay_spread=self.delay_spread_s,
            carrier_frequency=float(carrier_frequency_hz),
            min_speed=0.0,
            precision="single",
        )
        self._carrier_frequency_hz = float(carrier_frequency_hz)
        self._antenna_draws = {}  # N_r -> the draw of cir_antennas
        self._frequencies = subcarrier_frequencies(
            self.num_subcarriers, self.subcarrier_spacing_hz, precision="single"
        )

        # Tap delays are fixed by the profile and the delay spread (the same for every
        # device), so the frequency response is linear in the path coefficients:
        # H = a @ E with E[l, f] = exp(-j 2 pi f tau_l). E is computed once, by
        # cir_to_ofdm_channel on one unit coefficient per tap.
        num_taps = int(self._tdl.num_clusters)
        unit_taps = tf.reshape(
            tf.eye(num_taps, dtype=tf.complex64), [num_taps, 1, 1, 1, 1, num_taps, 1]
        )
        delays = tf.broadcast_to(
            tf.reshape(tf.cast(self._tdl.delays, tf.float32), [1, 1, 1, num_taps]),
            [num_taps, 1, 1, num_taps],
        )
        self._tap_responses = tf.reshape(
            cir_to_ofdm_channel(self._frequencies, unit_taps, delays, normalize=False),
            [num_taps, self.num_subcarriers],
        )  # [L, F], complex64

    @property
    def carrier_frequency_hz(self) -> float:
        """f_c [Hz] (the Doppler's, when the devices move: :mod:`phy.moving_tdl`)."""
        return self._carrier_frequency_hz

    @property
    def tap_responses(self) -> tf.Tensor:
        """``[L, F]`` complex64: ``exp(-j 2 pi f tau_l)``, each tap's response on the
        subcarriers (a response is ``a [K, L] @ tap_responses``)."""
        return self._tap_responses

    @property
    def delays_s(self) -> np.ndarray:
        """``[L]`` float64: the taps' delays [s] (the profile's, scaled by the delay spread)."""
        return np.asarray(self._tdl.delays.numpy(), np.float64).reshape(-1)

    @property
    def tap_powers(self) -> np.ndarray:
        """``[L]`` float64: the taps' mean powers, the LoS component's on tap 0 of TDL-D/E
        (Sionna's ``mean_powers``; they sum to one)."""
        return np.asarray(self._tdl.mean_powers.numpy(), np.float64).reshape(-1)

    @tf.function(autograph=False)
    def _draw(self, num_devices: tf.Tensor) -> tf.Tensor:
        # Zero speed: the sampling frequency only scales a zero Doppler phase.
        a, _ = self._tdl(num_devices, 1, 1.0)  # [K, 1, 1, 1, 1, L, 1]
        return tf.matmul(tf.reshape(a, [num_devices, -1]), self._tap_responses)

    def __call__(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        amplitude = _amplitude(path_gain)
        with sionna_rng_seeded(seed):
            response = self._draw(tf.constant(amplitude.shape[0], tf.int32))
        return amplitude * response

    @tf.function(autograph=False)
    def _draw_paths(self, num_devices: tf.Tensor) -> tf.Tensor:
        a, _ = self._tdl(num_devices, 1, 1.0)  # [K, 1, 1, 1, 1, L, 1]
        return tf.reshape(a, [num_devices, -1])

    def cir(self, path_gain: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The paths of one round (the same draw as the call): ``a`` [K, L] complex64
        scaled by ``sqrt(path_gain_k)``, ``tau`` [K, L] float32 [s] (the profile's delays)."""
        amplitude = _amplitude(path_gain)
        num_devices = int(amplitude.shape[0])
        with sionna_rng_seeded(seed):
            a = self._draw_paths(tf.constant(num_devices, tf.int32))
        delays = tf.cast(tf.reshape(self._tdl.delays, [1, -1]), tf.float32)
        return amplitude * a, tf.broadcast_to(delays, tf.shape(a, tf.int32))

    def cir_antennas(self, path_gain: tf.Tensor, seed: tf.Tensor,
                     num_antennas: int) -> tuple[tf.Tensor, tf.Tensor]:
        """The paths of one round to N_r BS antennas: Sionna's TDL with ``num_rx_ant = N_r``
        and no spatial correlation (i.i.d. over the antennas, each with the profile's power
        delay profile): ``a`` [K, N_r, L] complex64 scaled by ``sqrt(path_gain_k)``, ``tau``
        [K, L] float32 [s], the same on every antenna (N_r = 1: :meth:`cir`'s draw)."""
        num_antennas = _check_num_antennas(num_antennas)
        amplitude = _amplitude(path_gain)
        num_devices = int(amplitude.shape[0])
        if num_antennas not in self._antenna_draws:
            tdl = SionnaTDL(model=self.profile, delay_spread=self.delay_spread_s,
                            carrier_frequency=self._carrier_frequency_hz, min_speed=0.0,
                            num_rx_ant=num_antennas, precision="single")

            @tf.function(autograph=False)
            def draw(count, tdl=tdl):
                a, _ = tdl(count, 1, 1.0)  # [K, 1, N_r, 1, 1, L, 1]
                return tf.reshape(a, [count, num_antennas, -1])

            self._antenna_draws[num_antennas] = draw
        a = self._paths_antennas(num_devices, seed, num_antennas)
        delays = tf.cast(tf.reshape(self._tdl.delays, [1, -1]), tf.float32)
        return amplitude[:, :, None] * a, tf.broadcast_to(delays, [num_devices, a.shape[2]])

    def _paths_antennas(self, num_devices: int, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """[K, N_r, L] complex64 unit-power paths (without the path gain)."""
        with sionna_rng_seeded(seed):
            return self._antenna_draws[num_antennas](tf.constant(num_devices, tf.int32))

    def antennas(self, path_gain: tf.Tensor, seed: tf.Tensor, num_antennas: int) -> tf.Tensor:
        """The frequency responses to N_r BS antennas, ``h`` [K, N_r, F] complex64, of
        :meth:`cir_antennas`' paths (N_r = 1: the call's draw)."""
        self.cir_antennas(path_gain, seed, num_antennas)  # validates, builds the draw
        amplitude = _amplitude(path_gain)
        a = self._paths_antennas(int(amplitude.shape[0]), seed, num_antennas)
        num_devices, num_antennas, num_paths = a.shape
        response = tf.matmul(tf.reshape(a, [num_devices * num_antennas, num_paths]), self._tap_responses)
        return amplitude[:, :, None] * tf.reshape(response, [num_devices, num_antennas, self.num_subcarriers])
