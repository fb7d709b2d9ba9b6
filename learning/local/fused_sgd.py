"""FedAvg's and FedProx's local steps for the MLP, in Numba, device by device.

:class:`learning.algorithms.fedavg.LocalSGD` runs E full-batch gradient steps

    w <- w - eta [grad L_k(w) + mu (w - w_t)],   L_k(w) = sum_r m_r nll_r(w) / max(sum_r m_r, 1)

(the masked mean cross-entropy :func:`learning.algorithms.fedavg.masked_mean_nll`;
``mu = 0`` for FedAvg, FedProx's ``proximal_mu`` otherwise) for all K devices as one
TensorFlow call per step over per-device weights [K, d]: batched products over padded
rows (``B = max_k |D_k|``) whose kernels are per device, memory-bound at a few rows,
and the update streaming [K, d] tensors through memory every step. Here each device's
E steps run back to back on one core, on its real rows only (``mask > 0``), the device's
weights being its row of the output; the two cores take alternate devices
(:func:`_sgd_phase`). Each layer's kernel is read twice per step, once by the forward
pass and once by a backward pass that also updates it row by row (the row's input
gradient, its weight gradient and its update from one read), instead of the five
or so [K, d] passes of the batched step. A kernel row whose inputs are all 0 (MNIST's
blank pixels, hidden units the ReLU zeroes on every row) adds nothing to the forward
pass and, without the proximal term, has a zero gradient: it is skipped. At the
quickstart's size this is 5-6x faster than the batched TensorFlow step
(``benchmarks/README.md``, ``fedavg_step.py``).

One step of one device (:func:`_device_step`), the layers as
:class:`learning.models.model.MLP` lays them out (kernel ``[in, out]`` row-major, then
bias ``[out]``, layer by layer; ReLU after every hidden layer):

* forward ``h_{l+1} = relu(h_l W_l + b_l)`` on the real rows;
* loss and ``dL/dlogits = m_r / max(sum m, 1) (softmax - onehot)`` (float64, stored
  as float32, subnormals flushed as TensorFlow's CPU pools flush them);
* backward, last layer first, kernel row by kernel row (:func:`_dense_backward`): the
  input gradient ``(dL/da_l W_l^T) * (h_l > 0)`` (not for layer 1) from the row before
  its update, the row's weight gradient ``h_l^T dL/da_l`` and its update (the penalty's
  gradient and value formed in the same pass), then the bias's.

The loss a step reports is the objective at the weights before it (nll plus
``mu / 2 ||w - w_t||^2``), as ``LocalSGD`` reports it; a device that stops after
``device_steps[k]`` steps (a straggler) keeps its weights and repeats its last loss. A
device without data (no row with ``mask > 0``) has zero loss and gradient: it stays at
``w_t``. The output is the update ``w_k - w_t`` [K, d]. The conformance tests hold
updates and losses to ``LocalSGD`` on the same inputs
(``tests/learning/test_fused_sgd.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from learning.local.fused_local import FLUSH_BELOW
from learning.models.shapes import dense_layer_rows
from native.float_control import flush_subnormals, restore_float_control
from native.launch import LAUNCH, read_only


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _gather_rows(x, y, mask, act, labels, row_weights):
    """Copy the real rows (mask > 0) of one device into ``act`` [n, in], ``labels`` [n]
    and their loss weights ``m_r / max(sum m, 1)`` into ``row_weights`` [n]; returns n."""
    n_in = x.shape[1]
    n, total = 0, 0.0
    for r in range(x.shape[0]):
        if mask[r] > 0:
            act[n * n_in : (n + 1) * n_in] = x[r]
            labels[n] = y[r]
            row_weights[n] = mask[r]
            total += mask[r]
            n += 1
    scale = 1.0 / max(total, 1.0)
    for r in range(n):
        row_weights[r] *= scale
    return n


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _softmax_xent(logits, labels, row_weights, grad):
    """``sum_r w_r nll_r`` of ``logits`` [n, C] (float64) and its gradient
    ``dL/dlogits`` written into ``grad`` [n, C] (float32; below the smallest normal: 0)."""
    rows, classes = logits.shape
    total = 0.0
    for r in range(rows):
        top = logits[r, 0]
        for c in range(1, classes):
            top = max(top, logits[r, c])
        norm = 0.0
        for c in range(classes):
            norm += math.exp(np.float64(logits[r, c] - top))
        label = labels[r]
        weight = row_weights[r]
        total += weight * (math.log(norm) - np.float64(logits[r, label] - top))
        for c in range(classes):
            p = math.exp(np.float64(logits[r, c] - top)) / norm
            value = weight * (p - (1.0 if c == label else 0.0))
            grad[r, c] = np.float32(value) if abs(value) >= FLUSH_BELOW else np.float32(0.0)
    return total


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _dense_forward(h, kernel, bias, relu, out):
    """``out = act(h kernel + bias)``: ``h`` float32 [n, in], ``kernel`` [in, out],
    ``bias`` [out], ``out`` [n, out] (written). Kernel rows are taken four at a time
    and skipped for a row of ``h`` whose four inputs are all 0 (MNIST's blank pixels,
    the ReLU's zeros): what they add is 0. (Here and below the loops index the 2-d
    arrays directly: a row view taken inside a loop costs a reference count each.)"""
    n, n_in = h.shape
    n_out = out.shape[1]
    for r in range(n):
        for j in range(n_out):
            out[r, j] = bias[j]
    quads = n_in - n_in % 4
    for i in range(0, quads, 4):
        for r in range(n):
            a0, a1, a2, a3 = h[r, i], h[r, i + 1], h[r, i + 2], h[r, i + 3]
            if a0 == 0 and a1 == 0 and a2 == 0 and a3 == 0:
                continue
            for j in range(n_out):
                out[r, j] += a0 * kernel[i, j] + a1 * kernel[i + 1, j] + a2 * kernel[i + 2, j] \
                    + a3 * kernel[i + 3, j]
    for i in range(quads, n_in):
        for r in range(n):
            a = h[r, i]
            if a != 0:
                for j in range(n_out):
                    out[r, j] += a * kernel[i, j]
    if relu:
        for r in range(n):
            for j in range(n_out):
                out[r, j] = max(out[r, j], np.float32(0.0))


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _dense_backward(h, d_a, kernel, bias, anchor_kernel, anchor_bias, eta, mu, want_input_grad, d_h, row, h_t):
    """Backward of one layer of :func:`_dense_forward` and its update, in one pass over
    the kernel rows: for row ``i``, the input gradient ``d_h[:, i] = (d_a kernel[i]^T)
    * (h[:, i] > 0)`` (with ``want_input_grad``; from the row before its update), the
    row's gradient ``g = h[:, i]^T d_a`` and ``kernel[i] <- kernel[i] - eta (g + mu
    (kernel[i] - anchor_kernel[i]))``; then the bias's (gradient ``sum_r d_a[r]``).
    With ``mu`` = 0 a row whose inputs are all 0 has a zero gradient and is skipped.

    Input: ``h`` float32 [n, in] (the layer's input, after the ReLU below), ``d_a`` [n,
    out] (dL/d pre-activation), ``kernel`` [in, out] and ``bias`` [out] (updated in
    place), their ``anchor_*`` (w_t); scratch ``row`` [out] and ``h_t`` [in * n] (``h``
    transposed: a kernel row's inputs side by side). Output: ``d_h`` [n, in] (written
    with ``want_input_grad``); returns ``sum (w - anchor)^2`` over the layer before the
    update (0 when ``mu`` is 0: not formed).
    """
    n, n_in = h.shape
    n_out = d_a.shape[1]
    inputs = h_t[: n_in * n].reshape(n_in, n)
    for r in range(n):
        for i in range(n_in):
            inputs[i, r] = h[r, i]
    square = 0.0
    for i in range(n_in):
        if want_input_grad:
            for r in range(n):
                total = np.float32(0.0)
                if inputs[i, r] > 0:
                    for j in range(n_out):
                        total += d_a[r, j] * kernel[i, j]
                d_h[r, i] = total
        first = True
        for r in range(n):
            a = inputs[i, r]
            if a != 0:
                if first:
                    for j in range(n_out):
                        row[j] = a * d_a[r, j]
                    first = False
                else:
                    for j in range(n_out):
                        row[j] += a * d_a[r, j]
        if mu != 0:
            if first:
                for j in range(n_out):
                    row[j] = 0.0
            for j in range(n_out):
                diff = kernel[i, j] - anchor_kernel[i, j]
                square += np.float64(diff) * np.float64(diff)
                kernel[i, j] = kernel[i, j] - eta * (row[j] + mu * diff)
        elif not first:
            for j in range(n_out):
                kernel[i, j] = kernel[i, j] - eta * row[j]
    for j in range(n_out):
        row[j] = 0.0
    for r in range(n):
        for j in range(n_out):
            row[j] += d_a[r, j]
    for j in range(n_out):
        diff = bias[j] - anchor_bias[j]
        square += np.float64(diff) * np.float64(diff) if mu != 0 else 0.0
        bias[j] = bias[j] - eta * (row[j] + mu * diff)
    return square


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _device_step(w, anchor, n, labels, row_weights, layers, learning_rate, proximal_mu, act, tmp, row):
    """One step of one device on its ``n`` real rows (already in ``act[:n in_0]``):
    forward, loss, backward and each layer's update as soon as its gradient is formed.

    Input: ``w`` float32 [d] (the device's weights, updated in place), ``anchor`` [d]
    (w_t), ``layers`` int64 [L, 4] = (in, out, kernel offset, bias offset); ``act``
    holds every layer's input then the logits, ``tmp`` [4, n widest] the backward's
    ``dL/da`` slots (0..2) and a transposed input (3), ``row`` [widest] scratch. Returns the objective before the step
    (float64).
    """
    num_layers = layers.shape[0]
    eta, mu = np.float32(learning_rate), np.float32(proximal_mu)
    a_ats = np.empty(num_layers + 1, np.int64)
    a_ats[0] = 0
    for layer in range(num_layers):
        n_in, n_out, k_at, b_at = layers[layer, 0], layers[layer, 1], layers[layer, 2], layers[layer, 3]
        h = act[a_ats[layer] : a_ats[layer] + n * n_in].reshape(n, n_in)
        a_ats[layer + 1] = a_ats[layer] + n * n_in
        out = act[a_ats[layer + 1] : a_ats[layer + 1] + n * n_out].reshape(n, n_out)
        _dense_forward(h, w[k_at:b_at].reshape(n_in, n_out), w[b_at : b_at + n_out], layer < num_layers - 1, out)
    classes = layers[num_layers - 1, 1]
    logits = act[a_ats[num_layers] : a_ats[num_layers] + n * classes].reshape(n, classes)
    current = 0
    loss = _softmax_xent(logits, labels, row_weights, tmp[current, : n * classes].reshape(n, classes))
    square = 0.0
    for layer in range(num_layers - 1, -1, -1):
        n_in, n_out, k_at, b_at = layers[layer, 0], layers[layer, 1], layers[layer, 2], layers[layer, 3]
        h = act[a_ats[layer] : a_ats[layer] + n * n_in].reshape(n, n_in)
        d_a = tmp[current, : n * n_out].reshape(n, n_out)
        below = (current + 1) % 3
        d_h = tmp[below, : n * n_in].reshape(n, n_in)
        square += _dense_backward(h, d_a, w[k_at:b_at].reshape(n_in, n_out), w[b_at : b_at + n_out],
                                  anchor[k_at:b_at].reshape(n_in, n_out), anchor[b_at : b_at + n_out], eta, mu,
                                  layer > 0, d_h, row, tmp[3])
        current = below
    return loss + 0.5 * proximal_mu * square


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def _sgd_phase(anchor, x, y, mask, layers, learning_rate, proximal_mu, act, tmp, row, labels, row_weights,
               out, losses, device_steps):
    """Every device's local steps, device by device: ``out[k]`` starts at ``anchor``
    (w_t, [d]), takes ``device_steps[k]`` of the E = ``losses.shape[0]`` steps
    (:func:`_device_step`) and ends as the update ``w_k - w_t``; ``losses`` [E, K]
    float64: the objective before each step (a stopped device's later ones repeat its
    last). Worker ``w`` runs devices ``w, w + workers, ...`` on its own buffers
    (``act``, ``tmp``, ``row``, ``labels``, ``row_weights``: one row per worker)."""
    num_steps, num_devices = losses.shape[0], x.shape[0]
    workers = act.shape[0]
    for worker in prange(workers):
        control = flush_subnormals()
        for k in range(worker, num_devices, workers):
            w = out[k]
            w[:] = anchor
            n = _gather_rows(x[k], y[k], mask[k], act[worker], labels[worker], row_weights[worker])
            for step in range(num_steps):
                if n == 0:  # no data: zero loss and gradient, the weights stay w_t
                    losses[step, k] = 0.0
                elif step >= device_steps[k]:  # stopped (a straggler that sends early)
                    losses[step, k] = losses[step - 1, k]
                else:
                    losses[step, k] = _device_step(w, anchor, n, labels[worker], row_weights[worker], layers,
                                                   learning_rate, proximal_mu, act[worker], tmp[worker],
                                                   row[worker])
            for i in range(w.size):
                w[i] = w[i] - anchor[i]
        restore_float_control(control)


class FusedSGD:
    """E full-batch gradient steps of every device for the MLP (inputs as tensors or
    arrays, outputs as NumPy arrays); what :class:`learning.algorithms.fedavg.LocalSGD`
    computes, device by device (the module docstring).

    Parameters
    ----------
    layer_sizes : sequence of (int, int)
        ``(in, out)`` of every dense layer (:class:`learning.models.model.MLP`'s layout).
    learning_rate : float
        eta.
    local_steps : int
        E.
    proximal_mu : float
        mu >= 0 of the penalty ``mu / 2 ||w - w_t||^2`` (0: FedAvg).
    """

    def __init__(self, layer_sizes, learning_rate: float, local_steps: int, proximal_mu: float = 0.0):
        self.layer_sizes = tuple((int(a), int(b)) for a, b in layer_sizes)
        rows, self.num_params = dense_layer_rows(self.layer_sizes)
        self.layers = np.asarray(rows, np.int64)
        self.learning_rate = float(learning_rate)
        self.local_steps = int(local_steps)
        self.proximal_mu = float(proximal_mu)
        if self.local_steps < 1:
            raise ValueError(f"local_steps must be >= 1, got {local_steps!r}")
        if not self.proximal_mu >= 0.0:
            raise ValueError(f"proximal_mu must be >= 0, got {proximal_mu!r}")
        self._workspace: tuple | None = None

    def workspace(self, batch: int, workers: int) -> tuple:
        """Per-worker buffers for devices of up to ``batch`` rows (reused while they fit):
        ``act``, ``tmp``, ``row``, ``labels``, ``row_weights``."""
        if self._workspace is not None and self._workspace[0] >= batch and self._workspace[1] == workers:
            return self._workspace[2:]
        acts = batch * (self.layer_sizes[0][0] + sum(n_out for _, n_out in self.layer_sizes))
        widest = max(max(n_in, n_out) for n_in, n_out in self.layer_sizes)
        buffers = (
            np.zeros((workers, acts), np.float32),
            np.zeros((workers, 4, batch * widest), np.float32),
            np.zeros((workers, widest), np.float32),
            np.zeros((workers, batch), np.int64),
            np.zeros((workers, batch), np.float64),
        )
        self._workspace = (batch, workers, *buffers)
        return buffers

    def run(self, anchor, x, y, mask, out: np.ndarray, device_steps=None) -> tuple[np.ndarray, np.ndarray]:
        """E steps of every device from ``anchor`` [d].

        Input: ``x`` [K, B, *input] float32, ``y`` [K, B] int, ``mask`` [K, B] (> 0: a real
        row, weighted by its value), ``out`` a C-contiguous float32 array [K, d] (written),
        ``device_steps`` [K] (optional, each in 1..E): device k takes that many steps.
        Output: (``out``: the updates ``w_k - w_t`` [K, d]; the objective before each
        step [E, K] float32).
        """
        x = np.asarray(x, np.float32)
        x = np.ascontiguousarray(x.reshape(x.shape[0], x.shape[1], -1))
        num_devices = x.shape[0]
        if x.shape[2] != self.layer_sizes[0][0]:
            raise ValueError(f"x has {x.shape[2]} features per row, the MLP takes {self.layer_sizes[0][0]}")
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != (num_devices, self.num_params) \
                or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 array of shape "
                             f"{(num_devices, self.num_params)}, got {out!r:.80}")
        steps = np.full(num_devices, self.local_steps, np.int64) if device_steps is None \
            else np.asarray(device_steps, np.int64)
        if steps.shape != (num_devices,) or steps.min(initial=1) < 1 or steps.max(initial=1) > self.local_steps:
            raise ValueError(f"device_steps must be [K = {num_devices}] in 1..{self.local_steps}, got {steps}")
        workers = max(1, min(get_num_threads(), num_devices))
        buffers = self.workspace(max(x.shape[1], 1), workers)
        losses = np.empty((self.local_steps, num_devices), np.float64)
        with LAUNCH:
            _sgd_phase(read_only(anchor), read_only(x), read_only(y, np.int64), read_only(mask), self.layers,
                       self.learning_rate, self.proximal_mu, *buffers, out, losses, steps)
        return out, losses.astype(np.float32)
