"""The local reparameterization estimator's local steps for the MLP, in Numba.

The local reparameterization trick (Kingma, Salimans & Welling 2015) samples every
dense layer's pre-activation instead of its weights: for an input row ``h`` and a
factorised Gaussian posterior ``N(mu, diag(var))`` over the layer's kernel ``W`` and
bias ``b``, the pre-activation of unit ``c`` is Gaussian,

    a_c = gamma_c + sqrt(delta_c) eps_c,   gamma = h mu_W + mu_b,   delta = h^2 var_W + var_b,

with fresh ``eps`` for every (sample, row, unit) (:meth:`learning.models.model.MLP.logits_lrt`
is the TF form). A local step of one device is then a handful of small matrix
products per layer (the mean path ``h mu_W``, the variance path ``h^2 var_W``, their
transposes for the input gradient, and the one weight gradient the phase needs) and
elementwise work on ``d``-vectors. Run as a TF graph for all K devices at once, the
products see padded rows (``B = max_k |D_k|``, about twice the mean at the paper's
Poisson(10) sizes), TF's batched per-device products run at half the speed of a plain
GEMM here, and the elementwise algebra streams ``[K, d]`` tensors through memory a
dozen times per step. Here each device's E steps run back to back on one core, on
its real rows only, with the products in single-threaded BLAS (``np.dot`` inside
Numba) and the ``d``-vectors of one device in cache; the two cores take alternate
devices.

What is computed is :class:`learning.local.objective.LocalObjective`'s ``rho_objective`` /
``nu_objective`` with the LRT estimator and their gradients, written out by hand
(the conformance suite holds both phases to TF's autodiff on the same noise):

* forward per layer: ``gamma``, ``delta`` and ``a = gamma + sqrt(delta) eps``,
  ReLU after every hidden layer; layer 1's input rows are shared by the M samples,
  so its products run on the ``|D_k|`` rows once;
* loss: the masked softmax cross-entropy of eq. ``task_loss``, summed over the rows
  (or averaged, ``nll_reduction = "mean"``) and averaged over the M samples;
* backward: ``dL/dgamma = dL/da``, ``dL/ddelta = dL/da eps / (2 sqrt(delta))``; the
  weight gradient the phase needs (phase 1: ``dL/dvar_W = (h^2)^T dL/ddelta``, then
  ``dL/dstd = 2 std dL/dvar``; phase 2: ``dL/dmu_W = h^T dL/dgamma``; layer 1 sums
  over the M samples before its product); the input gradient
  ``dL/dh = dL/dgamma mu_W^T + 2 h (dL/ddelta var_W^T)`` masked by the ReLU;
* the step: :func:`learning.local.fused_local.rho_update_serial` /
  :func:`~learning.local.fused_local.nu_update_serial` (the exact estimator's update, KL
  and precision floor).

Noise: layer ``l``'s ``eps`` of device k, ``[M, |D_k|, out_l]`` row-major, is
:func:`native.sampling.standard_normal` under device k's step seed with stream
``l`` (Philox-4x32-10 and the ziggurat of :mod:`native.sampling`). It depends only
on (seed, step, device) and the device's own data, so batching and chunking devices
change no number, as on the TF path; the TF backend draws the same numbers with
``runtime.noise = "philox"`` and other ones with ``"tensorflow"``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange, uint32

from learning.local import covariance
from learning.local.fused_local import (
    FLUSH_BELOW,
    nu_update_serial,
    phase2_ratio_row,
    phase2_update_row,
    rho_update_serial,
)
from learning.models.shapes import dense_layer_rows
from native import sampling
from native.float_control import flush_subnormals, restore_float_control
from native.launch import LAUNCH, read_only, single_threaded_blas

_WORKER_VECTORS = 5
"""``d``-vectors per worker: the device's own parameters and gradient, then (whole
phases) phase 2's ratio and two iterates (phase 1 uses slots 2 and 3)."""

@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _gather_rows(x, y, mask, act, labels):
    """Copy the real rows (mask > 0) of one device into ``act`` [n, in] and ``labels``
    [n]; returns n."""
    n_in = x.shape[1]
    n = 0
    for r in range(x.shape[0]):
        if mask[r] > 0:
            act[n * n_in : (n + 1) * n_in] = x[r]
            labels[n] = y[r]
            n += 1
    return n


