"""Over-the-air aggregation of one phase: devices' update vectors -> the BS's estimate.

Implements Section IV-B of the paper for all K devices and N OFDM symbols at once, as one
chain (:func:`chain`); the reference that materialises every signal is
:func:`phy.aircomp_reference.reference_chain` (run when the signals are kept), and the
prologue and epilogue both share are :mod:`phy.aircomp_parts`'s:

1. ``delta_bar = sum_k pi_k ||Delta_k||^2 / d`` (eq. ``rho_avg``), reported over an
   error-free scalar control channel;
2. the grouping rule ``[K, d] -> [K, N, F]`` (:class:`phy.grid.GroupingRule`);
3. ``u_k = pi_k^2 gamma / (delta_bar |h_hat_k|^2)`` (eq. ``PowerAlloc_1``);
4. the amplitudes v from a power control (:mod:`phy.power`, eq. ``Opt_v``);
5. ``x = conj(sgn h_hat) sgn(Delta) sqrt(u) v`` (eq. ``Gen_x``);
6. the multiple-access channel ``y[n] = sum_k h_k o x_k[n] + z[n]`` (eqs.
   ``ReceivedSignal``, ``y_rho``);
7. the receiver ``sqrt(delta_bar / gamma) Re(y)`` (eq. ``delta_n``) and the reverse
   grouping ``[N, F] -> [d]``.

The chain (measured in ``benchmarks/phy_time.py``): a row (device k, OFDM symbol n)
whose budget does not bind sends ``v = m |Delta|`` (m = 1 on live subcarriers, TCI: its
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
(formed only for TCI's off-subcarriers). The graph is one ``tf.function`` per phase
shape and power control configuration (:func:`phy.power.configuration_key`; graph mode:
the row set is dynamic), shared by the runs of a process. Only Re(z) is drawn, the same numbers as the
reference's. With a :class:`phy.ofdm_time.TimeDomainUplink` the transmitted symbols go
through the waveform instead of eq. ``ReceivedSignal`` per subcarrier. With a true channel
per OFDM symbol (``h`` [K, N, F], moving devices) only the estimate gain changes, to one
per symbol (:mod:`phy.symbol_gains`), which the linear sum and the budget-bound rows read.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from phy import aircomp_parts as parts
from phy.aircomp_parts import AirCompResult
from phy.aircomp_reference import reference_chain
from phy.grid import GroupingRule
from phy.grid_sums import grid_sums
from phy.ofdm_time import TimeDomainUplink
from phy.power import PowerControl, configuration_key
from phy.symbol_gains import symbol_gains

__all__ = ["AirCompResult", "aggregate", "chain"]

_SCREEN_MARGIN = 1e-3


def chain(updates, weights, h, h_hat, reference_gain, seed, tx_power_w, noise_power_w,
          gamma_w, public_delta_bar, *, rule, power_control, internals=False):
    """The AirComp chain without materialising x, v or y (graph mode).

    Input: ``updates`` [K, d] tf.float32, ``weights`` [K], ``h`` [K, F] or [K, N, F] (the
    true channel of each OFDM symbol), ``h_hat`` [K, F] tf.complex64, ``reference_gain`` [K], the noise ``seed`` [2] tf.int32, P,
    sigma_z^2 and gamma as tf.float64 scalars, ``public_delta_bar`` a tf.float32 scalar
    (> 0: the delta_bar the BS uses in place of the reported one; 0: the reported one,
    eq. ``rho_avg``). Output: the fields of
    :class:`phy.aircomp_parts.AirCompResult` as a dict (with ``internals`` also the
    budget-bound rows, u, the mask and the precoder the time-domain uplink needs, under
    names starting with ``_``).

    Every row (device k, OFDM symbol n) whose budget does not bind sends
    ``v = m_kf |Delta|`` (m = 1 on live subcarriers; TCI: its on-subcarriers), so
    its contribution to the estimate is linear in Delta: the noise-free estimate is
    ``sum_k G_kf m_kf Delta_knf`` with ``G = pi Re(h conj(sgn h_hat)) / |h_hat|``
    (``sqrt(delta_bar/gamma) Re(c) sqrt(u)``; delta_bar cancels), one weighted sum
    over K. With ``h`` [K, N, F] the devices still send as ``h_hat`` dictates and only G
    changes, to ``G_knf = pi Re(h_knf conj(sgn h_hat_kf)) / |h_hat_kf|``. Rows that may
    exceed the budget are found from ``T_kn = sum_f Delta^2 / g``,
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
    w, gain, gain64, phase, c, on, inv_gain, unit, dead, mask = parts.device_terms(
        weights, h, h_hat, reference_gain, gamma_w, power_control)
    per_symbol = h.shape.rank == 3  # G_knf: the channel of each OFDM symbol
    if per_symbol:  # G and G m [K, N, F] in one pass (phy.symbol_gains)
        est_gain, coeff = tf.numpy_function(
            _reused_symbol_gains, [h, h_hat, phase, tf.abs(h_hat), w, dead, mask], [tf.float32] * 2,
            stateful=False)
        est_gain, coeff = (tf.ensure_shape(t, [num_devices, n, f]) for t in (est_gain, coeff))
    else:
        est_gain = parts.estimate_gain(w, c, h_hat, dead, tf.reduce_all(h == h_hat) & tf.reduce_all(mask > 0.0))
        coeff = est_gain * mask
    # one pass over the updates (phy.grid_sums): per (k, n) sum_f Delta^2 times the
    # screening scale, 1 and the off-mask (T, ||Delta||^2, off-part), and the linear part
    # of the estimate sum_k G_kf m_kf Delta_knf (G_knf per symbol)
    sums, linear = tf.numpy_function(
        grid_sums, [updates, tf.cast(inv_gain / unit[:, None], tf.float32), on, coeff],
        [tf.float32, tf.float32], stateful=False,
    )
    sums = tf.ensure_shape(sums, [num_devices, n, 3])
    linear = tf.ensure_shape(linear, [n, f])
    delta_bar = parts.reported_or_public(
        tf.reduce_sum(w * tf.reduce_sum(sums[..., 1], axis=1)) / num_values, public_delta_bar)
    coef = parts.coefficient(w, gamma_w, delta_bar)
    u = parts.allocation(coef, gain64, dead)
    # screen: rows whose power could reach the budget, and all rows of dead devices
    power_kn = tf.cast(coef * unit, tf.float32)[:, None] * sums[..., 0]
    special = tf.reduce_any(dead, axis=1)[:, None] | tf.zeros([num_devices, n], tf.bool)
    if power_control.budgeted:
        bound = tf.cast(tx_power_w, tf.float32) * (1.0 - _SCREEN_MARGIN)
        special |= (power_kn > bound) | ~tf.math.is_finite(power_kn)
    rows = tf.cast(tf.where(tf.reshape(special, [-1]))[:, 0], tf.int32)
    k_rows, n_rows = rows // n, rows % n
    # the control's own kernel for these rows (phy.power.PowerControl.budget_rows)
    # (per symbol: G of row (k, n) is row k N + n of G [K N, F], the row's flat index)
    corrections, row_power, row_dist, row_att, row_state = power_control.budget_rows(
        updates, k_rows, n_rows, u, tf.reshape(est_gain, [-1, f]) if per_symbol else est_gain, w, mask,
        gain, reference_gain, tx_power_w, n, f, gain_rows=rows if per_symbol else None)
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
    noise = tf.sqrt(parts.rx_scale(delta_bar, gamma_w)) * parts.receiver_noise(seed, [n, f], noise_power_w)
    received = tf.ensure_shape(tf.numpy_function(_in_order_sum, [clean, noise], tf.float32, stateful=False), [n, f])
    out = parts.finish(
        rule, received, delta_bar, local_distortion=tf.reduce_sum(dist, axis=1), power=power,
        attenuated=tf.reduce_sum(att, axis=1), aggregated_distortion=tf.reduce_sum(tf.square(xi)),
        noise_power_w=noise_power_w, gamma_w=gamma_w)
    if internals:
        # sqrt(delta_bar/gamma) x = pi conj(sgn h_hat) / |h_hat| sgn(Delta) v (eq. Gen_x)
        precoder = tf.math.divide_no_nan(
            tf.cast(w[:, None], tf.complex64) * tf.math.conj(h_hat), tf.cast(gain, tf.complex64))
        out.update({"_devices": k_rows, "_symbols": n_rows, "_u": u, "_mask": mask, "_gain": gain,
                    "_row_state": row_state, "_precoder": precoder, "_noise": noise})
    return out


