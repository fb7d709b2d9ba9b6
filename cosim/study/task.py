"""One run of a study, as every executor's worker runs it (:mod:`cosim.study.executor`).

Imports neither TensorFlow nor Ray at import time: :func:`_run_task` imports TensorFlow
in the worker, and Ray's runtime context only inside a Ray worker.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from typing import Any

from cosim.scenario import Scenario

__all__ = ["_run_and_release", "_run_task"]


def _run_and_release(scenario: Scenario):
    """``run_scenario(scenario, resume=True, progress=False)``, then a full garbage
    collection, whether the run returned or raised.

    A run's algorithm and trainer objects hold tf.functions of their own methods
    (reference cycles), and with them the run's host buffers (``BufferPool``,
    ``Workspace``). Freed only by the cyclic collector's full passes, which a worker that
    runs one task after another seldom makes, they piled up: +0.55 GB per paper-size run
    of the proposed method, a worker killed by Ray's memory monitor at 14.87 GB in its
    24th run (docs/studies.md).
    """
    from cosim.run import run_scenario

    try:
        return run_scenario(scenario, resume=True, progress=False)
    finally:
        gc.collect()


def _node_id() -> str:
    """Where this worker runs: the Ray node id inside a Ray worker, else
    ``"local:HOST:PID"`` (a local executor's worker process)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    import socket

    return f"local:{socket.gethostname()}:{os.getpid()}"


def _health_flags(trace_path) -> list[str] | None:
    """The names of the trace's health flags (:mod:`cosim.health`); None when they cannot
    be computed: they are advice, and the run's own result stands (:func:`_run_task`
    never raises)."""
    try:
        from cosim.health import health

        return [flag["name"] for flag in health(trace_path)["flags"]]
    except Exception:  # advice only: the run is reported either way
        return None


def _run_task(scenario: Scenario, cpus: float) -> dict[str, Any]:
    """One run inside a worker (a local executor's process or a Ray worker):
    :func:`_run_and_release`.

    Never raises: returns ``{"state": "done" | "failed", "error", "completed_rounds",
    "wall_s", "node"}`` (``node``: :func:`_node_id`), and ``health_flags`` (the names of
    :func:`cosim.health.health`'s flags on the trace) for a run that wrote one. A diverged run is failed. TensorFlow and Numba are held to
    ``ceil(cpus)`` threads (TensorFlow's once per worker process, before its first use).
    """
    started = time.perf_counter()
    node = None
    try:
        node = _node_id()
        from native.tensorflow_import import import_for_command

        threads = max(1, math.ceil(cpus))
        import_for_command()
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # a reused worker: TensorFlow is initialised already
            pass
        try:
            import numba

            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        except (ImportError, ValueError):
            pass
        summary = _run_and_release(scenario)
    except Exception as error:  # reported in status.json; the other runs go on
        return {"state": "failed", "error": f"{type(error).__name__}: {error}",
                "completed_rounds": None, "wall_s": time.perf_counter() - started, "node": node}
    result = {"state": "done", "error": None, "completed_rounds": summary.completed_rounds,
              "wall_s": summary.wall_s, "node": node,
              "health_flags": _health_flags(summary.trace_path)}
    if summary.diverged:
        result.update(state="failed", error=f"diverged: stopped after round "
                      f"{summary.completed_rounds - 1} (the trace holds it)")
    elif summary.completed_rounds < scenario.rounds:
        result.update(state="failed", error=f"stopped after {summary.completed_rounds} of "
                      f"{scenario.rounds} rounds")
    return result