@njit(inline="always", fastmath=True, error_model="numpy")
def _series_variances(code, sigma_t, anchor, delta, out):
    """``out = (sigma_t (1 + q))^2`` with ``q`` from :func:`learning.local.covariance.nb_std_change_series`;
    returns the number of entries beyond the series (their ``out`` is to be rewritten)."""
    one, beyond = np.float32(1.0), np.float32(0.0)
    for i in range(out.size):
        q, _ = covariance.nb_std_change_series(code, delta[i], sigma_t[i], anchor[i])
        s = sigma_t[i] * (one + q)
        out[i] = s * s
        beyond += np.float32(not covariance.nb_series_applies(delta[i]))
    return beyond


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _layer_params(phase1, code, a, b, c, out):
    """One layer's device-specific parameters (at a device's first step, just before
    the layer's products; at later steps, right after the layer's update in the step
    before: :func:`_device_step`).

    Phase 1 (``phase1``): the variances ``out = sigma_k^2`` of the covariance reading
    ``code`` (:mod:`learning.local.covariance`) from ``a = sigma_t``, ``b`` its anchor and
    ``c`` the device's iterate ``delta`` (``sigma_k = sigma_t (1 + q)``, as the TF path
    forms it). Phase 2: the sampling means ``out = mu_t + ratio_k z_k`` from
    ``a = mu_t``, ``b = ratio_k``, ``c = z_k``. All float32 views of the layer's slice.
    """
    if phase1 and code == covariance.PRECISION:  # 1 / (rho_t + Delta), the anchor being rho_t
        for i in range(out.size):
            s = np.float32(1.0) / np.sqrt(b[i] + c[i])
            out[i] = s * s
    elif phase1:  # q from series where they apply (vectorised), the exact forms elsewhere
        beyond = _series_variances(code, a, b, c, out)
        if beyond:
            for i in range(out.size):
                if not covariance.nb_series_applies(c[i]):
                    q, _ = covariance.nb_std_change(code, c[i], a[i], b[i])
                    s = np.float32(covariance.nb_std_of(q, a[i]))
                    out[i] = s * s
    else:
        for i in range(out.size):
            out[i] = a[i] + b[i] * c[i]


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _forward(phase1, code, mean, var, own, p_a, p_b, p_c, n, num_mc, layers, k0, k1, tables_k, tables_w,
             tables_f, act, sd, eps, tmp, first):
    """LRT forward of one device; returns the offset of the logits ``[M n, C]`` in ``act``.

    Input: ``mean``, ``var`` float32 [d]: the shared one is read, the device's own one
    (phase 1: ``var``; phase 2: ``mean``; ``own`` is that same array, writable) is
    written layer by layer from ``p_a``, ``p_b``, ``p_c`` (:func:`_layer_params`) just
    before the layer's products at the device's ``first`` step (later steps find them
    written by the step before, after its update: :func:`_device_step`);
    ``n`` real rows, already in ``act[:n in_0]``; ``layers`` int64 [L, 4] = (in, out,
    kernel offset, bias offset); the Philox key and the ziggurat tables. Written:
    every layer's input (``act``), ``sqrt(delta)`` (``sd``: [n, out] for layer 1,
    [M n, out] after) and ``eps`` ([M n, out]).

    Layer 1's input rows and its shared parameters are the same in every step of a
    phase, so its shared path is formed at the device's ``first`` step only and kept:
    phase 1's ``gamma`` (in ``tmp[4]``), phase 2's ``sqrt(delta)`` (in ``sd``). The
    kept values are those the step would form (the same products of the same inputs).
    """
    num_layers = layers.shape[0]
    a_at, s_at, e_at = 0, 0, 0
    for layer in range(num_layers):
        n_in, n_out, k_at, b_at = layers[layer, 0], layers[layer, 1], layers[layer, 2], layers[layer, 3]
        lo, hi = k_at, b_at + n_out
        if first:
            _layer_params(phase1, code, p_a[lo:hi], p_b[lo:hi], p_c[lo:hi], own[lo:hi])
        rows = n if layer == 0 else num_mc * n
        h = act[a_at : a_at + rows * n_in].reshape(rows, n_in)
        kept = layer == 0 and not first  # this layer's shared path is the first step's
        gamma = tmp[4 if layer == 0 and phase1 else 0, : rows * n_out].reshape(rows, n_out)
        mean_bias, var_bias = mean[b_at : b_at + n_out], var[b_at : b_at + n_out]
        if not (kept and phase1):
            np.dot(h, mean[k_at : k_at + n_in * n_out].reshape(n_in, n_out), gamma)
            for r in range(rows):
                gamma_row = gamma[r]
                for c in range(n_out):
                    gamma_row[c] += mean_bias[c]
        s = sd[s_at : s_at + rows * n_out].reshape(rows, n_out)
        if phase1 or not kept:
            square = tmp[1, : rows * n_in].reshape(rows, n_in)
            for r in range(rows):
                h_row, sq_row = h[r], square[r]
                for i in range(n_in):
                    sq_row[i] = h_row[i] * h_row[i]
            np.dot(square, var[k_at : k_at + n_in * n_out].reshape(n_in, n_out), s)
            for r in range(rows):
                s_row = s[r]
                for c in range(n_out):
                    s_row[c] = np.sqrt(s_row[c] + var_bias[c])
        noise = eps[e_at : e_at + num_mc * n * n_out]
        sampling.normals_into(noise, k0, k1, uint32(layer), tables_k, tables_w, tables_f)
        out_at = a_at + rows * n_in
        out = act[out_at : out_at + num_mc * n * n_out].reshape(num_mc * n, n_out)
        relu = layer < num_layers - 1
        for m in range(num_mc):
            for r in range(n):
                src = r if layer == 0 else m * n + r
                dst = m * n + r
                mean_row, sd_row, out_row = gamma[src], s[src], out[dst]
                noise_row = noise[dst * n_out : (dst + 1) * n_out]
                if relu:
                    for c in range(n_out):
                        out_row[c] = max(mean_row[c] + sd_row[c] * noise_row[c], np.float32(0.0))
                else:
                    for c in range(n_out):
                        out_row[c] = mean_row[c] + sd_row[c] * noise_row[c]
        a_at, s_at, e_at = out_at, s_at + rows * n_out, e_at + num_mc * n * n_out
    return a_at


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _softmax_xent(logits, labels, n, num_mc, nll_mean, grad):
    """Eq. ``task_loss`` on ``logits`` [M n, C]: returns ``1/M sum_m sum_r w nll`` (w = 1,
    or 1/n with ``nll_mean``) and writes its gradient ``dL/dlogits`` into ``grad``."""
    classes = logits.shape[1]
    weight = 1.0 / max(n, 1) if nll_mean else 1.0
    total = 0.0
    for row in range(num_mc * n):
        top = logits[row, 0]
        for c in range(1, classes):
            top = max(top, logits[row, c])
        norm = 0.0
        for c in range(classes):
            norm += math.exp(np.float64(logits[row, c] - top))
        label = labels[row % n]
        total += weight * (math.log(norm) - np.float64(logits[row, label] - top))
        scale = weight / num_mc
        for c in range(classes):
            p = math.exp(np.float64(logits[row, c] - top)) / norm
            value = scale * (p - (1.0 if c == label else 0.0))
            grad[row, c] = np.float32(value) if abs(value) >= FLUSH_BELOW else np.float32(0.0)
    return total / num_mc


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _device_step(phase1, code, mean, var, own, p_a, p_b, p_c, n, labels, num_mc, nll_mean, layers, k0, k1,
                 tables_k, tables_w, tables_f, act, sd, eps, tmp, grad,
                 prior_rho, limit, increasing, kl_weight, learning_rate, new, first, prepare_next):
    """One local step of one device: forward, loss, backward, and the update of each
    layer's parameters as soon as their gradient is formed (while it is in cache).

    Phase 1 (``phase1``): ``p_a = sigma_t``, ``p_b`` the anchor and ``p_c = delta`` of
    the covariance reading ``code`` (:mod:`learning.local.covariance`), ``limit`` and
    ``increasing`` its floor; the gradient with respect to the variances and
    :func:`learning.local.fused_local.rho_update_serial` (which forms ``sigma_k`` and
    ``dL/dsigma_k = 2 sigma_k dL/dvar`` in its own pass) into ``new``.
    Phase 2: ``p_a = mu_t``, ``p_b = ratio_k``, ``p_c = z_k``, ``prior_rho`` the KL
    prior's precision; the gradient with respect to the mean and
    :func:`~learning.local.fused_local.nu_update_serial`.
    With ``prepare_next``, each layer's parameters for the next step (``own``, from
    ``p_a``, ``p_b`` and the new iterate) are written right after its update, while
    its slices are in cache; that step's forward (not ``first``) takes them as they
    are.
    Returns (task loss, KL term (without lambda_k), floored entries).
    """
    num_layers = layers.shape[0]
    rows = num_mc * n
    loss = 0.0
    if n > 0:
        logits_at = _forward(phase1, code, mean, var, own, p_a, p_b, p_c, n, num_mc, layers, k0, k1,
                             tables_k, tables_w, tables_f, act, sd, eps, tmp, first)
        classes = layers[num_layers - 1, 1]
        logits = act[logits_at : logits_at + rows * classes].reshape(rows, classes)
        loss = _softmax_xent(logits, labels, n, num_mc, nll_mean, tmp[0, : rows * classes].reshape(rows, classes))
    # offsets of every layer's input, sqrt(delta) and eps (as _forward laid them out)
    a_ats = np.empty(num_layers, np.int64)
    s_ats = np.empty(num_layers, np.int64)
    e_ats = np.empty(num_layers, np.int64)
    a_at, s_at, e_at = 0, 0, 0
    for layer in range(num_layers):
        a_ats[layer], s_ats[layer], e_ats[layer] = a_at, s_at, e_at
        n_in, n_out = layers[layer, 0], layers[layer, 1]
        lead = n if layer == 0 else rows
        a_at += lead * n_in
        s_at += lead * n_out
        e_at += rows * n_out
    kl, hits = 0.0, 0
    current = 0  # tmp slot holding dL/da of the layer being processed
    for layer in range(num_layers - 1, -1, -1):
        n_in, n_out, k_at, b_at = layers[layer, 0], layers[layer, 1], layers[layer, 2], layers[layer, 3]
        lo, hi = k_at, b_at + n_out
        if n > 0:
            current = _layer_backward(phase1, layer, current, n, rows, n_in, n_out, k_at, b_at, mean, var,
                                      act[a_ats[layer]:], sd[s_ats[layer]:], eps[e_ats[layer]:], tmp, grad)
        else:
            grad[lo:hi] = 0.0
        if phase1:  # from dL/dvar: sigma_k is formed inside the update's pass
            part, floored = rho_update_serial(code, p_c[lo:hi], p_a[lo:hi], p_b[lo:hi], limit[lo:hi], grad[lo:hi],
                                              kl_weight, learning_rate, increasing, new[lo:hi], True)
            kl += part
            hits += floored
        else:
            kl += nu_update_serial(p_c[lo:hi], p_b[lo:hi], grad[lo:hi], prior_rho[lo:hi], kl_weight,
                                   learning_rate, new[lo:hi])
        if prepare_next:  # this layer's slices are done with in this step
            _layer_params(phase1, code, p_a[lo:hi], p_b[lo:hi], new[lo:hi], own[lo:hi])
    return loss, kl, hits


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def _layer_backward(phase1, layer, current, n, rows, n_in, n_out, k_at, b_at, mean, var, act, sd, eps, tmp, grad):
    """Backward of one layer (``act``, ``sd``, ``eps`` start at this layer's blocks):
    writes the layer's gradient (phase 1: with respect to the variances; phase 2: to
    the means) into ``grad`` and, above layer 1, ``dL/da`` of the layer below into a
    ``tmp`` slot; returns that slot."""
    lead = n if layer == 0 else rows
    h = act[: lead * n_in].reshape(lead, n_in)
    s = sd[: lead * n_out].reshape(lead, n_out)
    noise = eps[: rows * n_out].reshape(rows, n_out)
    d_a = tmp[current, : rows * n_out].reshape(rows, n_out)
    d_delta = tmp[(current + 1) % 4, : rows * n_out].reshape(rows, n_out)
    for row in range(rows if phase1 or layer > 0 else 0):  # phase 2 needs none at layer 1
        s_row = s[row % n] if layer == 0 else s[row]
        da_row, dd_row, noise_row = d_a[row], d_delta[row], noise[row]
        for c in range(n_out):
            dd_row[c] = da_row[c] * noise_row[c] / (np.float32(2.0) * s_row[c])
    # the weight gradient this phase needs; layer 1 sums over the samples first
    path = d_delta if phase1 else d_a
    if layer == 0:
        summed = tmp[(current + 2) % 4, : n * n_out].reshape(n, n_out)
        summed[:] = 0.0
        for row in range(rows):
            src, dst = path[row], summed[row % n]
            for c in range(n_out):
                dst[c] += src[c]
        path = summed
    kernel = grad[k_at : k_at + n_in * n_out].reshape(n_in, n_out)
    if phase1:
        square = tmp[(current + 3 if layer == 0 else current + 2) % 4, : lead * n_in].reshape(lead, n_in)
        for r in range(lead):
            h_row, sq_row = h[r], square[r]
            for i in range(n_in):
                sq_row[i] = h_row[i] * h_row[i]
        np.dot(square.T, path, kernel)
    else:
        np.dot(h.T, path, kernel)
    bias = grad[b_at : b_at + n_out]
    bias[:] = 0.0
    for r in range(path.shape[0]):
        p_row = path[r]
        for c in range(n_out):
            bias[c] += p_row[c]
    if layer == 0:
        return current
    # input gradient, masked by the ReLU that produced h
    d_h = tmp[(current + 2) % 4, : rows * n_in].reshape(rows, n_in)
    np.dot(d_a, mean[k_at : k_at + n_in * n_out].reshape(n_in, n_out).T, d_h)
    through_var = tmp[(current + 3) % 4, : rows * n_in].reshape(rows, n_in)
    np.dot(d_delta, var[k_at : k_at + n_in * n_out].reshape(n_in, n_out).T, through_var)
    for row in range(rows):
        h_row, dh_row, tv_row = h[row], d_h[row], through_var[row]
        for i in range(n_in):
            value = h_row[i]
            dh_row[i] = (dh_row[i] + np.float32(2.0) * value * tv_row[i]) * np.float32(value > 0)
    return (current + 2) % 4


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def _rho_phase(code, mu_t, rho_t, sigma_t, anchor, limit, increasing, x, y, mask, kl_weights, keys, num_mc,
               nll_mean, learning_rate, layers, tables_k, tables_w, tables_f, act, sd, eps, tmp, vec, labels,
               out, losses, hits, device_steps):
    """Phase 1 of every device, device by device: its E steps (``keys`` [E, K, 2]) one
    after the other on the increment ``delta`` of the covariance parameter ``code``
    (from 0; ``sigma_t``, ``anchor``, ``limit``, ``increasing``:
    :meth:`learning.local.covariance.Reading.phase_constants`), the iterate in the worker's
    buffers ``vec[w, 2:4]``, the last step writing ``out[k]``, which then becomes the
    transmitted ``Delta_rho_k`` (:func:`learning.local.covariance.precision_change_row`);
    ``losses`` [2, E, K]: each step's task loss and KL sum (without lambda_k),
    float64; ``hits`` [K]; ``device_steps`` [K]: device k takes that many of the E steps
    (1..E; its later losses repeat its last)."""
    num_steps, num_devices = keys.shape[0], keys.shape[1]
    workers = act.shape[0]
    # writeable copies and non-literal flags, so that both phases call one specialisation
    # of _device_step (as _nu_phase does): its compilation is the suite's largest
    mean, anchor_w, phase1 = mu_t.copy(), anchor.copy(), np.bool_(True)
    for w in prange(workers):
        control = flush_subnormals()
        var, grad = vec[w, 0], vec[w, 1]
        for k in range(w, num_devices, workers):
            n = _gather_rows(x[k], y[k], mask[k], act[w], labels[w])
            slot = 2
            start = vec[w, slot]
            start[:] = 0.0
            hits[k] = 0
            taken = device_steps[k]
            for step in range(num_steps):
                if step >= taken:  # stopped (a straggler that sends early)
                    losses[0, step, k], losses[1, step, k] = losses[0, step - 1, k], losses[1, step - 1, k]
                    continue
                current = vec[w, slot]
                new = out[k] if step == taken - 1 else vec[w, 5 - slot]
                task, kl, floored = _device_step(
                    phase1, code, mean, var, var, sigma_t, anchor_w, current, n, labels[w], num_mc, nll_mean, layers,
                    keys[step, k, 0], keys[step, k, 1], tables_k, tables_w, tables_f, act[w], sd[w], eps[w],
                    tmp[w], grad, rho_t, limit, increasing, kl_weights[k], learning_rate, new, step == 0,
                    step < taken - 1,
                )
                losses[0, step, k], losses[1, step, k] = task, kl
                hits[k] += floored
                slot = 5 - slot
            if code != covariance.PRECISION:  # the precision reading's iterate is Delta_rho_k
                covariance.precision_change_row(code, out[k], sigma_t, anchor, rho_t, out[k])  # NaN-safe (docs/faults.md)
        restore_float_control(control)


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def _nu_phase(delta_rho_k, delta_rho, rho_next, mu_t, var, prior_rho, x, y, mask, kl_weights,
              keys, num_mc, nll_mean, learning_rate, layers, tables_k, tables_w, tables_f, act, sd, eps, tmp,
              vec, labels, out, losses, device_steps):
    """Phase 2 of every device, device by device: ``ratio_k`` into ``vec[w, 2]``, its E
    steps (``device_steps[k]`` of them) from ``z = 0`` in ``vec[w, 3:5]``, then
    ``out[k] = c_k mu_t + z_k`` (:func:`learning.local.fused_local.phase2_ratio_row` /
    ``phase2_update_row``: the values of the whole-array passes); ``losses`` [2, E, K]."""
    num_steps, num_devices = keys.shape[0], keys.shape[1]
    workers = act.shape[0]
    # as in _rho_phase: the types of _rho_phase's call of _device_step
    variances, phase1, code, increasing = var.copy(), np.bool_(False), np.int64(0), np.bool_(False)
    for w in prange(workers):
        control = flush_subnormals()
        mean, grad, ratio = vec[w, 0], vec[w, 1], vec[w, 2]
        for k in range(w, num_devices, workers):
            n = _gather_rows(x[k], y[k], mask[k], act[w], labels[w])
            phase2_ratio_row(delta_rho_k[k], delta_rho, rho_next, ratio)
            slot = 3
            start = vec[w, slot]
            start[:] = 0.0
            for step in range(num_steps):
                if step >= device_steps[k]:  # stopped (a straggler that sends early)
                    losses[0, step, k], losses[1, step, k] = losses[0, step - 1, k], losses[1, step - 1, k]
                    continue
                current, new = vec[w, slot], vec[w, 7 - slot]
                task, kl, _ = _device_step(
                    phase1, code, mean, variances, mean, mu_t, ratio, current, n, labels[w], num_mc, nll_mean,
                    layers, keys[step, k, 0], keys[step, k, 1], tables_k, tables_w, tables_f, act[w], sd[w],
                    eps[w], tmp[w], grad, prior_rho, prior_rho, increasing, kl_weights[k], learning_rate, new,
                    step == 0, step < device_steps[k] - 1,
                )
                losses[0, step, k], losses[1, step, k] = task, kl
                slot = 7 - slot
            phase2_update_row(delta_rho_k[k], delta_rho, rho_next, mu_t, vec[w, slot], out[k])
        restore_float_control(control)


