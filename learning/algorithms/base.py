"""The interface every federated-learning algorithm implements.

An algorithm is a small set of pure functions over a state object, in the
spirit of FedJAX: it never touches the channel and never loops over rounds.
The round (``cosim/round.py::run_round``) calls, for each phase the algorithm declares::

    updates, carry, metrics = algo.local_update(phase, state, carry, data, seed)
    estimate = <air interface>(updates, data.weights)      # sum_k pi_k updates_k, with errors
    state, carry, metrics = algo.server_update(phase, state, carry, estimate)

and after the last phase ``algo.metrics(previous_state, state, phase_metrics)``: the
algorithm names every trace column it adds to the round (its phases' scalar metrics under
``<name>_<phase>``, ``train_loss``, ``precision_floor_hits`` and its own round metrics;
:func:`round_columns` is the common part).

With partial participation (the scenario's ``[participation]``) ``data`` holds only the
round's cohort (the devices that train, :attr:`DeviceData.devices`), the air interface
sums over the devices the BS received, and the engine passes
``server_update(..., received=Received(...))``: which cohort rows arrived and the share
of the population's data weight the BS scales its estimate to. An algorithm with
per-device state (SCAFFOLD's ``c_k``, FedSMOO's ``mu_k`` and ``h_k``, FedGMT's ``h_k``)
reads the cohort's rows by ``data.devices`` and advances only the received rows (for
FedAvg's variants, ``FedAvg.local_update`` and ``server_update`` do it for every
``*_k`` field); ``received=None`` means every device of the population took part.

``carry`` is whatever one phase hands to the next within a round (for the
proposed method: the devices' local precisions rho_k of phase 1, which phase 2
needs); it starts as ``None`` and is dropped at the end of the round. State that
persists across rounds (for SCAFFOLD: every device's control variate) lives in
``state``: a [K, d] tensor, or, in a round that streams its devices, a
:class:`learning.device_table.DeviceTable` on disk whose chunk rows the round reads and
whose next version it writes chunk by chunk (``cosim/streamed_round.py``).

Shapes: K devices, B padded local samples, d model weights; all float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import tensorflow as tf

from learning.catalog import CATALOG
from learning.device_table import DeviceTable


@dataclass(frozen=True)
class PhaseSpec:
    """One uplink aggregation of a round.

    Attributes
    ----------
    name : str
        Short name used in traces (``"rho"``, ``"nu"``, ``"delta"``, ...).
    num_values : int
        Length of the real vector every device sends in this phase (``d`` or ``2 d``).
    """

    name: str
    num_values: int


@dataclass(frozen=True)
class DeviceData:
    """All devices' local datasets, padded to a common length.

    Attributes
    ----------
    x : tf.Tensor, [K, B, *input_shape], tf.float32
        Local inputs (padding rows are zeros).
    y : tf.Tensor, [K, B], tf.int32
        Local labels (padding rows are 0).
    mask : tf.Tensor, [K, B], tf.float32
        1 for a real sample, 0 for padding.
    weights : tf.Tensor, [K], tf.float32
        pi_k = |D_k| / |D| (sums to one); for a cohort, renormalised over its devices.
    devices : tf.Tensor, [K], tf.int32, or None
        The rows' devices in the population (their ids: per-device noise streams and
        state rows); None: the whole population, in order.
    population_share : float
        The population's weight the rows hold, ``sum_k pi_k`` over them before the
        renormalisation (1 for the whole population): ``population_share * weights`` are
        the devices' own shares pi_k.
    local_steps : tf.Tensor, [K], tf.int32, or None
        Local steps each device takes per training phase, each in 1..E (stragglers that
        send after fewer steps, ``participation.straggler_policy = "fewer_steps"``); None:
        every device takes the algorithm's E.
    """

    x: tf.Tensor
    y: tf.Tensor
    mask: tf.Tensor
    weights: tf.Tensor
    devices: tf.Tensor | None = None
    population_share: float = 1.0
    local_steps: tf.Tensor | None = None

    @property
    def num_devices(self) -> int:
        return int(self.y.shape[0])

    @property
    def device_ids(self) -> tf.Tensor:
        """``devices``, or ``0..K-1`` for the whole population ([K] tf.int32)."""
        return self.devices if self.devices is not None else tf.range(self.num_devices)

    def rows(self, lo: int, hi: int) -> DeviceData:
        """The population's devices ``lo:hi`` with their own weights pi_k (not
        renormalised: a chunk of a round that streams its devices, whose updates the
        uplink sums with the population's weights) and their ids."""
        if self.devices is not None:
            raise ValueError("rows() takes the whole population's data, not a cohort's")
        steps = None if self.local_steps is None else self.local_steps[lo:hi]
        return DeviceData(self.x[lo:hi], self.y[lo:hi], self.mask[lo:hi], self.weights[lo:hi],
                          devices=tf.range(lo, hi, dtype=tf.int32), population_share=1.0,
                          local_steps=steps)

    def cohort(self, devices) -> DeviceData:
        """The rows of ``devices`` (population ids [K_S], ascending) with their weights
        renormalised to sum to one (``population_share`` their sum before)."""
        if self.devices is not None:
            raise ValueError("cohort() takes the whole population's data, not a cohort's")
        index = tf.constant(np.asarray(devices, np.int32))
        weights = tf.gather(self.weights, index)
        share = float(tf.reduce_sum(tf.cast(weights, tf.float64)))
        if share <= 0.0:
            raise ValueError(f"the cohort {list(np.asarray(devices))} holds no data weight")
        return DeviceData(tf.gather(self.x, index), tf.gather(self.y, index),
                          tf.gather(self.mask, index),
                          tf.cast(tf.cast(weights, tf.float64) / share, tf.float32),
                          devices=index, population_share=share)


