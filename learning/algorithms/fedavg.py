"""FedAvg (McMahan et al. 2017) over the same air interface: a deterministic network.

The global model is a point weight vector w_t (the MLP/CNN of the proposed method
evaluated with S = 1). Every device runs E full-batch gradient steps on its local
mean cross-entropy (padding rows masked out) from w_t and sends ``w_k - w_t``
(one phase, ``"delta"``, d values); the BS sets ``w_{t+1} = w_t + estimate``, which
with an error-free sum is the weighted average sum_k pi_k w_k. Downlink: d values.

:class:`LocalSGD` is the local solver, shared by FedAvg-like algorithms: its
:meth:`LocalSGD.penalty` hook (zero here) lets FedProx add its proximal term
``mu/2 ||w - w_t||^2`` by overriding one method.

Hyper-parameters: ``learning_rate`` (0.1), ``local_steps`` E (3), ``jit_compile``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from learning.algorithms.base import DeviceData, PhaseSpec, catalog_downlink_values, catalog_phases
from learning.hyperparameters import FedAvgParameters, defaults
from learning.models import Model

DEFAULTS = defaults(FedAvgParameters)


def masked_mean_nll(logits: tf.Tensor, y: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy over the real samples of each device.

    Input: ``logits`` [K, 1, B, C], ``y`` [K, B] int32, ``mask`` [K, B]. Output: [K].
    """
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits[:, 0])
    return tf.reduce_sum(nll * mask, -1) / tf.maximum(tf.reduce_sum(mask, -1), 1.0)


class LocalSGD:
    """E full-batch gradient steps for all K devices, one compiled call per step
    (``learning_rate`` and ``local_steps`` as the algorithm validated them).

    Parameters
    ----------
    model : Model
    learning_rate : float
    local_steps : int
    jit_compile : bool
    """

    def __init__(self, model: Model, learning_rate: float, local_steps: int, jit_compile: bool):
        self.model = model
        self.learning_rate = float(learning_rate)
        self.local_steps = int(local_steps)
        self._step = tf.function(self._step_impl, jit_compile=jit_compile, reduce_retracing=True)

    def penalty(self, w: tf.Tensor, anchor: tf.Tensor) -> tf.Tensor:
        """Extra local objective term ``[K]`` for weights ``w`` [K, d] and global ``anchor`` [d]."""
        del anchor
        return tf.zeros(tf.shape(w)[:1])

    def loss(self, w, anchor, x, y, mask):
        """Local objective ``[K]``: masked mean NLL plus :meth:`penalty`."""
        nll = masked_mean_nll(self.model.logits(w[:, None], x), y, mask)
        return nll + self.penalty(w, anchor)

    def _step_impl(self, w, anchor, x, y, mask):
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = self.loss(w, anchor, x, y, mask)
        return w - self.learning_rate * tape.gradient(loss, w), loss

    def iterate(self, step, anchor: tf.Tensor, *args) -> tuple[tf.Tensor, tf.Tensor]:
        """E applications of ``step(w, anchor, *args) -> (w [K, d], loss [K])``.

        Every device starts from ``anchor`` [d]; ``args`` end with ``x, y, mask``.
        Output: local weights [K, d], losses [E, K]. The variants (FedProx, SCAFFOLD,
        FedGMT) differ only in the step they hand in.
        """
        x = args[-3]
        w = tf.broadcast_to(anchor, [tf.shape(x)[0], tf.shape(anchor)[0]])
        losses = []
        for _ in range(self.local_steps):
            w, loss = step(w, anchor, *args)
            losses.append(loss)
        return w, tf.stack(losses)

    def run(self, anchor: tf.Tensor, x, y, mask) -> tuple[tf.Tensor, tf.Tensor]:
        """E steps from ``anchor`` [d] for every device: local weights [K, d], losses [E, K]."""
        return self.iterate(self._step, anchor, x, y, mask)


@dataclass(frozen=True)
class PointState:
    """Global point weights ``w`` [d] tf.float32."""

    w: tf.Tensor


class FedAvg:
    """FedAvg as a FederatedAlgorithm: one ``"delta"`` phase of d values per round."""

    name = "fedavg"

    def __init__(
        self,
        model: Model,
        num_devices: int,
        *,
        learning_rate: float = DEFAULTS["learning_rate"],
        local_steps: int = DEFAULTS["local_steps"],
        jit_compile: bool = False,
    ):
        if int(num_devices) < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        FedAvgParameters.check(learning_rate=learning_rate, local_steps=local_steps)
        self.model = model
        self.num_devices = int(num_devices)
        self.solver = self._make_solver(learning_rate, local_steps, jit_compile)
        self._predict = tf.function(
            lambda w, x: tf.nn.softmax(self.model.logits(w[None, None], x[None]))[0, 0],
            reduce_retracing=True,
        )

    def _make_solver(self, learning_rate, local_steps, jit_compile) -> LocalSGD:
        return LocalSGD(self.model, learning_rate, local_steps, jit_compile)

    def phases(self) -> tuple[PhaseSpec, ...]:
        return catalog_phases(self.name, self.model.num_params)

    def downlink_values(self) -> int:
        return catalog_downlink_values(self.name, self.model.num_params)

    def init(self, seed: tf.Tensor) -> PointState:
        return PointState(self.model.init_mean(seed))

    def local_update(self, phase: int, state: PointState, carry, data: DeviceData, seed):
        del seed  # full-batch gradient steps are deterministic
        if phase != 0:
            raise ValueError(f"phase must be 0, got {phase!r}")
        w_k, losses = self.solver.run(state.w, data.x, data.y, data.mask)
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        return w_k - state.w, carry, metrics

    def server_update(self, phase: int, state: PointState, carry, estimate: tf.Tensor):
        if phase != 0:
            raise ValueError(f"phase must be 0, got {phase!r}")
        return PointState(state.w + estimate), carry, {}

    def predict_probs(self, state: PointState, x, num_samples: int, seed, chunk: int = 1000):
        """Softmax outputs [N, C] of the point model (``num_samples`` and ``seed`` ignored)."""
        del num_samples, seed
        x = tf.convert_to_tensor(x, tf.float32)
        parts = [self._predict(state.w, x[i : i + chunk]) for i in range(0, int(x.shape[0]), chunk)]
        return tf.concat(parts, axis=0)

    def state_to_arrays(self, state: PointState) -> dict[str, np.ndarray]:
        return {"w": state.w.numpy()}

    def state_from_arrays(self, arrays: dict[str, np.ndarray]) -> PointState:
        return PointState(tf.constant(arrays["w"], tf.float32))

    def is_finite(self, state: PointState) -> bool:
        return bool(tf.reduce_all(tf.math.is_finite(state.w)))
