"""FedAvg with ``runtime.backend = "numba"`` end to end on the tiny scenario: the run goes
through the Numba steps (learning/local/fused_sgd.py), and its trace follows the TensorFlow
backend's run of the same scenario round for round (the same channel draws, the local
updates equal up to float32 summation order)."""

from __future__ import annotations

import h5py
import numpy as np
from tiny_scenario import write_tiny

from cosim.run import run_scenario
from cosim.scenario import load_scenario


def _losses(tmp_path, backend: str, calls: list) -> np.ndarray:
    path = write_tiny(tmp_path, rounds=2, every=2, algorithm="fedavg", learning_rate=0.1,
                      trace_dir=tmp_path / backend)
    scenario = load_scenario(path, [f'runtime.backend="{backend}"'])
    assert scenario.resolved_runtime().backend == backend
    summary = run_scenario(scenario, progress=False)
    assert calls, "the backend's solver was not called"
    with h5py.File(summary.trace_path, "r") as f:
        return f["rounds"]["train_loss"][()]


def test_fedavg_runs_on_the_numba_steps_and_follows_tensorflow(tmp_path, solver_calls):
    calls = solver_calls
    numba = _losses(tmp_path, "numba", calls["numba"])
    tensorflow = _losses(tmp_path, "tensorflow", calls["tensorflow"])
    assert set(calls["numba"]) == {"NumbaSGD"} and set(calls["tensorflow"]) == {"LocalSGD"}
    assert numba.shape == (2,) and np.all(np.isfinite(numba))
    np.testing.assert_allclose(numba, tensorflow, rtol=1e-5)