@dataclass(frozen=True)
class Received:
    """What the BS received in a phase of a round with partial participation.

    Attributes
    ----------
    rows : tf.Tensor, [K_T], tf.int32
        The received devices' rows in the round's :class:`DeviceData` (and its updates).
    devices : tf.Tensor, [K_T], tf.int32
        The same devices' population ids.
    share : float
        The population's data weight the BS scales its estimate to: the estimate is of
        ``sum_k pi_k Delta_k / share`` over the received devices (``share = sum_k pi_k``
        over them when the BS knows who dropped; over the whole cohort when it does not).
        An algorithm whose server state mirrors a population sum (SCAFFOLD's ``c``,
        FedDyn-style duals) adds ``share * estimate``.
    """

    rows: tf.Tensor
    devices: tf.Tensor
    share: float


def scatter_rows(table: tf.Tensor, received: Received, values: tf.Tensor) -> tf.Tensor:
    """``table`` [K, d] with the received devices' rows replaced by their rows of
    ``values`` [K_S, d] (the cohort's; the per-device state of a cohort round)."""
    rows = tf.gather(values, received.rows)
    return tf.tensor_scatter_nd_update(table, received.devices[:, None], rows)


def cohort_rows(table, data: DeviceData) -> tf.Tensor:
    """The cohort's rows of a per-device ``table`` [K, d] (the table itself for the
    whole population); of a :class:`learning.device_table.DeviceTable` on disk, the
    chunk's rows read from its file (``data`` a chunk, :meth:`DeviceData.rows`)."""
    if isinstance(table, DeviceTable):
        return tf.constant(table.rows_of(data.device_ids))
    return table if data.devices is None else tf.gather(table, data.devices)


def scalar_metrics(*metrics: dict) -> dict[str, float]:
    """The scalar entries of a phase's metric dicts (``local_update``'s, then
    ``server_update``'s) as Python floats, in order; ``[K]`` entries are left out."""
    out = {}
    for key, value in {k: v for part in metrics for k, v in part.items()}.items():
        value = np.asarray(value)
        if value.ndim == 0:
            out[key] = float(value)
    return out


