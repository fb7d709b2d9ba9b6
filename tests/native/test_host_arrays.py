"""Host arrays handed to TensorFlow without a copy, and the Numba phase-2 passes."""

import numpy as np
import pytest
import tensorflow as tf

from learning.local.fused_local import phase2_ratio, phase2_update, step_output
from native.host_arrays import ALIGN_BYTES, aligned_empty, aligned_zeros, as_tensor, is_adoptable


@pytest.mark.parametrize("shape", [7, (3, 5), (2, 3, 4)])
def test_aligned_arrays_have_their_shape_and_alignment(shape):
    for dtype in (np.float32, np.float64, np.int64):
        array = aligned_empty(shape, dtype)
        assert array.shape == ((shape,) if isinstance(shape, int) else shape)
        assert array.dtype == dtype and array.flags.c_contiguous
        assert array.ctypes.data % ALIGN_BYTES == 0
    assert not aligned_zeros(shape).any()


def test_as_tensor_adopts_an_aligned_array_without_copying():
    array = aligned_empty((4, 1000))
    array[:] = np.arange(4000, dtype=np.float32).reshape(4, 1000)
    tensor = as_tensor(array)
    assert tensor.dtype == tf.float32 and tensor.shape == (4, 1000)
    back = np.asarray(tensor)
    assert np.shares_memory(back, array)
    np.testing.assert_array_equal(back, array)
    np.testing.assert_array_equal(tf.reduce_sum(tensor, axis=1).numpy(), array.sum(axis=1))


def test_as_tensor_copies_what_it_cannot_adopt():
    raw = aligned_empty(1001)
    shifted = raw[1:]  # 4 bytes off the boundary
    shifted[:] = 1.5
    strided = aligned_empty((10, 10))[:, ::2]
    for array in (shifted, strided, np.arange(6, dtype=np.int16), [1.0, 2.0]):
        assert not is_adoptable(array)
        tensor = as_tensor(array)
        np.testing.assert_array_equal(tensor.numpy(), np.asarray(array))
    assert not np.shares_memory(np.asarray(as_tensor(shifted)), shifted)


def test_phase2_passes_equal_the_tf_expressions_bit_for_bit():
    rng = np.random.default_rng(3)
    k, d = 5, 3001
    rho_next = rng.uniform(1.0, 500.0, d).astype(np.float32)
    delta_rho = (rng.standard_normal(d) * 1e-3).astype(np.float32)
    delta_rho_k = (rng.standard_normal((k, d)) * 1e-2).astype(np.float32)
    mu_t = rng.standard_normal(d).astype(np.float32)
    z = (rng.standard_normal((k, d)) * 1e-3).astype(np.float32)
    offset = (tf.constant(delta_rho_k) - delta_rho) / rho_next
    ratio = np.empty((k, d), np.float32)
    phase2_ratio(delta_rho_k, delta_rho, rho_next, ratio)
    np.testing.assert_array_equal(ratio, (1.0 / (1.0 + offset)).numpy())
    out = np.empty((k, d), np.float32)
    phase2_update(delta_rho_k, delta_rho, rho_next, mu_t, z, out)
    np.testing.assert_array_equal(out, (offset * mu_t + z).numpy())
    phase2_update(delta_rho_k, delta_rho, rho_next, mu_t, z, z)  # in place
    np.testing.assert_array_equal(z, out)


def test_step_output_checks_the_buffer():
    like = np.zeros((3, 4), np.float32)
    assert step_output(like, None).shape == (3, 4)
    out = np.empty((3, 4), np.float32)
    assert step_output(like, out) is out
    with pytest.raises(ValueError, match="shape"):
        step_output(like, np.empty((4, 3), np.float32))
    with pytest.raises(ValueError, match="float32"):
        step_output(like, np.empty((3, 4), np.float64))
    with pytest.raises(ValueError, match="share memory"):
        step_output(like, like)


def test_pool_reuses_a_buffer_only_once_nothing_refers_to_it():
    from native.host_arrays import BufferPool

    pool = BufferPool(max_buffers=4)
    first = pool.take((3, 64), zero=True)
    address = first.ctypes.data
    assert not first.any() and first.ctypes.data % ALIGN_BYTES == 0
    second = pool.take((3, 64))
    assert second.ctypes.data != address  # `first` is still held
    del first
    again = pool.take((3, 64))
    assert again.ctypes.data == address
    row = again[1]  # a view keeps it busy
    del again
    assert pool.take((3, 64)).ctypes.data not in (address, second.ctypes.data)
    del row
    tensor = as_tensor(pool.take((3, 64)))  # so does a tensor over its memory
    assert np.asarray(tensor).ctypes.data == address
    assert pool.take((3, 64)).ctypes.data != address
    read_back = np.asarray(tensor)  # and an array NumPy made of that tensor
    del tensor
    assert pool.take((3, 64)).ctypes.data != address
    del read_back
    assert pool.take((3, 64)).ctypes.data == address
    assert pool.take((2, 64)).shape == (2, 64)  # other shapes get their own buffers


def test_pool_keeps_at_most_max_buffers_free():
    from native.host_arrays import BufferPool

    pool = BufferPool(max_buffers=2)
    held = [pool.take(16) for _ in range(4)]
    assert pool.num_free == 0
    del held
    assert pool.num_free == 2
    again = pool.take(16)
    assert pool.num_free == 1
    del again
    assert pool.num_free == 2


def test_pool_keeps_a_numpy_function_output_and_a_complex_array_busy():
    """A pooled array returned by a ``tf.numpy_function`` (the analog chain's gains per
    symbol) or handed to TensorFlow through DLPack as complex64 (the moving channel per
    symbol) is not handed out again while its tensor lives, and is once it is gone."""
    import tensorflow as tf

    from native.host_arrays import BufferPool

    pool = BufferPool(max_buffers=2)
    addresses = []

    def produce(value):
        out = pool.take((4, 32))
        out[:] = value
        addresses.append(out.ctypes.data)
        return out

    @tf.function
    def chain(value):  # in a graph TensorFlow adopts the aligned output (eagerly it copies)
        return tf.numpy_function(produce, [value], tf.float32, stateful=False)

    kept = chain(tf.constant(3.0))
    overwrite = pool.take((4, 32))
    assert overwrite.ctypes.data != addresses[0]
    overwrite[:] = -1.0
    assert np.all(kept.numpy() == 3.0)
    channel = pool.take((2, 8), np.complex64)
    channel[:] = 1.0 + 2.0j
    address = channel.ctypes.data
    tensor = tf.experimental.dlpack.from_dlpack(channel.__dlpack__())
    del channel
    assert pool.take((2, 8), np.complex64).ctypes.data != address
    assert np.all(tensor.numpy() == 1.0 + 2.0j)
    del tensor
    assert pool.take((2, 8), np.complex64).ctypes.data == address
