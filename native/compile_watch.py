"""Which Numba kernels a process compiles, said as it happens.

Numba compiles a kernel on its first call for a tuple of argument types, unless the
on-disk cache (``native/numba_cache.py``) holds it; from a cold cache the quickstart's
first round spends about two minutes there. :class:`CompileWatch` listens to Numba's
``numba:compile`` event, which Numba raises only for a compilation (never for a kernel
loaded from the cache), and calls ``say`` once per kernel compiled: its module and
name, its seconds, and the running count and total. A kernel compiled as part of
another (a callee typed inside its caller) is counted in its caller's time, not said
apart.

Use it as a context manager around the code that may compile::

    with CompileWatch(say=print) as watch:
        first_round()
    watch.compiled, watch.seconds   # what was compiled, and how long it took

It reports from whichever thread compiles (TensorFlow may call a kernel from its own
threads); the count is kept under a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CompileWatch"]


def _kernel_name(dispatcher) -> str:
    """``module.name`` of a Numba dispatcher (``?`` for what it does not say)."""
    function = getattr(dispatcher, "py_func", None)
    module = getattr(function, "__module__", None) or "?"
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", "?")
    return f"{module}.{name}"


class CompileWatch:
    """Say each Numba kernel compiled while the context is open.

    Parameters
    ----------
    say : callable
        Called with one line per kernel compiled, e.g. ``"compiled
        phy.grid_sums._grid_sums in 12.3 s (3 kernels, 41 s so far)"``.

    Attributes
    ----------
    compiled : list[tuple[str, float]]
        ``(module.name, seconds)`` of every outermost kernel compiled, in order.
    seconds : float
        Their total seconds.
    """

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.compiled: list[tuple[str, float]] = []
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: the start times of open compilations
        self._listener = None

    # -- Numba's listener interface (numba.core.event.Listener) ------------------------------
    def _on_start(self, event) -> None:
        starts = getattr(self._local, "starts", None)
        if starts is None:
            starts = self._local.starts = []
        starts.append(time.perf_counter())

    def _on_end(self, event) -> None:
        starts = self._local.starts
        seconds = time.perf_counter() - starts.pop()
        if starts:  # a callee compiled inside its caller: the caller's line counts it
            return
        name = _kernel_name((event.data or {}).get("dispatcher"))
        with self._lock:
            self.compiled.append((name, seconds))
            self.seconds += seconds
            count, total = len(self.compiled), self.seconds
        self.say(f"compiled {name} in {seconds:.1f} s ({count} kernel{'s' * (count != 1)}, "
                 f"{total:.0f} s so far)")

    def __enter__(self) -> CompileWatch:
        from numba.core import event

        watch = self

        class _Listener(event.Listener):
            def on_start(self, ev):
                watch._on_start(ev)

            def on_end(self, ev):
                watch._on_end(ev)

        self._listener = _Listener()
        event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc_info) -> bool:
        from numba.core import event

        if self._listener is not None:
            event.unregister("numba:compile", self._listener)
            self._listener = None
        return False

    def summary(self) -> str:
        """One line: how many kernels were compiled and in how long, or that none was."""
        if not self.compiled:
            return "no kernel needed compiling (all from Numba's cache)"
        count = len(self.compiled)
        return (f"{count} kernel{'s' * (count != 1)} compiled in {self.seconds:.0f} s "
                "(cached for later runs)")