def round_columns(phases: dict[str, dict[str, float]]) -> dict[str, float]:
    """The columns every algorithm writes from its phases' metrics.

    Input: phase name -> its scalar metrics (:func:`scalar_metrics`), in phase order
    (empty in a discarded round). Output: every metric under ``<name>_<phase>``,
    ``train_loss`` (the mean of the phases' ``train_loss``, NaN without one) and
    ``precision_floor_hits`` (the sum of the phases' ``precision_floor_hits``; 0 for an
    algorithm without a precision floor).
    """
    columns = {f"{key}_{phase}": value for phase, metrics in phases.items() for key, value in metrics.items()}
    losses = [metrics["train_loss"] for metrics in phases.values() if "train_loss" in metrics]
    columns["train_loss"] = float(np.mean(losses)) if losses else math.nan
    columns["precision_floor_hits"] = float(
        sum(metrics["precision_floor_hits"] for metrics in phases.values() if "precision_floor_hits" in metrics))
    return columns


def catalog_phases(name: str, num_params: int) -> tuple[PhaseSpec, ...]:
    """The uplink phases of algorithm ``name`` for ``num_params`` = d, from
    :data:`learning.catalog.CATALOG` (what ``phases()`` returns)."""
    return tuple(PhaseSpec(phase, values)
                 for phase, values in CATALOG[name].phase_values(num_params).items())


def catalog_downlink_values(name: str, num_params: int) -> int:
    """Real values the BS broadcasts per round for algorithm ``name`` (what
    ``downlink_values()`` returns), from :data:`learning.catalog.CATALOG`."""
    return CATALOG[name].downlink_values(num_params)


@runtime_checkable
class FederatedAlgorithm(Protocol):
    """What the engine needs from an FL algorithm.

    ``seed`` arguments are stateless-RNG seeds: ``tf.Tensor`` of shape [2],
    tf.int32, derived by the engine from (run seed, round, purpose).
    """

    name: str

    def phases(self) -> tuple[PhaseSpec, ...]:
        """The uplink phases of one round, in order."""
        ...

    def downlink_values(self) -> int:
        """Real values the BS broadcasts to every device per round."""
        ...

    def init(self, seed: tf.Tensor) -> Any:
        """The initial state (global model, and any persistent device state)."""
        ...

    def local_update(
        self, phase: int, state: Any, carry: Any, data: DeviceData, seed: tf.Tensor
    ) -> tuple[tf.Tensor, Any, dict[str, tf.Tensor]]:
        """Local training of all K devices for ``phase``.

        Output: ``updates`` [K, phases()[phase].num_values] tf.float32, the new
        ``carry``, and scalar or [K] metrics (e.g. ``train_loss``).
        """
        ...

    def server_update(
        self, phase: int, state: Any, carry: Any, estimate: tf.Tensor,
        received: Received | None = None,
    ) -> tuple[Any, Any, dict[str, tf.Tensor]]:
        """Apply the BS's estimate of sum_k pi_k updates_k ([num_values]) to the state
        (over the ``received`` devices of a partial round, :class:`Received`).

        Returns the new state, carry, and metrics (e.g. ``precision_floor_hits``).
        """
        ...

    def metrics(self, previous: Any, state: Any, phases: dict[str, dict[str, float]]) -> dict[str, float]:
        """Every ``/rounds`` column the algorithm adds to a round that went from
        ``previous`` to ``state`` with the phases' scalar metrics ``phases``
        (:func:`round_columns` and the algorithm's own), as Python floats."""
        ...

    def predict_mean_probs(self, state: Any, x: tf.Tensor) -> tf.Tensor | None:
        """The posterior mean's class probabilities [N, C], or None for an algorithm
        without a posterior (its ``posterior_mean_*`` columns are NaN)."""
        ...

    def predict_probs(
        self, state: Any, x: tf.Tensor, num_samples: int, seed: tf.Tensor
    ) -> tf.Tensor:
        """Predictive class probabilities [N, C] of the global model for inputs x [N, ...].

        Bayesian algorithms average softmax outputs over ``num_samples`` posterior
        samples; deterministic ones ignore ``num_samples``.
        """
        ...

    def state_to_arrays(self, state: Any) -> dict[str, np.ndarray]:
        """Everything needed to resume, as named NumPy arrays (for checkpoints)."""
        ...

    def state_from_arrays(self, arrays: dict[str, np.ndarray]) -> Any:
        """Inverse of :meth:`state_to_arrays`."""
        ...

    def is_finite(self, state: Any) -> bool:
        """False when the global model holds NaN or Inf."""
        ...