class FusedLRTSteps:
    """The Numba backend's two phases (:class:`learning.local.backend_numba.NumbaSteps`) for the MLP with the local
    reparameterization estimator (inputs as tensors or arrays, outputs as NumPy
    arrays): :meth:`rho_phase` and :meth:`nu_phase` run each device's E steps back to
    back on one core, its ``d``-vectors (iterates, gradient, layer parameters, phase 2's
    ratio) in that core's buffers, so the ``[K, d]`` arrays are read and written once
    per phase instead of once per step (at the paper's size, K = 100, alternating
    five times with the per-step kernels: phase 1 0.74 -> 0.68 s, phase 2 0.86 ->
    0.83 s on average).

    Parameters
    ----------
    layer_sizes : sequence of (int, int)
        ``(in, out)`` of every dense layer (:class:`learning.models.model.MLP`'s layout:
        kernel ``[in, out]`` then bias ``[out]``, layer by layer).
    num_mc : int
        M, samples per step.
    kl_scale, learning_rate, min_precision : float
        lambda, eta and the precision floor of :class:`learning.local.objective.LocalConfig`.
    nll_mean : bool
        ``nll_reduction == "mean"``.
    covariance_parameter : str
        The phase-1 parameter (:mod:`learning.local.covariance`).
    phase1_learning_rate : float, optional
        Phase 1's step size (``LocalConfig.phase1_learning_rate``); None: ``learning_rate``.
    """

    def __init__(self, layer_sizes, num_mc: int, *, kl_scale, learning_rate, min_precision, nll_mean,
                 covariance_parameter: str = "precision", phase1_learning_rate=None):
        self.reading = covariance.reading(covariance_parameter)
        self.layer_sizes = tuple((int(a), int(b)) for a, b in layer_sizes)
        self.num_mc = int(num_mc)
        rows, self.num_params = dense_layer_rows(self.layer_sizes)
        self.layers = np.asarray(rows, np.int64)
        self.kl_scale = float(kl_scale)
        self.learning_rate = float(learning_rate)
        self.phase1_learning_rate = float(
            learning_rate if phase1_learning_rate is None else phase1_learning_rate)
        self.min_precision = float(min_precision)
        self.nll_mean = bool(nll_mean)
        self._workspace: tuple | None = None

    def workspace(self, batch: int, workers: int) -> tuple:
        """Per-worker buffers for devices of up to ``batch`` rows (reused while they fit)."""
        if self._workspace is not None and self._workspace[0] >= batch and self._workspace[1] == workers:
            return self._workspace[2:]
        m = self.num_mc
        first_in, first_out = self.layer_sizes[0]
        acts = batch * first_in + sum(m * batch * n_out for _, n_out in self.layer_sizes)
        sds = batch * first_out + sum(m * batch * n_out for _, n_out in self.layer_sizes[1:])
        noise = sum(m * batch * n_out for _, n_out in self.layer_sizes)
        widest = max(max(n_in, n_out) for n_in, n_out in self.layer_sizes)
        buffers = (
            np.zeros((workers, acts), np.float32),
            np.zeros((workers, sds), np.float32),
            np.zeros((workers, noise), np.float32),
            np.zeros((workers, 5, m * batch * widest), np.float32),  # 4: layer 1's kept gamma
            np.zeros((workers, _WORKER_VECTORS, self.num_params), np.float32),
            np.zeros((workers, batch), np.int64),
        )
        self._workspace = (batch, workers, *buffers)
        return buffers

    def _data(self, x, y, mask, weights, seeds):
        x = np.asarray(x, np.float32)
        x = np.ascontiguousarray(x.reshape(x.shape[0], x.shape[1], -1))
        kl_weights = self.kl_scale * np.asarray(weights, np.float64) / self.num_params
        keys = (np.asarray(seeds).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
        workers = max(1, min(get_num_threads(), x.shape[0]))
        buffers = self.workspace(max(x.shape[1], 1), workers)
        return x, np.asarray(y, np.int64), np.asarray(mask, np.float32), kl_weights, keys, buffers

    def rho_phase(self, mu_t, rho_t, x, y, mask, weights, seeds, out, device_steps=None):
        """Phase 1 of every device: E = ``len(seeds)`` steps on the increment of the
        covariance parameter from 0 (``seeds`` [E, K, 2]: step s of device k draws its
        noise under ``seeds[s, k]``).

        ``device_steps`` [K] (optional, each in 1..E): device k takes that many steps.
        Output: (``out``: the devices' ``Delta_rho`` [K, d], float32, written;
        objective before each step [E, K] float32 (a stopped device's later ones repeat
        its last); floor hits summed over the steps and devices, int32).
        """
        x, y, mask, kl_weights, keys, buffers = self._data(x, y, mask, weights, seeds)
        _check_phase_output(out, (x.shape[0], self.num_params))
        losses = np.empty((2, *keys.shape[:2]), np.float64)
        hits = np.empty(x.shape[0], np.int64)
        rho_t = read_only(rho_t)
        sigma_t, anchor, limit = self.reading.phase_constants(rho_t, self.min_precision)
        with LAUNCH, single_threaded_blas():
            _rho_phase(
                self.reading.code, read_only(mu_t), rho_t, sigma_t, anchor, limit,
                self.reading.increasing, x, y, mask, kl_weights, keys, self.num_mc, self.nll_mean,
                self.phase1_learning_rate, self.layers, *sampling.tables(), *buffers, out, losses, hits,
                _device_steps(device_steps, keys),
            )
        return out, _objective(losses, kl_weights), np.int32(hits.sum())

    def nu_phase(self, delta_rho_k, delta_rho, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds, out,
                 device_steps=None):
        """Phase 2 of every device: ``ratio_k``, E = ``len(seeds)`` steps from ``z = 0``
        and ``Delta_nu_k = c_k mu_t + z_k`` (:meth:`learning.local.trainer.LocalBackend.nu_phase`;
        ``ratio_k`` and the result in the IEEE order of
        :func:`learning.local.fused_local.phase2_ratio` / :func:`~learning.local.fused_local.phase2_update`).

        Input: the devices' phase-1 updates ``delta_rho_k`` [K, d]; ``delta_rho`` [d],
        the applied global update; ``mu_t``, ``rho_next``, ``prior_rho`` [d]; data,
        pi_k and ``seeds`` [E, K, 2]; ``device_steps`` as in :meth:`rho_phase`. Output:
        (``out``: ``Delta_nu_k`` [K, d], written; objective before each step [E, K] float32).
        """
        x, y, mask, kl_weights, keys, buffers = self._data(x, y, mask, weights, seeds)
        delta_rho_k = read_only(delta_rho_k)
        _check_phase_output(out, delta_rho_k.shape)
        if np.shares_memory(out, delta_rho_k):
            raise ValueError("out must not share memory with delta_rho_k")
        var, prior_rho, prior_term = _phase2_constants(rho_next, prior_rho)
        losses = np.empty((2, *keys.shape[:2]), np.float64)
        with LAUNCH, single_threaded_blas():
            _nu_phase(
                delta_rho_k, read_only(delta_rho), read_only(rho_next), read_only(mu_t),
                read_only(var), read_only(prior_rho), x, y, mask, kl_weights, keys, self.num_mc, self.nll_mean,
                self.learning_rate, self.layers, *sampling.tables(), *buffers, out, losses,
                _device_steps(device_steps, keys),
            )
        return out, _objective(losses, kl_weights, prior_term)


def _device_steps(device_steps, keys) -> np.ndarray:
    """The steps each device takes, int64 [K] (all E = ``len(keys)`` when None; each
    checked to lie in 1..E)."""
    num_steps, num_devices = keys.shape[0], keys.shape[1]
    if device_steps is None:
        return np.full(num_devices, num_steps, np.int64)
    steps = np.asarray(device_steps, np.int64)
    if steps.shape != (num_devices,) or steps.min(initial=1) < 1 or steps.max(initial=1) > num_steps:
        raise ValueError(f"device_steps must be [K = {num_devices}] in 1..{num_steps}, got {steps}")
    return steps


def _objective(parts, kl_weights, prior_term=0.0):
    """The local objective per device, float32, from the kernels' float64 ``parts``
    [2, ...] = (task loss, KL sum without lambda_k): ``task + lambda_k (KL +
    prior_term)``, formed in float64 outside the fast-math kernel."""
    return (parts[0] + kl_weights * (parts[1] + prior_term)).astype(np.float32)


def _phase2_constants(rho_next, prior_rho):
    """Phase 2's shared variances ``1 / rho_{t+1}`` (as ``std^2``, the TF path's form),
    ``prior_rho`` as float32 and the prior's constant KL term (0 for the fresh prior)."""
    rho_next = np.ascontiguousarray(rho_next, np.float32)
    prior_rho = np.ascontiguousarray(prior_rho, np.float32)
    std = (np.float32(1.0) / np.sqrt(rho_next)).astype(np.float32)
    gap = rho_next.astype(np.float64) / prior_rho - 1.0  # 0 when the prior is the fresh one
    prior_term = 0.5 * float(np.sum(np.log1p(gap) - gap / (1.0 + gap)))
    return std * std, prior_rho, prior_term


def _check_phase_output(out, shape):
    """Raise ``ValueError`` unless ``out`` is a C-contiguous float32 array of ``shape``."""
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != tuple(shape) \
            or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {tuple(shape)}, got {out!r:.80}")
