"""FedAvg (McMahan et al. 2017) over the same air interface: a deterministic network.

The global model is a point weight vector w_t (the MLP/CNN of the proposed method
evaluated with S = 1). Every device runs E full-batch gradient steps on its local
mean cross-entropy (padding rows masked out) from w_t and sends ``w_k - w_t``
(one phase, ``"delta"``, d values); the BS sets ``w_{t+1} = w_t + estimate``, which
with an error-free sum is the weighted average sum_k pi_k w_k. Downlink: d values.

:class:`FedAvg` is the parent of the point-weight baselines (Flower's "a variant is a
small delta on its parent"): the round is written once here and a variant overrides
only the hooks where it differs (``docs/algorithms.md`` lists which):

* the state: :attr:`FedAvg.state_type`, a dataclass whose fields named ``*_k`` are
  per-device [K, d] and the others server [d]; :meth:`FedAvg.initial_state` (zeros);
* the local solver, :meth:`FedAvg._make_solver`: a :class:`LocalSGD` whose step has the
  hooks :meth:`LocalSGD.penalty` (an objective term: FedProx), :meth:`LocalSGD.objective`
  (the whole objective: FedGMT's KL), :meth:`LocalSGD.ascent` (a second gradient at an
  ascent point: FedSMOO's SAM) and :meth:`LocalSGD.direction` (a gradient correction:
  SCAFFOLD, FedSMOO, FedGMT); the loop over the E steps and the stragglers that stop
  early are written once (:meth:`LocalSGD.solve`);
* around it, :meth:`FedAvg.solver_inputs` (what the steps read from the state) and
  :meth:`FedAvg.local_outcome` (the later phases' uploads and the devices' new state
  rows), :meth:`FedAvg.server_step` (the server fields after each phase).

Per-device fields on disk: in a run whose rounds stream their devices
(``runtime.devices_in_memory``) the ``*_k`` fields are :class:`learning.device_table.DeviceTable`
versions on disk (:meth:`FedAvg.keep_tables_on_disk`; the checkpoint stores which
version), whose rows the local step reads per chunk and whose next version the streamed
round writes chunk by chunk (``cosim/streamed_round.py``); :meth:`FedAvg.server_update`
installs only the rows of in-memory fields.

Partial participation is FedAvg's alone: the cohort's rows of the ``*_k`` fields are
gathered for the solver, and a phase's new rows are installed only for the devices the
BS received (:meth:`FedAvg.server_update`); a server field that mirrors a population sum
adds :func:`population_sum`.

Hyper-parameters: ``learning_rate`` (0.1), ``local_steps`` E (3); runtime: ``jit_compile``
and ``backend`` (``"numba"``: FedAvg's and FedProx's steps for the MLP device by device,
:class:`NumbaSGD`; signSGD's are FedAvg's).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from learning.algorithms.base import (
    DeviceData,
    PhaseSpec,
    Received,
    catalog_downlink_values,
    catalog_phases,
    cohort_rows,
    round_columns,
    scatter_rows,
)
from learning.device_table import DeviceTable, TableStore
from learning.hyperparameters import AlgorithmParameters, FedAvgParameters, defaults
from learning.local.device_steps import continue_where
from learning.local.fused_sgd import FusedSGD
from learning.models.model import Model
from learning.runtime import NUMBA_BASELINES
from native.host_arrays import BufferPool, as_tensor

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

    One step, for every device at once (one compiled call, ``_step``)::

        loss, g = objective and its gradient at w              (objective, penalty)
        point   = an ascent point, or None                     (ascent)
        g       = the gradient at point, when there is one
        w      <- w - eta direction(g)                          (direction)

    A variant overrides only its hooks: FedProx :meth:`penalty`, SCAFFOLD
    :meth:`direction` (a control-variate correction), FedGMT-v2 :meth:`objective` and
    :meth:`direction`, FedSMOO :meth:`ascent` (a SAM step) and :meth:`direction`. A
    step reads the round's ``inputs`` (a tuple of tensors fixed over the E steps, e.g.
    SCAFFOLD's correction [K, d]) and may advance ``carried`` (a tuple of [K, ...]
    tensors that evolve from step to step, e.g. FedSMOO's dual and perturbation).

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
        self._step = tf.function(self._step_impl, jit_compile=jit_compile, reduce_retracing=True,
                                 autograph=False)

    def penalty(self, w: tf.Tensor, anchor: tf.Tensor) -> tf.Tensor:
        """Extra local objective term ``[K]`` for weights ``w`` [K, d] and global ``anchor`` [d]."""
        del anchor
        return tf.zeros(tf.shape(w)[:1])

    def loss(self, w, anchor, x, y, mask):
        """Local objective ``[K]``: masked mean NLL plus :meth:`penalty`."""
        nll = masked_mean_nll(self.model.logits(w[:, None], x), y, mask)
        return nll + self.penalty(w, anchor)

    def objective(self, w, anchor, inputs, x, y, mask) -> tuple[tf.Tensor, tf.Tensor]:
        """``(differentiated, reported)`` [K] each: the objective the step descends and
        the loss it reports (both :meth:`loss` here)."""
        del inputs
        loss = self.loss(w, anchor, x, y, mask)
        return loss, loss

    def gradient(self, w, anchor, inputs, x, y, mask) -> tuple[tf.Tensor, tf.Tensor]:
        """The reported loss [K] and the gradient [K, d] of :meth:`objective` at ``w``."""
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss, reported = self.objective(w, anchor, inputs, x, y, mask)
        return reported, tape.gradient(loss, w)

    def ascent(self, w, grad, anchor, inputs, carried) -> tuple[tf.Tensor | None, tuple]:
        """The point [K, d] whose gradient the step takes instead of ``grad``'s (None:
        ``grad`` itself) and the advanced ``carried``."""
        del w, grad, anchor, inputs
        return None, carried

    def direction(self, grad, w, anchor, inputs) -> tf.Tensor:
        """The step's direction [K, d] from the gradient ``grad`` [K, d] (``grad`` here)."""
        del w, anchor, inputs
        return grad

    def _step_impl(self, w, anchor, x, y, mask, inputs=(), carried=()):
        """One step of every device: new weights [K, d], the reported loss [K] at ``w``
        and the advanced ``carried``."""
        loss, grad = self.gradient(w, anchor, inputs, x, y, mask)
        point, carried = self.ascent(w, grad, anchor, inputs, carried)
        if point is not None:
            _, grad = self.gradient(point, anchor, inputs, x, y, mask)
        return w - self.learning_rate * self.direction(grad, w, anchor, inputs), loss, carried

    def solve(self, anchor: tf.Tensor, x, y, mask, inputs=(), carried=(), steps=None):
        """E steps from ``anchor`` [d] for every device (``inputs``, ``carried``: the
        hooks' tuples, see the class).

        ``steps`` [K] int32 (optional, each in 1..E): device k stops after ``steps[k]``
        steps (a straggler that sends early, ``[participation]``): its weights and
        ``carried`` rows stay those of its last step and its later losses repeat its last
        one. Output: local weights [K, d], losses [E, K], the last ``carried``.
        """
        w = tf.broadcast_to(anchor, [tf.shape(x)[0], tf.shape(anchor)[0]])
        losses = []
        for index in range(self.local_steps):
            new, loss, advanced = self._step(w, anchor, x, y, mask, inputs, carried)
            carried = tuple(continue_where(steps, index, a, c, loss, losses)[0]
                            for a, c in zip(advanced, carried))
            w, loss = continue_where(steps, index, new, w, loss, losses)
            losses.append(loss)
        return w, tf.stack(losses), carried

    def run(self, anchor: tf.Tensor, x, y, mask, steps=None) -> tuple[tf.Tensor, tf.Tensor]:
        """E steps (or ``steps`` [K], :meth:`solve`) from ``anchor`` [d] for every device:
        local weights [K, d], losses [E, K]."""
        w, losses, _ = self.solve(anchor, x, y, mask, steps=steps)
        return w, losses

    def updates(self, anchor: tf.Tensor, x, y, mask, inputs=(), carried=(), steps=None):
        """:meth:`solve`, with the local weights as updates ``w_k - anchor`` [K, d]:
        ``(updates, losses [E, K], carried)``."""
        w, losses, carried = self.solve(anchor, x, y, mask, inputs, carried, steps=steps)
        return w - anchor, losses, carried


