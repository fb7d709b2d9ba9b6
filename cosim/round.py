"""One round of Algorithm 1 as a function: ``run_round(state, world, t) -> (state, record)``.

The round draws its link (:meth:`phy.uplink.Uplink.round`: channel, CSI, cohort), runs
every phase the algorithm declares (local step of the cohort, the phase over the air,
the server update) and merges what each block names for the trace: the link's and each
phase's columns (:class:`phy.uplink.RoundLink`, :class:`phy.uplink.PhaseResult`), the
algorithm's (``metrics``: its phases' metrics, ``train_loss``, its own round metrics)
and the evaluator's (:class:`cosim.evaluation.Evaluator`). A name written twice is an
error. Every random stream derives from (seed, round, purpose) (:mod:`cosim.rng`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from cosim import rng as rngs
from learning.algorithms.base import Received, scalar_metrics
from native.columns import Columns

RUN_COLUMNS = ("round", "cumulative_channel_uses", "cumulative_uplink_symbols", "cumulative_downlink_symbols",
               "cumulative_uplink_seconds", "cumulative_uplink_energy_j")
"""Columns written outside :func:`run_round` (``round`` by the trace writer, the
``cumulative_*`` totals by :meth:`cosim.engine.Engine.rounds`)."""


@dataclass
class RoundRecord:
    """Everything one round writes to the trace: ``scalars`` (``/rounds``; NaN for the
    evaluation columns of a round without one), ``per_device`` ([K] arrays),
    ``reliability`` ([B] arrays), ``signals`` (raw arrays, when kept) and ``divergence``
    (what diverged, set by the loop; not written)."""

    round: int
    scalars: dict[str, float] = field(default_factory=dict)
    per_device: dict[str, np.ndarray] = field(default_factory=dict)
    reliability: dict[str, np.ndarray] = field(default_factory=dict)
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    divergence: list[str] = field(default_factory=list)

    def add(self, columns: Columns) -> None:
        """Merge a block's :class:`native.columns.Columns`; ``ValueError`` naming a column
        already written (or one the run writes itself: ``round``, ``cumulative_*``,
        ``wall_s``, ``cpu_s``)."""
        for part in ("scalars", "per_device", "reliability", "signals"):
            mine, new = getattr(self, part), getattr(columns, part)
            for name in new:
                if name in mine or (part == "scalars" and name in (*RUN_COLUMNS, "wall_s", "cpu_s")):
                    raise ValueError(f"round {self.round}: the column {name!r} is written twice; rename one")
            mine.update(new)

    @property
    def evaluated(self) -> bool:
        return not math.isnan(self.scalars.get("test_accuracy", math.nan))


def count_nonfinite(values) -> int:
    """The number of NaN or infinite entries of ``values`` (a float tensor or array): one
    reduction when there are none (NaN and inf propagate through a sum)."""
    if bool(tf.math.is_finite(tf.reduce_sum(values))):
        return 0
    return int(tf.reduce_sum(tf.cast(~tf.math.is_finite(values), tf.int32)))


def cohort_data(data, cohort, local_steps: int):
    """The local datasets of the round's cohort (all of ``data`` without one; None when
    nobody is scheduled), with the stragglers' fewer steps."""
    if cohort is None:
        return data
    if cohort.scheduled.size != data.weights.shape[0]:
        data = data.cohort(cohort.scheduled) if cohort.scheduled.size else None
    if data is not None and np.any(cohort.steps < local_steps):
        data = dataclasses.replace(data, local_steps=tf.constant(cohort.steps))
    return data


def end_round(record: RoundRecord, world, link, states: tuple, metrics: dict, nonfinite: int,
              clocks: tuple[float, float]) -> RoundRecord:
    """``record`` with the round's closing columns: the link's, the algorithm's (from the
    round's ``states`` = (previous, new) and its phases' ``metrics``), the nonfinite
    count, the evaluator's, and ``wall_s``, ``cpu_s`` since ``clocks`` (perf_counter,
    process_time at the round's start)."""
    algorithm, (previous, state) = world.algorithm, states
    record.add(link.columns())
    record.add(Columns(scalars={"nonfinite_update_entries": float(nonfinite),
                                **algorithm.metrics(previous, state, metrics)}))
    record.add(world.evaluator.columns(algorithm, state, record.round))
    record.scalars["wall_s"] = time.perf_counter() - clocks[0]
    record.scalars["cpu_s"] = time.process_time() - clocks[1]
    return record


def run_round(state: Any, world, t: int) -> tuple[Any, RoundRecord]:
    """Round ``t`` of ``world`` (:class:`cosim.world.World`) from ``state``: the new state
    and the round's record (without the ``cumulative_*`` totals)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    algorithm, seed = world.algorithm, world.scenario.seed
    record, link, previous = RoundRecord(round=t), world.uplink.round(t), state
    data = cohort_data(world.device_data, link.cohort, world.local_steps)
    carry, nonfinite, metrics = None, 0, {}
    for index, phase in enumerate(() if link.discarded else algorithm.phases()):
        updates, carry, local = algorithm.local_update(
            index, state, carry, data, rngs.stream_seed(seed, t, rngs.local_purpose(phase.name)))
        nonfinite += count_nonfinite(updates)
        sent = link.send(phase.name, updates, data.weights)
        received = None if sent.received is None else Received(*sent.received)
        state, carry, server = algorithm.server_update(index, state, carry, sent.estimate, received=received)
        metrics[phase.name] = scalar_metrics(local, server)
        record.add(sent.columns())
    return state, end_round(record, world, link, (previous, state), metrics, nonfinite,
                            (started, cpu_started))