def _reused_symbol_gains(*args):
    """:func:`phy.symbol_gains.symbol_gains` of the whole phase, in the memory of the last
    phase's gains when it is free."""
    return symbol_gains(*args, reuse=True)


def _in_order_sum(clean, noise):
    """``clean + noise`` ([N, F] float32), outside the graph: in the graph, Grappler's
    arithmetic optimizer merged ``(linear + corrections) + noise`` into one sum whose
    order differed from process to process (one float32 ulp in a quarter of the
    estimate's entries; ``docs/faults.md``)."""
    return np.add(clean, noise)


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
    return parts.estimate_of(rule, tf.math.real(tf.constant(y)) + out["_noise"], out["delta_bar"])


_COMPILED = {}


def _compiled_chain(rule, power_control, keep_signals, internals=False):
    # one graph per configuration, shared by the runs of a process (a study's worker)
    key = (rule.num_values, rule.num_subcarriers, configuration_key(power_control), keep_signals,
           internals)
    if key not in _COMPILED:
        if keep_signals:
            def fn(*args):
                return reference_chain(*args, rule=rule, power_control=power_control)
        else:
            def fn(*args):
                return chain(*args, rule=rule, power_control=power_control, internals=internals)

        _COMPILED[key] = (power_control, tf.function(fn, autograph=False))
    return _COMPILED[key][1]


