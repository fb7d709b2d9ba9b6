"""Where a study's runs execute: worker processes on this machine, or a Ray cluster.

:func:`cosim.study.run_study` hands every run to an executor and collects one result
dict per run (:func:`cosim.study.task._run_task`, the same task function for both):

- :class:`LocalExecutor` (the default without ``--address``): worker processes started
  with the ``spawn`` method on this machine, talking to the driver over pipes, so a
  study opens no network socket. ``floor(num_cpus / cpus_per_run)`` runs at a time; a
  worker is reused for run after run (TensorFlow starts once per worker); a worker that
  dies (an out-of-memory kill) fails its own run only and is replaced.
- :class:`RayExecutor` (``--address``, or ``--executor ray``): one Ray task per run,
  on a cluster, or on an embedded Ray of this machine with a session directory of its
  own (a short fresh directory, kept for its logs, so two studies never share Ray's
  temporary files and Ray's socket paths stay under the 107 bytes a Unix socket allows).

Both stop everything they started when asked (:meth:`stop`): no worker, and with an
embedded Ray no Ray process, outlives the study. This module imports neither
TensorFlow nor Ray at import time.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

from cosim.scenario import Scenario
from cosim.study.file import StudyError
from cosim.trace.exit_point import exit_when_consistent

__all__ = ["EXECUTORS", "ExecutorError", "LocalExecutor", "RayExecutor", "make_executor"]

EXECUTORS = ("local", "ray")
"""The values of ``cosim study run --executor``."""
ADDRESS_CHECK_S = 5.0
"""Seconds a cluster address gets to answer as a Ray head before it is refused."""
STOP_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when stopping what a study started."""
UNIX_SOCKET_PATH_MAX = 107
"""The longest path of a Unix socket on Linux (``sun_path`` holds 108 bytes with NUL)."""
RAY_SOCKET_SUFFIX = len("/session_2026-11-27_15-47-55_841051_4194304/sockets/plasma_store")
"""Ray's longest socket path below its temporary directory (a session directory of date,
microseconds and pid, then ``sockets/plasma_store``)."""


class ExecutorError(StudyError):
    """An executor option that cannot be used (``--address``, ``--executor``): one line
    naming the option and the value."""

    def __init__(self, message: str):
        self.problems = [message]
        self.source = None
        Exception.__init__(self, message)


def make_executor(kind: str | None, *, address: str | None, num_cpus: int | None,
                  cpus_per_run: float, log_dir: Path | None = None):
    """The executor for ``--executor kind`` (None: ``ray`` with an ``address``, else
    ``local``, whose workers write their output under ``log_dir``). ``--executor local``
    with an ``address`` is refused."""
    if kind is None:
        kind = "ray" if address is not None else "local"
    if kind not in EXECUTORS:
        raise ExecutorError(f"--executor: must be one of {', '.join(EXECUTORS)} (got {kind!r})")
    if kind == "local":
        if address is not None:
            raise ExecutorError(f"--address: a Ray cluster's address; the local executor "
                                f"takes none (got {address!r}; use --executor ray)")
        return LocalExecutor(num_cpus=num_cpus or os.cpu_count() or 1, cpus_per_run=cpus_per_run,
                             log_dir=log_dir)
    return RayExecutor(address=address, num_cpus=num_cpus, cpus_per_run=cpus_per_run)


# --------------------------------------------------------------------------- processes


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat), or None
    when it is gone: with the pid it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """``(pid, start time)`` of every process below ``pid`` (children, theirs, ...), read
    from ``/proc``; empty where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            started = _start_time(child)
            if started is not None:
                found.append((child, started))
                todo.append(child)
    return found


def end_processes(processes: list[tuple[int, int]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to each ``(pid, start time)`` still alive, SIGKILL to those alive
    ``grace_s`` later; returns once none is left (or after another ``grace_s``)."""

    def alive() -> list[int]:
        return [pid for pid, started in processes if _start_time(pid) == started]

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        for pid in alive():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            left = alive()
            for pid in left:  # reap our own children (else they stay as zombies)
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            if not alive():
                return
            time.sleep(0.05)


# --------------------------------------------------------------------------- local


