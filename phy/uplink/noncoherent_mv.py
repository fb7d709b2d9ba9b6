"""``uplink.scheme = "noncoherent_mv"``: non-coherent majority vote with frequency-shift
keying (Sahin and Yang, "Distributed learning over a wireless network with non-coherent
majority vote computation", IEEE Trans. Wireless Commun., 2023).

Every sender's sign of entry i, ``s_ki = sgn(u_ki)``, activates one of a pair of
subcarriers: entry i sits on OFDM symbol ``i // M`` and pair ``j = i % M`` (``M = floor(F
/ 2)`` pairs per symbol: subcarriers 2j for +1 and 2j + 1 for -1; a sign of 0 activates
neither; an odd F leaves its last subcarrier unused). The active tone carries a symbol of
random phase, ``x_k = sqrt(p_k) exp(j theta_k)``, theta uniform and independent per
device and entry: no CSI at the devices, no precoding. The BS receives ``y = sum_k h_kf
x_kf + z`` on both tones and compares the energies::

    vote_i = sgn(|y_{n, 2j}|^2 - |y_{n, 2j+1}|^2)

(no CSI at the BS either). Two resource elements per sign: ``ceil(n / M)`` OFDM symbols
per phase. Tone power (``uplink.noncoherent_power``):

* ``"path_gain_inversion"`` (default): ``p_k = c pi_k / g_k`` with ``c = min_k (P / M)
  g_k / pi_k``: the devices compensate their large-scale gain g_k (long-term knowledge,
  not instantaneous CSI; Sahin and Yang assume it compensated) and weight their energy by
  pi_k; the limiting device sends at its full share P / M of the per-symbol budget;
* ``"full_power"``: ``p_k = P / M`` for every device (unweighted, uncompensated).

Under Rayleigh fading ``h_kf ~ CN(0, g_k)`` independent over devices and subcarriers, the
energy on a tone is exponential: ``E_+ ~ Exp(mean mu_+)``, ``mu_+ = sum_{k: s_k = +1} p_k
g_k + sigma_z^2`` (likewise ``mu_-``), the two independent, so an entry whose true
majority is +1 is missed with ``P(E_- > E_+) = mu_- / (mu_+ + mu_-)`` (tested against the
simulation). Without noise the vote equals the majority exactly where the senders are
unanimous (the other tone holds no energy); where they are not, the fading and the random
phases decide even without noise.

With moving devices and ``mobility.channel_within_phase = "per_symbol"``
(:mod:`phy.uplink.moving_link`) the phase gets ``h`` [K, N, F], the channel of each of its
OFDM symbols, and tone f of symbol n is received through that symbol's channel,
``y[n, f] = sum_k h_knf x_k[n, f] + z[n, f]`` (the tone powers read the path gains only).
Every symbol's channel equal to a [K, F] ``h`` gives that ``h``'s result bit for bit.

Columns: ``vote_error_rate_<phase>``, ``vote_tie_rate_<phase>``
(:mod:`phy.uplink.majority_vote`); per sender ``tx_power_w_<phase>`` (with
``trace.per_device``); the signals ``y_<phase>``, ``estimate_<phase>`` (when kept).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from phy.parameters import NoncoherentMvScheme
from phy.uplink.majority_vote import complex_noise, majority_sums, signs_of, superpose, vote_result
from phy.uplink.scheme import SchemeResult


def tone_powers(power: str, path_gain, weights, tone_budget_w: float) -> np.ndarray:
    """``p_k`` [K] float64 (W per active tone) for ``uplink.noncoherent_power`` ``power``,
    the devices' ``path_gain`` and ``weights`` [K] and the full share ``tone_budget_w`` =
    P / M."""
    g = np.asarray(path_gain, np.float64)
    if power == "full_power":
        return np.full(g.shape, float(tone_budget_w))
    w = np.asarray(weights, np.float64)
    c = float(np.min(tone_budget_w * g / w)) if g.size else 0.0
    return c * w / g


class NoncoherentMajorityVote:
    """``uplink.scheme = "noncoherent_mv"`` (module docstring): FSK majority vote.

    Parameters
    ----------
    power : "path_gain_inversion" or "full_power"
        The devices' tone power.

    ``send`` returns the vote [n] tf.float32 in {-1, 0, +1}.
    """

    carries = NoncoherentMvScheme.carries
    channel_per_symbol = NoncoherentMvScheme.channel_per_symbol  # moving devices: h [K, N, F]
    accounts_privacy = getattr(NoncoherentMvScheme, "accounts_privacy", False)

    def __init__(self, power: str = "path_gain_inversion"):
        self.parameters = NoncoherentMvScheme.check(noncoherent_power=power)
        self.power = self.parameters.noncoherent_power

    pairs = staticmethod(NoncoherentMvScheme.pairs)
    """M = floor(F / 2), the signs per OFDM symbol (ValueError for F < 2): the rule of its
    parameters (:meth:`phy.parameters.NoncoherentMvScheme.pairs`), written once."""

    def nominal_symbols(self, grid) -> int:
        """``ceil(n / floor(F / 2))``: two resource elements per sign."""
        return self.parameters.symbols(grid.num_values, grid.num_subcarriers)

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool) -> SchemeResult:
        signs = signs_of(link.updates)
        num_devices, n = (int(d) for d in signs.shape)
        f = air.num_subcarriers
        m = self.pairs(f)
        num_symbols = self.parameters.symbols(n, f)
        grid = tf.reshape(tf.pad(signs, [[0, 0], [0, num_symbols * m - n]]), [num_devices, num_symbols, m])
        noise_seed, phase_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        theta = tf.random.stateless_uniform([num_devices, num_symbols, m], phase_seed, maxval=2.0 * math.pi)
        p = tone_powers(self.power, link.path_gain, link.weights, air.tx_power_w / m)
        cos, sin = tf.cos(theta), tf.sin(theta)
        plus, minus = tf.cast(grid > 0, tf.float32), tf.cast(grid < 0, tf.float32)
        if link.uplink is None:  # each tone of the pairs on its own: [N, M] each
            amplitude = np.broadcast_to(np.sqrt(p)[:, None], (num_devices, m))
            h = tf.convert_to_tensor(link.h)  # [K, F], or [K, N, F]: a channel per OFDM symbol
            tones = [superpose(mask * cos, mask * sin, amplitude, h[..., offset: 2 * m: 2])
                     for offset, mask in ((0, plus), (1, minus))]
            y = tf.reshape(tf.stack(tones, axis=-1), [num_symbols, 2 * m])
            y = tf.pad(y, [[0, 0], [0, f - 2 * m]])
        else:  # the waveform: the devices' whole grids
            c_re = tf.reshape(tf.stack([plus * cos, minus * cos], axis=-1), [num_devices, num_symbols, 2 * m])
            c_im = tf.reshape(tf.stack([plus * sin, minus * sin], axis=-1), [num_devices, num_symbols, 2 * m])
            pad = [[0, 0], [0, 0], [0, f - 2 * m]]
            amplitude = np.broadcast_to(np.sqrt(p)[:, None], (num_devices, f))
            y = superpose(tf.pad(c_re, pad), tf.pad(c_im, pad), amplitude, link.h, link.uplink)
        y = y + complex_noise(noise_seed, [num_symbols, f], air.noise_power_w)
        energy_tone = tf.abs(y[:, : 2 * m]) ** 2
        vote = tf.reshape(tf.sign(energy_tone[:, 0::2] - energy_tone[:, 1::2]), [-1])[:n]

        active = tf.reduce_sum(tf.abs(signs), axis=1).numpy().astype(np.float64)  # [K]: tones sent
        power = p * active  # [K], over the N symbols
        return vote_result(vote, majority_sums(signs, link.weights), phase=phase, power_w=power / num_symbols,
                           num_symbols=num_symbols, y=y, air=air, per_device=per_device,
                           keep_signals=keep_signals)
