"""FedProx: FedAvg with a proximal term in the local objective (Li et al., MLSys 2020).

Every device minimises h_k(w; w_t) = L_k(w) + (mu / 2) ||w - w_t||^2 (the FedProx
paper's eq. (2), Algorithm 2) with FedAvg's E full-batch gradient steps::

    w_k^{e+1} = w_k^e - eta [grad L_k(w_k^e) + mu (w_k^e - w_t)]

(the authors' optimizer, ``litian96/FedProx`` ``flearn/optimizer/pgd.py``, applies
exactly ``var - lr * (grad + mu * (var - vstar))``). Uplink, downlink and server
step are FedAvg's: one phase ``("delta", d)`` carrying Delta_k = w_k^E - w_t, and
w_{t+1} = w_t + estimate, the estimate being the air interface's version of
sum_k pi_k Delta_k; d values downlink. The only difference from FedAvg is
:meth:`ProximalSGD.penalty` (FedAvg's :class:`~learning.algorithms.fedavg.LocalSGD`
hook; on ``runtime.backend = "numba"`` the same penalty in
:class:`~learning.algorithms.fedavg.NumbaSGD`); with ``proximal_mu = 0`` the updates are
FedAvg's, step for step (tested).

Default ``proximal_mu = 0.01``: the default ``mu`` of the authors' optimizer; their
README asks to tune mu in {0.001, 0.01, 0.1, 0.5, 1} for new set-ups ("there are no
default mu values that would work for all settings").
"""

from __future__ import annotations

import tensorflow as tf

from learning.algorithms.fedavg import FedAvg, LocalSGD, NumbaSGD
from learning.hyperparameters import FedProxParameters, defaults
from learning.models.model import Model

DEFAULTS = defaults(FedProxParameters)


class ProximalSGD(LocalSGD):
    """FedAvg's local solver with the penalty (mu / 2) ||w - w_t||^2 per device."""

    def __init__(self, model: Model, learning_rate, local_steps, jit_compile, proximal_mu: float):
        self.proximal_mu = float(proximal_mu)
        super().__init__(model, learning_rate, local_steps, jit_compile)

    def penalty(self, w: tf.Tensor, anchor: tf.Tensor) -> tf.Tensor:
        """(mu / 2) ||w_k - w_t||^2: ``w`` [K, d], ``anchor`` [d] -> [K]."""
        return 0.5 * self.proximal_mu * tf.reduce_sum(tf.square(w - anchor[None, :]), axis=-1)


class FedProx(FedAvg):
    """FedAvg plus the proximal term; one ``"delta"`` phase of d values per round.

    Its keys beside FedAvg's:

    proximal_mu : float
        mu >= 0, the weight of (mu / 2) ||w - w_t||^2.
    """

    name = "fedprox"

    parameters = FedProxParameters

    def _make_solver(self, learning_rate, local_steps, jit_compile) -> ProximalSGD:
        return ProximalSGD(self.model, learning_rate, local_steps, jit_compile, self.proximal_mu)

    def _make_numba_solver(self, learning_rate, local_steps) -> NumbaSGD:
        return NumbaSGD(self.model, learning_rate, local_steps, self.proximal_mu)
