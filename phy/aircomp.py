"""Over-the-air aggregation of one phase: devices' update vectors -> the BS's estimate.

Implements Section IV-B of the paper for all K devices and N OFDM symbols at once:

1. ``delta_bar = sum_k pi_k ||Delta_k||^2 / d`` (eq. ``rho_avg``), reported over an
   error-free scalar control channel;
2. the grouping rule ``[K, d] -> [K, N, F]`` (:class:`phy.grid.GroupingRule`);
3. ``u_k = pi_k^2 gamma / (delta_bar |h_hat_k|^2)`` (eq. ``PowerAlloc_1``), kept
   ``[K, 1, F]`` (the channel is constant over the round's symbols);
4. the amplitudes v from a power control (:mod:`phy.power`, eq. ``Opt_v``);
5. ``x = conj(sgn h_hat) sgn(Delta) sqrt(u) v`` (eq. ``Gen_x``, ``sqrt(p) = sqrt(u) v``);
6. the multiple-access channel ``y[n] = sum_k h_k o x_k[n] + z[n]`` with
   ``z ~ CN(0, sigma_z^2 I_F)`` (eqs. ``ReceivedSignal``, ``y_rho``): the superposition
   is Sionna's :class:`~sionna.phy.channel.ApplyOFDMChannel` with the channel given
   once per round (its symbol axis has length 1 and broadcasts, so no [K, N, F]
   channel copy is made) when the signals are kept (``keep_signals=True``, x is
   materialised anyway); otherwise the same sum is taken as two real weighted sums
   over K of the real amplitude grid with the [K, 1, F] effective channel
   ``h conj(sgn h_hat)``, which avoids a complex [K, N, F] tensor (a test checks
   both paths agree); the noise is drawn with ``tf.random.stateless_normal``
   because Sionna's ``AWGN`` draws from Sionna's global stateful generator, which
   would not replay from our per-round seed;
7. the receiver ``sqrt(delta_bar / gamma) Re(y)`` (eq. ``delta_n``) and the reverse
   grouping ``[N, F] -> [d]``.

Fast path (the default, ``keep_signals=False``, for the three channel power controls;
measured in ``benchmarks/phy_time.py``): a row (device k, OFDM symbol n) whose budget
does not bind sends ``v = m |Delta|`` (m = 1 on live subcarriers, TCI: its
on-subcarriers), so its part of the estimate is linear in Delta: one weighted sum over
K of the grid, with perfect CSI simply ``sum_k pi_k Delta_k`` (a matrix-vector
product). The rows that may exceed the budget are screened from
``sum_f Delta^2 / |h_hat|^2`` (float32, relative margin 1e-3, then decided in float64),
gathered, and only they run the power control; their deviation from the linear part is
added back per OFDM symbol, and all diagnostics come from the same sums. For the KKT
control (eq. ``Opt_v``) that is two parallel Numba passes over the rows where they lie
(:mod:`phy.optimal_rows`: float64 Newton per row with warm starts, then the corrections
per OFDM symbol; 0.22-0.27 s -> 0.03-0.04 s per phase at the paper's size, where some
6,000 rows bind); TCI and full inversion run compiled XLA chunks of 256 rows
(:func:`phy.power.solve_rows`). The screening
sums, ``||Delta||^2`` per row, the linear part and the gathered rows are read from the
``[K, d]`` updates where they lie, in one parallel Numba pass (:mod:`phy.grid_sums`;
0.28-0.34 s -> 0.04-0.05 s per phase at the paper's size with no row at the budget):
no x, v or y [K, N, F] tensor, no float64 one, and no padded grid of the updates
(formed only for TCI's off-subcarriers). The graph is one
``tf.function`` per phase shape (graph mode: the row set is dynamic); the full chain
``_chain`` (graph mode) remains for ``keep_signals=True`` and any other power control,
and a test checks both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from sionna.phy.channel import ApplyOFDMChannel

from phy.grid import GroupingRule
from phy.grid_sums import grid_sums
from phy.ofdm_time import TimeDomainUplink
from phy.power import ATTENUATION_TOLERANCE, PowerControl

_SCREEN_MARGIN = 1e-3


@dataclass(frozen=True)
class AirCompResult:
    """Outcome of one over-the-air aggregation.

    Attributes
    ----------
    estimate : [d], tf.float32
        The BS's estimate of ``sum_k pi_k Delta_k``.
    num_symbols : int
        N, OFDM symbols used (channel uses of this phase).
    delta_bar : tf.float32 scalar
        eq. ``rho_avg``.
    local_distortion : [K], tf.float32
        ``||v_k - |Delta_k| ||^2`` summed over the device's N symbols (the
        ``||e_k||^2`` of eq. ``distortion_upper_bound`` *without* its 1/eta factor).
    tx_power_mean_w, tx_power_max_w : [K], tf.float32
        Transmit power ``||x_k^(n)||^2`` per OFDM symbol, mean and max over n (W).
    attenuated_fraction : [K], tf.float32
        Fraction of the device's d values with ``v < |Delta| (1 - 1e-6)``.
    aggregated_distortion : tf.float32 scalar
        ``||xi||^2 = ||sum_k pi_k sgn(Delta_k) o (v_k - |Delta_k|)||^2`` over the d values
        (again without 1/eta).
    noise_power : tf.float32 scalar
        Analytical variance per value of the estimate's noise term,
        ``delta_bar sigma_z^2 / (2 gamma)`` (real part of CN(0, sigma_z^2) scaled by
        ``sqrt(delta_bar/gamma)``); 0 for the ideal option.
    y : [N, F], tf.complex64 or None
        The received signal (only with ``keep_signals=True``).
    x : [K, N, F], tf.complex64 or None
        The transmitted symbols (only with ``keep_signals=True``).
    """

    estimate: tf.Tensor
    num_symbols: int
    delta_bar: tf.Tensor
    local_distortion: tf.Tensor
    tx_power_mean_w: tf.Tensor
    tx_power_max_w: tf.Tensor
    attenuated_fraction: tf.Tensor
    aggregated_distortion: tf.Tensor
    noise_power: tf.Tensor
    y: tf.Tensor | None = None
    x: tf.Tensor | None = None


def _chain(updates, weights, h, h_hat, reference_gain, seed, tx_power_w, noise_power_w, gamma_w,
           *, rule, power_control, keep_signals):
    """The full batched transmit/channel/receive chain (materialises x; graph mode)."""
    num_values = rule.num_values
    num_devices = updates.shape[0]
    w = tf.cast(weights, tf.float32)
    delta_bar = tf.reduce_sum(w * tf.reduce_sum(tf.square(updates), axis=1)) / num_values
    grid = rule.to_grid(updates)  # [K, N, F]
    delta_abs = tf.abs(grid)
    sign = tf.sign(grid)
    gain = tf.square(tf.abs(h_hat))[:, None, :]  # [K, 1, F] |h_hat|^2
    # u = pi^2 gamma / (delta_bar |h_hat|^2), float64 (inf on a zero estimate)
    safe_delta_bar = tf.where(delta_bar > 0.0, delta_bar, tf.ones_like(delta_bar))
    scale = (tf.cast(tf.square(w), tf.float64) * gamma_w)[:, None, None] / tf.cast(
        safe_delta_bar, tf.float64
    )
    u = tf.math.divide_no_nan(scale, tf.cast(gain, tf.float64))
    u = tf.where((gain <= 0.0) & (scale > 0.0), tf.constant(float("inf"), tf.float64), u)
    v = power_control(delta_abs, u, tx_power_w, gain, reference_gain[:, None, None])
    v = tf.where(tf.math.is_inf(u), tf.zeros_like(v), v)
    sqrt_u = tf.cast(tf.sqrt(tf.where(tf.math.is_inf(u), tf.zeros_like(u), u)), tf.float32)
    # transmit power per symbol: sum_f u v^2  [K, N]
    power = tf.reduce_sum(tf.square(sqrt_u * v), axis=-1)
    # x = conj(sgn h_hat) sgn(Delta) sqrt(u) v  (eq. Gen_x): a real amplitude q [K, N, F]
    # times a per-subcarrier phase [K, 1, F] that is constant over the symbols
    phase = tf.math.conj(tf.math.divide_no_nan(h_hat, tf.cast(tf.abs(h_hat), tf.complex64)))
    q = sign * sqrt_u * v
    if keep_signals:
        x = phase[:, None, :] * tf.cast(q, tf.complex64)  # [K, N, F]
        # MAC (eq. ReceivedSignal): Sionna sums h * x over transmitters; h has 1 symbol
        h_freq = tf.reshape(h, [1, 1, 1, num_devices, 1, 1, rule.num_subcarriers])
        y = ApplyOFDMChannel()(x[None, :, None], h_freq)[0, 0, 0]  # [N, F]
    else:
        # the same superposition without a complex [K, N, F] tensor: the effective
        # channel c = h conj(sgn h_hat) is [K, 1, F], so y = sum_k c_k q_k splits into
        # two real weighted sums over K (fused by XLA into one pass over q)
        c = (h * phase)[:, None, :]
        y = tf.complex(
            tf.reduce_sum(tf.math.real(c) * q, axis=0), tf.reduce_sum(tf.math.imag(c) * q, axis=0)
        )
    noise_std = tf.sqrt(tf.cast(noise_power_w, tf.float32) / 2.0)
    z = tf.complex(
        tf.random.stateless_normal(tf.shape(y, tf.int32), seed, stddev=noise_std),
        tf.random.stateless_normal(
            tf.shape(y, tf.int32), tf.random.experimental.stateless_fold_in(seed, 1),
            stddev=noise_std,
        ),
    )
    y = y + z
    rx_scale = tf.math.divide_no_nan(delta_bar, tf.cast(gamma_w, tf.float32))
    estimate = rule.from_grid(tf.sqrt(rx_scale) * tf.math.real(y))
    error = v - delta_abs
    out = {
        "estimate": tf.where(delta_bar > 0.0, estimate, tf.zeros_like(estimate)),
        "delta_bar": delta_bar,
        "local_distortion": tf.reduce_sum(tf.square(error), axis=[1, 2]),
        "tx_power_mean_w": tf.reduce_mean(power, axis=1),
        "tx_power_max_w": tf.reduce_max(power, axis=1),
        "attenuated_fraction": tf.reduce_sum(
            tf.cast(v < delta_abs * (1.0 - ATTENUATION_TOLERANCE), tf.float32), axis=[1, 2]
        ) / num_values,
        "aggregated_distortion": tf.reduce_sum(
            tf.square(tf.reduce_sum(w[:, None, None] * sign * error, axis=0))
        ),
        "noise_power": rx_scale * tf.cast(noise_power_w, tf.float32) / 2.0,
    }
    if keep_signals:
        out["y"] = y
        out["x"] = x
        out["z"] = z
    return out


def _fast_chain(updates, weights, h, h_hat, reference_gain, seed, tx_power_w, noise_power_w,
                gamma_w, *, rule, power_control, internals=False):
    """The chain of ``_chain`` without materialising x, v or y (graph mode).

    Every row (device k, OFDM symbol n) whose budget does not bind sends
    ``v = m_kf |Delta|`` (m = 1 on live subcarriers; TCI: its on-subcarriers), so
    its contribution to the estimate is linear in Delta: the noise-free estimate is
    ``sum_k G_kf m_kf Delta_knf`` with ``G = pi Re(h conj(sgn h_hat)) / |h_hat|``
    (``sqrt(delta_bar/gamma) Re(c) sqrt(u)``; delta_bar cancels), one weighted sum
    over K. Rows that may exceed the budget are found from ``T_kn = sum_f Delta^2 / g``,
    with a relative margin of 1e-3 for float32 rounding, and gathered (both sums and
    the linear part come from one pass over the ``[K, d]`` updates where they lie,
    :func:`phy.grid_sums.grid_sums`; the grid is formed only for TCI's off-subcarriers);
    the power control runs on them only (its own kernel,
    :meth:`phy.power.PowerControl.budget_rows`: :func:`phy.optimal_rows.optimal_rows`
    for the KKT control, :func:`phy.power.solve_rows` on gathered rows for the others) and
    their deviation from the linear term is added back per OFDM symbol. Devices
    with a dead subcarrier (|h_hat| = 0) are handled as special rows entirely.
    """
    num_devices, num_values = updates.shape
    n, f = rule.num_symbols, rule.num_subcarriers
    w = tf.cast(weights, tf.float32)
    gain = tf.square(tf.abs(h_hat))  # [K, F]
    gain64 = tf.cast(gain, tf.float64)
    # u = coef_k / |h_hat|^2 with coef = pi^2 gamma / delta_bar (eq. PowerAlloc_1)
    on = power_control.transmit_mask(gain, reference_gain[:, None])
    inv_gain = tf.where(on > 0.0, 1.0 / gain64, tf.zeros_like(gain64))
    unit = tf.reduce_max(inv_gain, axis=1)
    unit = tf.where(unit > 0.0, unit, tf.ones_like(unit))
    # a device that sends (coef > 0, i.e. pi_k != 0) on a subcarrier without channel
    # estimate is dead there (coef's other factor gamma / delta_bar is positive)
    dead = (gain64 <= 0.0) & (tf.cast(tf.square(w), tf.float64) * gamma_w > 0.0)[:, None]
    mask = power_control.regular_amplitude_mask(on, dead)
    # estimate gain G = pi Re(c)/|h_hat| (0 where nothing is sent)
    c = h * tf.math.conj(tf.math.divide_no_nan(h_hat, tf.cast(tf.abs(h_hat), tf.complex64)))
    est_gain = tf.math.divide_no_nan(w[:, None] * tf.math.real(c), tf.abs(h_hat))
    est_gain = tf.where(dead, tf.zeros_like(est_gain), est_gain)
    # perfect CSI: G = pi |h| / |h| = pi exactly
    exact_gain = tf.reduce_all(h == h_hat) & tf.reduce_all(mask > 0.0)
    est_gain = tf.where(exact_gain, tf.broadcast_to(w[:, None], tf.shape(est_gain)), est_gain)
    # one pass over the updates (phy.grid_sums): per (k, n) sum_f Delta^2 times the
    # screening scale, 1 and the off-mask (T, ||Delta||^2, off-part), and the linear part
    # of the estimate sum_k G_kf m_kf Delta_knf
    sums, linear = tf.numpy_function(
        grid_sums, [updates, tf.cast(inv_gain / unit[:, None], tf.float32), on, est_gain * mask],
        [tf.float32, tf.float32], stateful=False,
    )
    sums = tf.ensure_shape(sums, [num_devices, n, 3])
    linear = tf.ensure_shape(linear, [n, f])
    delta_bar = tf.reduce_sum(w * tf.reduce_sum(sums[..., 1], axis=1)) / num_values
    safe_delta_bar = tf.where(delta_bar > 0.0, delta_bar, tf.ones_like(delta_bar))
    coef = tf.cast(tf.square(w), tf.float64) * gamma_w / tf.cast(safe_delta_bar, tf.float64)
    u = tf.math.divide_no_nan(coef[:, None], gain64)
    u = tf.where(dead, tf.constant(float("inf"), tf.float64), u)
    # screen: rows whose power could reach the budget, and all rows of dead devices
    power_kn = tf.cast(coef * unit, tf.float32)[:, None] * sums[..., 0]
    special = tf.reduce_any(dead, axis=1)[:, None] | tf.zeros([num_devices, n], tf.bool)
    if power_control.budgeted:
        bound = tf.cast(tx_power_w, tf.float32) * (1.0 - _SCREEN_MARGIN)
        special |= (power_kn > bound) | ~tf.math.is_finite(power_kn)
    rows = tf.cast(tf.where(tf.reshape(special, [-1]))[:, 0], tf.int32)
    k_rows, n_rows = rows // n, rows % n
    # the control's own kernel for these rows (phy.power.PowerControl.budget_rows)
    corrections, row_power, row_dist, row_att, row_state = power_control.budget_rows(
        updates, k_rows, n_rows, u, est_gain, w, mask, gain, reference_gain, tx_power_w, n, f)
    clean = linear + corrections[..., 0]
    xi = corrections[..., 1]
    off = 1.0 - mask
    has_off = tf.reduce_any(off > 0.0)
    # values sent on no subcarrier (TCI's off-subcarriers): the grid is formed only then
    xi += tf.cond(has_off,
                  lambda: -tf.reduce_sum(rule.to_grid(updates) * (w[:, None] * off)[:, None, :], 0),
                  lambda: tf.zeros([n, f]))
    off_count = tf.cond(
        has_off,
        lambda: tf.matmul(tf.cast(rule.to_grid(updates) != 0.0, tf.float32), off[..., None])[..., 0],
        lambda: tf.zeros([num_devices, n]))
    # per-row diagnostics: regular rows analytically, special rows from the kernel
    index = tf.stack([k_rows, n_rows], 1)
    power = tf.tensor_scatter_nd_update(power_kn, index, row_power)
    dist = tf.tensor_scatter_nd_update(sums[..., 2], index, row_dist)
    att = tf.tensor_scatter_nd_update(off_count, index, row_att)
    noise_std = tf.sqrt(tf.cast(noise_power_w, tf.float32) / 2.0)
    noise = tf.random.stateless_normal([n, f], seed, stddev=noise_std)  # Re(z), as in _chain
    rx_scale = tf.math.divide_no_nan(delta_bar, tf.cast(gamma_w, tf.float32))
    estimate = rule.from_grid(clean + tf.sqrt(rx_scale) * noise)
    extra = {}
    if internals:
        # sqrt(delta_bar/gamma) x = pi conj(sgn h_hat) / |h_hat| sgn(Delta) v (eq. Gen_x)
        precoder = tf.math.divide_no_nan(
            tf.cast(w[:, None], tf.complex64) * tf.math.conj(h_hat), tf.cast(gain, tf.complex64))
        extra = {"_devices": k_rows, "_symbols": n_rows, "_u": u, "_mask": mask, "_gain": gain,
                 "_row_state": row_state, "_precoder": precoder,
                 "_noise": tf.sqrt(rx_scale) * noise}
    return {
        **extra,
        "estimate": tf.where(delta_bar > 0.0, estimate, tf.zeros_like(estimate)),
        "delta_bar": delta_bar,
        "local_distortion": tf.reduce_sum(dist, axis=1),
        "tx_power_mean_w": tf.reduce_mean(power, axis=1),
        "tx_power_max_w": tf.reduce_max(power, axis=1),
        "attenuated_fraction": tf.reduce_sum(att, axis=1) / num_values,
        "aggregated_distortion": tf.reduce_sum(tf.square(xi)),
        "noise_power": rx_scale * tf.cast(noise_power_w, tf.float32) / 2.0,
    }


def _time_domain_estimate(updates, out, uplink, *, rule, power_control, reference_gain,
                          tx_power_w):
    """The BS's estimate when the uplink is simulated in the time domain
    (:class:`phy.ofdm_time.TimeDomainUplink`): the transmitted symbols of every device
    (``sqrt(delta_bar/gamma) x``, eq. ``Gen_x``; the budget-bound rows' amplitudes from the
    power control's :meth:`~phy.power.PowerControl.row_amplitudes`), through the uplink,
    plus the receiver noise of the frequency-domain path (the same draw: white noise of
    variance sigma_z^2 per sample is, after the unitary FFT, white noise of the same
    variance per subcarrier), then eq. ``delta_n``'s real part and the reverse grouping."""
    n, f = rule.num_symbols, rule.num_subcarriers
    # np.asarray shares the eager tensors' buffers (.numpy() would copy the [K, d] updates)
    host = {key: np.asarray(value) for key, value in out.items() if key.startswith("_")}
    values = np.asarray(updates)
    amplitudes = power_control.row_amplitudes(
        values, host["_devices"], host["_symbols"], host["_u"], host["_mask"], host["_gain"],
        np.asarray(reference_gain), float(tx_power_w), f, host["_row_state"])
    y = uplink.transmit(values, host["_precoder"], host["_mask"], host["_devices"],
                        host["_symbols"], amplitudes, n)
    estimate = rule.from_grid(tf.math.real(tf.constant(y)) + out["_noise"])
    return tf.where(out["delta_bar"] > 0.0, estimate, tf.zeros_like(estimate))


_COMPILED = {}


def _compiled_chain(rule, power_control, keep_signals, internals=False):
    key = (rule.num_values, rule.num_subcarriers, id(power_control), keep_signals, internals)
    if key not in _COMPILED:
        if keep_signals:
            def fn(*args):
                return _chain(*args, rule=rule, power_control=power_control,
                              keep_signals=keep_signals)
        else:
            def fn(*args):
                return _fast_chain(*args, rule=rule, power_control=power_control,
                                   internals=internals)

        _COMPILED[key] = (power_control, tf.function(fn))
    return _COMPILED[key][1]


def aggregate(updates, weights, h, h_hat, *, power_control: PowerControl, tx_power_w: float,
              noise_power_w: float, gamma_w: float, seed, keep_signals: bool = False,
              path_gain=None, uplink: TimeDomainUplink | None = None) -> AirCompResult:
    """Over-the-air aggregation of one phase (eqs. ``rho_avg`` ... ``delta_n``).

    Parameters
    ----------
    updates : [K, d], tf.float32
        Delta_k, the devices' update vectors.
    weights : [K], tf.float32
        pi_k >= 0, summing to one (pi_k = 0 devices send nothing).
    h : [K, F], tf.complex64
        True channel of the round (constant over the N symbols).
    h_hat : [K, F], tf.complex64
        Each device's estimate of its own channel (used for precoding and power).
    power_control : phy.power.PowerControl
        ``OptimalPower()``, ``TruncatedInversion(...)``, ``FullInversion()`` or
        ``IdealAggregation()`` (exact weighted sum, no channel use except counting N).
    tx_power_w : float
        P, per-OFDM-symbol budget (W).
    noise_power_w : float
        sigma_z^2, noise power per subcarrier (W).
    gamma_w : float
        gamma, the power-scaling coefficient (paper: gamma = sigma_z^2), > 0.
    seed : [2], tf.int32
        Stateless seed of the receiver noise.
    keep_signals : bool
        Also return ``y`` [N, F] and ``x`` [K, N, F].
    path_gain : [K], tf.float32, optional
        r_k^-alpha, used only as the reference of a relative TCI threshold; if
        omitted the wideband mean of |h_hat_k|^2 is the reference.
    uplink : phy.ofdm_time.TimeDomainUplink, optional
        Simulate the multiple-access channel in the time domain (cyclic prefix, each
        device's discrete-time channel, timing and carrier frequency offset) instead of
        eq. ``ReceivedSignal`` per subcarrier. ``h`` must then be the uplink's
        offset-free response (:meth:`~phy.ofdm_time.TimeDomainUplink.frequency_response`
        of the same channel); the diagnostics (power, distortion) do not depend on it.
        With ``keep_signals`` the waveform goes through Sionna's blocks
        (:meth:`~phy.ofdm_time.TimeDomainUplink.reference`).

    Returns
    -------
    AirCompResult
        All-zero updates (delta_bar = 0) give a zero estimate without NaN.
    """
    updates = tf.convert_to_tensor(updates, tf.float32)
    if updates.shape.rank != 2:
        raise ValueError(f"updates must be [K, d], got shape {updates.shape}")
    num_devices, num_values = updates.shape
    h = tf.convert_to_tensor(h, tf.complex64)
    h_hat = tf.convert_to_tensor(h_hat, tf.complex64)
    if h.shape.rank != 2 or h.shape[0] != num_devices or h.shape != h_hat.shape:
        raise ValueError(
            f"h and h_hat must both be [K={num_devices}, F], got {h.shape} and {h_hat.shape}"
        )
    weights = tf.convert_to_tensor(weights, tf.float32)
    if weights.shape != (num_devices,):
        raise ValueError(f"weights must be [K={num_devices}], got shape {weights.shape}")
    for name, value in (("tx_power_w", tx_power_w), ("gamma_w", gamma_w)):
        if not float(value) > 0.0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    if not float(noise_power_w) >= 0.0:
        raise ValueError(f"noise_power_w must be >= 0, got {noise_power_w!r}")
    rule = GroupingRule(num_values, h.shape[1])
    if not power_control.over_the_air:
        estimate = tf.linalg.matvec(updates, weights, transpose_a=True)
        delta_bar = tf.reduce_sum(weights * tf.reduce_sum(tf.square(updates), axis=1)) / num_values
        zeros = tf.zeros([num_devices], tf.float32)
        return AirCompResult(estimate, rule.num_symbols, delta_bar, zeros, zeros, zeros, zeros,
                             tf.constant(0.0), tf.constant(0.0))
    if path_gain is None:
        reference_gain = tf.reduce_mean(tf.square(tf.abs(h_hat)), axis=1)
    else:
        reference_gain = tf.convert_to_tensor(path_gain, tf.float32)
    seed = tf.convert_to_tensor(seed, tf.int32)
    time_domain = uplink is not None
    if time_domain and (uplink.num_devices, uplink.num_subcarriers) != (num_devices, h.shape[1]):
        raise ValueError(f"uplink must have K={num_devices} devices and F={h.shape[1]} "
                         f"subcarriers, got {uplink.num_devices} and {uplink.num_subcarriers}")
    fn = _compiled_chain(rule, power_control, bool(keep_signals), internals=time_domain)
    tx_power = tf.constant(float(tx_power_w), tf.float64)
    out = fn(updates, weights, h, h_hat, reference_gain, seed, tx_power,
             tf.constant(float(noise_power_w), tf.float64),
             tf.constant(float(gamma_w), tf.float64))
    z = out.pop("z", None)
    if time_domain and keep_signals:
        y = tf.constant(uplink.reference(out["x"].numpy())) + z
        rx_scale = tf.math.divide_no_nan(out["delta_bar"], tf.constant(float(gamma_w), tf.float32))
        estimate = rule.from_grid(tf.sqrt(rx_scale) * tf.math.real(y))
        out["y"] = y
        out["estimate"] = tf.where(out["delta_bar"] > 0.0, estimate, tf.zeros_like(estimate))
    elif time_domain:
        out["estimate"] = _time_domain_estimate(
            updates, out, uplink, rule=rule, power_control=power_control,
            reference_gain=reference_gain, tx_power_w=tx_power)
        out = {key: value for key, value in out.items() if not key.startswith("_")}
    return AirCompResult(num_symbols=rule.num_symbols, **out)