class NumbaSGD:
    """:class:`LocalSGD`'s steps for the MLP in Numba, device by device
    (:class:`learning.local.fused_sgd.FusedSGD`), with FedProx's penalty
    ``proximal_mu / 2 ||w - w_t||^2`` (0: FedAvg's steps); ``runtime.backend = "numba"``.
    The updates it returns are ``tf.float32`` tensors over host arrays of its own pool
    (:mod:`native.host_arrays`).

    Parameters
    ----------
    model : Model
        An MLP (``model.dense_layer_sizes`` set); another model is a ``ValueError``.
    learning_rate : float
    local_steps : int
    proximal_mu : float
    """

    def __init__(self, model: Model, learning_rate: float, local_steps: int, proximal_mu: float = 0.0):
        if model.dense_layer_sizes is None:
            raise ValueError(f"runtime.backend: model.architecture = {model.name!r} has no Numba steps "
                             f"(the MLP has); use 'tensorflow' or 'auto' (got 'numba')")
        self.model = model
        self.learning_rate = float(learning_rate)
        self.local_steps = int(local_steps)
        self.steps = FusedSGD(model.dense_layer_sizes, learning_rate, local_steps, proximal_mu)
        self.buffers = BufferPool(max_buffers=2)  # the [K, d] updates

    def updates(self, anchor: tf.Tensor, x, y, mask, inputs=(), carried=(), steps=None):
        """:meth:`LocalSGD.updates` (``inputs`` and ``carried`` empty: FedAvg's and
        FedProx's steps read none): updates [K, d], losses [E, K], ``()``."""
        if inputs or carried:
            raise ValueError("the Numba steps take no inputs or carried state (FedAvg, FedProx, signSGD)")
        out = self.buffers.take([int(tf.shape(y)[0]), self.model.num_params])
        delta, losses = self.steps.run(anchor, x, y, mask, out,
                                       device_steps=None if steps is None else np.asarray(steps))
        return as_tensor(delta), tf.constant(losses), ()

    def run(self, anchor: tf.Tensor, x, y, mask, steps=None) -> tuple[tf.Tensor, tf.Tensor]:
        """:meth:`LocalSGD.run`: local weights [K, d], losses [E, K]."""
        delta, losses, _ = self.updates(anchor, x, y, mask, steps=steps)
        return delta + anchor, losses


