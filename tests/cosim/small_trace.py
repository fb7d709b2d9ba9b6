"""A small trace as the engine writes it, written with cosim.trace.TraceWriter alone
(no TensorFlow): shared by the command-line tests and benchmarks/cli_startup.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosim.trace import TraceWriter


def write_small_trace(path: Path, rounds: int = 3, *, uplink: float = 10.0,
                      downlink: float = 100.0, seconds: float | None = None,
                      energy_j: float | None = None, accuracy: float = 0.3) -> Path:
    """``rounds`` committed rounds, every one evaluated (test accuracy ``accuracy`` + 0.1 t), with the
    channel-use columns and two reliability series; with ``seconds`` / ``energy_j``
    also the uplink's ``uplink_seconds`` / ``uplink_energy_j`` per round and their
    running totals; returns ``path``."""
    scenario = f'name = "t"\nseed = 3\nrounds = {rounds}\n'
    with TraceWriter.create(path, scenario, seed=3, name="t") as writer:
        for t in range(rounds):
            writer.append_round({"uplink_symbols": uplink, "downlink_symbols": downlink,
                                 "cumulative_channel_uses": (uplink + downlink) * (t + 1),
                                 "cumulative_uplink_symbols": uplink * (t + 1),
                                 "cumulative_downlink_symbols": downlink * (t + 1),
                                 "test_accuracy": accuracy + 0.1 * t, "ece": 0.1, "test_nll": 1.0,
                                 **({} if seconds is None else {
                                     "uplink_seconds": seconds, "cumulative_uplink_seconds": seconds * (t + 1)}),
                                 **({} if energy_j is None else {
                                     "uplink_energy_j": energy_j,
                                     "cumulative_uplink_energy_j": energy_j * (t + 1)})})
            writer.append_series("reliability", "bin_accuracy", np.linspace(0, 1, 10))
            writer.append_series("reliability", "bin_count", np.full(10, 3.0))
            writer.commit()
    return path
