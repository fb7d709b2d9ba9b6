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
(no view, no tensor): it learns that from a finalizer on the memory's owner, so the
page faults of a fresh array are paid once.
The costs these avoid are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import weakref

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


class _Block:
    """The owner of one pooled allocation: the arrays handed out are made from its
    ``__array_interface__``, so they, their views and the DLPack capsules of their
    tensors all keep it alive, and it is collected only when none of them is left."""

    __slots__ = ("__array_interface__", "__weakref__", "raw")

    def __init__(self, raw: np.ndarray):
        self.raw = raw
        self.__array_interface__ = {
            "shape": raw.shape, "typestr": raw.dtype.str, "data": (raw.ctypes.data, False),
            "version": 3,
        }


class BufferPool:
    """Aligned arrays reused once nothing else refers to them.

    :meth:`take` returns an array of the asked shape and dtype. Its memory goes back to
    the pool when the last thing that refers to it is gone: the array, every view of
    it, every tensor made by :func:`as_tensor` and every array NumPy made of such a
    tensor. The pool learns it from a finalizer on the memory's owner (the arrays'
    ``base``), not by counting references, so it cannot hand out memory that is still
    read. At most ``max_buffers`` free buffers are kept; contents are not cleared
    unless ``zero``.
    """

    def __init__(self, max_buffers: int = 8):
        self.max_buffers = int(max_buffers)
        self._free: dict[tuple, list[np.ndarray]] = {}

    def _release(self, key: tuple, raw: np.ndarray) -> None:
        # called by the finalizer of raw's owner, in whichever thread dropped the last
        # reference; list.append and list.pop are atomic under the GIL
        if self.num_free < self.max_buffers:
            self._free.setdefault(key, []).append(raw)

    @property
    def num_free(self) -> int:
        """How many buffers the pool holds ready."""
        return sum(len(free) for free in self._free.values())

    def take(self, shape, dtype=np.float32, zero: bool = False) -> np.ndarray:
        """A C-contiguous, 64-byte-aligned array of ``shape`` and ``dtype``."""
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
        key = (shape, dtype.str)
        try:
            raw = self._free.get(key, []).pop()
        except IndexError:
            raw = aligned_empty(shape, dtype)
        block = _Block(raw)
        weakref.finalize(block, self._release, key, raw)
        found = np.asarray(block)
        if zero:
            found.fill(0)
        return found

    def clear(self) -> None:
        """Forget the free buffers (those in use come back when their users let go)."""
        self._free.clear()
