"""What both AirComp chains share: the result, the prologue and the epilogue, written once.

:mod:`phy.aircomp` (the implementation, the fast path) and :mod:`phy.aircomp_reference`
(the reference sum that materialises x and y) run the same steps around their different
middles:

* prologue: the devices' weights in float32, ``|h_hat|^2`` (float32 and float64), the
  precoder's phase ``conj(sgn h_hat)`` and the effective channel
  ``c = h conj(sgn h_hat)`` (:func:`transmit_terms`); the power-allocation coefficient
  ``pi^2 gamma / delta_bar`` (:func:`coefficient`) and ``u = coef / |h_hat|^2``, +inf on
  a subcarrier without estimate (:func:`allocation`, eq. ``PowerAlloc_1``); the receiver
  noise's real part (:func:`receiver_noise`);
* epilogue: the receiver's scale ``delta_bar / gamma`` (:func:`rx_scale`), the estimate
  after the reverse grouping, zero when ``delta_bar = 0`` (:func:`estimate_of`, eq.
  ``delta_n``), and the result's diagnostics (:func:`finish`).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf


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


def transmit_terms(weights, h, h_hat, per_symbol: bool | None = None):
    """The prologue's per-device terms.

    Input: ``weights`` pi [K], ``h`` [K, F] or [K, N, F] (the true channel per OFDM
    symbol) and ``h_hat`` [K, F] tf.complex64. Output: ``(w [K] tf.float32, gain [K, F]
    tf.float32 |h_hat|^2, gain64 [K, F] tf.float64, phase [K, F] tf.complex64
    conj(sgn h_hat), c [K, F] tf.complex64 h conj(sgn h_hat))``; c is None for ``h``
    [K, N, F] (the fast chain forms its gains per symbol in one pass,
    :mod:`phy.symbol_gains`, and the reference chain needs no c). ``per_symbol`` says so
    where ``h`` is not at hand (None: from ``h``'s rank; True: ``h`` is not read).
    """
    w = tf.cast(weights, tf.float32)
    gain = tf.square(tf.abs(h_hat))
    phase = tf.math.conj(tf.math.divide_no_nan(h_hat, tf.cast(tf.abs(h_hat), tf.complex64)))
    c = None if (h.shape.rank == 3 if per_symbol is None else per_symbol) else h * phase
    return w, gain, tf.cast(gain, tf.float64), phase, c


def device_terms(weights, h, h_hat, reference_gain, gamma_w, power_control, per_symbol: bool | None = None):
    """The prologue's per-device terms a power control needs, for any set of devices (the
    chain's all K, a stream's chunk or gathered rows: each row's terms are its own).

    Input: ``weights``, ``h``, ``h_hat``, ``reference_gain`` [K] as the chain's, gamma_w
    (tf.float64), the :class:`phy.power.PowerControl`. Output: :func:`transmit_terms`'
    ``(w, gain, gain64, phase, c)`` and ``on`` [K, F] (the control's transmit mask),
    ``inv_gain`` [K, F] f64 (1/|h_hat|^2 where on, else 0), ``unit`` [K] f64 (its row
    maximum, 1 where none), ``dead`` [K, F] bool (a device that sends, pi_k != 0, on a
    subcarrier without estimate), ``mask`` [K, F] (the regular amplitudes' mask).
    """
    w, gain, gain64, phase, c = transmit_terms(weights, h, h_hat, per_symbol)
    # u = coef_k / |h_hat|^2 with coef = pi^2 gamma / delta_bar (eq. PowerAlloc_1)
    on = power_control.transmit_mask(gain, reference_gain[:, None])
    inv_gain = tf.where(on > 0.0, 1.0 / gain64, tf.zeros_like(gain64))
    unit = tf.reduce_max(inv_gain, axis=1)
    unit = tf.where(unit > 0.0, unit, tf.ones_like(unit))
    # a device that sends (coef > 0, i.e. pi_k != 0) on a subcarrier without channel
    # estimate is dead there (coef's other factor gamma / delta_bar is positive)
    dead = (gain64 <= 0.0) & (tf.cast(tf.square(w), tf.float64) * gamma_w > 0.0)[:, None]
    mask = power_control.regular_amplitude_mask(on, dead)
    return w, gain, gain64, phase, c, on, inv_gain, unit, dead, mask


def estimate_gain(w, c, h_hat, dead, exact_gain):
    """The estimate gain ``G = pi Re(c) / |h_hat|`` [K, F] tf.float32 (0 where nothing is
    sent); exactly pi where ``exact_gain`` (a bool scalar: perfect CSI with every
    subcarrier live, over all the phase's devices); per OFDM symbol it is
    :func:`phy.symbol_gains.symbol_gains`'s, with the same operations."""
    est_gain = tf.math.divide_no_nan(w[:, None] * tf.math.real(c), tf.abs(h_hat))
    est_gain = tf.where(dead, tf.zeros_like(est_gain), est_gain)
    # perfect CSI: G = pi |h| / |h| = pi exactly
    return tf.where(exact_gain, tf.broadcast_to(w[:, None], tf.shape(est_gain)), est_gain)


def mean_power(w, updates, num_values):
    """``delta_bar = sum_k pi_k ||Delta_k||^2 / d`` (eq. ``rho_avg``) from the ``[K, d]``
    updates (the chain sums the same from :func:`phy.grid_sums.grid_sums`'s rows)."""
    return tf.reduce_sum(w * tf.reduce_sum(tf.square(updates), axis=1)) / num_values


def reported_or_public(reported, public):
    """The ``delta_bar`` a chain uses: ``public`` (a tf.float32 scalar) where it is > 0
    (:func:`phy.privacy.public_delta_bar`), else the ``reported`` one (eq. ``rho_avg``)."""
    return tf.where(public > 0.0, tf.cast(public, reported.dtype), reported)


def coefficient(w, gamma_w, delta_bar):
    """``pi_k^2 gamma / delta_bar`` [K] tf.float64 (eq. ``PowerAlloc_1`` without the gain;
    ``delta_bar = 0`` divides by 1: nothing is sent then)."""
    safe_delta_bar = tf.where(delta_bar > 0.0, delta_bar, tf.ones_like(delta_bar))
    return tf.cast(tf.square(w), tf.float64) * gamma_w / tf.cast(safe_delta_bar, tf.float64)


def allocation(coef, gain64, dead):
    """``u = coef / |h_hat|^2`` [K, F] tf.float64, +inf where ``dead`` (a device that sends
    on a subcarrier without estimate)."""
    u = tf.math.divide_no_nan(coef[:, None], gain64)
    return tf.where(dead, tf.constant(float("inf"), tf.float64), u)


def receiver_noise(seed, shape, noise_power_w):
    """Re(z) of ``z ~ CN(0, sigma_z^2)`` on ``shape`` from the stateless ``seed`` (the
    imaginary part, where a chain needs it, is drawn from ``stateless_fold_in(seed, IMAGINARY_NOISE)``, :mod:`native.streams`)."""
    noise_std = tf.sqrt(tf.cast(noise_power_w, tf.float32) / 2.0)
    return tf.random.stateless_normal(shape, seed, stddev=noise_std)


def rx_scale(delta_bar, gamma_w):
    """``delta_bar / gamma`` (tf.float32; 0 when ``delta_bar = 0``): the receiver's
    ``sqrt(delta_bar / gamma)`` squared (eq. ``delta_n``)."""
    return tf.math.divide_no_nan(delta_bar, tf.cast(gamma_w, tf.float32))


def estimate_of(rule, grid, delta_bar):
    """The reverse grouping of the receiver's ``grid`` [N, F] -> [d], all zero when
    ``delta_bar = 0`` (every update zero: nothing was sent)."""
    estimate = rule.from_grid(grid)
    return tf.where(delta_bar > 0.0, estimate, tf.zeros_like(estimate))


def finish(rule, grid, delta_bar, *, local_distortion, power, attenuated, aggregated_distortion,
           noise_power_w, gamma_w):
    """The chains' common output dict (the fields of :class:`AirCompResult` but
    ``num_symbols``): the estimate from the receiver's ``grid`` [N, F], the per-device
    ``local_distortion`` [K], transmit ``power`` [K, N] (mean and max over the symbols),
    ``attenuated`` value counts [K] (divided by d), ``aggregated_distortion`` and the
    noise term's variance ``delta_bar sigma_z^2 / (2 gamma)``."""
    return {
        "estimate": estimate_of(rule, grid, delta_bar),
        "delta_bar": delta_bar,
        "local_distortion": local_distortion,
        "tx_power_mean_w": tf.reduce_mean(power, axis=1),
        "tx_power_max_w": tf.reduce_max(power, axis=1),
        "attenuated_fraction": attenuated / rule.num_values,
        "aggregated_distortion": aggregated_distortion,
        "noise_power": rx_scale(delta_bar, gamma_w) * tf.cast(noise_power_w, tf.float32) / 2.0,
    }
