"""``uplink.scheme = "one_bit"``: one-bit broadband digital aggregation (OBDA; Zhu, Du,
Gunduz, Huang, "One-bit over-the-air aggregation for communication-efficient federated
edge learning: design and convergence analysis", IEEE Trans. Wireless Commun., 2021).

Every sender sends the signs of its update, ``s_ki = sgn(u_ki)`` in {-1, 0, +1}, as
digital symbols on the shared grid: BPSK, one sign per resource element (``c = s``), or
QPSK, two (``c = s_I + j s_Q``, entries 2e and 2e + 1 on element e), element e on OFDM
symbol ``e // F``, subcarrier ``e % F``. Each device inverts its channel (truncated
channel inversion, as OBDA) on the subcarriers whose estimated gain reaches the
threshold and stays silent on the others::

    x_k[n, f] = sqrt(eta) pi_k c_k[n, f] / h_hat_kf      if |h_hat_kf|^2 >= t g_k
              = 0                                        otherwise

(``g_k`` the device's path gain, ``t = uplink.one_bit_gain_threshold``; ``pi_k`` the
BS's weight, so that the BS receives the *weighted* vote; OBDA's equal weights are the
case pi_k = 1/K). One common ``eta`` keeps the devices aligned and puts the device that
needs the most power at the per-OFDM-symbol budget P::

    eta = P / max_k [ pi_k^2 E_s sum_{f < F_used, on} 1 / |h_hat_kf|^2 ]

(``E_s = |c|^2`` of a full symbol: 1 for BPSK, 2 for QPSK; ``F_used = min(F, elements)``,
the subcarriers of the fullest OFDM symbol). The BS receives ``y = sum_k h_kf x_kf + z``,
``z ~ CN(0, sigma_z^2)``, and its vote is the sign of the real part (and of the imaginary
part with QPSK), OBDA's majority-vote decoder. With perfect CSI the real part
of element (n, f) is ``sqrt(eta) sum_{k on f} pi_k s_k + Re z``, so an entry whose margin
``m = sqrt(eta) sum_{k on f} pi_k s_k`` has the sign of the true majority is missed with
probability ``Q(|m| / sqrt(sigma_z^2 / 2))`` (tested against the simulation).

Symbols per phase: ``ceil(n / F)`` (BPSK) or ``ceil(n / (2 F))`` (QPSK). Columns:
``vote_error_rate_<phase>``, ``vote_tie_rate_<phase>`` (:mod:`phy.uplink.majority_vote`),
``silent_fraction_<phase>`` (the senders' share of subcarriers below the threshold),
``inversion_amplitude_<phase>`` (``sqrt(eta)``); per sender ``tx_power_w_<phase>`` (with
``trace.per_device``); the signals ``y_<phase>``, ``estimate_<phase>`` (when kept).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from phy.parameters import OneBitScheme
from phy.uplink.majority_vote import complex_noise, signs_of, superpose, vote_result
from phy.uplink.scheme import SchemeResult


def inversion_scale(h_hat, path_gain, weights, *, gain_threshold: float, used_subcarriers: int,
                    symbol_energy: float, tx_power_w: float) -> tuple[float, np.ndarray]:
    """OBDA's truncated channel inversion with one common scale.

    Input: ``h_hat`` [K, F] complex (the devices' CSI), ``path_gain`` [K], ``weights`` [K]
    (pi_k), the relative ``gain_threshold`` t, the subcarriers of the fullest OFDM symbol,
    ``symbol_energy`` E_s and the per-symbol budget P (W).
    Output: ``eta`` (float; 0 when no device has a subcarrier on) and ``on`` [K, F] bool
    (``|h_hat_kf|^2 >= t g_k`` and nonzero).
    """
    gain = np.abs(np.asarray(h_hat, np.complex128)) ** 2
    g = np.asarray(path_gain, np.float64)[:, None]
    on = (gain >= gain_threshold * g) & (gain > 0.0)
    inverse = np.where(on, 1.0 / np.where(on, gain, 1.0), 0.0)
    w = np.asarray(weights, np.float64)
    load = w**2 * symbol_energy * inverse[:, :used_subcarriers].sum(axis=1)
    worst = float(load.max()) if load.size else 0.0
    return (float(tx_power_w) / worst if worst > 0.0 else 0.0), on


class OneBit:
    """``uplink.scheme = "one_bit"`` (module docstring): signs as BPSK/QPSK under truncated
    channel inversion, the BS's sign of the superposed signal.

    Parameters
    ----------
    modulation : "bpsk" or "qpsk"
        One or two signs per resource element.
    gain_threshold : float
        t >= 0: a subcarrier with ``|h_hat_kf|^2 < t g_k`` stays silent.

    ``send`` returns the vote [n] tf.float32 in {-1, 0, +1}.
    """

    carries = OneBitScheme.carries
    accounts_privacy = getattr(OneBitScheme, "accounts_privacy", False)

    def __init__(self, modulation: str = "bpsk", gain_threshold: float = 0.1):
        checked = OneBitScheme.check(one_bit_modulation=modulation, one_bit_gain_threshold=gain_threshold)
        self.parameters = checked
        self.modulation = checked.one_bit_modulation
        self.gain_threshold = float(checked.one_bit_gain_threshold)
        self.signs_per_element = 2 if self.modulation == "qpsk" else 1

    def nominal_symbols(self, grid) -> int:
        """``ceil(n / F)`` (BPSK) or ``ceil(n / (2 F))`` (QPSK)."""
        return self.parameters.symbols(grid.num_values, grid.num_subcarriers)

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool) -> SchemeResult:
        signs = signs_of(link.updates)
        num_devices, n = (int(d) for d in signs.shape)
        f, per = air.num_subcarriers, self.signs_per_element
        elements = -(-n // per)
        num_symbols = -(-elements // f)
        grid = tf.reshape(tf.pad(signs, [[0, 0], [0, num_symbols * f * per - n]]),
                          [num_devices, num_symbols, f, per])
        eta, on = inversion_scale(link.h_hat, link.path_gain, link.weights, gain_threshold=self.gain_threshold,
                                  used_subcarriers=min(f, elements), symbol_energy=float(per),
                                  tx_power_w=air.tx_power_w)
        h_hat = np.asarray(link.h_hat, np.complex128)
        w = np.asarray(link.weights, np.float64)[:, None]
        precoder = np.where(on, math.sqrt(eta) * w / np.where(on, h_hat, 1.0), 0.0)  # [K, F]
        c_re, c_im = grid[..., 0], (grid[..., 1] if per == 2 else None)
        y = superpose(c_re, c_im, precoder, link.h, link.uplink) + complex_noise(
            seed, [num_symbols, f], air.noise_power_w)
        parts = [tf.sign(tf.math.real(y))] + ([tf.sign(tf.math.imag(y))] if per == 2 else [])
        vote = tf.reshape(tf.stack(parts, axis=-1), [-1])[:n]

        used = tf.reduce_sum(tf.abs(grid), axis=[1, 3]).numpy().astype(np.float64)  # [K, F]: sum of |c|^2
        power = (np.abs(precoder) ** 2 * used).sum(axis=1)  # [K], over the N symbols
        own = {f"silent_fraction_{phase}": float(1.0 - on.mean()) if on.size else math.nan,
               f"inversion_amplitude_{phase}": math.sqrt(eta)}
        return vote_result(vote, signs, link.weights, phase=phase, power_w=power / num_symbols,
                           num_symbols=num_symbols, y=y, air=air, per_device=per_device,
                           keep_signals=keep_signals, scalars=own)
