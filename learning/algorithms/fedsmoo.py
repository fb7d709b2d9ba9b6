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
s (2 d values). mu_k, h_k [K, d] persist in the state (tables on disk when the
round streams its devices, :mod:`learning.device_table`).

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

from learning.algorithms.fedavg import FedAvg, LocalOutcome, LocalSGD, population_sum
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
    """FedSMOO's local solver: FedAvg's steps with a SAM ascent (:meth:`ascent`) and the
    dynamic regulariser and clip (:meth:`direction`).

    The step's ``inputs`` are the global perturbation ``s`` [d] and the duals ``h`` [K, d];
    its ``carried`` are the duals ``mu`` [K, d] and the last perturbation ``s_hat`` [K, d].

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

    def ascent(self, w, grad, anchor, inputs, carried):
        """``w + s_hat`` with ``s_hat = rho u / ||u||``, ``u = g1 - mu - s``; ``mu += s_hat - s``."""
        s, mu = inputs[0][None, :], carried[0]
        u = grad - mu - s
        s_hat = self.sam_rho * u / tf.maximum(tf.norm(u, axis=-1, keepdims=True), _TINY)
        return w + s_hat, (mu + s_hat - s, s_hat)

    def direction(self, grad, w, anchor, inputs):
        """``g2 + alpha (h + w - w_t)`` (-lambda_k = alpha h_k), clipped per device."""
        g = grad + self.dynamic_alpha * (inputs[1] + (w - anchor[None, :]))
        return clip_by_device_norm(g, self.max_grad_norm)


@dataclass(frozen=True)
class FedSmooState:
    """``w``, global perturbation ``s``, server dual ``h`` [d]; device duals ``mu_k``, ``h_k`` [K, d]."""

    w: tf.Tensor
    s: tf.Tensor
    h: tf.Tensor
    mu_k: tf.Tensor
    h_k: tf.Tensor


class FedSmoo(FedAvg):
    """FedSMOO over the air: 2 d uplink values (model delta and perturbation auxiliary).

    FedAvg's round with three overrides: the solver's inputs (``s``, ``h_k``) and duals
    ``mu_k``, the auxiliary upload and new duals (:meth:`local_outcome`) and the server
    step. Its keys beside FedAvg's:

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
        return DynamicSAM(self.model, learning_rate, local_steps, jit_compile, self.sam_rho,
                          self.dynamic_alpha, self.max_grad_norm)

    def solver_inputs(self, state, rows, data):
        """Inputs ``(s, h_k)``; carried ``(mu_k, s_hat = 0)``."""
        return (state.s, rows["h_k"]), (rows["mu_k"], tf.zeros_like(rows["mu_k"]))

    def local_outcome(self, state, rows, data, delta, inputs, carried) -> LocalOutcome:
        """Phase 1 uploads a_k = mu_k - s_hat; ``h_k += Delta_k`` (phase 0), the new
        ``mu_k`` (phase 1)."""
        mu_k, s_hat = carried
        return LocalOutcome((mu_k - s_hat,), ({"h_k": rows["h_k"] + delta}, {"mu_k": mu_k}))

    def server_step(self, phase, state, estimate, received):
        """Phase 0: ``h += share * estimate`` (a population sum), ``w += estimate + h``;
        phase 1: the global perturbation ``s = rho estimate / ||estimate||``."""
        if phase == 0:
            h = state.h + population_sum(estimate, received)
            return {"w": state.w + estimate + h, "h": h}
        return {"s": self.sam_rho * estimate / tf.maximum(tf.norm(estimate), _TINY)}
