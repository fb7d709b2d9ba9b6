"""Fused weight sampling for the reparameterization estimator: ``w = mean + std * eps``.

The exact estimator draws ``K M d`` standard normals per local step (1.4e9 per paper
MNIST round), and TensorFlow's CPU generators are the slowest part of that round
(``tf.random.stateless_normal``: about 10 ns per normal on two cores here, Philox
plus a scalar Box-Muller). This module draws the same distribution in compiled
NumPy code (Numba) and writes the weight sample directly:

* **Bits:** Philox-4x32-10 (Salmon et al., SC'11, the generator behind TF's and
  NumPy's ``Philox``), counter-based: key = the device's stateless seed (two
  32-bit words), counter = (block, 0, stream, 0) with ``stream`` the parameter
  tensor's index. Element ``j`` of a sample depends only on (seed, stream, j), so
  the draw does not depend on the thread count, on chunking, or on which other
  devices share the batch.
* **Normals:** the ziggurat of Marsaglia and Tsang (J. Stat. Softw. 5(8), 2000)
  with 256 layers: one 32-bit word gives the layer (8 bits), the sign (1 bit) and
  a 23-bit abscissa; 1.5 % of draws miss the rectangles and take the exact
  wedge / tail test (Marsaglia's exponential rejection beyond R = 3.654), whose
  extra uniforms come from disjoint Philox counters (element, attempt). The output
  is N(0, 1) up to float32 resolution, tails included (the tail draws from 32-bit
  uniforms, so |eps| is not truncated below about 9.9; TF's Box-Muller stops at 5.7).
  Per chunk, one scalar loop takes the table look-ups (the signed scale, the miss
  test, the misses recorded), a second loop without calls or look-ups forms ``mean +
  std * u * scale`` and vectorises, and the misses are completed right after, in the
  same work item, while the chunk's output, mean and std are still in L1. What each
  of these choices is worth, measured: ``benchmarks/README.md``.
* **Fusion:** the kernel writes ``mean + std * eps`` (the noise itself is never
  stored) and the backward kernel forms ``dL/dmean = sum_m g_m`` and
  ``dL/dstd = sum_m g_m (w_m - mean) / std`` in one pass over ``g`` and ``w``.

Everything runs on both cores (``numba.prange`` over chunks of ``CHUNK`` normals)
and is called from TensorFlow graphs through ``tf.numpy_function`` (graph mode, not
XLA), one call per device and step for all parameter tensors.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import tensorflow as tf
from numba import njit, prange, uint32, uint64

from native import numba_cache
from native.float_control import flush_subnormals, restore_float_control
from native.host_arrays import aligned_empty
from native.launch import LAUNCH, read_only

numba_cache.install()  # a damaged cache file is compiled again, with a note

CHUNK = 2048
"""Normals per work item; also fixes which Philox word feeds which element."""
_QUARTER = CHUNK // 4

# Ziggurat with 256 layers (Marsaglia & Tsang 2000, Table/constants of Doornik 2005).
_R = 3.6541528853610088  # right edge of the base layer
_V = 4.92867323399e-3  # area of every layer
_M1 = float(2**23)  # the abscissa has 23 bits


def _ziggurat_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Layer tables ``k`` (uint32 acceptance bounds), ``w`` (abscissa scale, float32),
    ``f`` (density at the layer edges, float64) and the closure residual
    ``v / x_top + f(x_top) - 1`` of the recursion (0 up to rounding when the
    constants are right; checked by the tests)."""
    k = np.zeros(256)
    w = np.zeros(256)
    f = np.zeros(256)
    dn = tn = _R
    q = _V / math.exp(-0.5 * dn * dn)
    k[0] = (dn / q) * _M1
    k[1] = 0.0
    w[0] = q / _M1
    w[255] = dn / _M1
    f[0] = 1.0
    f[255] = math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(_V / dn + math.exp(-0.5 * dn * dn)))
        k[i + 1] = (dn / tn) * _M1
        tn = dn
        f[i] = math.exp(-0.5 * dn * dn)
        w[i] = dn / _M1
    residual = _V / dn + math.exp(-0.5 * dn * dn) - 1.0
    return k.astype(np.uint32), w.astype(np.float32), f, residual


