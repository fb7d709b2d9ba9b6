"""The reference AirComp chain: every signal of Section IV-B materialised, ``[K, N, F]``.

Run by :func:`phy.aircomp.aggregate` when the raw signals are kept (``keep_signals=True``:
``trace.signals``); the implementation (:func:`phy.aircomp.chain`) never forms x, v or
y and is held to this one (``tests/phy/test_phy_conformance.py``,
``tests/phy/test_aircomp.py::test_same_seed_same_output_and_signals``). The prologue and
epilogue are :mod:`phy.aircomp_parts`'s.

1. ``delta_bar = sum_k pi_k ||Delta_k||^2 / d`` (eq. ``rho_avg``);
2. the grouping rule ``[K, d] -> [K, N, F]`` (:class:`phy.grid.GroupingRule`);
3. ``u_k = pi_k^2 gamma / (delta_bar |h_hat_k|^2)`` (eq. ``PowerAlloc_1``), ``[K, 1, F]``;
4. the amplitudes v from the power control (:mod:`phy.power`, eq. ``Opt_v``);
5. ``x = conj(sgn h_hat) sgn(Delta) sqrt(u) v`` (eq. ``Gen_x``);
6. ``y[n] = sum_k h_k o x_k[n] + z[n]``, ``z ~ CN(0, sigma_z^2 I_F)`` (eqs.
   ``ReceivedSignal``, ``y_rho``): Sionna's :class:`~sionna.phy.channel.ApplyOFDMChannel`
   with the channel given once per phase (its symbol axis of length 1 broadcasts) or per
   OFDM symbol (``h`` [K, N, F]); the
   noise from ``tf.random.stateless_normal`` (Sionna's ``AWGN`` draws from its global
   generator, which would not replay from the round's seed);
7. the receiver ``sqrt(delta_bar / gamma) Re(y)`` (eq. ``delta_n``) and the reverse grouping.
"""

from __future__ import annotations

import tensorflow as tf
from sionna.phy.channel import ApplyOFDMChannel

from native.streams import IMAGINARY_NOISE
from phy import aircomp_parts as parts
from phy.power import ATTENUATION_TOLERANCE


def reference_chain(updates, weights, h, h_hat, reference_gain, seed, tx_power_w, noise_power_w,
                    gamma_w, public_delta_bar, *, rule, power_control):
    """The full batched transmit/channel/receive chain (graph mode).

    Input as :func:`phy.aircomp.chain` (``h`` [K, F] or [K, N, F]). Output: its dict plus ``y`` [N, F], ``x`` [K, N, F]
    and ``z`` [N, F] (tf.complex64).
    """
    num_devices = updates.shape[0]
    w, gain, gain64, phase, _ = parts.transmit_terms(weights, h, h_hat)
    delta_bar = parts.reported_or_public(parts.mean_power(w, updates, rule.num_values),
                                         public_delta_bar)
    grid = rule.to_grid(updates)  # [K, N, F]
    delta_abs = tf.abs(grid)
    sign = tf.sign(grid)
    coef = parts.coefficient(w, gamma_w, delta_bar)
    u = parts.allocation(coef, gain64, (gain64 <= 0.0) & (coef[:, None] > 0.0))[:, None, :]
    v = power_control(delta_abs, u, tx_power_w, gain[:, None, :], reference_gain[:, None, None])
    v = tf.where(tf.math.is_inf(u), tf.zeros_like(v), v)
    sqrt_u = tf.cast(tf.sqrt(tf.where(tf.math.is_inf(u), tf.zeros_like(u), u)), tf.float32)
    power = tf.reduce_sum(tf.square(sqrt_u * v), axis=-1)  # sum_f u v^2  [K, N]
    q = sign * sqrt_u * v  # the real amplitude of x; its phase is constant over the symbols
    x = phase[:, None, :] * tf.cast(q, tf.complex64)  # [K, N, F]
    # MAC (eq. ReceivedSignal): Sionna sums h * x over transmitters; h has 1 symbol, or
    # N (a channel per OFDM symbol)
    symbols = h.shape[1] if h.shape.rank == 3 else 1
    h_freq = tf.reshape(h, [1, 1, 1, num_devices, 1, symbols, rule.num_subcarriers])
    y = ApplyOFDMChannel()(x[None, :, None], h_freq)[0, 0, 0]  # [N, F]
    shape = tf.shape(y, tf.int32)
    noise_std = tf.sqrt(tf.cast(noise_power_w, tf.float32) / 2.0)
    z = tf.complex(
        parts.receiver_noise(seed, shape, noise_power_w),
        tf.random.stateless_normal(shape, tf.random.experimental.stateless_fold_in(seed, IMAGINARY_NOISE),
                                   stddev=noise_std),
    )
    y = y + z
    error = v - delta_abs
    out = parts.finish(
        rule, tf.sqrt(parts.rx_scale(delta_bar, gamma_w)) * tf.math.real(y), delta_bar,
        local_distortion=tf.reduce_sum(tf.square(error), axis=[1, 2]),
        power=power,
        attenuated=tf.reduce_sum(
            tf.cast(v < delta_abs * (1.0 - ATTENUATION_TOLERANCE), tf.float32), axis=[1, 2]),
        aggregated_distortion=tf.reduce_sum(
            tf.square(tf.reduce_sum(w[:, None, None] * sign * error, axis=0))),
        noise_power_w=noise_power_w, gamma_w=gamma_w)
    return {**out, "y": y, "x": x, "z": z}
