"""Host arrays that the Numba kernels write and TensorFlow reads without a copy.

The Numba paths of the local training hand ``[K, d]`` update arrays (187 MB each at
the paper's size, K = 100) to the PHY and the server, which are TensorFlow code.
``tf.convert_to_tensor`` copies a NumPy array (TF copies it on purpose, and copies
again into its own buffer when the copy is not 64-byte aligned). :func:`as_tensor`
adopts the array instead, through DLPack, when it is C-contiguous and 64-byte
aligned (what TensorFlow's buffers must be; :func:`aligned_empty` makes such
arrays). ``np.asarray`` of the tensor gives the same memory back, also without a copy.

The caller gives the array away: it must not write it after :func:`as_tensor`.

:class:`BufferPool` hands out such arrays again once nothing refers to them any more
(no view, no tensor), so the page faults of a fresh array are paid once.
The costs these avoid are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf

ALIGN_BYTES = 64
"""TensorFlow's buffer alignment (``EIGEN_MAX_ALIGN_BYTES``)."""


def aligned_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` (an int or a tuple) whose data
    start on a 64-byte boundary."""
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    pad = ALIGN_BYTES // dtype.itemsize
    raw = np.empty(size + pad, dtype)
    shift = (-(raw.ctypes.data // dtype.itemsize)) % pad
    return raw[shift : shift + size].reshape(shape)


def aligned_zeros(shape, dtype=np.float32) -> np.ndarray:
    """:func:`aligned_empty` filled with zeros."""
    out = aligned_empty(shape, dtype)
    out.fill(0)
    return out


def is_adoptable(array) -> bool:
    """True when :func:`as_tensor` can adopt ``array`` without a copy."""
    return (
        isinstance(array, np.ndarray)
        and array.flags.c_contiguous
        and array.dtype in (np.float32, np.float64, np.int32, np.int64)
        and array.ctypes.data % ALIGN_BYTES == 0
    )


def as_tensor(array) -> tf.Tensor:
    """A ``tf.Tensor`` over ``array``'s memory (DLPack, no copy) when
    :func:`is_adoptable`, else ``tf.convert_to_tensor(array)`` (a copy).

    Input: a NumPy array (or anything ``tf.convert_to_tensor`` takes). Output: a
    tensor of the same shape and dtype; the array must not be written afterwards.
    """
    if not is_adoptable(array):
        return tf.convert_to_tensor(array)
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


class BufferPool:
    """Aligned arrays reused once nothing else refers to them.

    :meth:`take` returns an array of the asked shape and dtype that is free (referred
    to by the pool alone: no caller, no view of it, no tensor made by
    :func:`as_tensor` still alive), else a new one, which the pool keeps while it
    holds fewer than ``max_buffers``. Contents are not cleared unless ``zero``.
    """

    def __init__(self, max_buffers: int = 8):
        self.max_buffers = int(max_buffers)
        self._buffers: list[np.ndarray] = []

    @staticmethod
    def _is_free(array: np.ndarray) -> bool:
        # references to a free array: the pool's list, this parameter and
        # getrefcount's argument; to its memory's owner (``base``): the array and the
        # argument. A view of the array or a DLPack capsule (a tensor) adds one to
        # either count.
        return sys.getrefcount(array) == 3 and sys.getrefcount(array.base) == 2

    def take(self, shape, dtype=np.float32, zero: bool = False) -> np.ndarray:
        """A C-contiguous, 64-byte-aligned array of ``shape`` and ``dtype``."""
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        found = None
        for index in range(len(self._buffers)):
            if (self._buffers[index].shape == shape and self._buffers[index].dtype == dtype
                    and self._is_free(self._buffers[index])):
                found = self._buffers[index]
                break
        if found is None:
            found = aligned_empty(shape, dtype)
            if len(self._buffers) < self.max_buffers:
                self._buffers.append(found)
        if zero:
            found.fill(0)
        return found

    def clear(self) -> None:
        """Forget every buffer (those still in use stay valid for their users)."""
        self._buffers.clear()
