"""Inter-carrier interference of a channel that varies within an OFDM symbol (issue 58).

The frequency-domain uplink (and the time-domain one, :mod:`phy.ofdm_time`) holds the
channel constant over an OFDM symbol. A device moving at Doppler ``f_D`` changes its
channel from sample to sample; here the channel's taps are its Jakes processes
(:class:`phy.doppler.SumOfSinusoids`) evaluated at every sample's time
``t_n = t_0 + n T_s`` (``T_s = 1 / B``), and the symbol passes through them sample by
sample (:func:`apply_time_varying`):

``y[n] = sum_l h_l[n] x[n - l]``

After the cyclic prefix is removed and the N-point FFT taken, subcarrier k receives
``Y[k] = X[k] Hbar[k] + I[k]``, ``Hbar[k] = sum_l hbar_l exp(-j 2 pi k l / N)`` with
``hbar_l`` tap l's mean over the FFT window, and ``I[k]`` the inter-carrier interference
(ICI) from every other subcarrier. For unit-power taps of total power 1 with Jakes'
correlation and i.i.d. unit-power symbols X, its power per subcarrier is (Russell and
Stuber, VTC 1995; Li and Cimini, IEEE Commun. Lett. 2001)

``P_ICI = 1 - (1 / N^2) sum_{m,n=0}^{N-1} J0(2 pi f_D T_s (m - n))``

(:func:`jakes_ici_power`), a function of the normalised Doppler ``f_D N T_s`` (the Doppler
over the subcarrier spacing) and N; :func:`ici_power` measures it. The uplink of moving
devices in the time domain (:mod:`phy.moving_time`) passes every phase's waveform through
such taps, and its ICI is held to the same closed form (``tests/phy/test_moving_time.py``).

No TensorFlow: NumPy (complex128).
"""

from __future__ import annotations

import numpy as np
from scipy.special import j0

from phy.doppler import SumOfSinusoids


def jakes_ici_power(normalised_doppler: float, fft_size: int) -> float:
    """``1 - (1/N^2) sum_{m,n} J0(2 pi f_D T_s (m - n))`` at ``f_D N T_s`` =
    ``normalised_doppler`` and N = ``fft_size`` (the lags ``d = m - n`` counted ``N - |d|``
    times)."""
    n = int(fft_size)
    lag = np.arange(1, n)
    correlation = j0(2.0 * np.pi * float(normalised_doppler) * lag / n)
    return float(1.0 - (n + 2.0 * np.sum((n - lag) * correlation)) / n ** 2)


def sampled_taps(fading: SumOfSinusoids, speed_mps, start_s, num_samples: int, sample_s: float,
                 tap_power=None) -> np.ndarray:
    """``[K, L, S]`` complex128: the K processes' ``L = F_c`` coefficients (used as taps,
    scaled by ``sqrt(tap_power)`` [L], default all 1) at the S sample times
    ``start_s + n sample_s`` [s], each device at its speed ``speed_mps`` [K] (distance ``v t``)."""
    times = np.asarray(start_s, np.float64)[None, :] + np.arange(num_samples)[:, None] * float(sample_s)  # [S, K]
    z = fading.at(times * np.asarray(speed_mps, np.float64)[None, :]).astype(np.complex128)  # [S, K, L]
    if tap_power is not None:
        z = z * np.sqrt(np.asarray(tap_power, np.float64))
    return np.transpose(z, (1, 2, 0))


def apply_time_varying(x: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """``[K, S]``: ``y[n] = sum_l h_l[n] x[n - l]`` for ``x`` [K, S] (a symbol with its cyclic
    prefix, ``x[n - l] = 0`` before the first sample) and ``taps`` [K, L, S], tap l's value
    at sample n."""
    y = np.zeros(x.shape, np.complex128)
    for lag in range(taps.shape[1]):
        y[:, lag:] += taps[:, lag, lag:] * x[:, :x.shape[1] - lag]
    return y


def ofdm_symbol(symbols: np.ndarray, cyclic_prefix: int) -> np.ndarray:
    """``[K, N + C]``: the unitary IFFT of ``symbols`` [K, N] with its last C samples in front."""
    x = np.fft.ifft(symbols, axis=-1, norm="ortho")
    return np.concatenate([x[:, x.shape[1] - cyclic_prefix:], x], axis=1)


def ici_power(symbols: np.ndarray, taps: np.ndarray, cyclic_prefix: int) -> np.ndarray:
    """``[K]`` float64: per symbol, ``mean_k |Y[k] - X[k] Hbar[k]|^2 / mean_k |X[k]|^2``, the
    ICI power per subcarrier (module docstring) of ``symbols`` [K, N] sent through ``taps``
    [K, L, N + C] (L <= C + 1: no inter-symbol interference)."""
    num_subcarriers = symbols.shape[1]
    received = apply_time_varying(ofdm_symbol(symbols, cyclic_prefix), taps)[:, cyclic_prefix:]
    spectrum = np.fft.fft(received, axis=-1, norm="ortho")
    mean_taps = taps[:, :, cyclic_prefix:].mean(axis=2)  # [K, L] over the FFT window
    response = np.fft.fft(mean_taps, n=num_subcarriers, axis=-1)  # Hbar[k] = sum_l hbar_l e^{-j 2 pi k l / N}
    interference = spectrum - symbols * response
    return np.mean(np.abs(interference) ** 2, axis=1) / np.mean(np.abs(symbols) ** 2, axis=1)
