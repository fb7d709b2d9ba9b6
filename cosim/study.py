"""Studies: many runs of one base scenario (an axis product x seeds), run as Ray tasks.

A study file (TOML; every key in ``docs/studies.md``)::

    scenario = "scenarios/paper_mnist.toml"   # relative to the study file, or a shipped name
    seeds = [1, 2, 3]
    [set]                                     # --set overrides for every run
    rounds = 100
    "eval.every" = 5
    [axes]                                    # swept: the product of the lists
    "algorithm.name" = ["bayes_aircomp", "fedavg"]
    "algorithm.init_std" = [0.048587, 0.002476]
    [only]                                    # init_std swept for the proposed method only
    "algorithm.init_std" = {"algorithm.name" = ["bayes_aircomp"]}
    [resources]
    cpus_per_run = 1

:func:`load_study` (:mod:`cosim.study_file`, re-exported here) validates the file and
every point before anything runs; any problem is a :class:`StudyError` naming the key
and the value.

:func:`run_study` runs every point that is not complete as a plain Ray task (not Ray
Tune: a run is already a resumable trace and nothing is searched or stopped early).
Each task calls :func:`cosim.run.run_scenario` with ``resume=True``, so a study killed
at any moment and started again runs only what is missing. This module imports
neither TensorFlow nor Ray at import time (the tasks import TensorFlow in the workers;
the driver never does).
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from cosim.atomic_write import write_bytes_atomic, write_text_atomic
from cosim.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_TERMINATED
from cosim.scenario import Scenario
from cosim.study_cost import study_cost_lines
from cosim.study_file import (  # the study file, re-exported: where callers found it
    RUNS_DIR,
    STUDY_COPY,
    RunPoint,
    Study,
    StudyError,
    load_study,
    run_name,
    unswept,
)

__all__ = [
    "RUNS_DIR",
    "STATUS_FILE",
    "STUDY_COPY",
    "RunPoint",
    "Study",
    "StudyError",
    "load_study",
    "run_name",
    "run_study",
    "unswept",
]

STATUS_FILE = "status.json"
"""Per-run state and error in the output directory, rewritten after every change."""
SUMMARY_EVERY_S = 30.0
"""Seconds between two periodic summary lines while runs are going on."""
WAIT_SLICE_S = 0.5
"""The longest the driver waits inside Ray at once: Python runs a SIGTERM handler only
between its own bytecodes, so a longer wait would hold a stop request that long."""


def wait_timeout(until_summary_s: float) -> float:
    """The seconds of the driver's next wait inside Ray: until the next summary line is
    due, at least 0.1 s, and never more than :data:`WAIT_SLICE_S`."""
    return min(WAIT_SLICE_S, max(0.1, until_summary_s))


class StudyStopped(Exception):
    """SIGTERM while a study runs: the runs in flight are stopped, the status says so."""



# --------------------------------------------------------------------------- running


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


def _run_task(scenario: Scenario, cpus: float) -> dict[str, Any]:
    """One run inside a Ray worker: :func:`_run_and_release`.

    Never raises: returns ``{"state": "done" | "failed", "error", "completed_rounds",
    "wall_s", "node"}`` (``node``: the Ray node id it ran on). A diverged run is failed. TensorFlow and Numba are held to
    ``ceil(cpus)`` threads (TensorFlow's once per worker process, before its first use).
    """
    started = time.perf_counter()
    node = None
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
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
              "wall_s": summary.wall_s, "node": node}
    if summary.diverged:
        result.update(state="failed", error=f"diverged: stopped after round "
                      f"{summary.completed_rounds - 1} (the trace holds it)")
    elif summary.completed_rounds < scenario.rounds:
        result.update(state="failed", error=f"stopped after {summary.completed_rounds} of "
                      f"{scenario.rounds} rounds")
    return result


def _trace_state(path: Path) -> tuple[int | None, str | None]:
    """``(completed_rounds, divergence)`` of the trace at ``path``: ``(None, None)`` if
    there is none or it does not read (the task then starts, resumes or reports it);
    ``divergence`` as :func:`_first_divergence`."""
    from cosim.trace import TraceError, read_trace

    if not path.is_file():
        return None, None
    try:
        trace = read_trace(path)
    except TraceError:
        return None, None
    return trace.completed_rounds, _first_divergence(trace)


def _first_divergence(trace: Any) -> str | None:
    """The first committed round of ``trace`` (:class:`cosim.trace.TraceData`) that
    diverged (:class:`cosim.divergence.DivergenceWatch` replayed over it), named, or None."""
    from cosim.divergence import DivergenceWatch

    watch = DivergenceWatch()
    for t in range(trace.completed_rounds):
        reasons = watch.check(t, {k: float(v[t]) for k, v in trace.rounds.items() if np.ndim(v) == 1})
        if reasons:
            return f"diverged: round {t}: {'; '.join(reasons)}"
    return None


def compact_study(out_dir: str | Path, *, stream: TextIO | None = None) -> int:
    """Drop the model checkpoint (:func:`cosim.trace.drop_checkpoint`) of every finished
    trace under ``out_dir/runs/``: complete (``completed_rounds`` equal to the ``rounds``
    of the scenario it was run with, the study's at its last ``cosim study run``) or
    diverged. The exit status: 0, or 1 when a trace could not be compacted (it does not
    read, or a run is writing it; run the command again later).

    What a report reads stays; a compacted run can no longer be resumed or extended.
    Unfinished traces (to be resumed) are kept as they are. Prints a line per compacted
    or failed trace and one with the counts and the bytes freed.
    """
    from cosim.trace import TraceError

    stream = stream or sys.stdout
    runs = Path(out_dir) / RUNS_DIR
    if not runs.is_dir():
        raise StudyError([f"{runs}: no such directory (give the --out of `cosim study run`)"],
                         str(out_dir))
    freed, compacted, kept, failed = 0, 0, 0, 0
    for path in sorted(runs.glob("[!.]*.h5")):
        try:
            saved = _compact_if_finished(path)
        except TraceError as error:  # the others go on
            print(f"{path.name}: not compacted: {error}", file=stream, flush=True)
            failed += 1
            continue
        if saved is None:
            kept += 1
            continue
        freed += saved
        compacted += 1
        print(f"{path.name}: {saved / 1e6:,.1f} MB freed", file=stream, flush=True)
    print(f"{runs}: compacted {compacted} ({freed / 1e6:,.1f} MB freed), kept {kept} as they "
          f"were (unfinished, or compacted before), could not compact {failed}", file=stream,
          flush=True)
    return EXIT_OK if failed == 0 else EXIT_FAILED


def _compact_if_finished(path: Path) -> int | None:
    """The bytes :func:`cosim.trace.drop_checkpoint` freed of the trace at ``path`` if it
    is finished (complete or diverged); None if it is not, or was compacted before."""
    from cosim.trace import CHECKPOINT_DROPPED, TraceError, drop_checkpoint, read_trace

    trace = read_trace(path)
    rounds = trace.scenario.get("rounds")
    if not isinstance(rounds, int):
        raise TraceError(f"{path}: its stored scenario has no `rounds` (got {rounds!r})")
    finished = trace.completed_rounds >= rounds or _first_divergence(trace) is not None
    if trace.attrs.get(CHECKPOINT_DROPPED) or not finished:
        return None
    return drop_checkpoint(path)


def _committed_rounds(path: Path) -> tuple[int, float]:
    """``(completed_rounds, mtime)`` of the trace at ``path`` (``(0, 0.0)`` when there is
    none or it does not open now): the root attribute only, safe while its run writes."""
    import h5py

    try:
        modified = path.stat().st_mtime
        with h5py.File(path, "r", locking=False) as file:
            return int(file.attrs.get("completed_rounds", 0)), modified
    except (OSError, ValueError, TypeError):
        return 0, 0.0


class _Status:
    """``DIR/status.json``: the study and per run ``state`` (pending; queued: its task
    submitted; running: its trace written since; done; failed), ``error``, ``action`` of the last invocation (skipped: complete already, or
    its trace holds a diverged round; started; resumed), ``trace``, ``completed_rounds``,
    ``wall_s``, ``node`` (Ray node id); rewritten atomically."""

    def __init__(self, path: Path, study: Study, points: Sequence[RunPoint]):
        self.path = path
        self.data: dict[str, Any] = {
            "study": str(study.source.resolve()),
            "scenario": study.scenario,
            "axes": list(study.axes),
            "tasks_submitted": 0,
            "runs": {p.name: {"seed": p.seed, "axes": p.axis_values, "state": "pending",
                              "error": None, "action": None,
                              "trace": str(p.scenario.trace_path) if p.scenario else None}
                     for p in points},
        }

    def update(self, name: str, **fields: Any) -> None:
        self.data["runs"][name].update(fields)

    def counts(self) -> dict[str, int]:
        states = [r["state"] for r in self.data["runs"].values()]
        return {s: states.count(s)
                for s in ("done", "failed", "running", "queued", "pending", "stopped")}

    def observe(self, points: Sequence[RunPoint], since: float) -> tuple[int, int]:
        """Read the committed rounds of every run's trace: a queued run whose trace was
        written after ``since`` (a ``time.time()``) is running; the study's committed
        rounds and the rounds it asks for."""
        committed = asked = 0
        for point in points:
            run = self.data["runs"][point.name]
            asked += point.scenario.rounds
            rounds, modified = _committed_rounds(point.scenario.trace_path)
            committed += rounds
            if run["state"] in ("queued", "running"):
                run["completed_rounds"] = rounds
                if run["state"] == "queued" and modified > since:
                    run["state"] = "running"
        return committed, asked

    def write(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


def run_study(
    study_file: str | Path,
    out_dir: str | Path,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    summary_every_s: float = SUMMARY_EVERY_S,
    stream: TextIO | None = None,
) -> int:
    """Run every point of a study not complete yet; the exit status (0 all runs done,
    1 some failed).

    Validates the study and every point first (:class:`StudyError`, nothing written).
    Writes ``out_dir/study.toml`` (the study file's bytes), ``out_dir/status.json``
    (:class:`_Status`) and the traces under ``out_dir/runs/``. A run whose trace has
    ``completed_rounds == rounds`` is skipped without a task (done), so is one whose
    committed rounds hold a diverged round (failed: resuming would diverge again);
    every other one is one
    Ray task (``num_cpus = cpus_per_run``; workers are reused, so TensorFlow starts
    once per worker) that resumes its trace. With ``address`` the command connects to
    that Ray cluster (``"auto"``: the one started on this machine by ``ray start``),
    else it starts a local Ray of ``num_cpus`` CPUs (default: this machine's) and
    shuts it down at the end; it disconnects from a cluster without stopping it. Prints
    a line per finished run (done/failed/total) and a summary line every
    ``summary_every_s`` seconds.
    """
    stream = stream or sys.stdout
    study = load_study(study_file, validate=False)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StudyError([f"--out: {out} exists and is not a directory"], str(study_file))
    points = study.points(out)
    total = len(points)

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    for output in (out / STUDY_COPY, out / STATUS_FILE, out / RUNS_DIR):
        if output.is_symlink():
            raise StudyError([f"{output}: a symbolic link where the study writes its own "
                              "file; refusing to write through it"], str(study_file))
    copy = out / STUDY_COPY
    try:  # a read-only or full --out is one line, before anything runs
        (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
        if copy.is_file() and copy.read_text(encoding="utf-8") != study.text:
            say(f"note: {copy} differs from {study_file}; replacing it (runs whose scenario "
                "changed other than by `rounds` will fail to resume)")
        write_bytes_atomic(copy, study.source.read_bytes())
    except OSError as error:
        raise StudyError([f"--out: cannot write {out}: {error.strerror or error}"],
                         str(study_file)) from None
    status = _Status(out / STATUS_FILE, study, points)
    todo = []
    for point in points:
        done, diverged = _trace_state(point.scenario.trace_path)
        if diverged:  # resuming it would only diverge again
            status.update(point.name, state="failed", action="skipped", completed_rounds=done,
                          error=f"{diverged} (the trace holds it; change the scenario and use "
                          "a new --out)")
        elif done is not None and done >= point.scenario.rounds:
            status.update(point.name, state="done", action="skipped", completed_rounds=done)
        else:
            status.update(point.name, action="started" if done is None else "resumed",
                          completed_rounds=done)
            todo.append(point)
    status.write()
    c = status.counts()
    say(f"study {study.source}: {total} runs, {c['done']} complete already, "
        f"{c['failed']} diverged already, {len(todo)} to run "
        f"({study.cpus_per_run:g} CPU each) -> {out}")
    if todo:
        for line in study_cost_lines([p.scenario for p in todo]):
            say(line)
    if not todo:
        return EXIT_OK if c["failed"] == 0 else EXIT_FAILED

    import logging
    import signal
    import threading

    import ray

    def stop(signum, frame):
        raise StudyStopped(signum)

    late_stop: list[int] = []

    def stopped(when: str) -> int:
        """Record and say that SIGTERM stopped the study; its exit status."""
        status.data["stopped"] = "SIGTERM"
        status.write()
        c = status.counts()
        say(f"study stopped (SIGTERM){when}: {c['done']} done, {c['failed']} failed of {total}; "
            f"the same command resumes it; status: {status.path}")
        return EXIT_TERMINATED

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main else None
    embedded = address is None
    try:
        if embedded:
            # address="local": a new Ray of our own even when another one (another study's)
            # runs on this machine; ray.init() alone would connect to that one
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     object_store_memory=128 * 2**20)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        if in_main:  # after ray.init, which installs a handler of its own
            signal.signal(signal.SIGTERM, stop)
        largest = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]),
                      default=0.0)
        if largest < study.cpus_per_run:
            raise StudyError([f"resources.cpus_per_run: no Ray node has {study.cpus_per_run:g} "
                              f"CPUs (the largest has {largest:g})"], str(study_file))
        say(f"ray: {'local, ' if embedded else f'cluster {address}, '}"
            f"{ray.cluster_resources().get('CPU', 0):g} CPUs, {len(ray.nodes())} node(s)")
        task = ray.remote(num_cpus=study.cpus_per_run, max_retries=0)(_run_task)
        pending = {}
        submitted_at = time.time()
        for point in todo:
            pending[task.remote(point.scenario, study.cpus_per_run)] = point
            status.update(point.name, state="queued")
        status.data["tasks_submitted"] = len(pending)
        status.write()
        started = last_summary = time.monotonic()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_timeout(
                summary_every_s - (time.monotonic() - last_summary)))
            for ref in ready:
                point = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as error:  # the worker died (OOM kill, crash)
                    result = {"state": "failed", "error": f"{type(error).__name__}: {error}"}
                status.update(point.name, **result)
                status.write()
                c = status.counts()
                line = (f"[{c['done']} done, {c['failed']} failed / {total}] {point.name}: "
                        f"{result['state']}")
                if result.get("wall_s") is not None:
                    line += f" ({result['wall_s']:.1f} s)"
                if result["error"]:
                    line += f": {result['error']}"
                say(line)
            if time.monotonic() - last_summary >= summary_every_s and pending:
                committed, asked = status.observe(points, submitted_at)
                status.write()
                c = status.counts()
                say(f"[summary] {c['done']} done, {c['failed']} failed, {c['running']} running, "
                    f"{c['queued']} queued of {total}; rounds {committed}/{asked}; "
                    f"{time.monotonic() - started:.0f} s")
                last_summary = time.monotonic()
    except (StudyStopped, SystemError) as error:
        # a SIGTERM inside ray.wait reaches us as the SystemError Ray's Cython raises
        # around our StudyStopped (its cause)
        if not isinstance(error, StudyStopped) and not isinstance(
                error.__cause__ or error.__context__, StudyStopped):
            raise
        for run in status.data["runs"].values():
            if run["state"] in ("queued", "running"):
                run["state"] = "stopped"
        return stopped("")
    finally:
        if in_main:  # a SIGTERM while Ray shuts down is honoured once it has (below)
            signal.signal(signal.SIGTERM, lambda signum, frame: late_stop.append(signum))
        ray.shutdown()  # stops the embedded Ray; only disconnects from a cluster
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if late_stop:  # every run had ended; the study stops all the same, as asked
        return stopped(" as its last runs ended")
    c = status.counts()
    say(f"study done: {c['done']} done, {c['failed']} failed of {total} "
        f"({len(todo)} tasks run); status: {status.path}")
    return EXIT_OK if c["failed"] == 0 else EXIT_FAILED