def constructor_signature(parameters: type[AlgorithmParameters]) -> inspect.Signature:
    """``(self, model, num_devices, *, jit_compile=False, backend="tensorflow",
    <key>=<default>, ...)`` for the keys of ``parameters`` with their defaults."""
    kw = inspect.Parameter.KEYWORD_ONLY
    fixed = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("num_devices", inspect.Parameter.POSITIONAL_OR_KEYWORD),
             inspect.Parameter("jit_compile", kw, default=False),
             inspect.Parameter("backend", kw, default="tensorflow")]
    keys = [inspect.Parameter(key, kw, default=default) for key, default in defaults(parameters).items()]
    return inspect.Signature(fixed + keys)


@dataclass(frozen=True)
class PointState:
    """Global point weights ``w`` [d] tf.float32."""

    w: tf.Tensor


@dataclass(frozen=True)
class LocalOutcome:
    """What a round's first phase hands to its later phases (FedAvg's ``carry``).

    Attributes
    ----------
    uploads : tuple of tf.Tensor, [K, n_p] each
        The updates of phases 1, 2, ... (formed with the first phase's local training).
    rows : tuple of dict
        Per phase, state field (``*_k``) -> the cohort's new rows [K, d]: what every
        device installs for itself once the BS received that phase.
    """

    uploads: tuple = ()
    rows: tuple = ({},)


def population_sum(estimate: tf.Tensor, received: Received | None) -> tf.Tensor:
    """The estimate of a population sum ``sum_k pi_k u_k`` from the BS's estimate
    ``estimate`` [n] of the received devices' mean: ``received.share * estimate`` (the
    estimate itself when every device took part). SCAFFOLD's ``c`` and the FedDyn-style
    duals ``h`` add it."""
    return estimate if received is None else received.share * estimate


