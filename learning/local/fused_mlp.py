"""The exact estimator's MLP on the fused weight sample: forward and backward in Numba.

With the fused sampler (:mod:`native.sampling`) the weights of one device and step,
``w_m = mean + std * eps_m`` for the M samples, sit in one buffer outside TensorFlow.
Handing them to TF's batched matrix products costs more than drawing them at the
paper's size (B ~ 10 rows against 784 x 256 kernels: the products are memory-bound),
and its backward pass writes ``dL/dw_m`` ([M, d]) only for the sampler's backward to
read it again. Here the layers run next to the sample:

* **Forward** (:func:`_dense_forward`): ``h_{l+1}[m] = relu(h_l[m] W_l[m] + b_l[m])``
  for every sample ``m``, the kernel row streamed once and the [rows, out] block kept
  in cache. The first layer's input ``x`` is shared by the M samples.
* **Backward** (:func:`_dense_backward`), a block of kernel rows at a time: the
  block's weight gradient of sample ``m`` (``g_m[rows, :] = h_m[:, rows]^T delta_m``,
  a BLAS product) is formed in a small buffer and goes straight into the
  reparameterization sums ``dL/dmean = sum_m g_m`` and ``dL/dstd = sum_m g_m (w_m -
  mean) / std`` (= ``sum_m g_m eps_m``); the block's part of the input gradient
  ``delta_m W_m^T`` is taken from the same kernel rows. ``dL/dw`` is never stored whole.

Padding rows (mask 0) are left out of every product: their logits are returned as 0
and, as for any row the loss masks, their gradient is 0, so this changes nothing that
is computed. The weights are the same random numbers as
:func:`native.sampling.sample_weights` draws (same keys and streams), so the logits
equal ``MLP.logits_from_params`` of that sample up to float32 summation order
(``tests/learning/test_conformance.py``).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from native.float_control import flush_subnormals, restore_float_control
from native.host_arrays import aligned_empty
from native.launch import LAUNCH, read_only, single_threaded_blas
from native.sampling import Layout

_ROW_BLOCK = 64
"""Kernel rows per work item of the backward pass."""


@njit(parallel=True, nogil=True, cache=True, fastmath=True)
def _dense_forward(h, w, b, relu, out):
    """``out[m] = act(h[m or 0] w[m] + b[m])``.

    Input: ``h`` float32 [1 or M, R, n_in] (1: shared by the samples), ``w`` [M, n_in
    * n_out] (row-major kernels), ``b`` [M, n_out], ``relu`` bool.
    Output (written): ``out`` [M, R, n_out]. Work items are (sample, half of the
    output columns), so M = 5 splits evenly over two cores.
    """
    num_mc, rows, n_out = out.shape
    n_in = h.shape[2]
    parts = 2 if n_out >= 128 else 1
    width = n_out // parts
    for item in prange(num_mc * parts):
        control = flush_subnormals()
        m = item // parts
        j0 = (item % parts) * width
        j1 = n_out if item % parts == parts - 1 else j0 + width
        hm = h[0] if h.shape[0] == 1 else h[m]
        wm = w[m].reshape(n_in, n_out)
        om = out[m]
        bias = b[m, j0:j1]
        for r in range(rows):
            orow = om[r, j0:j1]
            for j in range(j1 - j0):
                orow[j] = bias[j]
        quads = n_in - n_in % 4
        for i in range(0, quads, 4):  # four kernel rows per pass: a quarter of the stores
            w0, w1, w2, w3 = wm[i, j0:j1], wm[i + 1, j0:j1], wm[i + 2, j0:j1], wm[i + 3, j0:j1]
            for r in range(rows):
                a0, a1, a2, a3 = hm[r, i], hm[r, i + 1], hm[r, i + 2], hm[r, i + 3]
                orow = om[r, j0:j1]
                for j in range(j1 - j0):
                    orow[j] += a0 * w0[j] + a1 * w1[j] + a2 * w2[j] + a3 * w3[j]
        for i in range(quads, n_in):
            wrow = wm[i, j0:j1]
            for r in range(rows):
                a = hm[r, i]
                orow = om[r, j0:j1]
                for j in range(j1 - j0):
                    orow[j] += a * wrow[j]
        if relu:
            for r in range(rows):
                orow = om[r, j0:j1]
                for j in range(j1 - j0):
                    orow[j] = max(orow[j], np.float32(0.0))
        restore_float_control(control)


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def _dense_backward(h, w, mean, std, delta, want_input_grad, delta_in, want_mean, want_std, g_mean, g_std):
    """Backward of one dense layer of :func:`_dense_forward` into the sampler's sums.

    Input: ``h`` float32 [1 or M, R, n_in] (the layer's input, after the ReLU of the
    layer below), ``w`` [M, n_in * n_out], the kernel's ``mean`` and ``std`` [n_in *
    n_out], ``delta`` [M, R, n_out] (dL/d pre-activation), ``want_input_grad`` bool.
    Output (written): ``g_mean = sum_m dL/dw_m`` and ``g_std = sum_m dL/dw_m (w_m -
    mean) / std`` [n_in * n_out]; with ``want_input_grad``, ``delta_in`` [M, R, n_in]
    = ``(delta_m W_m^T) * (h_m > 0)``, the next layer down's ``delta`` (ReLU below).
    ``want_mean`` / ``want_std`` False: that sum is neither formed nor written (phase
    1 needs only ``g_std``, phase 2 only ``g_mean``).

    Work items are blocks of ``_ROW_BLOCK`` kernel rows; per sample, a block's weight
    gradient ``h_m[:, rows]^T delta_m`` and its part of the input gradient ``delta_m
    W_m[rows]^T`` are BLAS products (``np.dot``: run under
    :func:`native.launch.single_threaded_blas`), and the block's gradient goes into
    the two sums while it is in cache.
    """
    num_mc, rows, n_out = delta.shape
    lead, n_in = h.shape[0], h.shape[2]
    h_t = np.empty((lead, n_in, rows), np.float32)  # h_m^T: a block's rows are contiguous
    for m in range(lead):
        for r in range(rows):
            for i in range(n_in):
                h_t[m, i, r] = h[m, r, i]
    blocks = (n_in + _ROW_BLOCK - 1) // _ROW_BLOCK
    for block in prange(blocks):
        control = flush_subnormals()
        i0 = block * _ROW_BLOCK
        i1 = min(i0 + _ROW_BLOCK, n_in)
        width = i1 - i0
        lo, hi = i0 * n_out, i1 * n_out
        g_block = np.zeros((width, n_out), np.float32)
        part = np.zeros((rows, width), np.float32)
        gm = g_mean[lo:hi].reshape(width, n_out)
        gs = g_std[lo:hi].reshape(width, n_out)
        mean_block = mean[lo:hi].reshape(width, n_out)
        if want_mean:
            gm[:] = 0.0
        if want_std:
            gs[:] = 0.0
        for m in range(num_mc):
            w_block = w[m, lo:hi].reshape(width, n_out)
            if rows > 0:
                np.dot(h_t[0 if lead == 1 else m, i0:i1], delta[m], g_block)
            if want_mean:
                for a in range(width):
                    for j in range(n_out):
                        gm[a, j] += g_block[a, j]
            if want_std:
                for a in range(width):
                    for j in range(n_out):
                        gs[a, j] += g_block[a, j] * (w_block[a, j] - mean_block[a, j])
            if want_input_grad and rows > 0:
                np.dot(delta[m], w_block.T, part)
                hm = h[0] if lead == 1 else h[m]
                for r in range(rows):
                    for a in range(width):
                        delta_in[m, r, i0 + a] = part[r, a] if hm[r, i0 + a] > 0 else np.float32(0.0)
        if want_std:
            std_block = std[lo:hi].reshape(width, n_out)
            for a in range(width):
                for j in range(n_out):
                    gs[a, j] /= std_block[a, j]
        restore_float_control(control)


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _bias_backward(b, mean, std, delta, g_mean, g_std):
    """The bias's part of :func:`_dense_backward`: ``dL/db_m = sum_rows delta_m``.

    Input: ``b`` float32 [M, n_out] (the sampled biases), ``mean``, ``std`` [n_out],
    ``delta`` [M, R, n_out]. Output (written): ``g_mean``, ``g_std`` [n_out].
    """
    num_mc, rows, n_out = delta.shape
    for j in range(n_out):
        g_mean[j] = 0.0
        g_std[j] = 0.0
    for m in range(num_mc):
        for j in range(n_out):
            total = np.float32(0.0)
            for r in range(rows):
                total += delta[m, r, j]
            g_mean[j] += total
            g_std[j] += total * (b[m, j] - mean[j])
    for j in range(n_out):
        g_std[j] /= std[j]


class Workspace:
    """Arrays that :meth:`FusedMLP.forward` / :meth:`FusedMLP.backward` write, kept for
    reuse from device to device and step to step (the weight sample alone is 9.3 MB at
    the paper's size). What a call returns lives here until the next call with the same
    workspace.
    """

    def __init__(self, net: FusedMLP):
        self.net = net
        self.buffer = aligned_empty(net.layout.buffer_size)
        self.g_mean = aligned_empty(net.num_params)
        self.g_std = aligned_empty(net.num_params)
        self._hidden = aligned_empty(0)

    def hidden(self, batch: int) -> np.ndarray:
        """The hidden-activation buffer for ``batch`` rows (grown when needed)."""
        size = self.net._hidden_size(batch)
        if self._hidden.size < size:
            self._hidden = aligned_empty(size)
        return self._hidden[:size]


class FusedMLP:
    """Forward and backward of an MLP on fused weight samples, one device at a time.

    Parameters
    ----------
    layer_sizes : sequence of (int, int)
        ``(in, out)`` of every dense layer; ReLU after all but the last. The flat
        parameter vector is kernel ``[in, out]`` then bias ``[out]``, layer by layer
        (:class:`learning.models.model.MLP`'s layout), sampled with streams ``0..2L-1``.
    num_mc : int
        M, weight samples per device.
    """

    def __init__(self, layer_sizes, num_mc: int):
        self.layer_sizes = tuple((int(a), int(b)) for a, b in layer_sizes)
        self.num_mc = int(num_mc)
        sizes = [n for a, b in self.layer_sizes for n in (a * b, b)]
        self.layout = Layout(sizes, self.num_mc)
        self.num_params = int(self.layout.mean_at[-1])

    def _rows(self, mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(np.asarray(mask).ravel() > 0)

    def _hidden(self, hidden: np.ndarray, batch: int, rows: int) -> list[np.ndarray]:
        """The hidden activations [M, rows, out] of each layer, as views of ``hidden``
        (``batch`` rows reserved per layer, so every device's buffer has one size)."""
        views, at = [], 0
        for _, n_out in self.layer_sizes[:-1]:
            views.append(hidden[at : at + self.num_mc * rows * n_out].reshape(self.num_mc, rows, n_out))
            at += self.num_mc * batch * n_out
        return views

    def _hidden_size(self, batch: int) -> int:
        return sum(self.num_mc * batch * n_out for _, n_out in self.layer_sizes[:-1])

    def forward(self, mean, std, seed, x, mask, workspace: Workspace | None = None):
        """Logits of one device's M weight samples.

        Input: ``mean``, ``std`` float32 [d]; ``seed`` two integers (the device's
        Philox key); ``x`` [B, in] float32; ``mask`` [B] (1 = real row).
        Output: ``logits`` float32 [M, B, C] (0 on padding rows), the weight sample
        buffer (:meth:`native.sampling.Layout.fill_buffer`) and the hidden
        activations of the real rows, flat: what :meth:`backward` needs (written into
        ``workspace`` when given, else into new arrays).
        """
        rows = self._rows(mask)
        x = np.ascontiguousarray(x, np.float32)
        h = np.ascontiguousarray(x[rows] if rows.size < x.shape[0] else x)[None]
        reuse = workspace is not None
        buffer = self.layout.fill_buffer(mean, std, seed, out=workspace.buffer if reuse else None)
        weights = self.layout.views(buffer)
        size = self._hidden_size(x.shape[0])
        hidden = workspace.hidden(x.shape[0]) if reuse else aligned_empty(size)
        outs = self._hidden(hidden, x.shape[0], rows.size)
        outs.append(np.empty((self.num_mc, rows.size, self.layer_sizes[-1][1]), np.float32))
        with LAUNCH:
            for i, out in enumerate(outs):
                _dense_forward(read_only(h), weights[2 * i], weights[2 * i + 1], i < len(outs) - 1, out)
                h = out
        logits = np.zeros((self.num_mc, x.shape[0], self.layer_sizes[-1][1]), np.float32)
        logits[:, rows] = outs[-1]
        return logits, buffer, hidden

    def backward(
        self, grad_logits, buffer, hidden, mean, std, x, mask, want_mean=True, want_std=True,
        workspace: Workspace | None = None,
    ):
        """``(dL/dmean, dL/dstd)``, float32 [d] each, from ``dL/dlogits`` [M, B, C] and
        the other inputs and outputs of :meth:`forward`. A sum not wanted
        (``want_mean`` / ``want_std`` False) is returned unwritten (uninitialised); with
        a ``workspace`` both are its arrays."""
        rows = self._rows(mask)
        x = np.ascontiguousarray(x, np.float32)
        first = np.ascontiguousarray(x[rows] if rows.size < x.shape[0] else x)[None]
        inputs = [first, *self._hidden(hidden, x.shape[0], rows.size)]
        weights = self.layout.views(buffer)
        mean, std = read_only(mean).ravel(), read_only(std).ravel()
        if workspace is None:
            g_mean, g_std = aligned_empty(self.num_params), aligned_empty(self.num_params)
        else:
            g_mean, g_std = workspace.g_mean, workspace.g_std
        delta = np.ascontiguousarray(np.asarray(grad_logits, np.float32)[:, rows])
        starts = self.layout.mean_at
        with LAUNCH, single_threaded_blas():
            for i in range(len(self.layer_sizes) - 1, -1, -1):
                n_in = self.layer_sizes[i][0]
                k0, k1, b1 = starts[2 * i], starts[2 * i + 1], starts[2 * i + 2]
                _bias_backward(weights[2 * i + 1], mean[k1:b1], std[k1:b1], delta,
                               g_mean[k1:b1], g_std[k1:b1])
                below = np.empty((self.num_mc, rows.size, n_in) if i else (1, 1, 1), np.float32)
                _dense_backward(read_only(inputs[i]), weights[2 * i], mean[k0:k1], std[k0:k1], delta,
                                i > 0, below, want_mean, want_std, g_mean[k0:k1], g_std[k0:k1])
                delta = below
        return g_mean, g_std


@functools.lru_cache(maxsize=32)
def network(layer_sizes: tuple[tuple[int, int], ...], num_mc: int) -> FusedMLP:
    """The (cached) :class:`FusedMLP` of these layer sizes and M."""
    return FusedMLP(layer_sizes, num_mc)
