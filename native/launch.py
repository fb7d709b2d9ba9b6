"""How ``phy/`` and ``learning/`` launch their Numba kernels.

* **One parallel launch at a time.** Numba runs one parallel region at a time per
  process well; TensorFlow may call a kernel from several of its threads at once
  (``tf.numpy_function`` in the PHY's graph, the local training's steps). Every
  parallel Numba launch of ``phy/`` and ``learning/`` runs inside :data:`LAUNCH` or
  :data:`LAUNCH_ENDING_TEAM`, which hold one lock.
* **One OpenMP team, the main thread's.** libgomp (Numba's ``omp`` layer) keeps one
  team of worker threads per thread that launches a parallel region. Once more than
  one thread has launched (TensorFlow runs ``tf.numpy_function`` on its own threads),
  the process has more OpenMP threads than cores, and libgomp then lets a waiting
  worker spin only 100 times before it sleeps: every later launch wakes its workers
  through the kernel. Both contexts therefore end the team of a launching thread
  other than the main one when the launch is over (:func:`release_openmp_team`).
* **The team ended where threaded work follows.** Between launches the main thread's
  worker spins (libgomp's default, up to 300,000 times), which is what the training's
  thousands of small launches per round want; but a kernel followed by threaded work
  outside Numba would have that worker hold a core from it. The time-domain uplink's
  kernels that scipy's threaded FFTs follow launch in :data:`LAUNCH_ENDING_TEAM`, which
  ends the team on the main thread too (starting it again cost about 0.05 ms here on
  2026-11-27); every other kernel in :data:`LAUNCH`. What each is worth is in ``benchmarks/README.md``.
* **Inputs read-only.** Numba compiles one specialisation of a kernel per tuple of
  argument types, and an array's writeable flag is part of its type. A kernel input
  that arrives read-only on one path (memory of a TensorFlow tensor) and writeable on
  another would compile the kernel twice. Every array a kernel only reads is passed
  through :func:`read_only`, so each kernel compiles once.
* **BLAS on the calling thread.** Kernels that call ``np.dot`` (scipy's BLAS) from
  inside their own ``prange`` run under :func:`single_threaded_blas`, so each core
  runs its own products and BLAS starts no threads of its own on top.
"""

from __future__ import annotations

import ctypes
import threading

import numba
import numpy as np

from native import numba_cache

numba_cache.install()  # a damaged cache file is compiled again, with a note

__all__ = ["LAUNCH", "LAUNCH_ENDING_TEAM", "read_only", "release_openmp_team", "single_threaded_blas"]


class _Launch:
    """The context of one parallel Numba launch (or a few in a row): holds the process's
    launch lock, and on exit ends the calling thread's OpenMP team when that thread is
    not the main one, or always with ``end_team``."""

    _lock = threading.Lock()

    def __init__(self, *, end_team: bool):
        self.end_team = end_team

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc_info):
        try:
            if self.end_team or threading.current_thread() is not threading.main_thread():
                release_openmp_team()
        finally:
            self._lock.release()
        return False


LAUNCH = _Launch(end_team=False)
"""Around a parallel launch: the main thread keeps its team (its worker spins between
launches), any other thread's team is ended after the launch."""

LAUNCH_ENDING_TEAM = _Launch(end_team=True)
"""Around a parallel launch that threaded work outside Numba follows (scipy's FFTs): the
launching thread's team is ended after the launch, whichever thread it is."""

_BLAS = None
"""The process's :class:`threadpoolctl.ThreadpoolController` (built on first use)."""


def single_threaded_blas():
    """A context in which BLAS runs on the calling thread (each Numba worker runs its
    own products); entering it costs about 25 microseconds."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


_GOMP = None
"""libgomp's ``omp_pause_resource_all``, once looked up by :func:`release_openmp_team`
(False: Numba's layer is not libgomp's)."""
_OMP_PAUSE_SOFT = 1  # omp_pause_resource_t omp_pause_soft (OpenMP 5.0)


def release_openmp_team() -> bool:
    """End the OpenMP team of the calling thread (``omp_pause_resource_all(omp_pause_soft)``:
    its workers exit; the next parallel launch from this thread starts new ones).
    Returns whether there was an OpenMP runtime to ask: Numba's layer is ``omp`` and
    its libgomp has the call (OpenMP 5.0); otherwise this does nothing."""
    global _GOMP
    if _GOMP is None:
        try:
            layer = numba.threading_layer()
        except ValueError:  # no parallel kernel has run in this process yet
            return False
        _GOMP = False
        if layer == "omp":
            try:
                library = ctypes.CDLL("libgomp.so.1")
                _GOMP = library.omp_pause_resource_all
                _GOMP.argtypes, _GOMP.restype = [ctypes.c_int], ctypes.c_int
            except (OSError, AttributeError):
                _GOMP = False
    if _GOMP is False:
        return False
    _GOMP(_OMP_PAUSE_SOFT)
    return True


def read_only(array, dtype=np.float32) -> np.ndarray:
    """``array`` as a C-contiguous ``dtype`` array that cannot be written: a read-only
    view of the same memory when it is C-contiguous ``dtype`` already (no copy), else a
    read-only copy.

    Input: an array-like. Output: ``np.ndarray`` of ``dtype``, ``flags.writeable`` False,
    at least 1-d (as :func:`numpy.ascontiguousarray`).
    """
    contiguous = np.ascontiguousarray(array, dtype)
    if not contiguous.flags.writeable:
        return contiguous
    view = contiguous.view()
    view.flags.writeable = False
    return view


ALIGNMENT_BYTES = 64
"""TensorFlow's CPU alignment (``EIGEN_MAX_ALIGN_BYTES``): a NumPy array whose data starts
on such a boundary becomes a tensor without a copy (a ``tf.numpy_function`` output, or
through DLPack); NumPy's own large arrays start 16 bytes past a page."""


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts on
    an :data:`ALIGNMENT_BYTES` boundary (a view into a slightly larger byte buffer), for a
    kernel's output that TensorFlow then takes as it is."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    buffer = np.empty(size + ALIGNMENT_BYTES, np.uint8)
    offset = -buffer.ctypes.data % ALIGNMENT_BYTES
    return buffer[offset:offset + size].view(dtype).reshape(shape)
