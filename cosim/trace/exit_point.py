"""Ending a process where the traces it writes are whole.

A local study worker whose driver is gone ends by itself (``cosim/study/executor.py``).
Ended at an arbitrary instant, it could stop a trace half-way through an HDF5 flush, or
after HDF5 has written metadata of a round not yet flushed: the file then fails to open
(``addr overflow``). :func:`exit_when_consistent` ends the process at once when no
trace is open for writing in it, and otherwise at the next point where every committed
round is on disk: right after a round's commit (:meth:`TraceWriter.commit`) or another
completed flush (:meth:`TraceWriter.flush`), or when the last trace is closed. A process
writes one trace at a time (a run's rounds are sequential), so such a point is one for
the whole process.

A kill from outside (SIGKILL, the machine going down) cannot wait for it: see
docs/faults.md.
"""

from __future__ import annotations

import os
import sys
import threading

_lock = threading.Lock()
_writers_open = 0
_exit_code: int | None = None


def _leave(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_when_consistent(code: int) -> None:
    """From any thread: end the process with ``code`` (``os._exit``, no teardown) now if
    no trace is open for writing, else at the next completed flush or close."""
    global _exit_code
    with _lock:
        _exit_code = code
        if _writers_open == 0:
            _leave(code)


def opened() -> None:
    """A trace writer has opened its file for writing."""
    global _writers_open
    with _lock:
        _writers_open += 1


def closed() -> None:
    """A trace writer's file is closed (or abandoned): leave if asked to and none is left."""
    global _writers_open
    with _lock:
        _writers_open -= 1
        if _exit_code is not None and _writers_open == 0:
            _leave(_exit_code)


def flushed() -> None:
    """A flush of the open trace has completed: leave if asked to."""
    with _lock:
        if _exit_code is not None:
            _leave(_exit_code)
