"""How kernels are launched (:mod:`native.launch`): a launch from TensorFlow's threads
ends its OpenMP team, so the main thread's stays the only one; the main thread keeps
its team in :data:`LAUNCH` and ends it in :data:`LAUNCH_ENDING_TEAM`."""

import os
import threading

import numba
import numpy as np
import pytest
import tensorflow as tf
from numba import njit, prange

from native import launch
from native.launch import LAUNCH, LAUNCH_ENDING_TEAM

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one Numba thread: no team")


@njit(parallel=True)
def _touch(out):
    for i in prange(out.size):
        out[i] = i


def _threads() -> set[str]:
    """The ids of the process's threads (threads that end meanwhile, e.g. another
    test's, are no concern: the tests look for new ones)."""
    return set(os.listdir("/proc/self/task"))


def _omp_layer():
    _touch(np.empty(64))  # the main thread's team
    if numba.threading_layer() != "omp":
        pytest.skip("the OpenMP layer is not Numba's layer here")


def test_a_launch_from_another_thread_leaves_no_team_behind():
    """A thread that launches in LAUNCH and lives on (as TF's threads do) keeps no
    worker thread: the only new thread is itself (without the release, its team's
    worker would be a second one)."""
    _omp_layer()
    before = _threads()
    launched, done, native_id = threading.Event(), threading.Event(), []

    def body():
        with LAUNCH:
            _touch(np.empty(64))
        native_id.append(str(threading.get_native_id()))
        launched.set()
        done.wait()

    thread = threading.Thread(target=body)
    thread.start()
    try:
        assert launched.wait(60)
        assert _threads() - before == set(native_id)
    finally:
        done.set()
        thread.join()


def test_a_launch_from_tensorflows_thread_leaves_no_team_behind():
    """The same from inside a ``tf.numpy_function`` in a graph, where TF runs it."""
    _omp_layer()
    ran_on = []

    def kernel(x):
        ran_on.append(threading.get_ident())
        with LAUNCH:
            _touch(np.empty(64))
        return x

    @tf.function
    def graph(x):
        return tf.numpy_function(kernel, [x], tf.float32, stateful=False)

    graph(tf.constant(1.0))  # traced, and TF's threads started
    before = _threads()
    for _ in range(4):
        assert graph(tf.constant(2.0)).numpy() == 2.0
    assert threading.get_ident() not in ran_on
    assert _threads() - before == set()


def test_the_main_thread_keeps_its_team_in_launch():
    """The same worker threads (by id) before and after: ended and restarted, the
    worker would come back with a new id."""
    _omp_layer()
    before = _threads()
    for _ in range(3):
        with LAUNCH:
            _touch(np.empty(64))
    _touch(np.empty(64))
    assert _threads() - before == set()


def test_launch_ending_team_ends_the_main_threads_team():
    _omp_layer()
    before = _threads()
    with LAUNCH_ENDING_TEAM:
        _touch(np.empty(64))
    after_end = _threads()
    assert before - after_end != set()  # the worker is gone
    _touch(np.empty(64))  # and the next launch starts a new one
    assert _threads() - after_end != set()


def test_the_lock_is_released_when_the_launch_raises():
    with pytest.raises(RuntimeError):
        with LAUNCH:
            raise RuntimeError("a kernel failed")
    assert launch._Launch._lock.acquire(blocking=False)
    launch._Launch._lock.release()
