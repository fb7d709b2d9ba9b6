"""FedSMOO: dynamic-regularised sharpness-aware minimisation (Sun et al., ICML 2023).

"Dynamic Regularized Sharpness Aware Minimization in Federated Learning: Approaching
Global Consistency and Smooth Landscape". Local steps are SAM steps whose
perturbation is pulled towards a globally consistent perturbation s by a per-device
dual mu_k, plus the FedDyn-style dynamic regulariser (dual lambda_k, penalty
weight alpha = 1/beta). Device k, full-batch local step e = 0..E-1::

    g1      = grad L_k(w^e)
    s_hat   = rho (g1 - mu_k - s) / ||g1 - mu_k - s||
    mu_k   <- mu_k + s_hat - s
    g2      = grad L_k(w^e + s_hat)
    g       = g2 - lambda_k + alpha (w^e - w_t),   ||g|| clipped to max_grad_norm
    w^{e+1} = w^e - eta g

After E steps lambda_k <- lambda_k - alpha (w^E - w_t). Two uplink phases through
the air interface (the paper's Section VI: "the additional d values correspond to
auxiliary variables"):

* ``("delta", d)``:        Delta_k = w^E - w_t
* ``("perturbation", d)``: a_k = mu_k - s_hat^{E-1}

Server (AC[u_k] = the BS's estimate of sum_k pi_k u_k)::

    lambda <- lambda - alpha AC[Delta_k],   w_{t+1} = w_t + AC[Delta_k] - lambda / alpha
    s_{t+1} = rho AC[a_k] / ||AC[a_k]||

We store h_k = -lambda_k / alpha (device k's accumulated Delta_k) and h = -lambda /
alpha, so w_{t+1} = w_t + AC[Delta_k] + h_{t+1} with h_{t+1} = h_t + AC[Delta_k]:
error-free this is sum_k pi_k w_k^E + sum_k pi_k h_k, the FedDyn/FedSMOO server
rule; over the air h integrates every round's aggregation error. Downlink: w and
s (2 d values). mu_k, h_k [K, d] persist in the state.

Sources: Algorithm 1 of the paper as implemented in the first author's simulator
(``woodenchild95/FL-Simulator``: ``client/fedsmoo.py``, ``optimizer/DRegSAM.py``,
``server/FedSMOO.py``) and an independent implementation in the paper's notation;
both clip the gradient norm at 10. The authors' simulator uploads mu_k instead of
mu_k - s_hat ("ignoring the s_hat term, its norm is small"); we upload the paper's
mu_k - s_hat. The paper's PDF text was not retrievable here; the equations are
reconstructed from these two codes, which agree. Defaults: rho = 0.1 and
alpha = 0.1 (FL-Simulator ``--rho 0.1 --lamb 0.1``; the FL-SAM README's "penalty
coefficient 10" = 1/alpha). Plain gradient descent (no momentum / weight decay),
as every method here. With rho = 0, alpha = 0 and zero duals the step is FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from learning.algorithms.base import (
    DeviceData,
    Received,
    gather_rows,
    scatter_add_rows,
    scatter_rows,
)
from learning.algorithms.fedavg import FedAvg, LocalSGD
from learning.device_steps import continue_where
from learning.hyperparameters import FedSmooParameters, defaults

DEFAULTS = defaults(FedSmooParameters)

_TINY = 1e-12


def clip_by_device_norm(g: tf.Tensor, max_norm: float | None) -> tf.Tensor:
    """Scale each row of ``g`` [K, d] to an L2 norm of at most ``max_norm`` (None: unchanged)."""
    if max_norm is None:
        return g
    norm = tf.norm(g, axis=-1, keepdims=True)
    return g * tf.minimum(1.0, max_norm / tf.maximum(norm, _TINY))


class DynamicSAM(LocalSGD):
    """FedSMOO's local solver: E dynamic-regularised SAM steps, one compiled call per step.

    Parameters
    ----------
    model, learning_rate, local_steps, jit_compile
        As :class:`~learning.algorithms.fedavg.LocalSGD`.
    sam_rho : float
        SAM radius rho.
    dynamic_alpha : float
        alpha = 1/beta, weight of the dynamic regulariser.
    max_grad_norm : float or None
        Per-device gradient-norm clip.
    """

    def __init__(
        self, model, learning_rate, local_steps, jit_compile, sam_rho, dynamic_alpha, max_grad_norm
    ):
        super().__init__(model, learning_rate, local_steps, jit_compile)
        self.sam_rho = float(sam_rho)
        self.dynamic_alpha = float(dynamic_alpha)
        self.max_grad_norm = max_grad_norm
        self._sam_step = tf.function(
            self._sam_step_impl, jit_compile=jit_compile, reduce_retracing=True
        )

    def _loss_and_grad(self, w, anchor, x, y, mask):
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = self.loss(w, anchor, x, y, mask)
        return loss, tape.gradient(loss, w)

    def _sam_step_impl(self, w, anchor, s, mu, h, x, y, mask):
        loss, g1 = self._loss_and_grad(w, anchor, x, y, mask)
        u = g1 - mu - s[None, :]
        s_hat = self.sam_rho * u / tf.maximum(tf.norm(u, axis=-1, keepdims=True), _TINY)
        mu = mu + s_hat - s[None, :]
        _, g2 = self._loss_and_grad(w + s_hat, anchor, x, y, mask)
        g = g2 + self.dynamic_alpha * (h + (w - anchor[None, :]))  # -lambda_k = alpha h_k
        return w - self.learning_rate * clip_by_device_norm(g, self.max_grad_norm), mu, s_hat, loss

    def run_sam(self, anchor, s, mu, h, x, y, mask, steps=None):
        """E steps (or ``steps`` [K], :meth:`LocalSGD.iterate`) from ``anchor`` [d] with
        global perturbation ``s`` [d], duals ``mu``, ``h`` [K, d].

        Output: local weights [K, d], updated mu [K, d], last s_hat [K, d], losses [E, K].
        """
        w = tf.broadcast_to(anchor, tf.shape(mu))
        losses = []
        s_hat = tf.zeros_like(mu)
        for index in range(self.local_steps):
            new_w, new_mu, new_s_hat, step_loss = self._sam_step(w, anchor, s, mu, h, x, y, mask)
            mu, _ = continue_where(steps, index, new_mu, mu, step_loss, losses)
            s_hat, _ = continue_where(steps, index, new_s_hat, s_hat, step_loss, losses)
            w, loss = continue_where(steps, index, new_w, w, step_loss, losses)
            losses.append(loss)
        return w, mu, s_hat, tf.stack(losses)


@dataclass(frozen=True)
class FedSmooState:
    """``w``, global perturbation ``s``, server dual ``h`` [d]; device duals ``mu_k``, ``h_k`` [K, d]."""

    w: tf.Tensor
    s: tf.Tensor
    h: tf.Tensor
    mu_k: tf.Tensor
    h_k: tf.Tensor


@dataclass(frozen=True)
class FedSmooCarry:
    """Phase 0 -> 1: auxiliary a_k = mu_k - s_hat, the new mu_k, and Delta_k (all [K, d])."""

    auxiliary: tf.Tensor
    mu_k_new: tf.Tensor
    delta: tf.Tensor


class FedSmoo(FedAvg):
    """FedSMOO over the air: 2 d uplink values (model delta and perturbation auxiliary).

    Its keys beside FedAvg's:

    sam_rho : float
        SAM radius rho >= 0.
    dynamic_alpha : float
        alpha = 1/beta >= 0, weight of the dynamic regulariser.
    max_grad_norm : float or None
        Per-device gradient-norm clip (None: no clipping).
    """

    name = "fedsmoo"

    state_type = FedSmooState
    parameters = FedSmooParameters

    def _make_solver(self, learning_rate, local_steps, jit_compile) -> DynamicSAM:
        return DynamicSAM(self.model, learning_rate, local_steps, jit_compile, self.sam_rho, self.dynamic_alpha, self.max_grad_norm)

    def init(self, seed: tf.Tensor) -> FedSmooState:
        w = self.model.init_mean(seed)
        zeros, zeros_k = tf.zeros_like(w), tf.zeros([self.num_devices, w.shape[0]])
        return FedSmooState(w, zeros, zeros, zeros_k, zeros_k)

    def local_update(self, phase: int, state: FedSmooState, carry, data: DeviceData, seed):
        del seed  # full-batch gradient steps are deterministic
        self._check_phase(phase, 2)
        if phase == 1:  # the second upload, formed in phase 0
            return carry.auxiliary, carry, {}
        w_k, mu_k, s_hat, losses = self.solver.run_sam(
            state.w, state.s, gather_rows(state.mu_k, data), gather_rows(state.h_k, data),
            data.x, data.y, data.mask, steps=data.local_steps
        )
        delta = w_k - state.w
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        return delta, FedSmooCarry(mu_k - s_hat, mu_k, delta), metrics

    def server_update(self, phase: int, state: FedSmooState, carry, estimate: tf.Tensor,
                      received: Received | None = None):
        """Phase 0: ``h += share * estimate`` (a population sum), ``w += estimate + h``, the
        devices that sent their update add it to ``h_k``; phase 1: the global perturbation
        ``s`` from the estimate and the devices that sent it take their ``mu_k`` (a device
        that could not send a phase keeps that phase's state)."""
        if phase == 0:
            if received is None:
                h, h_k = state.h + estimate, state.h_k + carry.delta
            else:
                h = state.h + received.share * estimate
                h_k = scatter_add_rows(state.h_k, received, carry.delta)
            new = FedSmooState(state.w + estimate + h, state.s, h, state.mu_k, h_k)
            return new, carry, {}
        if phase != 1:
            raise ValueError(f"phase must be 0 or 1, got {phase!r}")
        s = self.sam_rho * estimate / tf.maximum(tf.norm(estimate), _TINY)
        mu_k = carry.mu_k_new if received is None else scatter_rows(state.mu_k, received, carry.mu_k_new)
        new = FedSmooState(state.w, s, state.h, mu_k, state.h_k)
        return new, None, {}

    def is_finite(self, state: FedSmooState) -> bool:
        return all(bool(tf.reduce_all(tf.math.is_finite(t))) for t in (state.w, state.s, state.h))