def _watch_parent(parent_pid: int) -> None:
    """End this worker process when its driver is gone (killed with SIGKILL, or it
    crashed): checked every 0.05 s from a daemon thread (one ``getppid`` each; at 0.5 s a
    worker could finish a tiny study's runs between its driver's death and noticing it).
    It ends at once when no trace is open, else at the trace's next completed flush
    (:mod:`cosim.trace.exit_point`), so the run it leaves is resumable."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.05)
        exit_when_consistent(1)

    threading.Thread(target=watch, name="cosim-driver-watch", daemon=True).start()


def _local_worker(connection, cpus: float, parent_pid: int, log_path: str | None) -> None:
    """A local worker's loop: receive ``(run name, scenario as TOML text)``, answer with
    ``_run_task``'s result dict; ``None`` or a closed pipe ends it (``os._exit``: between
    runs nothing is open). SIGINT is the driver's
    (a terminal's Ctrl-C reaches the whole process group): the worker ignores it and is
    stopped by the driver. Its output (TensorFlow's, the runs' own lines) goes to
    ``log_path``, appended, as a Ray worker's goes to its session log."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(parent_pid)
    if log_path is not None:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            os.dup2(log, stream.fileno())
        os.close(log)
    import tomllib

    from cosim.scenario import parse_scenario
    from cosim.study.task import _run_task

    try:  # TensorFlow and the run's modules, before READY (their threads are set per run)
        from native.tensorflow_import import import_for_command

        import_for_command()
        import cosim.run  # noqa: F401
    except Exception:  # the run's task meets it again and reports it as its error; the log says why now
        traceback.print_exc()
    connection.send(READY)  # the driver says so
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            message = None
        if message is None:  # every trace is closed: leave without the interpreter's
            sys.stdout.flush()  # teardown (TensorFlow's took seconds)
            sys.stderr.flush()
            os._exit(0)
        name, text = message
        # the scenario travels as its TOML (scenario_to_toml: every key, resolved), which
        # parses back to an equal Scenario; its pydantic classes do not pickle
        connection.send(_run_task(parse_scenario(tomllib.loads(text), name), cpus))


READY = ("ready",)
"""What a local worker sends once it has imported what its runs need (TensorFlow with
them), before its first result."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class _Worker:
    """One local worker process, its end of the pipe and the run it holds (or None)."""

    def __init__(self, context, cpus: float, log_path: str | None, index: int = 0):
        self.index, self.created = index, time.perf_counter()
        parent, child = context.Pipe()
        self.process = context.Process(target=_local_worker,
                                       args=(child, cpus, os.getpid(), log_path),
                                       name="cosim-study-worker", daemon=False)
        # the worker starts with SIGINT ignored (a disposition that survives exec, and
        # with it CPython installs no KeyboardInterrupt handler): a terminal's Ctrl-C
        # reaches the whole process group, and a starting interpreter would die of it
        # with a traceback. The driver ignores SIGINT for the few milliseconds of the
        # start (a blocked mask would not do: the spawn resets it in the child)
        # OpenMP (and the BLAS under NumPy) held to the run's CPUs as Ray holds its
        # workers' (OMP_NUM_THREADS, unless the environment sets it): read once, when the
        # worker's NumPy loads, so it goes in the environment the worker starts with
        threads = None if "OMP_NUM_THREADS" in os.environ else str(max(1, math.ceil(cpus)))
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            if threads is not None:
                os.environ["OMP_NUM_THREADS"] = threads
            self.process.start()
        finally:
            if threads is not None:
                os.environ.pop("OMP_NUM_THREADS", None)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        child.close()
        self.connection = parent
        self.run: tuple[str, float] | None = None  # (run name, time.perf_counter() at start)


class StudyOutputError(Exception):
    """A file the study driver writes for itself (``status.json``, a worker's log) that
    cannot be written: a full disk, a symbolic link planted where it belongs. The study
    stops its runs (their traces keep every committed round) and exits 2 with this one
    line; the same command resumes it once the fault is gone."""


def output_failure(path: Path, error: OSError) -> StudyOutputError:
    """The :class:`StudyOutputError` of the driver's own file ``path`` that ``error`` kept
    from being written: a link named as one, else the system's reason."""
    if path.is_symlink():
        reason = "a symbolic link where the study writes its own file; refusing to write through it"
    else:
        reason = error.strerror or str(error)
    return StudyOutputError(f"cannot write {path}: {reason}; the runs were stopped and their "
                            "traces keep every committed round: the same command resumes the "
                            "study once that is mended")


def _check_log(path: Path) -> None:
    """Open (create) a worker's log as the worker will, never through a link
    (``O_NOFOLLOW``), before the worker starts: a log that cannot be opened (a link
    planted there, a full disk, a directory) stops the study with one line naming it
    (:class:`StudyOutputError`), not as a dead worker."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644))
    except OSError as error:
        raise output_failure(path, error) from None


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"WorkerDied: the worker process was killed by {name}{hint}"
    return f"WorkerDied: the worker process exited with status {exitcode}"


class LocalExecutor:
    """Runs on this machine in ``floor(num_cpus / cpus_per_run)`` worker processes (spawn),
    with no socket: the driver and each worker talk over a pipe."""

    name = "local"

    def __init__(self, *, num_cpus: int, cpus_per_run: float, log_dir: Path | None = None):
        self.num_cpus = num_cpus
        self.log_dir = log_dir
        self.cpus_per_run = cpus_per_run
        self.slots = math.floor(num_cpus / cpus_per_run + 1e-9)
        self.workers: list[_Worker] = []
        self.queue: deque[tuple[str, Scenario]] = deque()
        self.context = None
        self.replaced = 0  # workers that died and were replaced (their logs keep their names)
        self.notes: list[str] = []  # lines for the study's output (:meth:`notices`)

    @property
    def pending(self) -> int:
        return len(self.queue) + sum(w.run is not None for w in self.workers)

    def check(self) -> None:
        """StudyError when not one run fits in ``num_cpus``."""
        if self.slots < 1:
            raise StudyError([f"resources.cpus_per_run: the local executor has "
                              f"{self.num_cpus} CPUs (--num-cpus), fewer than "
                              f"{self.cpus_per_run:g}"])

    def start(self) -> str:
        """The line the study prints; workers start with the runs."""
        import multiprocessing

        self.check()
        self.context = multiprocessing.get_context("spawn")
        logs = ""
        if self.log_dir is not None:
            try:
                self.log_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise output_failure(self.log_dir, error) from None
            logs = f"; worker output in {self.log_dir}"
        return (f"executor: local (worker processes, no network), {self.num_cpus} CPUs, "
                f"{self.slots} run(s) at a time{logs}")

    def submit(self, name: str, scenario: Scenario) -> None:
        self.queue.append((name, scenario))
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand queued runs to idle workers, starting workers up to ``slots``."""
        while self.queue:
            idle = next((w for w in self.workers if w.run is None), None)
            if idle is None:
                if len(self.workers) >= self.slots:
                    return
                log, index = None, len(self.workers) + self.replaced
                if self.log_dir is not None:
                    log = str(self.log_dir / f"worker-{index}.log")
                    _check_log(Path(log))
                idle = _Worker(self.context, self.cpus_per_run, log, index)
                self.workers.append(idle)
                self.notes.append(f"worker {index} starting (pid {idle.process.pid}): it imports "
                                  "TensorFlow, then runs; its first run compiles the kernels")
            name, scenario = self.queue.popleft()
            idle.run = (name, time.perf_counter())
            try:
                idle.connection.send((name, scenario.to_toml()))
            except OSError:  # it died as it started (BrokenPipeError): wait() fails its run, naming why
                pass

    def wait(self, timeout_s: float) -> list[tuple[str, dict[str, Any]]]:
        """The runs that ended within ``timeout_s`` seconds: ``(name, result)``."""
        from multiprocessing.connection import wait

        busy = [w for w in self.workers if w.run is not None]
        if not busy:
            return []
        handles = [w.connection for w in busy] + [w.process.sentinel for w in busy]
        ready = set(wait(handles, timeout=timeout_s))
        finished = []
        for worker in busy:
            if worker.connection in ready or worker.process.sentinel in ready:
                name, started = worker.run
                try:
                    if not worker.connection.poll():
                        raise EOFError
                    result = worker.connection.recv()
                    if result == READY:  # started: said, and its run goes on
                        self.notes.append(f"worker {worker.index} ready after "
                                          f"{time.perf_counter() - worker.created:.1f} s; "
                                          f"running {name}")
                        if not worker.connection.poll():
                            continue
                        result = worker.connection.recv()
                except (EOFError, OSError):  # died while running this run
                    worker.process.join(timeout=STOP_GRACE_S)
                    result = {"state": "failed", "error": _death(worker.process.exitcode),
                              "completed_rounds": None,
                              "wall_s": time.perf_counter() - started, "node": None}
                    worker.connection.close()
                    self.workers.remove(worker)
                    self.replaced += 1
                worker.run = None
                finished.append((name, result))
        self._dispatch()
        return finished

    def notices(self) -> list[str]:
        """The lines about the workers since the last call (one starting, one ready)."""
        notes, self.notes = self.notes, []
        return notes

    def _processes(self) -> list[tuple[int, int]]:
        found = []
        for worker in self.workers:
            pid = worker.process.pid
            started = _start_time(pid) if pid else None
            if started is not None:
                found.append((pid, started))
                found.extend(descendants(pid))
        return found

    def stop(self) -> None:
        """End every worker now (SIGTERM, then SIGKILL): the runs in flight stop where they
        are (what they committed stays; the same command resumes them)."""
        self.queue.clear()
        end_processes(self._processes())
        self._forget()

    def close(self) -> None:
        """End the idle workers (every run has ended): ask each to leave, then make sure."""
        for worker in self.workers:
            try:
                worker.connection.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in self.workers:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
        end_processes(self._processes())
        self._forget()

    def _forget(self) -> None:
        for worker in self.workers:
            worker.process.join(timeout=0)
            worker.connection.close()
        self.workers = []


# --------------------------------------------------------------------------- Ray


def ray_temp_base() -> str:
    """Where an embedded Ray's session directory goes: Ray's default temporary directory
    (``RAY_TMPDIR``, else ``TMPDIR``, else ``/tmp``) when Ray's socket paths below it fit
    in the 107 bytes a Unix socket allows, else ``/tmp``; ExecutorError when neither does."""
    candidates = [os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp", "/tmp"]
    for base in candidates:
        if len(base) + len("/cosim-ray-XXXXXXXX") + RAY_SOCKET_SUFFIX <= UNIX_SOCKET_PATH_MAX \
                and os.path.isdir(base):
            return base
    raise ExecutorError(
        f"--executor ray: Ray's socket paths under {candidates[0]!r} (RAY_TMPDIR or TMPDIR) "
        f"would pass the {UNIX_SOCKET_PATH_MAX} bytes a Unix socket allows, and /tmp is not "
        "a directory; set RAY_TMPDIR to a short directory")


def check_cluster_address(address: str) -> str:
    """``address`` (``auto``, or ``HOST:PORT``) as the ``HOST:PORT`` of a Ray head that
    answers, within :data:`ADDRESS_CHECK_S` seconds; ExecutorError (one line naming the
    address) when there is none: nothing running (``auto``), a closed port, a server that
    is not Ray, a host that does not answer.

    ``auto`` is the cluster ``ray start`` recorded on this machine (``RAY_ADDRESS`` when
    set): never another study's embedded Ray, which Ray's own ``auto`` would fall back to
    (and which ends with that study)."""
    import grpc
    from ray._common.utils import get_ray_address_file
    from ray._private.utils import read_ray_address
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    given = address
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or read_ray_address()
        if not address:
            raise ExecutorError(
                f"--address: 'auto': no Ray cluster started on this machine (`ray start "
                f"--head` records one in {get_ray_address_file(None)}; none there, and "
                "RAY_ADDRESS is not set); start one, or give HOST:PORT")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ExecutorError(f"--address: {given!r}: must be HOST:PORT of a Ray head, or auto")
    resolved = address
    where = repr(given) if resolved == given else f"{given!r} ({resolved})"
    channel = grpc.insecure_channel(resolved)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=ADDRESS_CHECK_S)
    except grpc.RpcError as error:
        code = error.code()
        if code == grpc.StatusCode.UNAUTHENTICATED:  # a Ray head that wants its token
            from ray._private.authentication.authentication_utils import is_token_auth_enabled

            if not is_token_auth_enabled():  # ray.init would retry for 20 s, then fail
                raise ExecutorError(
                    f"--address: {where}: the Ray head wants a token (Ray's token "
                    "authentication) and this command sends none; set RAY_AUTH_MODE=token "
                    "(the head's token in ~/.ray/auth_token or RAY_AUTH_TOKEN)") from None
        else:
            detail = (error.details() or "").strip().splitlines()
            why = {grpc.StatusCode.UNAVAILABLE: "nothing that speaks Ray's protocol answers there",
                   grpc.StatusCode.DEADLINE_EXCEEDED: f"no answer within {ADDRESS_CHECK_S:g} s",
                   grpc.StatusCode.UNIMPLEMENTED: "a gRPC server that is not a Ray head"}.get(
                       code, f"not a Ray head ({code.name})")
            raise ExecutorError(f"--address: {where}: {why}"
                                + (f" ({detail[0][:160]})" if detail else "")) from None
    finally:
        channel.close()
    return resolved


class RayExecutor:
    """One Ray task per run (``num_cpus = cpus_per_run``, no retries; workers reused), on
    the cluster at ``address`` or on an embedded Ray of ``num_cpus`` CPUs with a session
    directory of its own."""

    name = "ray"

    def __init__(self, *, address: str | None, num_cpus: int | None, cpus_per_run: float):
        self.address = address
        self.num_cpus = num_cpus
        self.cpus_per_run = cpus_per_run
        self.refs: dict[Any, str] = {}
        self.task = None
        self.temp_dir: str | None = None
        self.started = False
        self.before: set[tuple[int, int]] = set()
        self.resolved: str | None = None

    @property
    def pending(self) -> int:
        return len(self.refs)

    def check(self) -> None:
        """ExecutorError for a cluster address that does not answer as a Ray head, or an
        embedded Ray whose socket paths would not fit."""
        if self.address is None:
            ray_temp_base()
        elif self.resolved is None:
            self.resolved = check_cluster_address(self.address)

    def start(self) -> str:
        import logging

        import ray

        from cosim.study.task import _run_task

        self.check()
        if self.address is None:
            self.temp_dir = tempfile.mkdtemp(prefix="cosim-ray-", dir=ray_temp_base())
            self.before = set(descendants(os.getpid()))
            self.started = True
            # address="local": a new Ray of our own even when another one (another
            # study's) runs on this machine; ray.init() alone would connect to that one
            ray.init(address="local", num_cpus=self.num_cpus or os.cpu_count() or 1,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     object_store_memory=128 * 2**20, _temp_dir=self.temp_dir)
        else:
            resolved = self.resolved
            self.started = True
            try:
                ray.init(address=resolved, log_to_driver=False, logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError) as error:
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                where = (repr(self.address) if resolved == self.address
                         else f"{self.address!r} ({resolved})")
                raise ExecutorError(f"--address: {where}: {first[:200]}") from None
        largest = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]),
                      default=0.0)
        if largest < self.cpus_per_run:
            raise StudyError([f"resources.cpus_per_run: no Ray node has {self.cpus_per_run:g} "
                              f"CPUs (the largest has {largest:g})"])
        self.task = ray.remote(num_cpus=self.cpus_per_run, max_retries=0)(_run_task)
        where = (f"local (temporary files and logs in {self.temp_dir})" if self.address is None
                 else f"cluster {self.address}")
        return (f"ray: {where}, {ray.cluster_resources().get('CPU', 0):g} CPUs, "
                f"{len(ray.nodes())} node(s)")

    def submit(self, name: str, scenario: Scenario) -> None:
        self.refs[self.task.remote(scenario, self.cpus_per_run)] = name

    def wait(self, timeout_s: float) -> list[tuple[str, dict[str, Any]]]:
        import ray

        if not self.refs:
            return []
        ready, _ = ray.wait(list(self.refs), num_returns=1, timeout=timeout_s)
        finished = []
        for ref in ready:
            name = self.refs.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as error:  # the worker died (OOM kill, crash)
                result = {"state": "failed", "error": f"{type(error).__name__}: {error}"}
            finished.append((name, result))
        return finished

    def stop(self) -> None:
        """Shut Ray down: the embedded Ray's every process (its head processes and the
        workers, which Ray leaves to notice their raylet gone) ends; a cluster is only
        disconnected from."""
        self.refs.clear()
        self.close()

    def close(self) -> None:
        import ray

        if not self.started:
            return
        self.started = False
        # the embedded Ray's processes: started by ray.init below this process (the
        # raylet's workers too); a cluster's are not ours
        ours = ([p for p in descendants(os.getpid()) if p not in self.before]
                if self.address is None else [])
        ray.shutdown()
        if ours:
            end_processes(ours)