_K, _W, _F, ZIGGURAT_RESIDUAL = _ziggurat_tables()
_NO_REASSOCIATION = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}
"""Fast-math flags of the fill: ``mean + std * eps`` may be one fused multiply-add, but
no operation is reordered, so every element rounds the same way on every path."""


@njit(inline="always")
def _philox(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 of the counter (c0..c3) under the key (k0, k1): four uint32."""
    for _ in range(10):
        p0 = uint64(0xD2511F53) * uint64(c0)
        p1 = uint64(0xCD9E8D57) * uint64(c2)
        c0, c1, c2, c3 = (
            uint32(p1 >> uint64(32)) ^ c1 ^ k0,
            uint32(p1),
            uint32(p0 >> uint64(32)) ^ c3 ^ k1,
            uint32(p0),
        )
        k0 = uint32(k0 + uint32(0x9E3779B9))
        k1 = uint32(k1 + uint32(0xBB67AE85))
    return c0, c1, c2, c3


@njit(inline="always")
def _unit(word):
    """A uint32 as a uniform in (0, 1), float64."""
    return (np.float64(word) + 0.5) * 2.3283064365386963e-10


@njit(inline="always")
def _ziggurat_slow(word, index, stream, k0, k1, table_k, table_w, table_f):
    """The exact completion of one ziggurat draw whose first word missed the rectangles.

    Extra randomness for attempt ``a >= 1`` of element ``index`` comes from the
    Philox counter (index low, index high, stream, a): disjoint from the bulk
    counters, whose last word is 0.
    """
    attempt = uint32(0)
    while True:
        layer = word & uint32(0xFF)
        negative = (word >> uint32(8)) & uint32(1)
        u = word >> uint32(9)
        if u < table_k[layer]:
            x = np.float64(u) * np.float64(table_w[layer])
            return -x if negative else x
        attempt += uint32(1)
        a0, a1, a2, _ = _philox(
            uint32(index & 0xFFFFFFFF), uint32(index >> 32), stream, attempt, k0, k1
        )
        if layer == 0:  # the tail beyond R: Marsaglia's exponential rejection, to acceptance
            while True:
                tail = -math.log(_unit(a0)) / _R
                if -2.0 * math.log(_unit(a1)) > tail * tail:
                    return -(_R + tail) if negative else _R + tail
                attempt += uint32(1)
                a0, a1, _, _ = _philox(
                    uint32(index & 0xFFFFFFFF), uint32(index >> 32), stream, attempt, k0, k1
                )
        else:
            x = np.float64(u) * np.float64(table_w[layer])
            height = table_f[layer] + _unit(a0) * (table_f[layer - 1] - table_f[layer])
            if height < math.exp(-0.5 * x * x):
                return -x if negative else x
        word = a2  # rejected: a fresh first word


@njit(inline="always")
def _chunk_words(chunk, k0, k1, stream):
    """The CHUNK Philox words of one chunk: blocks ``chunk * CHUNK / 4 + b``, word-major."""
    bits = np.empty((4, _QUARTER), np.uint32)
    block0 = chunk * _QUARTER
    for b in range(_QUARTER):  # inlined, so LLVM vectorises this loop across blocks
        c0, c1, c2, c3 = _philox(uint32(block0 + b), uint32(0), stream, uint32(0), k0, k1)
        bits[0, b] = c0
        bits[1, b] = c1
        bits[2, b] = c2
        bits[3, b] = c3
    return bits.ravel()


@njit(inline="always")
def _signed_tables(table_k, table_w):
    """The look-up tables of the fast path: ``table_k`` as int32 (all below 2^23) and
    ``table_w`` with the sign folded in, [512], entry ``word & 0x1FF`` (layer in bits
    0-7, sign in bit 8)."""
    return table_k.astype(np.int32), np.concatenate((table_w, -table_w))


@njit(inline="always")
def _look_up(words, count, k_signed, signed_w, scale, missed):
    """The fast path's table look-ups for the first ``count`` words of a chunk, in one
    scalar loop (LLVM emits no gathers for them here, and with them in it the
    arithmetic's loop stayed scalar): each element's signed scale into ``scale``, the
    positions of the misses (about 1.2 %) into ``missed``; returns their number."""
    misses = 0
    for j in range(count):
        word = np.int32(words[j])
        scale[j] = signed_w[word & np.int32(0x1FF)]
        if ((word >> np.int32(9)) & np.int32(0x7FFFFF)) >= k_signed[word & np.int32(0xFF)]:
            missed[misses] = j
            misses += 1
    return misses


@njit(inline="always")
def _abscissa(word):
    """The float32 abscissa ``u`` (23 bits) of a word (int32 before float: AVX2
    converts only signed integers); ``eps = u * scale``."""
    return np.float32((np.int32(word) >> np.int32(9)) & np.int32(0x7FFFFF))


@njit(inline="always")
def _bulk_chunk(
    g, tensor_of, chunk_of, streams, mean_at, out_at, num_mc, mean, std, k0, k1,
    table_k, signed_w, out, miss_word, miss_pos, miss_count,
):
    """Fast path of work item ``g`` (chunk ``chunk_of[g]`` of tensor ``tensor_of[g]``):
    every element as if its first word hit a rectangle; the misses (about 1.2 %) are
    recorded for :func:`_fix_chunk`. The look-ups are :func:`_look_up`'s scalar loop
    (tables from :func:`_signed_tables`); the arithmetic, ``mean + std * (u * scale)``,
    runs in a second loop that vectorises. A chunk inside one sample writes ``out``
    straight from that loop; one that wraps from sample to sample goes through an
    ``eps`` buffer."""
    t = tensor_of[g]
    chunk = chunk_of[g]
    n = mean_at[t + 1] - mean_at[t]
    start = chunk * CHUNK
    stop = min(start + CHUNK, num_mc * n)
    count = stop - start
    words = _chunk_words(chunk, k0, k1, streams[t])
    scale = np.empty(CHUNK, np.float32)
    missed = np.empty(CHUNK, np.int32)
    misses = _look_up(words, count, table_k, signed_w, scale, missed)
    for c in range(min(misses, _MAX_MISSES)):
        miss_word[g, c] = words[missed[c]]
        miss_pos[g, c] = missed[c]
    miss_count[g] = misses
    base_in, base_out = mean_at[t], out_at[t]
    first = start % n
    if first + count <= n:
        mean_row = mean[base_in + first : base_in + first + count]
        std_row = std[base_in + first : base_in + first + count]
        out_row = out[base_out + start : base_out + stop]
        for j in range(count):
            out_row[j] = mean_row[j] + std_row[j] * (_abscissa(words[j]) * scale[j])
    else:
        eps = np.empty(CHUNK, np.float32)
        for j in range(count):
            eps[j] = _abscissa(words[j]) * scale[j]
        j = start
        while j < stop:  # out[j] = mean[i] + std[i] eps, i = j mod n, without a division per element
            i0 = j % n
            run = min(stop - j, n - i0)
            offset = j - start
            for q in range(run):
                out[base_out + j + q] = mean[base_in + i0 + q] + std[base_in + i0 + q] * eps[offset + q]
            j += run


@njit(inline="always")
def _fix_chunk(
    g, tensor_of, chunk_of, streams, mean_at, out_at, num_mc, mean, std, k0, k1,
    table_k, table_w, table_f, out, miss_word, miss_pos, miss_count,
):
    """Exact completion of the misses recorded for work item ``g`` (found again from
    the regenerated words when more than ``_MAX_MISSES`` were)."""
    count = miss_count[g]
    if count == 0:
        return
    t = tensor_of[g]
    chunk = chunk_of[g]
    stream = streams[t]
    n = mean_at[t + 1] - mean_at[t]
    start = chunk * CHUNK
    stop = min(start + CHUNK, num_mc * n)
    base_in, base_out = mean_at[t], out_at[t]
    if count <= _MAX_MISSES:
        for c in range(count):
            j = start + miss_pos[g, c]
            z = _ziggurat_slow(miss_word[g, c], j, stream, k0, k1, table_k, table_w, table_f)
            i = base_in + j % n
            out[base_out + j] = mean[i] + std[i] * np.float32(z)
    else:
        words = _chunk_words(chunk, k0, k1, stream)
        for jj in range(stop - start):
            word = words[jj]
            if (word >> uint32(9)) >= table_k[word & uint32(0xFF)]:
                j = start + jj
                z = _ziggurat_slow(word, j, stream, k0, k1, table_k, table_w, table_f)
                i = base_in + j % n
                out[base_out + j] = mean[i] + std[i] * np.float32(z)


@njit(nogil=True, cache=True, fastmath=_NO_REASSOCIATION)
def normals_into(out, k0, k1, stream, table_k, table_w, table_f):
    """Standard normals into the flat float32 array ``out``, serially (callable from
    other Numba kernels, e.g. inside their own ``prange``).

    Element ``j`` is the ``eps`` that :func:`standard_normal` returns at flat
    position ``j`` for the key ``(k0, k1)`` and ``stream`` (bit for bit: the same
    words, the same fast path and the same exact completion of the misses).
    Input: uint32 ``k0``, ``k1``, ``stream``; the ziggurat tables ``_K``, ``_W``, ``_F``.
    """
    size = out.size
    k_signed, signed_w = _signed_tables(table_k, table_w)  # the fill's loops, serially
    scale = np.empty(CHUNK, np.float32)
    missed = np.empty(CHUNK, np.int32)
    for chunk in range((size + CHUNK - 1) // CHUNK):
        words = _chunk_words(chunk, k0, k1, stream)
        start = chunk * CHUNK
        count = min(CHUNK, size - start)
        misses = _look_up(words, count, k_signed, signed_w, scale, missed)
        row = out[start : start + count]
        for j in range(count):  # as the fill's mean 0 + std 1 * eps (-0 -> +0)
            row[j] = np.float32(0.0) + _abscissa(words[j]) * scale[j]
        for c in range(misses):
            j = missed[c]
            row[j] = np.float32(0.0) + np.float32(
                _ziggurat_slow(words[j], start + j, stream, k0, k1, table_k, table_w, table_f))


_MAX_MISSES = 128  # per chunk; Binomial(2048, 0.012) has mean 25 and sd 5


@njit(parallel=True, nogil=True, cache=True, fastmath=_NO_REASSOCIATION)
def _fill(
    tensor_of, chunk_of, streams, mean_at, out_at, num_mc, mean, std, k0, k1,
    table_k, table_w, table_f, out,
):
    table_k_signed, signed_w = _signed_tables(table_k, table_w)
    work = tensor_of.size
    miss_word = np.empty((work, _MAX_MISSES), np.uint32)
    miss_pos = np.empty((work, _MAX_MISSES), np.int32)
    miss_count = np.empty(work, np.int64)
    for g in prange(work):  # the misses right after their chunk, while it is in L1
        control = flush_subnormals()
        _bulk_chunk(
            g, tensor_of, chunk_of, streams, mean_at, out_at, num_mc, mean, std, k0, k1,
            table_k_signed, signed_w, out, miss_word, miss_pos, miss_count,
        )
        _fix_chunk(
            g, tensor_of, chunk_of, streams, mean_at, out_at, num_mc, mean, std, k0, k1,
            table_k, table_w, table_f, out, miss_word, miss_pos, miss_count,
        )
        restore_float_control(control)


@njit(parallel=True, nogil=True, cache=True, fastmath=True)
def _grad(tensor_of, chunk_of, mean_at, grads, samples, mean, std, g_mean, g_std):
    for g in prange(tensor_of.size):
        control = flush_subnormals()
        t = tensor_of[g]
        grad = grads[t]
        sample = samples[t]
        num_mc, n = grad.shape
        lo = chunk_of[g] * CHUNK
        hi = min(lo + CHUNK, n)
        base = mean_at[t]
        for i in range(lo, hi):
            g_mean[base + i] = 0.0
            g_std[base + i] = 0.0
        for m in range(num_mc):
            for i in range(lo, hi):
                gi = grad[m, i]
                g_mean[base + i] += gi
                g_std[base + i] += gi * (sample[m, i] - mean[base + i])
        for i in range(lo, hi):
            g_std[base + i] /= std[base + i]
        restore_float_control(control)


_ALIGN = 16  # floats: every tensor starts 64-byte aligned in the output buffer


def shared_gradients(g_mean, g_std, shared_mean: bool, shared_std: bool):
    """Per-device gradients ``[K, ...]`` of ``mean`` and ``std`` summed over the devices
    for a parameter that all devices share (its input had a leading axis of 1)."""
    if shared_mean:
        g_mean = tf.reduce_sum(g_mean, axis=0, keepdims=True)
    if shared_std:
        g_std = tf.reduce_sum(g_std, axis=0, keepdims=True)
    return g_mean, g_std


GRAD_GROUP = 16
"""Parameter tensors per launch of the gradient kernel: Numba passes a tuple into a
parallel region only up to ``NUMBA_PARFOR_MAX_TUPLE_SIZE`` (100) elements, and ResNet-56
has 167 tensors; each launch takes the chunks of its group's tensors. The kernel compiles
once per tuple length, and its compile time grows with the length (a group of 64 had not
compiled after 8 CPU-minutes), so the groups stay small: the MLPs' 12 tensors are one."""


class Layout:
    """Where each sampled tensor lives in the flat parameter vector and in the output.

    Parameters
    ----------
    sizes : sequence of int
        Elements ``n_l`` of each parameter tensor (the flat vector is their concatenation).
    num_mc : int
        Samples M per tensor.
    streams : sequence of int, optional
        Philox counter word of each tensor (default ``0..L-1``).
    """

    def __init__(self, sizes, num_mc: int, streams=None):
        self.sizes = tuple(int(n) for n in sizes)
        self.num_mc = int(num_mc)
        count = len(self.sizes)
        self.streams = np.asarray(range(count) if streams is None else streams, np.uint32)
        self.mean_at = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        padded = [-(-self.num_mc * n // _ALIGN) * _ALIGN for n in self.sizes]
        self.out_at = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)
        chunks = [-(-self.num_mc * n // CHUNK) for n in self.sizes]
        self.tensor_of = np.repeat(np.arange(count), chunks).astype(np.int64)
        self.chunk_of = np.concatenate([np.arange(c) for c in chunks]).astype(np.int64)
        grad_chunks = [-(-n // CHUNK) for n in self.sizes]
        grad_tensor_of = np.repeat(np.arange(count), grad_chunks).astype(np.int64)
        grad_chunk_of = np.concatenate([np.arange(c) for c in grad_chunks]).astype(np.int64)
        # the tensors in groups of at most GRAD_GROUP, one _grad launch each:
        # (first, stop, tensor_of relative to first, chunk_of, mean_at[first:stop])
        self.grad_groups = []
        for first in range(0, count, GRAD_GROUP):
            stop = min(first + GRAD_GROUP, count)
            rows = (grad_tensor_of >= first) & (grad_tensor_of < stop)
            self.grad_groups.append((first, stop, grad_tensor_of[rows] - first,
                                     grad_chunk_of[rows], self.mean_at[first:stop].copy()))

    def fill(self, mean: np.ndarray, std: np.ndarray, seed) -> list[np.ndarray]:
        """``mean + std * eps`` for every tensor: a list of float32 ``[M, n_l]``.

        Input: ``mean``, ``std`` float32 ``[d]`` (d = sum n_l), ``seed`` two integers
        (the Philox key). The outputs are 64-byte-aligned views of one buffer.
        """
        return self.views(self.fill_buffer(mean, std, seed))

    def fill_buffer(self, mean: np.ndarray, std: np.ndarray, seed, out=None) -> np.ndarray:
        """:meth:`fill` as the one 64-byte-aligned float32 buffer behind its views
        (length ``buffer_size``; see :meth:`views`), written into ``out`` if given."""
        mean, std = read_only(mean).ravel(), read_only(std).ravel()
        if mean.size != self.mean_at[-1] or std.size != mean.size:
            raise ValueError(
                f"mean and std must have {self.mean_at[-1]} elements, got {mean.size} and {std.size}"
            )
        if out is None:
            out = aligned_empty(self.buffer_size)
        elif out.shape != (self.buffer_size,) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 [{self.buffer_size}], got {out.dtype} {out.shape}")
        k0, k1 = _key(seed)
        with LAUNCH:
            _fill(
                self.tensor_of, self.chunk_of, self.streams, self.mean_at, self.out_at,
                self.num_mc, mean, std, k0, k1, _K, _W, _F, out,
            )
        return out

    @property
    def buffer_size(self) -> int:
        """Floats in the buffer of :meth:`fill_buffer` (tensors padded to 64 bytes)."""
        return int(self.out_at[-1])

    def views(self, buffer: np.ndarray) -> list[np.ndarray]:
        """The per-tensor ``[M, n_l]`` views of a :meth:`fill_buffer` buffer."""
        return [
            buffer[a : a + self.num_mc * n].reshape(self.num_mc, n)
            for a, n in zip(self.out_at[:-1], self.sizes, strict=True)
        ]

    def grad(self, grads, samples, mean: np.ndarray, std: np.ndarray):
        """Backward of :meth:`fill`: ``(sum_m g_m, sum_m g_m (w_m - mean) / std)``, each
        float32 ``[d]``, from the per-tensor ``grads`` and ``samples`` ``[M, n_l]``."""
        grads = tuple(np.ascontiguousarray(g, np.float32).reshape(self.num_mc, -1) for g in grads)
        samples = tuple(
            np.ascontiguousarray(w, np.float32).reshape(self.num_mc, -1) for w in samples
        )
        mean, std = read_only(mean).ravel(), read_only(std).ravel()
        g_mean = np.empty(mean.size, np.float32)
        g_std = np.empty(mean.size, np.float32)
        with LAUNCH:
            for first, stop, tensor_of, chunk_of, mean_at in self.grad_groups:
                _grad(tensor_of, chunk_of, mean_at, grads[first:stop], samples[first:stop],
                      mean, std, g_mean, g_std)
        return g_mean, g_std


def _key(seed) -> tuple[np.uint32, np.uint32]:
    s = np.asarray(seed).astype(np.int64) & 0xFFFFFFFF
    return np.uint32(s[0]), np.uint32(s[1])


def fill_normal(mean: np.ndarray, std: np.ndarray, num_mc: int, seed, stream: int) -> np.ndarray:
    """``mean + std * eps`` for ``num_mc`` samples of one tensor, in NumPy.

    Input: ``mean``, ``std`` float32 ``[n]``, ``seed`` two integers (the Philox key),
    ``stream`` the counter word that separates parameter tensors.
    Output: float32 ``[num_mc, n]``; ``eps`` is N(0, 1), independent across elements,
    samples, streams and keys.
    """
    mean = np.asarray(mean, np.float32).ravel()
    return Layout([mean.size], num_mc, [stream]).fill(mean, std, seed)[0]


def tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ziggurat tables ``(k, w, f)`` that :func:`normals_into` takes."""
    return _K, _W, _F


def standard_normal(shape, seed, stream: int = 0) -> np.ndarray:
    """The fused generator's ``eps`` as standard normals of ``shape`` (float32).

    Element ``j`` of the flattened array is the ``eps`` that :func:`fill_normal` and
    :func:`sample_weights` use at flat position ``j`` of a ``[M, *param_shape]`` sample
    drawn with the same ``seed`` and ``stream`` (so ``shape = [M, *param_shape]``
    reproduces a parameter tensor's noise exactly).
    """
    size = math.prod(shape)
    zeros, ones = np.zeros(size, np.float32), np.ones(size, np.float32)
    return fill_normal(zeros, ones, 1, seed, stream).reshape(shape)


@functools.lru_cache(maxsize=32)
def _layout(sizes: tuple[int, ...], num_mc: int) -> Layout:
    return Layout(sizes, num_mc)


def sample_weights(mean, std, seeds, num_mc: int, shapes) -> list[tf.Tensor]:
    """Differentiable weight samples of all parameter tensors, every device.

    Input: ``mean``, ``std`` ``[K or 1, d]`` tf.float32 (flat, in the order of
    ``shapes``); ``seeds`` ``[K, 2]`` tf.int32 (device k's key); ``num_mc`` M;
    ``shapes`` the parameter shapes. Output: a list of ``[K, M, *shape]`` tf.float32,
    tensor ``l`` drawn with ``stream = l``. Gradients flow to ``mean`` and ``std``
    (summed over K where they are shared, i.e. given with a leading 1).
    """
    layout = _layout(tuple(math.prod(s) for s in shapes), num_mc)

    def backward(m, s, *gw):
        half = len(gw) // 2
        return layout.grad(gw[:half], gw[half:], m, s)

    def one_device(m, s, seed):
        flat = tf.numpy_function(layout.fill, [m, s, seed], [tf.float32] * len(shapes), stateful=False)
        return [tf.reshape(t, [num_mc, *shape]) for t, shape in zip(flat, shapes, strict=True)]

    @tf.custom_gradient
    def sample(mean, std):
        num_devices = tf.shape(seeds)[0]
        shared_mean, shared_std = mean.shape[0] == 1, std.shape[0] == 1

        def pick(x, shared, i):
            return x[0] if shared else x[i]

        if seeds.shape[0] == 1:
            ws = [w[None] for w in one_device(mean[0], std[0], seeds[0])]
        else:
            ws = tf.map_fn(
                lambda i: one_device(pick(mean, shared_mean, i), pick(std, shared_std, i), seeds[i]),
                tf.range(num_devices),
                fn_output_signature=[tf.float32] * len(shapes),
                parallel_iterations=1,
            )

        def grad(*gs):
            def one_grad(i):
                m, s = pick(mean, shared_mean, i), pick(std, shared_std, i)
                flat_g = [tf.reshape(g[i], [num_mc, -1]) for g in gs]
                flat_w = [tf.reshape(w[i], [num_mc, -1]) for w in ws]
                g_m, g_s = tf.numpy_function(
                    backward, [m, s, *flat_g, *flat_w], [tf.float32, tf.float32], stateful=False
                )
                return tf.reshape(g_m, tf.shape(m)), tf.reshape(g_s, tf.shape(s))

            if seeds.shape[0] == 1:
                g_mean, g_std = (g[None] for g in one_grad(0))
            else:
                g_mean, g_std = tf.map_fn(
                    one_grad,
                    tf.range(num_devices),
                    fn_output_signature=(tf.float32, tf.float32),
                    parallel_iterations=1,
                )
            return shared_gradients(g_mean, g_std, shared_mean, shared_std)

        return ws, grad

    return sample(mean, std)
