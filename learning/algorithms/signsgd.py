"""signSGD with majority vote (Bernstein, Wang, Azizzadenesheli, Anandkumar, ICML 2018;
Bernstein, Zhao, Azizzadenesheli, Anandkumar, ICLR 2019) as a delta on FedAvg.

Local training is FedAvg's (E full-batch gradient steps from w_t, the same
:class:`~learning.algorithms.fedavg.LocalSGD`; on ``runtime.backend = "numba"`` FedAvg's
:class:`~learning.algorithms.fedavg.NumbaSGD` for the MLP, asked for explicitly: the
baselines' ``"auto"`` is TensorFlow). Each device sends the sign of its
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
the straight one; a table on disk when the round streams its devices,
:mod:`learning.device_table`); FedAvg installs a round's new memories for the devices the BS
received, and a device it did not receive keeps its own. Downlink: w (d values), as
FedAvg. A delta on FedAvg: ``local_update`` (the sign of FedAvg's update, the memory),
``server_step`` (the vote step) and ``device_fields`` (``e_k`` only with error feedback).
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from learning.algorithms.base import DeviceData, Received, cohort_rows
from learning.algorithms.fedavg import FedAvg, LocalOutcome, constructor_signature
from learning.hyperparameters import SignSgdParameters, defaults
from learning.models.model import Model

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

    state_type = SignState
    parameters = SignSgdParameters

    def __init__(self, model: Model, num_devices: int, *, jit_compile: bool = False,
                 backend: str = "tensorflow", **hyper_parameters):
        FedAvg.__init__(self, model, num_devices, jit_compile=jit_compile, backend=backend,
                        **hyper_parameters)
        self.state_type = SignFeedbackState if self.error_feedback else SignState

    def device_fields(self) -> tuple[str, ...]:
        """``("e_k",)`` with error feedback, else none (the instance's :attr:`state_type`)."""
        return ("e_k",) if self.error_feedback else ()

    def local_update(self, phase: int, state, carry, data: DeviceData, seed):
        """FedAvg's E steps, then ``sgn(Delta_k)`` [K, d]; with error feedback
        ``sgn(Delta_k + e_k)`` and, in the carry, the cohort's new memories."""
        delta, carry, metrics = super().local_update(phase, state, carry, data, seed)
        if not self.error_feedback:
            return tf.sign(delta), carry, metrics
        p = delta + cohort_rows(state.e_k, data)
        signs = tf.sign(p)
        memory = p - tf.reduce_mean(tf.abs(p), axis=1, keepdims=True) * signs  # ||p_k||_1 / d
        return signs, LocalOutcome(rows=({"e_k": memory},)), metrics

    def server_step(self, phase: int, state, estimate: tf.Tensor, received: Received | None) -> dict:
        """``v = beta v + sgn(estimate)``, ``w += eta_s v`` (the sign of a received
        devices' mean is that of their sum: ``received`` changes nothing)."""
        del phase, received
        v = self.server_momentum * state.v + tf.sign(estimate)
        return {"w": state.w + self.server_learning_rate * v, "v": v}


SignSgd.__init__.__signature__ = constructor_signature(SignSgdParameters)
