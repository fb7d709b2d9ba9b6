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
checkpoints (a version of a table on disk when the round streams its devices,
:mod:`learning.device_table`). With c = c_k = 0 and one local step the model update is FedAvg's
(tested bit for bit).

Default ``global_learning_rate`` eta_g = 1 (the paper's experiments).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from learning.algorithms.fedavg import FedAvg, LocalOutcome, LocalSGD, population_sum
from learning.hyperparameters import ScaffoldParameters, defaults

DEFAULTS = defaults(ScaffoldParameters)


class CorrectedSGD(LocalSGD):
    """FedAvg's local solver with a per-device linear gradient correction.

    One step: ``w <- w - eta (grad loss_k(w) + correction_k)``, ``correction`` [K, d]
    (the step's ``inputs``) fixed over the E steps (SCAFFOLD: c - c_k).
    """

    def direction(self, grad, w, anchor, inputs):
        """``grad + correction`` [K, d]."""
        (correction,) = inputs
        return grad + correction


@dataclass(frozen=True)
class ScaffoldState:
    """Global model ``w`` [d], server control ``c`` [d], device controls ``c_k`` [K, d]."""

    w: tf.Tensor
    c: tf.Tensor
    c_k: tf.Tensor


class Scaffold(FedAvg):
    """SCAFFOLD over the air: 2 d uplink values (model and control-variate deltas).

    FedAvg's round with three overrides: the correction c - c_k as the solver's input,
    the control variates after the local steps (:meth:`local_outcome`) and the server
    step. Its keys beside FedAvg's:

    global_learning_rate : float
        eta_g > 0.
    """

    name = "scaffold"

    state_type = ScaffoldState
    parameters = ScaffoldParameters

    def _make_solver(self, learning_rate, local_steps, jit_compile) -> CorrectedSGD:
        return CorrectedSGD(self.model, learning_rate, local_steps, jit_compile)

    def solver_inputs(self, state, rows, data):
        """The correction ``c - c_k`` [K, d]."""
        return (state.c[None, :] - rows["c_k"],), ()

    def local_outcome(self, state, rows, data, delta, inputs, carried) -> LocalOutcome:
        """Option II, c_k^+ = c_k - c + (x - y_k) / (E eta_l) over the steps each device
        took; phase 1 uploads ``c_k^+ - c_k`` and installs c_k^+."""
        if data.local_steps is None:
            scale = 1.0 / (self.solver.local_steps * self.solver.learning_rate)
        else:
            taken = tf.cast(data.local_steps, tf.float32)[:, None]
            scale = 1.0 / (taken * self.solver.learning_rate)
        c_k_new = -inputs[0] - scale * delta  # c_k - c + (x - y_k) / (E eta_l)
        return LocalOutcome((c_k_new - rows["c_k"],), ({}, {"c_k": c_k_new}))

    def server_step(self, phase, state, estimate, received):
        """Phase 0: ``w += eta_g estimate``; phase 1: ``c += share * estimate`` (``c`` stays
        ``sum_k pi_k c_k`` over the population, :func:`population_sum`)."""
        if phase == 0:
            return {"w": state.w + self.global_learning_rate * estimate}
        return {"c": state.c + population_sum(estimate, received)}
