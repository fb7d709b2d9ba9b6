"""Time the project's own round: :meth:`cosim.engine.Engine.run_round`, PHY and evaluation apart.

One round is exactly what the engine runs: the block-fading channel and CSI draw,
the downlink count, and for both phases of the proposed method the local training
of all K devices, :func:`phy.aircomp.aggregate` and the server update (evaluation is
switched off inside the timed rounds and timed on its own). The PHY's share is
measured by wrapping the engine's PHY calls (channel, CSI, downlink count,
``aircomp.aggregate`` and, in a round that streams its devices, the phases' streams'
``add`` and ``finish``) with stopwatches; TensorFlow on the CPU runs eagerly and
synchronously, so a call's wall time is its cost.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from cosim import engine as engine_module
from cosim.scenario import Scenario
from learning.metrics import evaluate_probs
from native.streams import EVAL, stream_seed
from phy import aircomp as aircomp_module
from phy.uplink import block as block_module
from phy.uplink.phase_stream import PhaseStream


class _Stopwatch:
    """Accumulated wall seconds per key."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, key: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            self.seconds[key] += time.perf_counter() - start
            return out

        return timed

    def reset(self) -> None:
        self.seconds.clear()


def build_engine(scenario: Scenario) -> engine_module.Engine:
    """The engine for ``scenario`` (static world built once)."""
    return engine_module.Engine(scenario)


class ProjectRounds:
    """The project's rounds of one scenario, timed one at a time.

    Building it builds the engine and runs ``warmup`` untimed rounds (compiles,
    traces, first-touch memory); every :meth:`step` then runs and times the next
    round, and :meth:`result` sums them up. The harness interleaves the steps of
    several configurations so that their ratios see the same machine.
    """

    def __init__(self, scenario: Scenario, warmup: int):
        self.scenario = scenario
        self.engine = build_engine(scenario)
        self.watch = _Stopwatch()
        # the round's channel draw (and, in the time domain, its taps and offsets)
        uplink = self.engine.uplink
        uplink.draw_channel = self.watch.wrap("channel", uplink.draw_channel)
        uplink.csi = self.watch.wrap("csi", uplink.csi)
        self.state = self.engine.initial_state()
        self.round = 0
        self.samples: list[float] = []
        self.phy: list[float] = []
        self.phy_share: list[float] = []
        self.parts: dict[str, list[float]] = defaultdict(list)
        self.nonfinite_rounds = 0
        for _ in range(warmup):
            self._run()

    def _run(self):
        original_aggregate = aircomp_module.aggregate
        original_multicast = block_module.multicast_symbols
        original_add, original_finish = PhaseStream.add, PhaseStream.finish
        aircomp_module.aggregate = self.watch.wrap("aircomp", original_aggregate)
        block_module.multicast_symbols = self.watch.wrap("downlink", original_multicast)
        # a streamed round (runtime.devices_in_memory below K) sends through its phases' streams
        PhaseStream.add = self.watch.wrap("uplink_stream", original_add)
        PhaseStream.finish = self.watch.wrap("uplink_stream", original_finish)
        self.watch.reset()
        try:
            start = time.perf_counter()
            self.state, record = self.engine.run_round(self.round, self.state)
            seconds = time.perf_counter() - start
        finally:
            aircomp_module.aggregate = original_aggregate
            block_module.multicast_symbols = original_multicast
            PhaseStream.add, PhaseStream.finish = original_add, original_finish
        self.round += 1
        return seconds, record

    def step(self) -> float:
        """Run and time one round; returns its wall seconds."""
        seconds, record = self._run()
        phy_s = sum(self.watch.seconds.values())
        self.samples.append(seconds)
        self.phy.append(phy_s)
        self.phy_share.append(phy_s / seconds)
        for key, value in self.watch.seconds.items():
            self.parts[key].append(value)
        scalars = record.scalars
        if scalars["nonfinite_update_entries"] > 0 or not math.isfinite(scalars["train_loss"]):
            self.nonfinite_rounds += 1
        return seconds

    def result(self, eval_repeats: int = 1) -> dict:
        """The timed rounds summed up, after timing ``eval_repeats`` evaluations.

        Returns a dict: ``seconds`` (median round), ``samples`` (every timed round),
        ``phy_seconds`` (median PHY time of a round, both phases), ``phy_share``
        (median of per-round PHY / round), ``phy_parts`` (median seconds per PHY call
        kind), ``eval_seconds`` (median of one evaluation of the global model with the
        scenario's predictive samples on its test set), ``num_params`` and
        ``uplink_symbols``, ``model_finite`` (the final global model) and
        ``nonfinite_rounds``: timed rounds whose local updates held NaN or inf entries
        or whose training loss was not finite (their times are of diverged training,
        not of the method; the harness warns).
        """
        eng, scenario = self.engine, self.scenario
        eval_samples = []
        seed = stream_seed(scenario.seed, 0, EVAL)
        for i in range(eval_repeats + 1):
            start = time.perf_counter()
            probs = eng.algorithm.predict_probs(
                self.state, eng.world.evaluator.x_test, scenario.eval.predictive_samples, seed
            )
            evaluate_probs(np.asarray(probs), eng.world.evaluator.y_test, num_bins=scenario.eval.ece_bins)
            if i > 0:  # the first call traces
                eval_samples.append(time.perf_counter() - start)
        return {
            "seconds": statistics.median(self.samples),
            "samples": self.samples,
            "phy_seconds": statistics.median(self.phy),
            "phy_share": statistics.median(self.phy_share),
            "phy_parts": {k: statistics.median(v) for k, v in self.parts.items()},
            "eval_seconds": statistics.median(eval_samples),
            "num_params": int(eng.num_params),
            "uplink_symbols": sum(grid.num_symbols for grid in eng.uplink.grids.values()),
            "model_finite": bool(eng.algorithm.is_finite(self.state)),
            "nonfinite_rounds": self.nonfinite_rounds,
        }


def device_arrays(scenario: Scenario) -> dict[str, np.ndarray]:
    """The scenario's padded local datasets as NumPy (for the reference loop).

    Output: ``x`` [K, B, ...], ``y`` [K, B], ``counts`` [K], ``weights`` [K],
    ``num_classes``.
    """
    world = engine_module.build_world(scenario)
    data = world.device_data
    mask = np.asarray(data.mask)
    return {
        "x": np.asarray(data.x),
        "y": np.asarray(data.y),
        "counts": mask.sum(axis=1).astype(np.int64),
        "weights": np.asarray(data.weights, np.float64),
        "num_classes": int(world.dataset.num_classes),
    }
