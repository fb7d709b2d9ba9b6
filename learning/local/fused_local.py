"""The exact estimator's local steps for the MLP, device by device, without TensorFlow.

On the Numba backend (the MLP), everything a local step does is either the
network on the weight sample (:mod:`learning.local.fused_mlp`) or elementwise algebra on
``d``-vectors, here one parallel Numba pass per step and device with the gradients
written out by hand (what that saves against the TF graph: ``benchmarks/README.md``). They
are the gradients TensorFlow's autodiff forms on :class:`learning.local.objective.LocalObjective`'s
objectives (the conformance suite compares the two backends phase by phase):

* phase 1 (``rho_objective``): the iterate is the increment ``delta`` of the covariance
  parameter; ``sigma_k``, ``dL/ddelta`` and the KL come from
  :mod:`learning.local.covariance` (``q = sigma_k / sigma_t - 1`` and its slope, the chain
  rule :func:`learning.local.covariance.phase1_gradient`), then the step and the precision
  floor (a bound on delta);
* phase 2 (``nu_objective``): ``shift = ratio * z``, sampling mean ``mu_t + shift``,
  ``dL/dz = ratio * (dL_task/dmean + lambda_k * prior_rho * shift)`` (the KL is
  ``1/2 sum prior_rho shift^2``, plus a constant with ``phase2_prior = "previous"``).

The task loss and ``dL/dlogits`` (the masked, summed or averaged softmax cross-entropy
of eq. ``task_loss``, averaged over the M samples) are formed in NumPy on the [M, B, C]
logits. Device k's weights are the fused sampler's draw under ``seeds[k]``, exactly
as on the TF path.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from learning.local import covariance
from learning.local.fused_mlp import FusedMLP, Workspace
from native.float_control import flush_subnormals, restore_float_control
from native.launch import LAUNCH, read_only

_BLOCK = 2048
"""Elements per work item of the elementwise passes (the updates: partial sums in
float32 within a block, across blocks in float64)."""


@njit(parallel=True, nogil=True, cache=True, fastmath=True)
def _shifted_mean(mu, ratio, z, out):
    """``out = mu + ratio * z`` (the phase-2 sampling mean, float32 [d])."""
    for block in prange((out.size + _BLOCK - 1) // _BLOCK):
        control = flush_subnormals()
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, out.size)
        mu_b, ratio_b, z_b, out_b = mu[lo:hi], ratio[lo:hi], z[lo:hi], out[lo:hi]
        for i in range(out_b.size):  # over the views: no wraparound checks, so it vectorises
            out_b[i] = mu_b[i] + ratio_b[i] * z_b[i]
        restore_float_control(control)


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def phase2_ratio(delta_rho_k, delta_rho, rho_next, out):
    """Phase 2's ``ratio_k = rho_{t+1} / rho_k = 1 / (1 + c_k)``, ``c_k = (Delta_rho_k -
    Delta_rho) / rho_{t+1}`` (:meth:`learning.local.trainer.LocalBackend.nu_phase`), in one pass.

    Input: float32 ``delta_rho_k`` [K, d], ``delta_rho`` (the applied global update)
    and ``rho_next`` [d]. Output: ``out`` [K, d] (written). IEEE float32 in TF's order
    of operations (no fast-math), so the values are those of the TF path.
    """
    for k in prange(out.shape[0]):
        control = flush_subnormals()
        phase2_ratio_row(delta_rho_k[k], delta_rho, rho_next, out[k])
        restore_float_control(control)


@njit(nogil=True, cache=True, error_model="numpy")
def phase2_ratio_row(own, delta_rho, rho_next, out):
    """:func:`phase2_ratio` of one device on the calling thread (float32 [d] each)."""
    for i in range(out.size):
        out[i] = np.float32(1.0) / (np.float32(1.0) + (own[i] - delta_rho[i]) / rho_next[i])


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def phase2_update(delta_rho_k, delta_rho, rho_next, mu_t, z, out):
    """Phase 2's result ``Delta_nu_k = c_k mu_t + z_k`` (:func:`phase2_ratio`'s ``c_k``)
    in one pass: float32 [K, d] ``delta_rho_k``, ``z``; [d] ``delta_rho``, ``rho_next``,
    ``mu_t``. Output: ``out`` [K, d] (written; may be ``z`` itself)."""
    for k in prange(out.shape[0]):
        control = flush_subnormals()
        phase2_update_row(delta_rho_k[k], delta_rho, rho_next, mu_t, z[k], out[k])
        restore_float_control(control)


@njit(nogil=True, cache=True, error_model="numpy")
def phase2_update_row(own, delta_rho, rho_next, mu_t, step, out):
    """:func:`phase2_update` of one device on the calling thread (float32 [d] each)."""
    for i in range(out.size):
        out[i] = (own[i] - delta_rho[i]) / rho_next[i] * mu_t[i] + step[i]


_SERIES_BOUND = covariance.KL_SERIES_BOUND
"""Below this |u| (the precision reading's fast loop), ``log1p(u) - u / (1 + u)`` is
summed from its series in float32 (vectorised; no cancellation); above, in float64 from
``log1p`` (:func:`_rho_kl_large_block`). The other readings sum their gap in q with
:func:`learning.local.covariance.nb_kl_gap`."""


@njit(inline="always", fastmath=True, error_model="numpy")
def _series_update(code, from_var, increasing, delta, sigma_t, anchor, limit, g_std, kl_weight, rate, out):
    """:func:`_rho_update_block`'s step of a transcendental reading on the entries where
    :func:`learning.local.covariance.nb_series_applies` (float32, vectorised); returns (the gap
    sum of those entries, float32; their floored entries; the number of the others, whose
    ``out`` is to be rewritten)."""
    one, zero = np.float32(1.0), np.float32(0.0)
    kl, hits, beyond = zero, zero, zero
    for i in range(out.size):
        d = delta[i]
        small = covariance.nb_series_applies(d)
        q, slope = covariance.nb_std_change_series(code, d, sigma_t[i], anchor[i])
        gap = covariance.nb_kl_gap_series32(q)
        kl += gap if small else zero
        beyond += np.float32(not small)
        g = g_std[i]
        if from_var:
            g = g * (np.float32(2.0) * sigma_t[i] * (one + q))
        grad = (g * sigma_t[i] + kl_weight * (q * (np.float32(2.0) + q) * covariance.nb_inv1p_series32(q))) * slope
        new = d - rate * grad
        if increasing:
            hit = new > limit[i]
            out[i] = min(new, limit[i])
        else:
            hit = new < limit[i]
            out[i] = max(new, limit[i])
        hits += np.float32(hit and small)
    return kl, hits, beyond


@njit(inline="always", fastmath=True, error_model="numpy")
def _rho_update_block(code, delta, sigma_t, anchor, limit, g_std, kl_weight, rate, increasing, out,
                      from_var):
    """:func:`_rho_update` on views of one block: returns (half the KL gap, float64: for
    the precision reading of the entries with ``|u| <= _SERIES_BOUND`` only; floored
    entries; entries above that bound, whose gap :func:`_rho_kl_large_block` adds).

    ``code`` is the covariance reading (:mod:`learning.local.covariance`): ``q``, ``dq/ddelta``
    and the chain rule come from there. With ``from_var`` (the LRT step's form,
    :mod:`learning.local.fused_lrt`), ``g_std`` holds ``dL_task/dvar`` (var = sigma_k^2) and
    ``dL/dsigma_k = 2 sigma_k dL/dvar`` is formed here. The branches on ``code``,
    ``from_var`` and ``increasing`` are loop-invariant (LLVM unswitches them).

    The loop runs over ``range(out.size)`` of the views, not ``range(lo, hi)`` of the
    whole arrays: Numba proves the first index non-negative and drops its wraparound
    check, which is what lets LLVM vectorise the loop."""
    kl = np.float32(0.0)
    hits = np.float32(0.0)  # counts in float32 (exact below 2^24) so the loop vectorises
    large = np.float32(0.0)
    if code == covariance.PRECISION:
        # the same maths in the precision's own terms, in float32 so that it vectorises:
        # u = Delta / rho_t (the anchor is rho_t), sigma_k = (rho_t + Delta)^-1/2,
        # dL/dDelta = dL/dsigma_k (-sigma_k^3 / 2) + lambda_k u / (1 + u)^2 / rho_t, and
        # the KL gap log1p(u) - u / (1 + u) (equal to the q-form's gap)
        half_weight = np.float32(0.5) * kl_weight
        for i in range(out.size):
            u = delta[i] / anchor[i]
            one_plus = np.float32(1.0) + u
            small = abs(u) <= np.float32(_SERIES_BOUND)
            series = u * u * (np.float32(0.5) + u * (np.float32(-2.0 / 3.0) + u * (np.float32(0.75) + u * np.float32(-0.8))))
            kl += series * np.float32(small)
            large += np.float32(not small)
            s = np.float32(1.0) / np.sqrt(anchor[i] + delta[i])
            g = g_std[i] * (np.float32(2.0) * s) if from_var else g_std[i]
            grad = g * (np.float32(-0.5) * s * s * s)
            grad += half_weight * (u / (one_plus * one_plus)) / anchor[i]
            new = delta[i] - rate * grad
            hits += np.float32(new < limit[i])
            out[i] = max(new, limit[i])
        return 0.5 * np.float64(kl), hits, large
    # the transcendental readings: q, dq/ddelta and the gap from series in float32 where
    # they apply (vectorised, as the precision loop), the exact forms in float64 elsewhere
    kl, hits, beyond = _series_update(code, from_var, increasing, delta, sigma_t, anchor, limit,
                                      g_std, kl_weight, rate, out)
    if not beyond:
        return 0.5 * np.float64(kl), hits, large
    gap = 0.0
    for i in range(out.size):
        if covariance.nb_series_applies(delta[i]):
            continue
        q64, slope = covariance.nb_std_change(code, delta[i], sigma_t[i], anchor[i])
        gap += covariance.nb_kl_gap(np.float64(q64))
        g = g_std[i]
        if from_var:
            g = g * (np.float32(2.0) * np.float32(covariance.nb_std_of(q64, sigma_t[i])))
        grad = covariance.nb_phase1_gradient(g, q64, slope, sigma_t[i], kl_weight)
        new = delta[i] - rate * np.float32(grad)
        if increasing:
            hits += np.float32(new > limit[i])
            out[i] = min(new, limit[i])
        else:
            hits += np.float32(new < limit[i])
            out[i] = max(new, limit[i])
    return 0.5 * (np.float64(kl) + gap), hits, large


@njit(inline="always", fastmath=True, error_model="numpy")
def _rho_kl_large_block(code, delta, sigma_t, anchor):
    """Half the KL gap in float64 over the entries of these views with
    ``|u| > _SERIES_BOUND`` (the precision reading's fast loop sums the rest from the
    series)."""
    kl = 0.0
    if code == covariance.PRECISION:  # in u = Delta / rho_t, as the fast loop counts them
        for i in range(delta.size):
            u = np.float64(delta[i]) / np.float64(anchor[i])
            if abs(u) > _SERIES_BOUND:
                kl += math.log1p(u) - u / (1.0 + u)
        return 0.5 * kl
    return 0.5 * kl  # the other readings sum their gap in the update's own pass


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def _rho_update(code, delta, sigma_t, anchor, limit, g_std, kl_weight, learning_rate, increasing, out):
    """One phase-1 step of one device: ``out = clamp(delta - eta dL/ddelta, limit)``.

    Input: ``code``, the covariance reading (:mod:`learning.local.covariance`); float32 [d]
    ``delta`` (the iterate), ``sigma_t`` (= rho_t^-1/2), ``anchor`` and ``limit``
    (:meth:`learning.local.covariance.Reading.phase_constants`), ``g_std`` (dL_task/dsigma_k);
    scalars ``kl_weight`` (lambda_k), ``learning_rate`` and ``increasing`` (the floor
    bounds delta from above). Output: ``out`` [d] (written); returns (the KL term, half
    the summed gap, as float64; the number of floored entries).
    :func:`rho_update_serial` is the same on one thread.
    """
    size = out.size
    blocks = (size + _BLOCK - 1) // _BLOCK
    kl_parts = np.zeros(blocks)
    hit_parts = np.zeros(blocks, np.int64)
    large_parts = np.zeros(blocks, np.int64)
    weight = np.float32(kl_weight)
    rate = np.float32(learning_rate)
    for block in prange(blocks):
        control = flush_subnormals()
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
        kl, hits, large = _rho_update_block(
            code, delta[lo:hi], sigma_t[lo:hi], anchor[lo:hi], limit[lo:hi], g_std[lo:hi], weight, rate,
            increasing, out[lo:hi], False,
        )
        kl_parts[block] = kl
        hit_parts[block] = np.int64(hits)
        large_parts[block] = np.int64(large)
        restore_float_control(control)
    total = kl_parts.sum()
    if large_parts.sum():
        for block in prange(blocks):
            control = flush_subnormals()
            lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
            kl_parts[block] = _rho_kl_large_block(code, delta[lo:hi], sigma_t[lo:hi], anchor[lo:hi])
            restore_float_control(control)
        total += kl_parts.sum()
    return total, hit_parts.sum()


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def rho_update_serial(code, delta, sigma_t, anchor, limit, g_std, kl_weight, learning_rate, increasing, out,
                      from_var=False):
    """:func:`_rho_update` on the calling thread (for kernels that run devices in
    parallel); the same blocks and the same values. With ``from_var`` the gradient
    ``g_std`` is ``dL_task/dvar`` instead (:func:`_rho_update_block`)."""
    size = out.size
    blocks = (size + _BLOCK - 1) // _BLOCK
    weight = np.float32(kl_weight)
    rate = np.float32(learning_rate)
    total, hits, large = 0.0, 0, 0
    for block in range(blocks):
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
        kl_b, hits_b, large_b = _rho_update_block(
            code, delta[lo:hi], sigma_t[lo:hi], anchor[lo:hi], limit[lo:hi], g_std[lo:hi], weight, rate,
            increasing, out[lo:hi], from_var,
        )
        total += kl_b
        hits += np.int64(hits_b)
        large += np.int64(large_b)
    if large:
        for block in range(blocks):
            lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
            total += _rho_kl_large_block(code, delta[lo:hi], sigma_t[lo:hi], anchor[lo:hi])
    return total, hits


@njit(parallel=True, nogil=True, cache=True, fastmath=True, error_model="numpy")
def phase1_std(code, delta, sigma_t, anchor, out):
    """The device's sampling std ``sigma_k = sigma_t (1 + q)`` (float32 [d]) from its
    iterate ``delta`` under the covariance reading ``code``."""
    one = np.float32(1.0)
    for block in prange((out.size + _BLOCK - 1) // _BLOCK):
        control = flush_subnormals()
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, out.size)
        delta_b, sigma_b, anchor_b, out_b = delta[lo:hi], sigma_t[lo:hi], anchor[lo:hi], out[lo:hi]
        if code == covariance.PRECISION:  # (rho_t + Delta)^-1/2, the anchor being rho_t
            for i in range(out_b.size):
                out_b[i] = one / np.sqrt(anchor_b[i] + delta_b[i])
        else:
            for i in range(out_b.size):  # from series where they apply, else the exact forms
                if covariance.nb_series_applies(delta_b[i]):
                    q, _ = covariance.nb_std_change_series(code, delta_b[i], sigma_b[i], anchor_b[i])
                    out_b[i] = sigma_b[i] * (one + q)
                else:
                    q, _ = covariance.nb_std_change(code, delta_b[i], sigma_b[i], anchor_b[i])
                    out_b[i] = np.float32(covariance.nb_std_of(q, sigma_b[i]))
        restore_float_control(control)


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def precision_change(code, delta, sigma_t, anchor, rho_t, out):
    """Every device's transmitted ``Delta_rho_k`` [K, d] from its final iterate
    ``delta`` [K, d] (:func:`learning.local.covariance.precision_change_row`; ``out`` may be
    ``delta``)."""
    for k in prange(out.shape[0]):
        control = flush_subnormals()
        covariance.precision_change_row(code, delta[k], sigma_t, anchor, rho_t, out[k])  # NaN-safe (docs/faults.md)
        restore_float_control(control)


@njit(inline="always", fastmath=True)
def _nu_update_block(z, ratio, g_mean, prior_rho, weight, rate, out):
    """:func:`_nu_update` on views of one block; returns their ``sum prior_rho shift^2``."""
    kl = np.float32(0.0)
    for i in range(out.size):
        shift = ratio[i] * z[i]
        kl += prior_rho[i] * shift * shift
        grad = ratio[i] * (g_mean[i] + weight * prior_rho[i] * shift)
        out[i] = z[i] - rate * grad
    return kl


@njit(parallel=True, nogil=True, cache=True, fastmath=True)
def _nu_update(z, ratio, g_mean, prior_rho, kl_weight, learning_rate, out):
    """One phase-2 step of one device: ``out = z - eta dL/dz``.

    Input: float32 [d] ``z``, ``ratio`` (rho_{t+1} / rho_k), ``g_mean``
    (dL_task/dmean), ``prior_rho``; scalars ``kl_weight`` and ``learning_rate``.
    Output: ``out`` [d] (written); returns the KL term ``1/2 sum prior_rho shift^2``
    (float64). :func:`nu_update_serial` is the same on one thread.
    """
    size = out.size
    blocks = (size + _BLOCK - 1) // _BLOCK
    kl_parts = np.zeros(blocks)
    weight = np.float32(kl_weight)
    rate = np.float32(learning_rate)
    for block in prange(blocks):
        control = flush_subnormals()
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
        kl_parts[block] = _nu_update_block(
            z[lo:hi], ratio[lo:hi], g_mean[lo:hi], prior_rho[lo:hi], weight, rate, out[lo:hi]
        )
        restore_float_control(control)
    return 0.5 * kl_parts.sum()


@njit(nogil=True, cache=True, fastmath=True)
def nu_update_serial(z, ratio, g_mean, prior_rho, kl_weight, learning_rate, out):
    """:func:`_nu_update` on the calling thread; the same blocks and values."""
    size = out.size
    weight = np.float32(kl_weight)
    rate = np.float32(learning_rate)
    total = 0.0
    for block in range((size + _BLOCK - 1) // _BLOCK):
        lo, hi = block * _BLOCK, min(block * _BLOCK + _BLOCK, size)
        total += _nu_update_block(
            z[lo:hi], ratio[lo:hi], g_mean[lo:hi], prior_rho[lo:hi], weight, rate, out[lo:hi]
        )
    return 0.5 * total


FLUSH_BELOW = np.float32(np.finfo(np.float32).tiny)
"""Logit gradients below the smallest normal float32 (about 1.2e-38) are flushed to 0,
as TensorFlow's CPU thread pools flush subnormals (``port::ScopedFlushDenormal``): a
confident row's softmax gradient (``p - 1[c = y]`` with ``p`` below 1e-38) would
otherwise be subnormal and slow every product it enters downstream (on Intel CPUs, a
microcode assist per operation; benchmarks/README.md)."""


def task_loss_and_grads(
    net: FusedMLP, mean, std, seed, x, y, mask, nll_mean: bool, want: str,
    workspace: Workspace | None = None,
):
    """The MC task loss (eq. ``task_loss``) of one device and its gradient.

    Input: ``mean``, ``std`` float32 [d]; ``seed`` two integers; ``x`` [B, in]
    float32, ``y`` [B] int, ``mask`` [B] float32; ``nll_mean`` divides the NLL by
    |D_k| (``nll_reduction = "mean"``) instead of summing it; ``want`` is ``"mean"``
    or ``"std"``: the gradient that is formed; ``workspace`` (optional) is passed on
    to :class:`learning.local.fused_mlp.FusedMLP` (the gradient is then its array).
    Output: (loss as float, the gradient with respect to ``want``, float32 [d]).
    """
    logits, buffer, hidden = net.forward(mean, std, seed, x, mask, workspace=workspace)
    weight = mask.astype(np.float64)
    if nll_mean:
        weight = weight / max(float(weight.sum()), 1.0)
    top = logits.max(axis=-1, keepdims=True)
    shifted = (logits - top).astype(np.float64)
    exp = np.exp(shifted)
    total = exp.sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(shifted, np.broadcast_to(y[None, :, None], (*logits.shape[:2], 1)), -1)
    nll = (np.log(total) - picked)[..., 0]  # [M, B]
    loss = float((nll * weight).sum(axis=1).mean())
    probs = exp / total
    probs[:, np.arange(y.size), y] -= 1.0
    grad_logits = (probs * (weight[None, :, None] / net.num_mc)).astype(np.float32)
    grad_logits[np.abs(grad_logits) < FLUSH_BELOW] = 0.0  # subnormal: flushed, as TF does
    g_mean, g_std = net.backward(
        grad_logits, buffer, hidden, mean, std, x, mask,
        want_mean=want == "mean", want_std=want == "std", workspace=workspace,
    )
    return loss, g_mean if want == "mean" else g_std


def step_output(like: np.ndarray, out) -> np.ndarray:
    """Where a step writes its new ``[K, d]`` iterate: ``out`` when given (checked to
    be a float32 array of ``like``'s shape, not ``like`` itself), else a new array."""
    if out is None:
        return np.empty_like(like)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != like.shape:
        raise ValueError(f"out must be a float32 array of shape {like.shape}, got {out!r:.80}")
    if np.shares_memory(out, like):
        raise ValueError("out must not share memory with the step's input")
    return out


class FusedSteps:
    """The exact estimator's local steps for the Numba backend
    (:class:`learning.local.backend_numba.NumbaSteps`): the inputs of the TensorFlow backend's
    steps (tensors or arrays; ``seeds`` [K, 2]), outputs as NumPy arrays, one device at
    a time.

    Parameters
    ----------
    net : FusedMLP
        The network and its sampler layout.
    kl_scale, learning_rate, min_precision : float
        lambda, eta and the precision floor of :class:`learning.local.objective.LocalConfig`.
    num_params : int
        d (lambda_k = lambda pi_k / d).
    nll_mean : bool
        ``nll_reduction == "mean"``.
    covariance_parameter : str
        The phase-1 parameter (:mod:`learning.local.covariance`).
    phase1_learning_rate : float, optional
        Phase 1's step size (``LocalConfig.phase1_learning_rate``); None: ``learning_rate``.
    """

    def __init__(self, net: FusedMLP, *, kl_scale, learning_rate, min_precision, num_params, nll_mean,
                 covariance_parameter: str = "precision", phase1_learning_rate=None):
        self.net = net
        self.reading = covariance.reading(covariance_parameter)
        self.kl_scale = float(kl_scale)
        self.learning_rate = float(learning_rate)
        self.phase1_learning_rate = float(
            learning_rate if phase1_learning_rate is None else phase1_learning_rate)
        self.min_precision = float(min_precision)
        self.num_params = int(num_params)
        self.nll_mean = bool(nll_mean)
        self.workspace = Workspace(net)

    def _data(self, x, y, mask, weights, seeds):
        x = np.asarray(x, np.float32)
        x = np.ascontiguousarray(x.reshape(x.shape[0], x.shape[1], -1))
        kl_weights = self.kl_scale * np.asarray(weights, np.float64) / self.num_params
        return x, np.asarray(y), np.asarray(mask, np.float32), kl_weights, np.asarray(seeds)

    def rho_step(self, delta, mu_t, rho_t, x, y, mask, weights, seeds, out=None):
        """Phase-1 step of every device on its iterate ``delta`` [K, d] (the increment of
        the covariance parameter, :mod:`learning.local.covariance`): (new iterate [K, d],
        objective [K], floor hits). The new iterate is written into ``out`` when given
        (:func:`step_output`)."""
        x, y, mask, kl_weights, seeds = self._data(x, y, mask, weights, seeds)
        delta = np.asarray(delta, np.float32)
        mu_t = read_only(mu_t)
        reading = self.reading
        sigma_t, anchor, limit = reading.phase_constants(rho_t, self.min_precision)
        new = step_output(delta, out)
        losses = np.empty(delta.shape[0], np.float32)
        std = np.empty_like(sigma_t)
        hits = 0
        for k in range(delta.shape[0]):
            own = np.ascontiguousarray(delta[k])
            with LAUNCH:
                phase1_std(reading.code, own, sigma_t, anchor, std)
            task, g_std = task_loss_and_grads(
                self.net, mu_t, std, seeds[k], x[k], y[k], mask[k], self.nll_mean, want="std",
                workspace=self.workspace,
            )
            with LAUNCH:
                kl, floored = _rho_update(
                    reading.code, own, sigma_t, anchor, limit, g_std, kl_weights[k],
                    self.phase1_learning_rate, reading.increasing, new[k],
                )
            losses[k] = task + kl_weights[k] * kl
            hits += floored
        return new, losses, np.int32(hits)

    def nu_step(self, z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds, out=None):
        """Phase-2 step of every device: (new ``z`` [K, d], objective [K]); ``out`` as in
        :meth:`rho_step`."""
        x, y, mask, kl_weights, seeds = self._data(x, y, mask, weights, seeds)
        z = np.asarray(z, np.float32)
        ratio = np.asarray(ratio, np.float32)
        mu_t, rho_next, prior_rho = read_only(mu_t), read_only(rho_next), read_only(prior_rho)
        std = (np.float32(1.0) / np.sqrt(rho_next)).astype(np.float32)
        gap = rho_next.astype(np.float64) / prior_rho - 1.0  # 0 when the prior is the fresh one
        prior_term = 0.5 * float(np.sum(np.log1p(gap) - gap / (1.0 + gap)))
        new = step_output(z, out)
        losses = np.empty(z.shape[0], np.float32)
        mean = np.empty_like(mu_t)
        for k in range(z.shape[0]):
            zk, rk = np.ascontiguousarray(z[k]), np.ascontiguousarray(ratio[k])
            with LAUNCH:
                _shifted_mean(mu_t, rk, zk, mean)
            task, g_mean = task_loss_and_grads(
                self.net, mean, std, seeds[k], x[k], y[k], mask[k], self.nll_mean, want="mean",
                workspace=self.workspace,
            )
            with LAUNCH:
                kl = _nu_update(zk, rk, g_mean, prior_rho, kl_weights[k], self.learning_rate, new[k])
            losses[k] = task + kl_weights[k] * (kl + prior_term)
        return new, losses
