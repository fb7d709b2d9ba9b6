"""signSGD with majority vote (Bernstein, Wang, Azizzadenesheli, Anandkumar, ICML 2018;
Bernstein, Zhao, Azizzadenesheli, Anandkumar, ICLR 2019) as a delta on FedAvg.

Local training is FedAvg's (E full-batch gradient steps from w_t, the same
:class:`~learning.algorithms.fedavg.LocalSGD`). Each device sends the sign of its
update, one phase ``("delta", d)``::

    s_k = sgn(Delta_k),   Delta_k = w_k^E - w_t            (entries in {-1, 0, +1})

and the server steps by the sign of the BS's estimate, the majority vote::

    vote = sgn(AC[s_k]),   v_{t+1} = beta v_t + vote,   w_{t+1} = w_t + eta_s v_{t+1}

(``server_learning_rate`` eta_s, ``server_momentum`` beta; beta = 0: w_{t+1} = w_t +
eta_s vote). Over a sign-carrying scheme (``uplink.scheme = "one_bit"`` or
``"noncoherent_mv"``) the estimate is already the vote; over ``"analog"`` (or any scheme
that carries values) it is the weighted sum sum_k pi_k s_k with the channel's errors, and
the server's sign makes it the vote.

``error_feedback = true`` (the error-feedback signSGD of Karimireddy, Rebjock, Stich,
Jaggi, ICML 2019, as EFOBDA adds it to one-bit over-the-air aggregation): device k keeps
the part of its update its scaled sign did not carry and adds it to its next one::

    p_k = Delta_k + e_k,   s_k = sgn(p_k),   e_k <- p_k - (||p_k||_1 / d) s_k

The memories e_k [K, d] are part of the state (and of checkpoints: a resumed run equals
the straight one); a device the BS did not receive keeps its memory. Downlink: w (d
values), as FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from learning.algorithms.base import DeviceData, Received, gather_rows, scatter_rows
from learning.algorithms.fedavg import FedAvg, constructor_signature
from learning.hyperparameters import SignSgdParameters, defaults
from learning.models import Model

DEFAULTS = defaults(SignSgdParameters)


@dataclass(frozen=True)
class SignState:
    """Global weights ``w`` [d] and the server's vote momentum ``v`` [d] (tf.float32)."""

    w: tf.Tensor
    v: tf.Tensor


@dataclass(frozen=True)
class SignFeedbackState:
    """:class:`SignState` with the devices' error memories ``e_k`` [K, d] (tf.float32)."""

    w: tf.Tensor
    v: tf.Tensor
    e_k: tf.Tensor


class SignSgd(FedAvg):
    """signSGD with majority vote: one ``"delta"`` phase of d signs per round.

    Its keys beside FedAvg's:

    server_learning_rate : float
        eta_s > 0.
    server_momentum : float
        beta in [0, 1).
    error_feedback : bool
        The devices' error memories.
    """

    name = "signsgd"

    parameters = SignSgdParameters

    def __init__(self, model: Model, num_devices: int, *, jit_compile: bool = False, **hyper_parameters):
        FedAvg.__init__(self, model, num_devices, jit_compile=jit_compile, **hyper_parameters)
        self.state_type = SignFeedbackState if self.error_feedback else SignState

    def init(self, seed: tf.Tensor) -> SignState | SignFeedbackState:
        w = self.model.init_mean(seed)
        if self.error_feedback:
            return SignFeedbackState(w, tf.zeros_like(w), tf.zeros([self.num_devices, w.shape[0]]))
        return SignState(w, tf.zeros_like(w))

    def local_update(self, phase: int, state, carry, data: DeviceData, seed):
        """FedAvg's E steps, then ``sgn(Delta_k)`` [K, d] (``sgn(Delta_k + e_k)`` with
        error feedback; the carry then holds the new memories [K, d])."""
        del seed  # full-batch gradient steps are deterministic
        self._check_phase(phase)
        w_k, losses = self.solver.run(state.w, data.x, data.y, data.mask, steps=data.local_steps)
        p = w_k - state.w
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        if not self.error_feedback:
            return tf.sign(p), carry, metrics
        p = p + gather_rows(state.e_k, data)
        signs = tf.sign(p)
        scale = tf.reduce_mean(tf.abs(p), axis=1, keepdims=True)  # ||p_k||_1 / d
        return signs, p - scale * signs, metrics

    def server_update(self, phase: int, state, carry, estimate: tf.Tensor, received: Received | None = None):
        """``v = beta v + sgn(estimate)``, ``w += eta_s v``; with error feedback the
        received devices' memories advance (all of them when ``received`` is None)."""
        self._check_phase(phase)
        v = self.server_momentum * state.v + tf.sign(estimate)
        w = state.w + self.server_learning_rate * v
        if not self.error_feedback:
            return SignState(w, v), None, {}
        e_k = carry if received is None else scatter_rows(state.e_k, received, carry)
        return SignFeedbackState(w, v, e_k), None, {}


SignSgd.__init__.__signature__ = constructor_signature(SignSgdParameters)
