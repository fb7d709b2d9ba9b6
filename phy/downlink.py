"""Downlink accounting: OFDM symbols needed to multicast the global model.

Section III of the paper: the BS disseminates the global variational parameters to
all devices by *reliable digital multicast*, so the number of downlink transmissions
is set by the worst-channel device. Model used here (the paper gives no formula):

- the BS splits its power ``bs_tx_power_w`` equally over the F subcarriers;
- subcarrier f of device k carries ``log2(1 + (P_bs / F) |h_kf|^2 / sigma_z^2)`` bits per
  OFDM symbol (Shannon rate, ideal capacity-achieving code; ``h`` is the round's
  channel, reciprocal to the uplink under TDD);
- device k decodes ``b_k = sum_f rate_kf`` bits per OFDM symbol;
- one multicast stream must reach every device, so it runs at ``min_k b_k``;
- a payload of ``num_values * bits_per_value`` bits takes
  ``ceil(bits / min_k b_k)`` OFDM symbols.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

ROWS_PER_PASS = 1024
"""Devices whose float64 rates are formed at once (each row's sum is its own: the blocks
change no bit; at K = 100,000, F = 1,024 the whole array's temporaries were 4 GB; 1,024 rows hold 40 MB)."""


def bits_per_symbol(h, bs_tx_power_w: float, noise_power_w: float) -> np.ndarray:
    """Shannon bits per OFDM symbol each device can decode.

    Parameters
    ----------
    h : [K, F], complex (tf.complex64 or NumPy)
        Downlink channel of the round.
    bs_tx_power_w : float
        BS transmit power per OFDM symbol (W), split equally over F subcarriers.
    noise_power_w : float
        sigma_z^2, noise power per subcarrier (W), > 0.

    Returns
    -------
    : [K], np.float64
        ``sum_f log2(1 + (P_bs/F) |h_kf|^2 / sigma_z^2)``.
    """
    if not bs_tx_power_w > 0.0:
        raise ValueError(f"bs_tx_power_w must be positive, got {bs_tx_power_w!r}")
    if not noise_power_w > 0.0:
        raise ValueError(f"noise_power_w must be positive, got {noise_power_w!r}")
    h = np.asarray(h.numpy() if isinstance(h, tf.Tensor) else h)
    if h.ndim != 2:
        raise ValueError(f"h must be [K, F], got shape {h.shape}")
    bits = np.empty(h.shape[0], np.float64)
    for lo in range(0, h.shape[0], ROWS_PER_PASS):  # float64 temporaries of a bounded block of devices
        gain = np.abs(h[lo:lo + ROWS_PER_PASS].astype(np.complex128)) ** 2
        snr = (bs_tx_power_w / h.shape[1]) * gain / noise_power_w
        bits[lo:lo + ROWS_PER_PASS] = np.log2(1.0 + snr).sum(axis=1)
    return bits


def multicast_symbols(num_values: int, bits_per_value: int, h, bs_tx_power_w: float,
                      noise_power_w: float) -> int:
    """OFDM symbols to multicast ``num_values * bits_per_value`` bits to all devices.

    Parameters
    ----------
    num_values : int
        Number of values in the payload (e.g. 2 d for the posterior (mu, rho)).
    bits_per_value : int
        Bits per value (e.g. 32 for float32).
    h, bs_tx_power_w, noise_power_w
        See :func:`bits_per_symbol`.

    Returns
    -------
    int
        ``ceil(num_values * bits_per_value / min_k bits_per_symbol_k)``; 0 for an
        empty payload.
    """
    if int(num_values) != num_values or num_values < 0:
        raise ValueError(f"num_values must be a non-negative integer, got {num_values!r}")
    if int(bits_per_value) != bits_per_value or bits_per_value <= 0:
        raise ValueError(f"bits_per_value must be a positive integer, got {bits_per_value!r}")
    bits = int(num_values) * int(bits_per_value)
    if bits == 0:
        return 0
    rate = float(bits_per_symbol(h, bs_tx_power_w, noise_power_w).min())
    if not rate > 0.0:
        raise ValueError("the worst device has zero downlink rate (all |h| = 0); cannot multicast")
    return math.ceil(bits / rate)
