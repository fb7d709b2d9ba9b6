"""Where a change goes (docs/architecture.md): a new trace column is one file's change."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from phy.uplink import RoundLink


def test_a_toy_round_column_is_one_line_in_the_block_that_computes_it(tmp_path, monkeypatch):
    """A column the uplink computes (here the round's strongest device gain) is added
    where it is computed, :meth:`phy.uplink.RoundLink.columns`, and reaches the trace with
    no other change."""
    original = RoundLink.columns

    def columns(self):
        out = original(self)
        out.scalars["toy_max_channel_gain"] = float(np.max(out.per_device["mean_channel_gain"]))
        return out

    monkeypatch.setattr(RoundLink, "columns", columns)
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4))
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        toy = f["rounds/toy_max_channel_gain"][()]
        gains = f["rounds/per_device/mean_channel_gain"][()]
    np.testing.assert_array_equal(toy, gains.max(axis=1))


def test_a_toy_algorithm_metric_is_one_line_in_the_algorithm(tmp_path):
    """An algorithm names its own columns (``metrics``): one more entry there is one more
    trace column; a name another block writes is refused."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, every=1, algorithm="fedavg", hidden=4))
    engine = Engine(scenario)
    algorithm = engine.algorithm
    original = algorithm.metrics
    algorithm.metrics = lambda previous, state, phases: {
        **original(previous, state, phases), "toy_update_norm": float(np.linalg.norm(state.w - previous.w))}
    _, record = engine.run_round(0, engine.initial_state())
    assert record.scalars["toy_update_norm"] > 0.0
    assert record.scalars["train_loss"] == record.scalars["train_loss_delta"]
    algorithm.metrics = lambda previous, state, phases: {"ece": 0.0}
    with pytest.raises(ValueError, match="'ece' is written twice"):
        engine.run_round(0, engine.initial_state())
