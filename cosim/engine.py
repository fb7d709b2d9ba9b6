"""THE round loop (Algorithm 1), generic over federated-learning algorithms.

One :class:`Engine` couples the two halves of the co-simulation. It builds the
static world of a scenario once (device drop, path gains, dataset and its
partition, model, algorithm, channel and CSI models) and then, for every round
``t``:

1. draws a new block-fading channel ``H [K, F]`` and the devices' estimates
   ``H_hat [K, F]`` (constant over all OFDM symbols of the round); with a multi-antenna
   BS (``bs.num_antennas`` N_r > 1) ``H`` is the effective channel ``m_f^H h_kf`` of the
   ``[K, N_r, F]`` draw and the BS's combiner (:mod:`phy.combiner`);
2. counts the downlink OFDM symbols needed to multicast the global model to the
   worst device (:mod:`phy.downlink`);
3. for each phase the algorithm declares (the proposed method: ``rho`` then ``nu``;
   FedAvg: ``delta``), runs the local step of all K devices at once, sends the
   [K, n] update vectors through :func:`phy.aircomp.aggregate` (or the error-free
   reference when ``power.control = "ideal"``), measures the estimate's error against
   the error-free weighted sum (:mod:`phy.aggregate_error`: ``aggregate_error_<phase>``,
   ``aggregate_nmse_<phase>``) and applies the server update;
4. if the algorithm has the optional hook ``round_metrics`` (below), records the
   round-level metrics it returns;
5. evaluates the global model every ``eval.every`` rounds (and after the last): the
   algorithm's ``predict_probs`` (the S-sample posterior predictive for the proposed
   method) gives ``test_accuracy``, ``test_nll``, ``ece``; an algorithm with the
   optional hook ``predict_mean_probs(state, x)`` (the proposed method: the posterior
   mean's softmax) also gives ``posterior_mean_accuracy``, ``posterior_mean_nll``,
   ``posterior_mean_ece`` (NaN for the others and in rounds without evaluation);
6. hands one :class:`RoundRecord` to the caller (the trace writer).

Optional algorithm hook (not part of the :class:`FederatedAlgorithm` protocol, so
an algorithm without it needs nothing)::

    algo.round_metrics(previous_state, state) -> dict[str, float]

``previous_state`` is the state the round started from, ``state`` the state after
its last phase's server update. Each value (a Python or NumPy/TF scalar) is written
to ``record.scalars`` under its own name, without a phase suffix, so it becomes the
``/rounds/<name>`` column of the trace (``docs/trace.md``). A name the engine or the
run already writes (``uplink_symbols``, ``model_finite``, ``cumulative_*``, ...) is
refused with a ``ValueError``. Only the proposed method has the hook: it returns
``precision_rel_change`` (mean over the d entries of
``|rho_{t+1} - rho_t| / rho_t``), ``precision_changed_fraction`` (share of the d
entries whose float32 precision, the one the devices use, changed) and ``posterior_std_p05``,
``posterior_std_p50``, ``posterior_std_p95`` (quantiles over the d entries of the
global posterior std ``rho_{t+1}^{-1/2}``).

Randomness comes only from :mod:`cosim.rng` streams keyed by (seed, round,
purpose), so a run replays bit-for-bit and a run resumed at round ``t`` draws
exactly what an uninterrupted run draws.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from cosim import rng as rngs
from cosim.divergence import DivergenceWatch
from cosim.scenario import Scenario
from cosim.trace import (
    EVAL_COLUMNS,
    POSTERIOR_MEAN_COLUMNS,
    RELIABILITY_SERIES,
    TraceWriter,
    channel_use_split,
)
from learning import algorithms as fl_algorithms
from learning.algorithms.base import DeviceData, FederatedAlgorithm, Received
from learning.architectures import build_model
from learning.catalog import CATALOG
from learning.datasets import Dataset, load_dataset
from learning.metrics import evaluate_probs
from learning.partition import Partition, PoolExhausted, partition, to_device_data
from native.columns import Columns
from phy import geometry
from phy.cells import CELL_MODELS
from phy.combiner import ReceiveCombiner
from phy.parameters import CELL_LAYOUTS, CHANNEL_MODELS, CSI_MODELS, POWER_CONTROLS
from phy.sync import UniformOffsets
from phy.uplink import Uplink

RUN_COLUMNS = (
    "round",
    "cumulative_channel_uses",
    "cumulative_uplink_symbols",
    "cumulative_downlink_symbols",
)
"""Columns written outside :meth:`Engine.run_round` (``round`` by the trace writer, the
``cumulative_*`` totals by :meth:`Engine.rounds`, :class:`ChannelUses`)."""


@dataclass
class ChannelUses:
    """Running totals of OFDM symbols up to and including the last round added.

    The one place the cumulative channel uses are summed: :meth:`Engine.rounds` adds
    every round to one, and ``cosim.run`` keeps it in the checkpoint's attributes.

    Attributes
    ----------
    uplink : float
        Uplink symbols (sum of the rounds' ``uplink_symbols``).
    downlink : float
        Downlink symbols (sum of the rounds' ``downlink_symbols``).
    """

    uplink: float = 0.0
    downlink: float = 0.0

    @property
    def total(self) -> float:
        """Uplink + downlink (``cumulative_channel_uses``; whole numbers of symbols, so
        the sum is exact)."""
        return self.uplink + self.downlink

    def add(self, scalars: dict[str, float]) -> None:
        """Add one round's ``uplink_symbols`` and ``downlink_symbols`` and write the
        three ``cumulative_*`` columns into ``scalars``."""
        up, down = scalars["uplink_symbols"], scalars["downlink_symbols"]
        self.uplink += up
        self.downlink += down
        scalars.update(self.attrs())

    def attrs(self) -> dict[str, float]:
        """The totals under their trace column names (also the checkpoint attributes)."""
        return {
            "cumulative_channel_uses": self.total,
            "cumulative_uplink_symbols": self.uplink,
            "cumulative_downlink_symbols": self.downlink,
        }

    @classmethod
    def resumed(cls, attrs: dict, writer: TraceWriter) -> ChannelUses:
        """The totals saved with a checkpoint.

        A checkpoint written before the uplink / downlink split holds only
        ``cumulative_channel_uses``; the split is then summed from the trace's
        committed ``uplink_symbols`` / ``downlink_symbols`` rows (whole numbers of
        symbols, so the sums are exact and equal a run that kept them).
        """
        if "cumulative_uplink_symbols" in attrs and "cumulative_downlink_symbols" in attrs:
            return cls(float(attrs["cumulative_uplink_symbols"]), float(attrs["cumulative_downlink_symbols"]))
        rows = {name: writer.column(name) for name in ("uplink_symbols", "downlink_symbols")}
        split = channel_use_split({k: v for k, v in rows.items() if v is not None})
        return cls(*split) if split is not None else cls()


@dataclass
class RoundRecord:
    """Everything one round writes to the trace.

    Attributes
    ----------
    round : int
        Zero-based round index.
    scalars : dict[str, float]
        One value per column of ``/rounds`` (NaN for evaluation columns in rounds
        without evaluation); the ``cumulative_*`` channel uses are added by
        :meth:`Engine.rounds`, not by :meth:`Engine.run_round`.
    per_device : dict[str, np.ndarray]
        ``[K]`` arrays for ``/rounds/per_device``.
    reliability : dict[str, np.ndarray]
        ``[ece_bins]`` arrays for ``/rounds/reliability`` (NaN without evaluation).
    signals : dict[str, np.ndarray]
        Optional raw signals (only when ``trace.signals`` is on).
    divergence : list[str]
        What diverged in this round (:class:`cosim.divergence.DivergenceWatch`; set
        by :meth:`Engine.rounds`, empty when the round is sane). Not written to the trace.
    """

    round: int
    scalars: dict[str, float] = field(default_factory=dict)
    per_device: dict[str, np.ndarray] = field(default_factory=dict)
    reliability: dict[str, np.ndarray] = field(default_factory=dict)
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    divergence: list[str] = field(default_factory=list)

    def add(self, columns: Columns) -> None:
        """Add a block's columns (:class:`native.columns.Columns`) to this record."""
        self.scalars.update(columns.scalars)
        self.per_device.update(columns.per_device)
        self.signals.update(columns.signals)

    @property
    def evaluated(self) -> bool:
        return not math.isnan(self.scalars.get("test_accuracy", math.nan))


@dataclass(frozen=True)
class StaticWorld:
    """What a scenario fixes for the whole run (drawn from the STATIC_ROUND streams)."""

    deployment: geometry.Deployment
    path_gain: np.ndarray
    dataset: Dataset
    partition: Partition
    device_data: DeviceData
    label_histogram: np.ndarray


def _channel_of(scenario: Scenario, deployment: geometry.Deployment):
    """The scenario's channel model (:data:`phy.parameters.CHANNEL_MODELS`) on its grid; a
    3GPP cell (``channel.model = "umi" | "uma" | "rma"``) draws its large-scale state
    (LoS, path loss, shadow fading) once, from the static "cell" stream."""
    ofdm = scenario.ofdm
    return CHANNEL_MODELS[scenario.channel.model].build(
        scenario.channel.variant_values(), model=scenario.channel.model,
        positions_m=np.asarray(deployment.positions_m, np.float64),
        num_subcarriers=ofdm.num_subcarriers, subcarrier_spacing_hz=ofdm.subcarrier_spacing_hz,
        sample_period_s=1.0 / ofdm.bandwidth_hz,
        seed=rngs.stream_seed(scenario.seed, rngs.STATIC_ROUND, "cell"),
        num_bs_antennas=scenario.bs.num_antennas,
    )


def build_world(scenario: Scenario) -> StaticWorld:
    """Drop the devices, load and partition the data (deterministic for the scenario's seed)."""
    cell = scenario.cell
    geo_rng = rngs.numpy_rng(scenario.seed, rngs.STATIC_ROUND, "geometry")
    deployment = CELL_LAYOUTS[cell.layout].build(cell.variant_values(), rng=geo_rng)
    if scenario.channel.model in CELL_MODELS:
        path_gain = _channel_of(scenario, deployment).path_gain
    else:
        path_gain = geometry.path_gain(deployment.distances_m, scenario.channel.path_loss_exponent)

    data_cfg = scenario.data
    dataset = load_dataset(
        data_cfg.dataset,
        data_dir=data_cfg.data_dir,
        synthetic_classes=data_cfg.synthetic_classes,
        synthetic_shape=tuple(data_cfg.synthetic_shape),
        synthetic_train=data_cfg.synthetic_train_size,
        synthetic_test=data_cfg.synthetic_test_size,
        seed=scenario.seed,
    )
    try:
        parts = partition(
            dataset.y_train,
            dataset.num_classes,
            num_devices=cell.num_devices,
            scheme=data_cfg.partition,
            mean_samples_per_device=data_cfg.mean_samples_per_device,
            size_distribution=data_cfg.size_distribution,
            labels_per_device=data_cfg.labels_per_device,
            dirichlet_alpha=data_cfg.dirichlet_alpha,
            rng=rngs.numpy_rng(scenario.seed, rngs.STATIC_ROUND, "partition"),
        )
    except PoolExhausted as error:  # learning/ speaks of its arguments; name the scenario keys
        raise ValueError(
            f"data.partition = {data_cfg.partition!r}: class {error.label} has {error.available} "
            f"training samples but all devices together need {error.needed}; lower "
            f"data.mean_samples_per_device (now {data_cfg.mean_samples_per_device:g}) or "
            f"cell.num_devices (now {cell.num_devices})"
        ) from error
    return StaticWorld(
        deployment=deployment,
        path_gain=np.asarray(path_gain, np.float64),
        dataset=dataset,
        partition=parts,
        device_data=to_device_data(dataset, parts),
        label_histogram=parts.label_histogram(dataset.y_train, dataset.num_classes),
    )


def build_uplink(scenario: Scenario, world: StaticWorld, algorithm: FederatedAlgorithm) -> Uplink:
    """The scenario's :class:`phy.uplink.Uplink`: its components built from the registries
    of :mod:`phy.parameters` (``Variant.build``), its integers and the run seed."""
    ofdm, power, participation = scenario.ofdm, scenario.power, scenario.participation
    return Uplink(
        channel=_channel_of(scenario, world.deployment),
        csi=CSI_MODELS[scenario.csi.model].build(scenario.csi.variant_values()),
        power_control=POWER_CONTROLS[power.control].build(power.variant_values()),
        path_gain=world.path_gain, seed=scenario.seed,
        phases=[(phase.name, phase.num_values) for phase in algorithm.phases()],
        num_subcarriers=ofdm.num_subcarriers, tx_power_w=power.tx_power_w,
        noise_power_w=power.noise_power_w, gamma_w=power.gamma_w,
        downlink_values=algorithm.downlink_values(), bits_per_value=scenario.downlink.bits_per_value,
        bs_tx_power_w=scenario.downlink.bs_tx_power_w, domain=ofdm.domain,
        bandwidth_hz=ofdm.bandwidth_hz, cyclic_prefix_length=ofdm.cyclic_prefix_samples,
        sync=UniformOffsets(scenario.sync.timing_offset_max_samples, scenario.sync.cfo_max_subcarriers,
                            scenario.sync.precompensate),
        combiner=ReceiveCombiner(scenario.bs.combiner), num_antennas=scenario.bs.num_antennas,
        participation=participation,
        population_weights=np.asarray(world.device_data.weights, np.float64),
        local_steps=int(scenario.hyper_parameters().get("local_steps", 1)),
        training_phases=CATALOG[scenario.algorithm.name].training_phases,
        per_device=scenario.trace.per_device, keep_signals=scenario.trace.records_signals,
    )


def count_nonfinite(values) -> int:
    """The number of NaN or infinite entries of ``values`` (a float tensor or array).

    One reduction when there are none, which is the usual case: NaN and inf propagate
    through a sum, so a finite sum means every entry is finite (an overflowing sum of
    finite entries only falls through to the exact count).
    """
    if bool(tf.math.is_finite(tf.reduce_sum(values))):
        return 0
    return int(tf.reduce_sum(tf.cast(~tf.math.is_finite(values), tf.int32)))


class Engine:
    """Runs a scenario round by round.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    world : StaticWorld, optional
        Pre-built static world (tests and benchmarks reuse one); built from the
        scenario when omitted.
    """

    def __init__(self, scenario: Scenario, world: StaticWorld | None = None):
        self.scenario = scenario
        self.world = world if world is not None else build_world(scenario)
        dataset = self.world.dataset
        self.model = build_model(
            scenario.model.architecture,
            dataset.input_shape,
            dataset.num_classes,
            tuple(scenario.model.hidden_units),
        )
        self.algorithm: FederatedAlgorithm = fl_algorithms.build(
            scenario.algorithm.name,
            self.model,
            scenario.cell.num_devices,
            runtime=scenario.runtime.runtime(),
            **scenario.hyper_parameters(),
        )
        self._local_steps = int(scenario.hyper_parameters().get("local_steps", 1))
        self.uplink = build_uplink(scenario, self.world, self.algorithm)
        test_subset = scenario.data.test_subset
        x_test, y_test = dataset.x_test, dataset.y_test
        if test_subset is not None:
            x_test, y_test = x_test[:test_subset], y_test[:test_subset]
        self.x_test = tf.constant(x_test, tf.float32)
        self.y_test = np.asarray(y_test)

    # ------------------------------------------------------------------ state
    @property
    def num_params(self) -> int:
        return int(self.model.num_params)

    def initial_state(self) -> Any:
        """The algorithm's initial state (deterministic for the scenario's seed)."""
        return self.algorithm.init(rngs.stream_seed(self.scenario.seed, rngs.STATIC_ROUND, "init"))

    # ------------------------------------------------------------------ one round
    def run_round(self, t: int, state: Any) -> tuple[Any, RoundRecord]:
        """Run round ``t`` from ``state``; return the new state and the round's record."""
        scenario, seed = self.scenario, self.scenario.seed
        started = time.perf_counter()
        record = RoundRecord(round=t)
        data = self.world.device_data
        previous_state = state

        link = self.uplink.round(t)
        cohort = link.cohort
        carry = None
        scalars = record.scalars
        nonfinite = 0
        phases = self.algorithm.phases()
        if cohort is not None:
            data = data if cohort.scheduled.size == self.scenario.cell.num_devices else (
                data.cohort(cohort.scheduled) if cohort.scheduled.size else None)
            if data is not None and np.any(cohort.steps < self._local_steps):
                data = dataclasses.replace(data, local_steps=tf.constant(cohort.steps))
        for index, phase in enumerate(() if link.discarded else phases):
            updates, carry, local_metrics = self.algorithm.local_update(
                index, state, carry, data, rngs.stream_seed(seed, t, f"local/{phase.name}")
            )
            nonfinite += count_nonfinite(updates)
            result = link.send(phase.name, updates, data.weights)
            if result.received is None:
                state, carry, server_metrics = self.algorithm.server_update(
                    index, state, carry, result.estimate
                )
            else:
                state, carry, server_metrics = self.algorithm.server_update(
                    index, state, carry, result.estimate, received=Received(*result.received)
                )
            record.add(result.columns())
            for key, value in {**local_metrics, **server_metrics}.items():
                value = np.asarray(value)
                if value.ndim == 0:
                    scalars[f"{key}_{phase.name}"] = float(value)
        record.add(link.columns())
        round_metrics = self._round_metrics(previous_state, state)

        scalars["nonfinite_update_entries"] = float(nonfinite)
        train_losses = [v for k, v in scalars.items() if k.startswith("train_loss_")]
        scalars["train_loss"] = float(np.mean(train_losses)) if train_losses else math.nan
        scalars["precision_floor_hits"] = float(
            sum(v for k, v in scalars.items() if k.startswith("precision_floor_hits_"))
        )

        finite = self.algorithm.is_finite(state)
        bins = scenario.eval.ece_bins
        probs = None
        if finite and self._evaluate_now(t):
            probs = np.asarray(self.algorithm.predict_probs(
                state,
                self.x_test,
                scenario.eval.predictive_samples,
                rngs.stream_seed(seed, t, "eval"),
            ))
            # finite weights whose logits overflow: the model has diverged all the same
            finite = bool(np.all(np.isfinite(probs)))
        mean_probs = None
        predict_mean = getattr(self.algorithm, "predict_mean_probs", None)
        if finite and probs is not None and predict_mean is not None:
            mean_probs = np.asarray(predict_mean(state, self.x_test))
            finite = bool(np.all(np.isfinite(mean_probs)))
        scalars.update(dict.fromkeys(POSTERIOR_MEAN_COLUMNS, math.nan))
        if finite and probs is not None:
            ev = evaluate_probs(probs, self.y_test, num_bins=bins)
            scalars.update(test_accuracy=ev.accuracy, test_nll=ev.nll, ece=ev.ece)
            record.reliability = {
                name: np.asarray(getattr(ev, name), np.float64) for name in RELIABILITY_SERIES
            }
            if mean_probs is not None:
                mean = evaluate_probs(mean_probs, self.y_test, num_bins=bins)
                scalars.update(posterior_mean_accuracy=mean.accuracy, posterior_mean_nll=mean.nll,
                               posterior_mean_ece=mean.ece)
        else:
            scalars.update(dict.fromkeys(EVAL_COLUMNS, math.nan))
            record.reliability = dict.fromkeys(RELIABILITY_SERIES, np.full(bins, np.nan))
        scalars["model_finite"] = float(finite)
        for key, value in round_metrics.items():
            if key in scalars or key in RUN_COLUMNS or key == "wall_s":
                raise ValueError(
                    f"{type(self.algorithm).__name__}.round_metrics returned {key!r}, "
                    "a column the engine already writes; rename the metric"
                )
            scalars[key] = value
        scalars["wall_s"] = time.perf_counter() - started
        return state, record

    def _round_metrics(self, previous_state: Any, state: Any) -> dict[str, float]:
        """The algorithm's optional ``round_metrics(previous_state, state)`` as floats ({} without it)."""
        hook = getattr(self.algorithm, "round_metrics", None)
        if hook is None:
            return {}
        metrics = {}
        for key, value in hook(previous_state, state).items():
            value = np.asarray(value)
            if value.ndim != 0:
                raise ValueError(
                    f"{type(self.algorithm).__name__}.round_metrics()[{key!r}] must be a scalar, "
                    f"got shape {value.shape}"
                )
            metrics[str(key)] = float(value)
        return metrics

    def _evaluate_now(self, t: int) -> bool:
        every = self.scenario.eval.every
        return (t + 1) % every == 0 or t + 1 == self.scenario.rounds

    def _keep_signals(self, t: int) -> bool:
        return self.scenario.trace.records_signals(t)

    # ------------------------------------------------------------------ the loop
    def rounds(
        self,
        state: Any,
        start_round: int = 0,
        divergence: DivergenceWatch | None = None,
        channel_uses: ChannelUses | None = None,
    ) -> Iterator[tuple[Any, RoundRecord]]:
        """Yield ``(state, record)`` for rounds ``start_round .. rounds-1``.

        Every record's scalars hold the running channel-use totals up to and including
        its round, ``cumulative_uplink_symbols``, ``cumulative_downlink_symbols`` and
        ``cumulative_channel_uses`` (OFDM symbols), summed in ``channel_uses`` (updated
        in place; a fresh :class:`ChannelUses` when None). Every record is checked by
        ``divergence`` (a fresh :class:`~cosim.divergence.DivergenceWatch` when None; a
        resumed run passes one holding round 0's loss) and carries its findings in
        ``record.divergence``; whether a diverged run stops is the caller's choice
        (``cosim.run``).

        Raises
        ------
        ValueError
            On the first iteration: ``start_round > 0`` without ``channel_uses`` (the totals of rounds
            ``0 .. start_round-1``, e.g. :meth:`ChannelUses.resumed`): the cumulative
            columns would silently count from ``start_round``.
        """
        if start_round > 0 and channel_uses is None:
            raise ValueError(
                f"start_round = {start_round} needs channel_uses, the totals of rounds "
                f"0..{start_round - 1} (ChannelUses.resumed)"
            )
        uses = channel_uses if channel_uses is not None else ChannelUses()
        watch = divergence if divergence is not None else DivergenceWatch()
        for t in range(start_round, self.scenario.rounds):
            state, record = self.run_round(t, state)
            uses.add(record.scalars)
            record.divergence = watch.check(t, record.scalars)
            yield state, record

    def divergence_advice(self) -> str:
        """The scenario keys most likely behind a divergence, with their values."""
        algorithm = self.scenario.algorithm
        knobs = [f"algorithm.learning_rate (now {algorithm.learning_rate:g}; a smaller step is the usual cure)"]
        if algorithm.name == "bayes_aircomp":
            knobs.append(
                f'algorithm.nll_reduction (now "{algorithm.nll_reduction}"; "mean" divides '
                "the step on the means by |D_k|)"
            )
            knobs.append(f"algorithm.init_std (now {algorithm.init_std:g})")
            if algorithm.covariance_learning_rate != "learning_rate":
                knobs.append(f"algorithm.covariance_learning_rate (now "
                             f"{algorithm.covariance_learning_rate:g}; phase 1's own step)")
        return "Likely knobs: " + ", ".join(knobs)
