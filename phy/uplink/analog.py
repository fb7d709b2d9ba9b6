"""``uplink.scheme = "analog"``: the paper's broadband analog aggregation (Section IV,
eqs. ``rho_avg`` ... ``delta_n``), :func:`phy.aircomp.aggregate` behind the scheme seam."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from native.columns import Columns
from phy import aircomp
from phy.aircomp_stream import AggregateStream
from phy.parameters import AnalogScheme
from phy.power import PowerControl
from phy.receiver_scaling import joint_gamma
from phy.uplink.scheme import SchemeResult, energy_j

BUDGET_TOLERANCE = 1e-4
"""Relative slack above P before a device-symbol counts as over budget (float32 rounding)."""


class Analog:
    """Every sender's amplitude-and-sign-encoded update superposed on the same
    subcarriers (one real value per resource element, eq. ``Gen_x``), the power control
    of ``power.control`` and the receiver's scaling gamma (eq. ``delta_n``).

    The receiver noise is ``power.noise_power_dbm``'s plus the link's
    ``artificial_noise_power_w`` (a ``[privacy]`` target's, :mod:`phy.privacy`; 0
    without one, and then exactly the receiver's). A link's ``signal_scale`` s < 1 (a
    target met by :class:`phy.power.PrivacyScaling`) runs the chain at ``s^2 gamma`` and
    ``s^2 P``.

    Parameters
    ----------
    power_control : phy.power.PowerControl
        ``power.control``, how each sender scales its update to the budget P.
    gamma_w : float
        gamma (W), the receiver's scaling; with ``joint_gamma`` the value used when no
        device sends.
    joint_gamma : bool
        Choose gamma per phase instead (``power.gamma = "joint"``).

    These are the scheme's own: the block holds none of them, and no other scheme reads
    them; the ``[privacy]`` wrapper (:class:`phy.uplink.private.Private`, for a scheme that
    ``accounts_privacy``) reads ``power_control`` and ``gamma_w`` from it.

    With ``joint_gamma`` gamma is chosen per
    phase from what the BS knows, the weights, the senders' reported ``||Delta_k||^2 / d``
    and their effective channels ``h_hat`` after its combiner
    (:func:`phy.receiver_scaling.joint_gamma`), and traced as ``gamma_w_<phase>``.

    Columns per phase: ``delta_bar_<phase>``, ``distortion_<phase>``,
    ``noise_power_<phase>`` (of both noises), ``power_over_budget_<phase>`` (a control that is
    ``budgeted``), ``gamma_w_<phase>`` (joint gamma); per sender ``local_distortion_``, ``tx_power_w_``,
    ``tx_power_max_w_``, ``clipped_fraction_<phase>`` (with ``trace.per_device``); the
    signals ``y_<phase>``, ``estimate_<phase>`` (when kept).
    """

    carries = AnalogScheme.carries
    accounts_privacy = getattr(AnalogScheme, "accounts_privacy", False)
    channel_per_symbol = AnalogScheme.channel_per_symbol  # moving devices: h [K, N, F]

    def __init__(self, power_control: PowerControl, gamma_w: float, joint_gamma: bool = False):
        self.power_control, self.gamma_w, self.joint_gamma = power_control, gamma_w, bool(joint_gamma)

    def nominal_symbols(self, grid) -> int:
        """N = ceil(n / F): one real value per resource element."""
        return grid.num_symbols

    def _air(self, link, air, gamma_w: float) -> tuple[float, float, float]:
        """``(gamma_w, tx_power_w, noise_power_w)`` the chain runs at: the receiver's noise
        plus a privacy target's artificial noise, and a target's ``signal_scale`` s < 1 on
        gamma and P."""
        noise_power_w = air.noise_power_w  # plus the artificial noise of a privacy target
        if link.artificial_noise_power_w > 0.0:
            noise_power_w = noise_power_w + link.artificial_noise_power_w
        tx_power_w = air.tx_power_w
        if link.signal_scale != 1.0:  # a privacy target met by sending less (phy.power.PrivacyScaling)
            gamma_w, tx_power_w = gamma_w * link.signal_scale ** 2, tx_power_w * link.signal_scale ** 2
        return gamma_w, tx_power_w, noise_power_w

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool) -> SchemeResult:
        gamma_w = joint_gamma_of(link, air, self.gamma_w) if self.joint_gamma else self.gamma_w
        gamma_w, tx_power_w, noise_power_w = self._air(link, air, gamma_w)
        result = aircomp.aggregate(
            link.updates, link.weights, link.h, link.h_hat, power_control=self.power_control,
            tx_power_w=tx_power_w, noise_power_w=noise_power_w, gamma_w=gamma_w,
            seed=seed, keep_signals=keep_signals, path_gain=link.path_gain, uplink=link.uplink,
            public_delta_bar=link.delta_bar)
        return self._result(result, air, phase=phase, gamma_w=gamma_w, per_device=per_device)

    def open_stream(self, link, air, *, phase: str, seed, per_device: bool) -> AnalogStream:
        """The phase with the senders' updates added in chunks (:class:`AnalogStream`); a
        joint gamma and the time-domain uplink need every update at once and are refused."""
        if self.joint_gamma:
            raise NotImplementedError("power.gamma = 'joint' needs every sender's update before any "
                                      "is sent: it does not stream")
        if link.uplink is not None:
            raise NotImplementedError("ofdm.domain = 'time' needs every sender's symbols at once: "
                                      "it does not stream")
        return AnalogStream(self, link, air, phase=phase, seed=seed, per_device=per_device)

    def _result(self, result, air, *, phase: str, gamma_w: float, per_device: bool) -> SchemeResult:
        """The scheme's result and columns from the chain's
        :class:`phy.aircomp_parts.AirCompResult`."""
        columns = Columns()
        scalars = columns.scalars
        if self.joint_gamma:
            scalars[f"gamma_w_{phase}"] = float(gamma_w)
        scalars[f"delta_bar_{phase}"] = float(result.delta_bar)
        scalars[f"distortion_{phase}"] = float(result.aggregated_distortion)
        scalars[f"noise_power_{phase}"] = float(result.noise_power)
        if self.power_control.budgeted:
            over = result.tx_power_max_w > air.tx_power_w * (1.0 + BUDGET_TOLERANCE)
            scalars[f"power_over_budget_{phase}"] = float(tf.reduce_sum(tf.cast(over, tf.int32)))
        if per_device:
            columns.per_device.update({
                f"local_distortion_{phase}": result.local_distortion.numpy(),
                f"tx_power_w_{phase}": result.tx_power_mean_w.numpy(),
                f"tx_power_max_w_{phase}": result.tx_power_max_w.numpy(),
                f"clipped_fraction_{phase}": result.attenuated_fraction.numpy()})
        if result.y is not None:
            columns.signals[f"y_{phase}"] = result.y.numpy()
            columns.signals[f"estimate_{phase}"] = result.estimate.numpy()
        energy = energy_j(result.tx_power_mean_w.numpy(), result.num_symbols, air.symbol_duration_s)
        return SchemeResult(result.estimate, result.num_symbols, energy, columns)


class AnalogStream:
    """One analog phase with the senders' updates added in chunks
    (:meth:`Analog.open_stream`; the chain is :class:`phy.aircomp_stream.AggregateStream`):
    ``add(lo, hi, updates)`` in order, then ``finish() -> SchemeResult``, the result of
    :meth:`Analog.send` on all the updates up to the float32 order of the linear sum."""

    def __init__(self, scheme: Analog, link, air, *, phase: str, seed, per_device: bool):
        self.scheme, self.air, self.phase, self.per_device = scheme, air, phase, per_device
        self.link, self.seed, self.chain = link, seed, None
        self.gamma_w, self.tx_power_w, self.noise_power_w = scheme._air(link, air, scheme.gamma_w)

    def add(self, lo: int, hi: int, updates) -> None:
        """Rows ``lo:hi`` of the senders' updates ([hi - lo, n] float32), in order."""
        if self.chain is None:  # n is known from the first rows
            link = self.link
            self.chain = AggregateStream(
                int(updates.shape[1]), link.weights, link.h, link.h_hat,
                power_control=self.scheme.power_control, tx_power_w=self.tx_power_w,
                noise_power_w=self.noise_power_w, gamma_w=self.gamma_w, seed=self.seed,
                path_gain=link.path_gain, public_delta_bar=link.delta_bar)
        self.chain.add(lo, hi, updates)

    def finish(self) -> SchemeResult:
        return self.scheme._result(self.chain.finish(), self.air, phase=self.phase, gamma_w=self.gamma_w,
                                   per_device=self.per_device)


def joint_gamma_of(link, air, fallback_w: float) -> float:
    """The phase's joint gamma (W) from what the BS knows: the weights pi_k [K_T], the
    senders' reported update powers ``||Delta_k||^2 / n`` (eq. ``rho_avg``'s terms) and
    ``|h_hat|^2`` [K_T, F], the effective channels after the combiner
    (:func:`phy.receiver_scaling.joint_gamma`) at ``air``'s P and sigma_z^2;
    ``fallback_w`` when no device sends."""
    updates = tf.convert_to_tensor(link.updates, tf.float32)
    energy = tf.reduce_sum(tf.square(updates), axis=1).numpy().astype(np.float64)
    energy /= max(int(updates.shape[1]), 1)
    gain = np.abs(np.asarray(link.h_hat).astype(np.complex128)) ** 2
    return joint_gamma(np.asarray(link.weights, np.float64), energy, gain,
                       tx_power_w=air.tx_power_w, noise_power_w=air.noise_power_w,
                       fallback_w=fallback_w)
