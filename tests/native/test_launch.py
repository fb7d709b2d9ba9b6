"""How kernels are launched (:mod:`native.launch`): a TensorFlow op's OpenMP team is
ended after the op, so the main thread's stays the only one."""

import os
import threading

import numba
import numpy as np
import pytest
import tensorflow as tf
from numba import njit, prange

from native import launch
from native.launch import inside_tensorflow_op


@njit(parallel=True)
def _touch(out):
    for i in prange(out.size):
        out[i] = i


def _threads() -> set[str]:
    """The ids of the process's threads (threads that end meanwhile, e.g. another
    test's, are no concern: the tests look for new ones)."""
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one Numba thread: no team")
def test_a_tensorflow_ops_team_is_ended_after_the_op():
    """A parallel kernel run from TF's thread in a graph leaves no worker thread
    behind (without the wrapper it leaves one per TF thread that ran it); on the main
    thread, asked to, its team ends too."""
    _touch(np.empty(64))  # the main thread's team
    if numba.threading_layer() != "omp":
        pytest.skip("the OpenMP layer is not Numba's layer here")
    ran_on = []

    def kernel(x):
        ran_on.append(threading.get_ident())
        _touch(np.empty(64))
        return x

    @tf.function
    def graph(x):
        return tf.numpy_function(inside_tensorflow_op(kernel), [x], tf.float32, stateful=False)

    graph(tf.constant(1.0))  # traced, and TF's threads started
    before = _threads()
    for _ in range(4):
        assert graph(tf.constant(2.0)).numpy() == 2.0
    assert threading.get_ident() not in ran_on
    assert _threads() - before == set()
    assert launch.release_openmp_team() is True  # on the main thread: its team ends too
    _touch(np.empty(64))  # and the next launch starts a new one


def test_a_call_on_the_main_thread_keeps_its_team():
    """The same worker threads (by id) before and after: ended and restarted, the
    worker would come back with a new id."""
    _touch(np.empty(64))
    before = _threads()
    assert inside_tensorflow_op(lambda x: x)(np.float32(1.0)) == 1.0
    _touch(np.empty(64))
    assert _threads() - before == set()
