"""Studies: many runs of one base scenario (an axis product x seeds), run as tasks in
worker processes on this machine or on a Ray cluster.

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

:func:`load_study` (:mod:`cosim.study.file`, re-exported here) validates the file and
every point before anything runs; any problem is a :class:`StudyError` naming the key
and the value.

:func:`run_study` runs every point that is not complete as one task of an executor
(:mod:`cosim.study.executor`: worker processes on this machine by default, plain Ray
tasks on a cluster; not Ray Tune: a run is already a resumable trace and nothing is
searched or stopped early). Each task calls :func:`cosim.run.run_scenario` with ``resume=True``, so a study killed
at any moment and started again runs only what is missing. This module imports
neither TensorFlow nor Ray at import time (the tasks import TensorFlow in the workers;
the driver never does, and imports Ray only for the Ray executor).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from cosim.atomic_write import write_bytes_atomic, write_text_atomic
from cosim.exit_codes import (
    EXIT_FAILED,
    EXIT_HANGUP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from cosim.study.cost import study_cost_lines
from cosim.study.executor import StudyOutputError, output_failure
from cosim.study.file import (  # the study file, re-exported: where callers found it
    RUNS_DIR,
    STUDY_COPY,
    RunPoint,
    Study,
    StudyError,
    load_study,
    run_name,
    unswept,
)
from cosim.study.options import OPTIONS_FILE, StudyOptions, record_options, resolve_recorded
from cosim.study.task import _run_and_release, _run_task  # noqa: F401 (where tests find them)

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
LOGS_DIR = "logs"
"""The local executor's worker output (``worker-N.log``) in the output directory."""
SUMMARY_EVERY_S = 30.0
"""Seconds between two periodic summary lines while runs are going on."""
WAIT_SLICE_S = 0.5
"""The longest the driver waits inside Ray at once: Python runs a SIGTERM handler only
between its own bytecodes, so a longer wait would hold a stop request that long."""


