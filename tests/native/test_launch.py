"""How kernels are launched (:mod:`native.launch`): from inside a TensorFlow op on the
op's thread alone."""

import threading

import numba
import numpy as np
import pytest
import tensorflow as tf

from native.launch import inside_tensorflow_op


def test_a_tensorflow_op_launches_on_its_own_thread_alone():
    """In a graph, the wrapped function sees one Numba thread on TF's thread; the
    caller's count is untouched, and a call on this thread gets its count back."""
    seen = []

    def probe(x):
        seen.append((numba.get_num_threads(), threading.get_ident()))
        return x

    before = numba.get_num_threads()

    @tf.function
    def graph(x):
        return tf.numpy_function(inside_tensorflow_op(probe), [x], tf.float32, stateful=False)

    assert graph(tf.constant(2.0)).numpy() == 2.0
    assert seen[0][0] == 1
    assert numba.get_num_threads() == before
    inside_tensorflow_op(probe)(np.float32(1.0))  # as TF may run it: on the caller's thread
    assert seen[1] == (1, threading.get_ident())
    assert numba.get_num_threads() == before


def test_the_count_comes_back_when_the_function_raises():
    before = numba.get_num_threads()

    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        inside_tensorflow_op(fails)()
    assert numba.get_num_threads() == before
