"""Time the project's own round: :meth:`cosim.engine.Engine.run_round`, PHY and evaluation apart.

One round is exactly what the engine runs: the block-fading channel and CSI draw,
the downlink count, and for both phases of the proposed method the local training
of all K devices, :func:`phy.aircomp.aggregate` and the server update (evaluation is
switched off inside the timed rounds and timed on its own). The PHY's share is
measured by wrapping the engine's PHY calls (channel, CSI, downlink count and
``aircomp.aggregate``) with stopwatches; TensorFlow on the CPU runs eagerly and
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


def time_rounds(scenario: Scenario, repeats: int, warmup: int, eval_repeats: int = 1) -> dict:
    """Median wall seconds of ``repeats`` rounds after ``warmup`` rounds.

    Returns a dict: ``seconds`` (median round), ``samples`` (every timed round),
    ``phy_seconds`` (median PHY time of a round, both phases), ``phy_share``
    (median of per-round PHY / round), ``phy_parts`` (median seconds per PHY call
    kind), ``eval_seconds`` (median of one evaluation of the global model with the
    scenario's predictive samples on its test set), ``num_params`` and
    ``uplink_symbols``, ``model_finite`` (the final global model) and
    ``nonfinite_rounds``: timed rounds whose local updates held NaN or inf entries or
    whose training loss was not finite (their times are of diverged training, not of
    the method; the harness warns).
    """
    eng = build_engine(scenario)
    watch = _Stopwatch()
    aircomp_module = engine_module.aircomp
    original_aggregate = aircomp_module.aggregate
    original_multicast = engine_module.multicast_symbols
    eng.channel = watch.wrap("channel", eng.channel)
    eng.csi = watch.wrap("csi", eng.csi)
    aircomp_module.aggregate = watch.wrap("aircomp", original_aggregate)
    engine_module.multicast_symbols = watch.wrap("downlink", original_multicast)
    try:
        state = eng.initial_state()
        samples, phy, phy_share, parts = [], [], [], defaultdict(list)
        nonfinite_rounds = 0
        for t in range(warmup + repeats):
            watch.reset()
            start = time.perf_counter()
            state, record = eng.run_round(t, state)
            seconds = time.perf_counter() - start
            if t < warmup:
                continue
            scalars = record.scalars
            if scalars["nonfinite_update_entries"] > 0 or not math.isfinite(scalars["train_loss"]):
                nonfinite_rounds += 1
            phy_s = sum(watch.seconds.values())
            samples.append(seconds)
            phy.append(phy_s)
            phy_share.append(phy_s / seconds)
            for key, value in watch.seconds.items():
                parts[key].append(value)
        finite = bool(eng.algorithm.is_finite(state))
    finally:
        aircomp_module.aggregate = original_aggregate
        engine_module.multicast_symbols = original_multicast

    eval_samples = []
    seed = engine_module.rngs.stream_seed(scenario.seed, 0, "eval")
    for i in range(eval_repeats + 1):
        start = time.perf_counter()
        probs = eng.algorithm.predict_probs(
            state, eng.x_test, scenario.eval.predictive_samples, seed
        )
        evaluate_probs(np.asarray(probs), eng.y_test, num_bins=scenario.eval.ece_bins)
        if i > 0:  # the first call traces
            eval_samples.append(time.perf_counter() - start)
    return {
        "seconds": statistics.median(samples),
        "samples": samples,
        "phy_seconds": statistics.median(phy),
        "phy_share": statistics.median(phy_share),
        "phy_parts": {k: statistics.median(v) for k, v in parts.items()},
        "eval_seconds": statistics.median(eval_samples),
        "num_params": int(eng.num_params),
        "uplink_symbols": int(eng.uplink_symbols_per_round()),
        "model_finite": finite,
        "nonfinite_rounds": nonfinite_rounds,
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