def wait_timeout(until_summary_s: float) -> float:
    """The seconds of the driver's next wait inside Ray: until the next summary line is
    due, at least 0.1 s, and never more than :data:`WAIT_SLICE_S`."""
    return min(WAIT_SLICE_S, max(0.1, until_summary_s))


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""The signals that stop a study: its runs in flight are stopped, status.json says so."""
STOP_EXIT = {signal.SIGTERM: EXIT_TERMINATED, signal.SIGHUP: EXIT_HANGUP,
             signal.SIGINT: EXIT_INTERRUPTED}
"""The exit status of ``cosim study run`` stopped by each signal (128 + its number)."""


class StudyStopped(Exception):
    """SIGTERM, SIGHUP or SIGINT while a study runs (its number the argument): the runs in
    flight are stopped, the status says so."""



# --------------------------------------------------------------------------- running


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
    diverged (:func:`cosim.divergence.replay_divergence`), named, or None."""
    from cosim.divergence import replay_divergence

    found = replay_divergence(trace.rounds, trace.completed_rounds)
    return None if found is None else f"diverged: round {found.round}: {'; '.join(found.reasons)}"


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
    from cosim.trace.compact import drop_checkpoint
    from cosim.trace.file_format import CHECKPOINT_DROPPED
    from cosim.trace.writer import TraceError, read_trace

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
    """``DIR/status.json``: the study (its base ``scenario``, None with a ``scenario``
    axis) and per run its base ``scenario`` (resolved), ``state`` (pending; queued: its task
    submitted; running: its trace written since; done; failed), ``error``, ``action`` of the last invocation (skipped: complete already, or
    its trace holds a diverged round; started; resumed), ``trace``, ``completed_rounds``,
    ``wall_s``, ``node`` (Ray node id), ``health_flags``; rewritten atomically."""

    def __init__(self, path: Path, study: Study, points: Sequence[RunPoint]):
        self.path = path
        self.data: dict[str, Any] = {
            "study": str(study.source.resolve()),
            "scenario": study.scenario or None,  # None: a scenario axis (each run's own)
            "axes": list(study.axes),
            "tasks_submitted": 0,
            "runs": {p.name: {"seed": p.seed, "axes": p.axis_values, "state": "pending",
                              "error": None, "action": None,
                              "scenario": study.base_scenario(p.axis_values),
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
        """Rewrite ``status.json`` (atomically); :class:`StudyOutputError` naming it when it
        cannot be written."""
        try:
            write_text_atomic(self.path, json.dumps(self.data, indent=2, default=str) + "\n")
        except OSError as error:
            raise output_failure(self.path, error) from None

    def stopped(self, signum: int, when: str, say) -> int:
        """Record and say that a signal stopped the study (the runs not ended: stopped);
        its exit status (128 + signal)."""
        name = signal.Signals(signum).name
        for run in self.data["runs"].values():
            if run["state"] in ("pending", "queued", "running"):
                run["state"] = "stopped"
        self.data["stopped"] = name
        try:
            self.write()
        except StudyOutputError as error:  # stopped all the same; the status could not say so
            _said(error)
        c = self.counts()
        say(f"study stopped ({name}){when}: {c['done']} done, {c['failed']} failed of "
            f"{len(self.data['runs'])}; the same command resumes it; status: {self.path}")
        return STOP_EXIT[signum]


def run_study(
    study_file: str | Path,
    out_dir: str | Path,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    executor: str | None = None,
    options: StudyOptions | None = None,
    summary_every_s: float = SUMMARY_EVERY_S,
    stream: TextIO | None = None,
) -> int:
    """Run every point of a study not complete yet; the exit status (0 all runs done,
    1 some failed; 129, 130, 143 stopped by SIGHUP, SIGINT, SIGTERM).

    Validates the options (``executor``, ``address``: :mod:`cosim.study.executor`), the
    study and every point first (:class:`StudyError`, nothing written). Writes
    ``out_dir/study.toml`` (the study file's bytes), ``out_dir/status.json``
    (:class:`_Status`) and the traces under ``out_dir/runs/``. A run whose trace has
    ``completed_rounds == rounds`` is skipped (done), so is one whose committed rounds
    hold a diverged round (failed: resuming would diverge again); every other one is one
    task (:func:`_run_task`, ``cpus_per_run`` CPUs) that resumes its trace.

    ``executor``: ``"local"`` (the default without ``address``) runs the tasks in worker
    processes on this machine, ``floor(num_cpus / cpus_per_run)`` at a time, with no
    network socket (their output in ``out_dir/logs/``); ``"ray"`` (the default with
    ``address``) runs them as Ray tasks, on the cluster at ``address`` (``"auto"``: the
    one ``ray start`` runs on this machine; disconnected from at the end, not stopped) or
    on an embedded Ray of ``num_cpus`` CPUs (shut down at the end). ``num_cpus``
    defaults to this machine's cores. ``options`` (:mod:`cosim.study.options`: ``--set``,
    ``--seeds``, ``--rounds``, ``--only``) change the study; they are recorded in
    ``out_dir/options.json``: none given means the recorded ones, other ones are refused
    (:class:`StudyError`). Workers are reused, so TensorFlow starts once per worker.
    SIGTERM, SIGHUP, SIGINT and a file of its own it cannot write
    (:class:`StudyOutputError`: exit 2, one line) stop the runs in flight and every process
    the study started; ``status.json`` then says ``stopped``. Prints a line per finished
    run (done/failed/total) and a summary line every ``summary_every_s`` seconds.
    """
    say = _Say(stream or sys.stdout)
    from cosim.study.executor import make_executor

    study = load_study(study_file, validate=False)
    out = Path(out_dir)
    options, recorded = _options(out, options or StudyOptions())
    study = options.apply(study)
    executor = make_executor(executor, address=address, num_cpus=num_cpus,
                             cpus_per_run=study.cpus_per_run, log_dir=out / LOGS_DIR)
    executor.check()  # a bad --address or cpus_per_run: refused before anything is written
    if out.exists() and not out.is_dir():
        raise StudyError([f"--out: {out} exists and is not a directory"], str(study_file))
    points = study.points(out)

    if recorded:
        say(f"options recorded in {out / OPTIONS_FILE}: {options.flags()}")
    _prepare_out(out, study, study_file, say, options)
    status = _Status(out / STATUS_FILE, study, points)
    todo = _plan(points, status, study, out, say)
    if not todo:  # None: status.json could not be written (said; nothing started)
        return EXIT_USAGE if todo is None else EXIT_OK if status.counts()["failed"] == 0 else EXIT_FAILED

    return _run_todo(executor, todo, points, status, summary_every_s, say)


def _run_todo(executor, todo, points, status: _Status, summary_every_s: float, say) -> int:
    """Start ``executor``, run ``todo`` on it (:func:`_follow`) and close it, the stop
    signals handled (:class:`_StopSignals`); the study's exit status."""
    signals = _StopSignals()
    try:
        signals.raise_stopped()
        line = executor.start()
        signals.raise_stopped()  # again after ray.init, which installs a SIGTERM handler of its own
        say(line)
        _follow(executor, todo, points, status, summary_every_s=summary_every_s, say=say)
    except (StudyStopped, SystemError) as error:
        # a signal inside ray.wait reaches us as the SystemError Ray's Cython raises
        # around our StudyStopped (its cause)
        cause = error if isinstance(error, StudyStopped) else (error.__cause__ or error.__context__)
        if not isinstance(cause, StudyStopped):
            raise
        signals.defer()  # a second signal while the runs are stopped is the same request
        executor.stop()
        return status.stopped(cause.args[0], "", say)
    except StudyOutputError as error:  # its own file: stopped as a run stops on a full disk
        executor.stop()
        return _said(error)
    finally:
        signals.defer()  # a signal while the executor shuts down is honoured once it has (below)
        executor.close()  # stops the embedded Ray or the workers; only disconnects from a cluster
        signals.restore()
    if signals.late:  # every run had ended; the study stops all the same, as asked
        return status.stopped(signals.late[0], " as its last runs ended", say)
    c = status.counts()
    say(f"study done: {c['done']} done, {c['failed']} failed of {len(points)} "
        f"({len(todo)} tasks run); status: {status.path}")
    return EXIT_OK if c["failed"] == 0 else EXIT_FAILED


def _options(out: Path, given: StudyOptions) -> tuple[StudyOptions, bool]:
    """The options of a run into ``out`` and whether they are the recorded ones
    (:func:`cosim.study.options.resolve_recorded`; a new ``out`` takes those given)."""
    return resolve_recorded(out, given) if out.is_dir() else (given, False)


def _prepare_out(out: Path, study, study_file, say, options: StudyOptions) -> None:
    """``out/runs/`` made, the study file's bytes copied to ``out/study.toml`` (a note
    when it replaces a different copy) and ``options`` recorded (``out/options.json``);
    :class:`StudyError` (one line, nothing run) for a symbolic link where the study
    writes, or an ``out`` it cannot write."""
    for output in (out / STUDY_COPY, out / STATUS_FILE, out / RUNS_DIR, out / LOGS_DIR,
                   out / OPTIONS_FILE):
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
        record_options(out, options)
    except OSError as error:
        raise StudyError([f"--out: cannot write {out}: {error.strerror or error}"],
                         str(study_file)) from None


class _Say:
    """The study's lines on ``stream``; a reader that went away (``cosim study run ... |
    head``, a closed terminal's pipe) silences them, and the study goes on."""

    def __init__(self, stream: TextIO):
        self.stream: TextIO | None = stream

    def __call__(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            print(text, file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):  # ValueError: a closed stream
            self.stream = None


def _said(error: StudyOutputError) -> int:
    """Say ``error`` in one line on stderr; the exit status (2)."""
    print(f"cosim study run: {error}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def _plan(points, status: _Status, study, out: Path, say) -> list | None:
    """The points still to run, each marked in ``status`` (written): a run whose trace
    holds a diverged round is failed (skipped: resuming would diverge again), one whose
    trace is complete is done (skipped), every other one is started or resumed; a line
    says how many, with the estimated cost of those to run. None (said on stderr) when
    ``status.json`` cannot be written."""
    todo = []
    for point in points:
        done, diverged = _trace_state(point.scenario.trace_path)
        if diverged:
            status.update(point.name, state="failed", action="skipped", completed_rounds=done,
                          error=f"{diverged} (the trace holds it; change the scenario and use "
                          "a new --out)")
        elif done is not None and done >= point.scenario.rounds:
            status.update(point.name, state="done", action="skipped", completed_rounds=done)
        else:
            status.update(point.name, action="started" if done is None else "resumed",
                          completed_rounds=done)
            todo.append(point)
    try:
        status.write()
    except StudyOutputError as error:
        _said(error)
        return None
    c = status.counts()
    say(f"study {study.source}: {len(points)} runs, {c['done']} complete already, "
        f"{c['failed']} diverged already, {len(todo)} to run "
        f"({study.cpus_per_run:g} CPU each) -> {out}")
    for line in study_cost_lines([p.scenario for p in todo]) if todo else ():
        say(line)
    return todo


def _follow(executor, todo, points, status: _Status, *, summary_every_s: float, say) -> None:
    """Submit every point of ``todo`` and follow the executor until none is pending: a
    line per finished run, a summary line (rounds committed of asked) every
    ``summary_every_s`` seconds, ``status.json`` rewritten at each."""
    total = len(points)
    submitted_at = time.time()
    for point in todo:
        executor.submit(point.name, point.scenario)
        status.update(point.name, state="queued")
    status.data["tasks_submitted"] = len(todo)
    status.write()
    started = last_summary = time.monotonic()
    notices = getattr(executor, "notices", list)  # the local workers' start (Ray's: none)
    while executor.pending:
        finished = executor.wait(wait_timeout(summary_every_s - (time.monotonic() - last_summary)))
        for line in notices():
            say(line)
        for name, result in finished:
            status.update(name, **result)
            status.write()
            c = status.counts()
            line = f"[{c['done']} done, {c['failed']} failed / {total}] {name}: {result['state']}"
            if result.get("wall_s") is not None:
                line += f" ({result['wall_s']:.1f} s)"
            if result["error"]:
                line += f": {result['error']}"
            flags = result.get("health_flags") or ()
            if "at_chance" in flags:
                line += "; its last evaluation is at chance (health flag at_chance)"
            elif "fell_from_best" in flags:
                line += "; its last evaluation fell from its best (health flag fell_from_best)"
            say(line)
        if time.monotonic() - last_summary >= summary_every_s and executor.pending:
            committed, asked = status.observe(points, submitted_at)
            status.write()
            c = status.counts()
            say(f"[summary] {c['done']} done, {c['failed']} failed, {c['running']} running, "
                f"{c['queued']} queued of {total}; rounds {committed}/{asked}; "
                f"{time.monotonic() - started:.0f} s")
            last_summary = time.monotonic()


class _StopSignals:
    """The study's handling of :data:`STOP_SIGNALS` (in the main thread only; elsewhere
    nothing is installed): :meth:`raise_stopped` makes a signal raise
    :class:`StudyStopped`, :meth:`defer` records it in ``late`` instead, :meth:`restore`
    puts the handlers found at construction back."""

    def __init__(self):
        import threading

        self.in_main = threading.current_thread() is threading.main_thread()
        self.previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if self.in_main else {}
        self.late: list[int] = []

    def _install(self, handler) -> None:
        if self.in_main:
            for signum in STOP_SIGNALS:
                signal.signal(signum, handler)

    def raise_stopped(self) -> None:
        def stop(signum, frame):
            raise StudyStopped(signum)

        self._install(stop)

    def defer(self) -> None:
        self._install(lambda signum, frame: self.late.append(signum))

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            if handler is not None:
                signal.signal(signum, handler)
