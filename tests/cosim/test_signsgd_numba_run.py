"""signSGD with ``runtime.backend = "numba"`` end to end on the tiny scenario over one-bit
BPSK: the run goes through FedAvg's Numba steps (learning/local/fused_sgd.py), its trace
follows the TensorFlow backend's run of the same scenario (the same channel draws, the
same signs: test_fused_sgd.py), and its round with the devices in chunks
(``runtime.devices_in_memory``, cosim/streamed_round.py) writes the one-call round's trace."""

from __future__ import annotations

import h5py
import numpy as np
from tiny_scenario import write_tiny

from cosim.run import run_scenario
from cosim.scenario import load_scenario

SIGNSGD = ['uplink.scheme="one_bit"', "algorithm.signsgd.server_learning_rate=0.01"]
COMPARED = ("train_loss", "test_accuracy", "vote_error_rate_delta", "uplink_energy_j")


def _trace(tmp_path, tag: str, overrides: list[str]) -> dict[str, np.ndarray]:
    path = write_tiny(tmp_path, rounds=3, every=3, algorithm="signsgd", learning_rate=0.1,
                      trace_dir=tmp_path / tag, file_name=f"{tag}.toml")
    scenario = load_scenario(path, [*SIGNSGD, *overrides])
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        return {name: rounds[name][()] for name in rounds if isinstance(rounds[name], h5py.Dataset)}


def test_signsgd_runs_on_the_numba_steps_streamed_or_not_and_follows_tensorflow(tmp_path, solver_calls):
    """Three rounds of K = 8 on the Numba steps: every round in one call, in chunks of 3
    devices (3, 3, 2), and on TensorFlow's steps; the compared columns within float32
    rounding of each other (the trace bits differ: float32 summation order)."""
    numba = _trace(tmp_path, "numba", ['runtime.backend="numba"'])
    assert set(solver_calls["numba"]) == {"NumbaSGD"} and not solver_calls["tensorflow"]
    streamed = _trace(tmp_path, "streamed", ['runtime.backend="numba"', "runtime.devices_in_memory=3"])
    assert len(solver_calls["numba"]) == 3 + 3 * 3  # one call a round, then one per chunk
    tensorflow = _trace(tmp_path, "tensorflow", ['runtime.backend="tensorflow"'])
    assert set(solver_calls["tensorflow"]) == {"LocalSGD"}
    assert numba["train_loss"].shape == (3,) and np.all(np.isfinite(numba["train_loss"]))
    assert np.any(numba["vote_error_rate_delta"] > 0)  # the channel's errors are in the trace
    for name in COMPARED:
        np.testing.assert_allclose(streamed[name], numba[name], rtol=2e-4, atol=1e-9, err_msg=f"streamed {name}")
        np.testing.assert_allclose(tensorflow[name], numba[name], rtol=2e-4, atol=1e-9, err_msg=f"TF {name}")
    np.testing.assert_array_equal(streamed["uplink_symbols"], numba["uplink_symbols"])


def test_signsgd_with_error_feedback_runs_on_the_numba_steps(tmp_path, solver_calls):
    """Error feedback (per-device memories, a round in one call) on the Numba steps: the
    same trace columns as TensorFlow's steps within float32 rounding."""
    feedback = ["algorithm.signsgd.error_feedback=true"]
    numba = _trace(tmp_path, "numba", ['runtime.backend="numba"', *feedback])
    tensorflow = _trace(tmp_path, "tensorflow", ['runtime.backend="tensorflow"', *feedback])
    assert set(solver_calls["numba"]) == {"NumbaSGD"} and set(solver_calls["tensorflow"]) == {"LocalSGD"}
    for name in COMPARED:
        np.testing.assert_allclose(tensorflow[name], numba[name], rtol=2e-4, atol=1e-9, err_msg=name)