def aggregate(updates, weights, h, h_hat, *, power_control: PowerControl, tx_power_w: float,
              noise_power_w: float, gamma_w: float, seed, keep_signals: bool = False,
              path_gain=None, uplink: TimeDomainUplink | None = None,
              public_delta_bar: float | None = None) -> AirCompResult:
    """Over-the-air aggregation of one phase (eqs. ``rho_avg`` ... ``delta_n``).

    Parameters
    ----------
    updates : [K, d], tf.float32
        Delta_k, the devices' update vectors.
    weights : [K], tf.float32
        pi_k >= 0, summing to one (pi_k = 0 devices send nothing).
    h : [K, F] or [K, N, F], tf.complex64
        True channel of the phase: constant over its N symbols, or one per OFDM symbol
        (moving devices, :mod:`phy.uplink.moving_link`; not with ``uplink``).
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
    public_delta_bar : float, optional
        The ``delta_bar`` every device and the BS use in place of the reported
        ``sum_k pi_k ||Delta_k||^2 / d`` (:func:`phy.privacy.public_delta_bar`: formed from a
        clip norm, so no device's data enters another's transmission); None: the reported one.

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
    num_symbols = -(-num_values // h_hat.shape[-1]) if h_hat.shape.rank == 2 and h_hat.shape[-1] else 0
    per_symbol = h.shape.rank == 3 and h.shape == (num_devices, num_symbols, h_hat.shape[-1])
    if (h_hat.shape.rank != 2 or h_hat.shape[0] != num_devices
            or not (h.shape == h_hat.shape or per_symbol)):
        raise ValueError(
            f"h and h_hat must both be [K={num_devices}, F], or h [K, N, F] (a channel per OFDM "
            f"symbol, N = ceil(d / F)) and h_hat [K, F], got {h.shape} and {h_hat.shape}"
        )
    weights = tf.convert_to_tensor(weights, tf.float32)
    if weights.shape != (num_devices,):
        raise ValueError(f"weights must be [K={num_devices}], got shape {weights.shape}")
    for name, value in (("tx_power_w", tx_power_w), ("gamma_w", gamma_w)):
        if not float(value) > 0.0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    if not float(noise_power_w) >= 0.0:
        raise ValueError(f"noise_power_w must be >= 0, got {noise_power_w!r}")
    rule = GroupingRule(num_values, h_hat.shape[1])
    if not power_control.over_the_air:
        estimate = tf.linalg.matvec(updates, weights, transpose_a=True)
        delta_bar = parts.mean_power(weights, updates, num_values)
        zeros = tf.zeros([num_devices], tf.float32)
        return AirCompResult(estimate, rule.num_symbols, delta_bar, zeros, zeros, zeros, zeros,
                             tf.constant(0.0), tf.constant(0.0))
    if path_gain is None:
        reference_gain = tf.reduce_mean(tf.square(tf.abs(h_hat)), axis=1)
    else:
        reference_gain = tf.convert_to_tensor(path_gain, tf.float32)
    seed = tf.convert_to_tensor(seed, tf.int32)
    time_domain = uplink is not None
    if time_domain and per_symbol:
        raise NotImplementedError("ofdm.domain = 'time' takes one channel per phase, not h [K, N, F] "
                                  "per OFDM symbol")
    if time_domain and (uplink.num_devices, uplink.num_subcarriers) != (num_devices, h_hat.shape[1]):
        raise ValueError(f"uplink must have K={num_devices} devices and F={h_hat.shape[1]} "
                         f"subcarriers, got {uplink.num_devices} and {uplink.num_subcarriers}")
    fn = _compiled_chain(rule, power_control, bool(keep_signals), internals=time_domain)
    tx_power = tf.constant(float(tx_power_w), tf.float64)
    out = fn(updates, weights, h, h_hat, reference_gain, seed, tx_power,
             tf.constant(float(noise_power_w), tf.float64),
             tf.constant(float(gamma_w), tf.float64),
             tf.constant(0.0 if public_delta_bar is None else float(public_delta_bar), tf.float32))
    z = out.pop("z", None)
    if time_domain and keep_signals:
        y = tf.constant(uplink.reference(out["x"].numpy())) + z
        rx_scale = parts.rx_scale(out["delta_bar"], tf.constant(float(gamma_w), tf.float64))
        out["y"] = y
        out["estimate"] = parts.estimate_of(rule, tf.sqrt(rx_scale) * tf.math.real(y), out["delta_bar"])
    elif time_domain:
        out["estimate"] = _time_domain_estimate(
            updates, out, uplink, rule=rule, power_control=power_control,
            reference_gain=reference_gain, tx_power_w=tx_power)
        out = {key: value for key, value in out.items() if not key.startswith("_")}
    return AirCompResult(num_symbols=rule.num_symbols, **out)
