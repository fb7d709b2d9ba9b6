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

import inspect
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from learning.algorithms.base import (
    DeviceData,
    PhaseSpec,
    catalog_downlink_values,
    catalog_phases,
    round_columns,
)
from learning.device_steps import continue_where
from learning.hyperparameters import AlgorithmParameters, FedAvgParameters, defaults
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

    def iterate(self, step, anchor: tf.Tensor, *args, steps=None) -> tuple[tf.Tensor, tf.Tensor]:
        """E applications of ``step(w, anchor, *args) -> (w [K, d], loss [K])``.

        Every device starts from ``anchor`` [d]; ``args`` end with ``x, y, mask``.
        ``steps`` [K] int32 (optional, each in 1..E): device k stops after ``steps[k]``
        steps (a straggler that sends early, ``[participation]``); its later losses repeat
        its last one. Output: local weights [K, d], losses [E, K]. The variants (FedProx,
        SCAFFOLD, FedGMT) differ only in the step they hand in.
        """
        x = args[-3]
        w = tf.broadcast_to(anchor, [tf.shape(x)[0], tf.shape(anchor)[0]])
        losses = []
        for index in range(self.local_steps):
            new, loss = step(w, anchor, *args)
            w, loss = continue_where(steps, index, new, w, loss, losses)
            losses.append(loss)
        return w, tf.stack(losses)

    def run(self, anchor: tf.Tensor, x, y, mask, steps=None) -> tuple[tf.Tensor, tf.Tensor]:
        """E steps (or ``steps`` [K], :meth:`iterate`) from ``anchor`` [d] for every device:
        local weights [K, d], losses [E, K]."""
        return self.iterate(self._step, anchor, x, y, mask, steps=steps)


def constructor_signature(parameters: type[AlgorithmParameters]) -> inspect.Signature:
    """``(self, model, num_devices, *, jit_compile=False, <key>=<default>, ...)`` for the
    keys of ``parameters`` with their defaults."""
    kw = inspect.Parameter.KEYWORD_ONLY
    fixed = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("num_devices", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("jit_compile", kw, default=False)]
    keys = [inspect.Parameter(key, kw, default=default) for key, default in defaults(parameters).items()]
    return inspect.Signature(fixed + keys)


@dataclass(frozen=True)
class PointState:
    """Global point weights ``w`` [d] tf.float32."""

    w: tf.Tensor


class FedAvg:
    """FedAvg as a FederatedAlgorithm: one ``"delta"`` phase of d values per round."""

    name = "fedavg"

    state_type: type = PointState
    """The state dataclass (its fields are the checkpoint's arrays)."""
    parameters: type[AlgorithmParameters] = FedAvgParameters
    """The hyper-parameters a variant takes: its pydantic model (``learning_rate``,
    ``local_steps`` and, for a variant, its own keys; ``learning/hyperparameters.py``)."""

    def __init__(self, model: Model, num_devices: int, *, jit_compile: bool = False,
                 **hyper_parameters):
        """``hyper_parameters``: keys of :attr:`parameters`, each absent one at its
        default; every key validated (a ValueError naming an unknown or bad one) and kept
        as an attribute. The local solver is :meth:`_make_solver`: the one thing most
        variants change (a proximal term, a control-variate correction, a SAM step)."""
        if int(num_devices) < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        hyper = self.parameters.check(**hyper_parameters)
        for key in type(hyper).model_fields:
            setattr(self, key, getattr(hyper, key))
        self.model = model
        self.num_devices = int(num_devices)
        self.solver = self._make_solver(hyper_parameters.get("learning_rate", self.learning_rate),
                                        hyper_parameters.get("local_steps", self.local_steps),
                                        jit_compile)
        self._predict = tf.function(
            lambda w, x: tf.nn.softmax(self.model.logits(w[None, None], x[None]))[0, 0],
            reduce_retracing=True,
        )

    def __init_subclass__(cls, **kwargs):
        """A variant without an ``__init__`` of its own gets FedAvg's, with the signature
        of its :attr:`parameters` (so ``inspect`` and IDEs list its keys and defaults)."""
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            def __init__(self, model, num_devices, *, jit_compile=False, **hyper_parameters):
                FedAvg.__init__(self, model, num_devices, jit_compile=jit_compile,
                                **hyper_parameters)

            __init__.__doc__ = FedAvg.__init__.__doc__
            __init__.__signature__ = constructor_signature(cls.parameters)
            cls.__init__ = __init__

    @staticmethod
    def _check_phase(phase: int, phases: int = 1) -> None:
        """ValueError unless ``phase`` is one of the algorithm's ``phases`` (0-based)."""
        if not 0 <= phase < phases:
            expected = " or ".join(str(i) for i in range(phases))
            raise ValueError(f"phase must be {expected}, got {phase!r}")

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
        w_k, losses = self.solver.run(state.w, data.x, data.y, data.mask, steps=data.local_steps)
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        return w_k - state.w, carry, metrics

    def server_update(self, phase: int, state: PointState, carry, estimate: tf.Tensor,
                      received=None):
        """``w += estimate`` (the estimate is already the received devices' mean)."""
        del received
        if phase != 0:
            raise ValueError(f"phase must be 0, got {phase!r}")
        return PointState(state.w + estimate), carry, {}

    def metrics(self, previous, state, phases: dict[str, dict[str, float]]) -> dict[str, float]:
        """The phases' metrics, ``train_loss`` and ``precision_floor_hits`` (0)
        (:func:`~learning.algorithms.base.round_columns`)."""
        del previous, state
        return round_columns(phases)

    def predict_mean_probs(self, state, x) -> None:
        """None: a point model has no posterior mean apart from itself."""
        del state, x

    def predict_probs(self, state: PointState, x, num_samples: int, seed, chunk: int = 1000):
        """Softmax outputs [N, C] of the point model (``num_samples`` and ``seed`` ignored)."""
        del num_samples, seed
        x = tf.convert_to_tensor(x, tf.float32)
        parts = [self._predict(state.w, x[i : i + chunk]) for i in range(0, int(x.shape[0]), chunk)]
        return tf.concat(parts, axis=0)

    def state_to_arrays(self, state) -> dict[str, np.ndarray]:
        """Every field of the state (a :attr:`state_type` dataclass of float32 tensors)."""
        return {k: getattr(state, k).numpy() for k in self.state_type.__dataclass_fields__}

    def state_from_arrays(self, arrays: dict[str, np.ndarray]):
        fields = self.state_type.__dataclass_fields__
        return self.state_type(**{k: tf.constant(arrays[k], tf.float32) for k in fields})

    def is_finite(self, state: PointState) -> bool:
        return bool(tf.reduce_all(tf.math.is_finite(state.w)))


FedAvg.__init__.__signature__ = constructor_signature(FedAvgParameters)