class FedAvg:
    """FedAvg as a FederatedAlgorithm: one ``"delta"`` phase of d values per round."""

    name = "fedavg"

    state_type: type = PointState
    """The state dataclass (its fields are the checkpoint's arrays)."""
    parameters: type[AlgorithmParameters] = FedAvgParameters
    """The hyper-parameters a variant takes: its pydantic model (``learning_rate``,
    ``local_steps`` and, for a variant, its own keys; ``learning/hyperparameters.py``)."""

    def __init__(self, model: Model, num_devices: int, *, jit_compile: bool = False,
                 backend: str = "tensorflow", **hyper_parameters):
        """``hyper_parameters``: keys of :attr:`parameters`, each absent one at its
        default; every key validated (a ValueError naming an unknown or bad one) and kept
        as an attribute. The local solver is :meth:`_make_solver`: the one thing most
        variants change (a proximal term, a control-variate correction, a SAM step);
        with ``backend = "numba"`` it is :meth:`_make_numba_solver` (FedAvg, FedProx and
        signSGD on the MLP, :data:`learning.runtime.NUMBA_BASELINES`; a ValueError naming
        ``runtime.backend`` elsewhere)."""
        if int(num_devices) < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        if backend not in ("tensorflow", "numba"):
            raise ValueError(f"runtime.backend: a baseline runs on 'tensorflow' or 'numba', got {backend!r}")
        hyper = self.parameters.check(**hyper_parameters)
        for key in type(hyper).model_fields:
            setattr(self, key, getattr(hyper, key))
        self.model = model
        self.num_devices = int(num_devices)
        self.backend = backend
        self.table_store: TableStore | None = None
        learning_rate = hyper_parameters.get("learning_rate", self.learning_rate)
        local_steps = hyper_parameters.get("local_steps", self.local_steps)
        if backend == "numba":
            if self.name not in NUMBA_BASELINES:
                raise ValueError(f"runtime.backend: algorithm.name = {self.name!r} runs on TensorFlow "
                                 f"only; use 'auto' or 'tensorflow' (got 'numba')")
            self.solver = self._make_numba_solver(learning_rate, local_steps)
        else:
            self.solver = self._make_solver(learning_rate, local_steps, jit_compile)
        self._predict = tf.function(
            lambda w, x: tf.nn.softmax(self.model.logits(w[None, None], x[None]))[0, 0],
            reduce_retracing=True, autograph=False,
        )

    def __init_subclass__(cls, **kwargs):
        """A variant without an ``__init__`` of its own gets FedAvg's, with the signature
        of its :attr:`parameters` (so ``inspect`` and IDEs list its keys and defaults)."""
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            def __init__(self, model, num_devices, *, jit_compile=False, backend="tensorflow",
                         **hyper_parameters):
                FedAvg.__init__(self, model, num_devices, jit_compile=jit_compile, backend=backend,
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

    def _make_numba_solver(self, learning_rate, local_steps) -> NumbaSGD:
        """The solver of ``runtime.backend = "numba"``: :class:`LocalSGD`'s steps in
        Numba (an algorithm of :data:`learning.runtime.NUMBA_BASELINES` only)."""
        return NumbaSGD(self.model, learning_rate, local_steps)

    def phases(self) -> tuple[PhaseSpec, ...]:
        return catalog_phases(self.name, self.model.num_params)

    def downlink_values(self) -> int:
        return catalog_downlink_values(self.name, self.model.num_params)

    def init(self, seed: tf.Tensor):
        """The :attr:`state_type` with ``w`` the model's initial weights and the other
        fields :meth:`initial_state`."""
        w = self.model.init_mean(seed)
        return self.state_type(w=w, **self.initial_state(w))

    def keep_tables_on_disk(self, store: TableStore) -> None:
        """Hold the per-device fields as :class:`learning.device_table.DeviceTable` versions
        in ``store`` from now on (a run whose rounds stream their devices): the initial
        state's are version 0 (zeros, no file) and a checkpoint names its version."""
        self.table_store = store

    def initial_state(self, w: tf.Tensor) -> dict[str, tf.Tensor]:
        """The state's fields beside ``w`` at round 0: zeros, [K, d] for a per-device field
        (named ``*_k``; version 0 of its table with :meth:`keep_tables_on_disk`), [d] for a
        server field."""
        def zeros(name):
            if not name.endswith("_k"):
                return tf.zeros_like(w)
            if self.table_store is not None:
                return self.table_store.zeros(name, self.num_devices, int(w.shape[0]))
            return tf.zeros([self.num_devices, w.shape[0]])

        return {name: zeros(name) for name in self.state_type.__dataclass_fields__ if name != "w"}

    @classmethod
    def device_fields(cls) -> tuple[str, ...]:
        """The state's per-device fields ([K, d] each, named ``*_k``)."""
        return tuple(name for name in cls.state_type.__dataclass_fields__ if name.endswith("_k"))

    def local_update(self, phase: int, state, carry, data: DeviceData, seed):
        """Phase 0: the :attr:`solver`'s steps from ``w`` for every device (its inputs from
        :meth:`solver_inputs`), the update ``w_k - w``, the carry :meth:`local_outcome`'s.
        A later phase sends what phase 0 formed for it (``carry.uploads``)."""
        del seed  # full-batch gradient steps are deterministic
        self._check_phase(phase, len(self.phases()))
        if phase > 0:
            return carry.uploads[phase - 1], carry, {}
        rows = {name: cohort_rows(getattr(state, name), data) for name in self.device_fields()}
        inputs, carried = self.solver_inputs(state, rows, data)
        delta, losses, carried = self.solver.updates(state.w, data.x, data.y, data.mask, inputs, carried,
                                                     steps=data.local_steps)
        metrics = {"train_loss": tf.reduce_sum(data.weights * losses[-1])}
        return delta, self.local_outcome(state, rows, data, delta, inputs, carried), metrics

    def solver_inputs(self, state, rows: dict, data: DeviceData) -> tuple[tuple, tuple]:
        """The solver's ``inputs`` and first ``carried`` (:class:`LocalSGD`) from the state
        and the cohort's ``rows`` of the per-device fields: none here."""
        del state, rows, data
        return (), ()

    def local_outcome(self, state, rows: dict, data: DeviceData, delta, inputs, carried) -> LocalOutcome:
        """The later phases' uploads and the devices' new state rows after the local steps
        (``delta`` [K, d] the update, ``carried`` the solver's last): none here."""
        del state, rows, data, delta, inputs, carried
        return LocalOutcome()

    def server_update(self, phase: int, state, carry: LocalOutcome | None, estimate: tf.Tensor,
                      received: Received | None = None):
        """The state after phase ``phase``: :meth:`server_step`'s fields, and the phase's new
        device rows (``carry.rows[phase]``; none when ``carry`` is None) installed for the
        devices the BS received (all when ``received`` is None; a device it did not receive
        keeps its own). A field on disk (:class:`learning.device_table.DeviceTable`) is left
        as it is: the streamed round writes each chunk's rows into its next version."""
        self._check_phase(phase, len(self.phases()))
        fields = self.server_step(phase, state, estimate, received)
        for name, values in ({} if carry is None else carry.rows[phase]).items():
            if isinstance(getattr(state, name), DeviceTable):
                continue
            fields[name] = values if received is None else scatter_rows(getattr(state, name), received, values)
        return dataclasses.replace(state, **fields), carry, {}

    def chunk_carry(self, chunk: LocalOutcome, round_carry: LocalOutcome) -> LocalOutcome:
        """The carry a chunk brings to a later phase of a streamed round: its own
        (``chunk``, its first phase trained again; :class:`LocalOutcome` holds only the
        chunk's rows, nothing of the server's)."""
        del round_carry
        return chunk

    def round_carry_for_chunks(self, carry: LocalOutcome | None) -> None:
        """What a streamed round keeps of a phase's carry for :meth:`chunk_carry`: nothing
        (the last chunk's rows would be held through the later phases for no use)."""
        del carry

    def server_step(self, phase: int, state, estimate: tf.Tensor, received: Received | None) -> dict:
        """The server fields after phase ``phase`` from the estimate [n] of the received
        devices' mean update (:func:`population_sum` for a population sum): ``w + estimate``."""
        del phase, received
        return {"w": state.w + estimate}

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
        """Every field of the state (a :attr:`state_type` dataclass of float32 tensors); for
        a field on disk, which version of its table (:meth:`DeviceTable.reference`:
        ``[version, K, d]``, int64)."""
        def array(value):
            return value.reference() if isinstance(value, DeviceTable) else value.numpy()

        return {k: array(getattr(state, k)) for k in self.state_type.__dataclass_fields__}

    def state_from_arrays(self, arrays: dict[str, np.ndarray]):
        """Inverse of :meth:`state_to_arrays`; with :meth:`keep_tables_on_disk` a
        per-device field opens the version its array names
        (:class:`learning.device_table.MissingTableError` naming the file when it is gone)."""
        def field(name):
            if self.table_store is not None and name.endswith("_k"):
                table = self.table_store.open(name, arrays[name])
                if table.shape != (self.num_devices, self.model.num_params):
                    raise ValueError(f"{name}: a table of shape {table.shape} (expected "
                                     f"{(self.num_devices, self.model.num_params)})")
                return table
            return tf.constant(arrays[name], tf.float32)

        return self.state_type(**{k: field(k) for k in self.state_type.__dataclass_fields__})

    def is_finite(self, state) -> bool:
        """False when a server field (every field but the per-device ``*_k``) holds NaN or Inf."""
        return all(bool(tf.reduce_all(tf.math.is_finite(getattr(state, name))))
                   for name in self.state_type.__dataclass_fields__ if not name.endswith("_k"))


FedAvg.__init__.__signature__ = constructor_signature(FedAvgParameters)
