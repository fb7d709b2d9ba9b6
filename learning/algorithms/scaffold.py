"""SCAFFOLD: stochastic controlled averaging (Karimireddy et al., ICML 2020), option II.

Algorithm 1 of the paper with full participation (|S| = N = K). Device k keeps a
control variate c_k, the server keeps c. Every local step corrects the gradient by
the difference of the control variates::

    y_k^0 = x_t,   y_k^{e+1} = y_k^e - eta_l [grad L_k(y_k^e) - c_k + c],   e = 0..E-1
    c_k^+ = c_k - c + (x_t - y_k^E) / (E eta_l)                        (option II)

Uplink, two phases through the same air interface (so the control variates see
the channel noise):

* ``("delta", d)``:   Delta y_k = y_k^E - x_t
* ``("control", d)``: Delta c_k = c_k^+ - c_k

Server: x_{t+1} = x_t + eta_g AC[Delta y_k] and c_{t+1} = c_t + (|S|/N) AC[Delta c_k]
= c_t + AC[Delta c_k], AC[u_k] being the BS's estimate of sum_k pi_k u_k: the paper's
plain average over the sampled clients becomes the pi-weighted sum the air interface
computes. Error-free, c = sum_k pi_k c_k at every round (c = c_k = 0 at the start;
tested); over the air c integrates the aggregation errors of the control phase.
Each device installs c_k^+ exactly (it knows its own control variate). Downlink: x
and c (2 d values). The device control variates [K, d] are part of the state and of
checkpoints. With c = c_k = 0 and one local step the model update is FedAvg's
(tested bit for bit).

Default ``global_learning_rate`` eta_g = 1 (the paper's experiments).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from learning.algorithms.base import DeviceData, Received, gather_rows, scatter_rows
from learning.algorithms.fedavg import FedAvg, LocalSGD
from learning.hyperparameters import ScaffoldParameters, defaults
from learning.models import Model

DEFAULTS = defaults(ScaffoldParameters)


class CorrectedSGD(LocalSGD):
    """FedAvg's local solver with a per-device linear gradient correction.

    One step: ``w <- w - eta (grad loss_k(w) + correction_k)``, ``correction`` [K, d]
    fixed over the E steps (SCAFFOLD: c - c_k).
    """

    def __init__(self, model: Model, learning_rate, local_steps, jit_compile):
        super().__init__(model, learning_rate, local_steps, jit_compile)
        self._corrected = tf.function(
            self._corrected_impl, jit_compile=jit_compile, reduce_retracing=True
        )

    def _corrected_impl(self, w, anchor, correction, x, y, mask):
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = self.loss(w, anchor, x, y, mask)
        return w - self.learning_rate * (tape.gradient(loss, w) + correction), loss

    def run_corrected(self, anchor, correction, x, y, mask, steps=None) -> tuple[tf.Tensor, tf.Tensor]:
        """E corrected steps (or ``steps`` [K], :meth:`LocalSGD.iterate`) from ``anchor``
        [d]: local weights [K, d], losses [E, K]."""
        return self.iterate(self._corrected, anchor, correction, x, y, mask, steps=steps)


@dataclass(frozen=True)
class ScaffoldState:
    """Global model ``w`` [d], server control ``c`` [d], device controls ``c_k`` [K, d]."""

    w: tf.Tensor
    c: tf.Tensor
    c_k: tf.Tensor


@dataclass(frozen=True)
class ScaffoldCarry:
    """Phase 0 -> phase 1: ``delta_c`` = c_k^+ - c_k and ``c_k_new`` = c_k^+, both [K, d]."""

    delta_c: tf.Tensor
    c_k_new: tf.Tensor


class Scaffold(FedAvg):
    """SCAFFOLD over the air: 2 d uplink values (model and control-variate deltas).

    Its keys beside FedAvg's:

    global_learning_rate : float
        eta_g > 0.
    """

    name = "scaffold"

    state_type = ScaffoldState
    parameters = ScaffoldParameters

    def _make_solver(self, learning_rate, local_steps, jit_compile) -> CorrectedSGD:
        return CorrectedSGD(self.model, learning_rate, local_steps, jit_compile)

    def init(self, seed: tf.Tensor) -> ScaffoldState:
        w = self.model.init_mean(seed)
        return ScaffoldState(w, tf.zeros_like(w), tf.zeros([self.num_devices, w.shape[0]]))

    def local_update(self, phase: int, state: ScaffoldState, carry, data: DeviceData, seed):
        del seed  # full-batch gradient steps are deterministic
        self._check_phase(phase, 2)
        if phase == 1:  # the second upload, formed in phase 0
            return carry.delta_c, carry, {}
        c_k = gather_rows(state.c_k, data)
        correction = state.c[None, :] - c_k  # c - c_k
        y_k, losses = self.solver.run_corrected(state.w, correction, data.x, data.y, data.mask,
                                                steps=data.local_steps)
        delta = y_k - state.w
        if data.local_steps is None:
            scale = 1.0 / (self.solver.local_steps * self.solver.learning_rate)
        else:  # option II over the steps the device took
            taken = tf.cast(data.local_steps, tf.float32)[:, None]
            scale = 1.0 / (taken * self.solver.learning_rate)
        c_k_new = -correction - scale * delta  # c_k - c + (x - y_k) / (E eta_l)
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        return delta, ScaffoldCarry(c_k_new - c_k, c_k_new), metrics

    def server_update(self, phase: int, state: ScaffoldState, carry, estimate: tf.Tensor,
                      received: Received | None = None):
        """Phase 0: ``w += eta_g estimate``; phase 1: ``c += share * estimate`` (the
        estimate is the received devices' mean of ``Delta c_k``; ``c`` stays
        ``sum_k pi_k c_k`` over the population) and the received devices' ``c_k`` advance
        (a device that could not send keeps its own)."""
        if phase == 0:
            w = state.w + self.global_learning_rate * estimate
            return ScaffoldState(w, state.c, state.c_k), carry, {}
        if phase != 1:
            raise ValueError(f"phase must be 0 or 1, got {phase!r}")
        if received is None:
            return ScaffoldState(state.w, state.c + estimate, carry.c_k_new), None, {}
        c_k = scatter_rows(state.c_k, received, carry.c_k_new)
        return ScaffoldState(state.w, state.c + received.share * estimate, c_k), None, {}

    def is_finite(self, state: ScaffoldState) -> bool:
        return bool(
            tf.reduce_all(tf.math.is_finite(state.w)) and tf.reduce_all(tf.math.is_finite(state.c))
        )
