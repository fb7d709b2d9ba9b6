"""The definitions of the proposed method's local training: the objectives of both phases.

This module is the reference: every backend of the local steps (:mod:`learning.local.trainer`)
minimises these objectives, and the conformance suite (``tests/learning/test_conformance.py``)
holds each backend to TensorFlow's autodiff of them.

Local objective (eq. ``localLoss``), per device k::

    L_k = L_task,k + lambda_k KL[q_k || prior],      lambda_k = lambda pi_k / d,

with the MC task loss (eq. ``task_loss``) ``L_task,k = 1/M sum_m -log p(D_k | w_m)``:
the negative log-likelihood is *summed* over the whole local dataset (B = |D_k|,
padding rows masked out), the paper's reading; ``nll_reduction="mean"`` divides it by
|D_k| instead (an option, not the default). ``lambda`` is ``kl_scale`` (the paper: K).

Phase 1 (Algorithm 1 lines 4-7, eq. ``update_phase1``): the device's covariance starts
at the global one; E plain gradient steps on the parameter ``covariance_parameter``
names (:mod:`learning.local.covariance`: the precision itself as the paper writes it, or
bayesian-torch's softplus parameter of sigma, log sigma, log rho) with the mean fixed
at mu_t (samples ``w = mu_t + sigma_k eps``), KL to N(mu_t, Sigma_t). Whatever the
parameter, the update sent is ``Delta_rho_k = rho_k - rho_t`` (eq. ``rho_normal``).

Phase 2 (eq. ``nu_def`` and the nu updates): nu_k starts at ``rho_k / rho_{t+1} mu_t``;
the local mean it implies is ``mu_k = rho_{t+1} / rho_k nu_k`` and the samples are
``w = rho_{t+1}^-1/2 eps + mu_k`` (the new global covariance is the common
approximation, so ``q_k = N(mu_k, Sigma_{t+1})``); E steps on nu_k. The paper leaves
the prior of this KL implicit: by default it is the freshest global posterior
N(mu_t, Sigma_{t+1}) (``phase2_prior="fresh"``), optionally the round's prior
N(mu_t, Sigma_t) (``"previous"``). Update ``Delta_nu_k = nu_k - mu_t``: the paper's
``nu_{t,k} - nu_t`` with ``nu_t = mu_t``, so that ``mu_{t+1} = sum_k pi_k nu_k`` under
exact aggregation (eq. ``mu_update``), which with ``rho_{t+1} = sum_k pi_k rho_k`` is
exactly the Gaussian conflation (eqs. ``Sigma``, ``mu_sigma``) of the local posteriors
N(rho_{t+1}/rho_k nu_k, diag(rho_k)^-1).

Float32 resolution: the optimisation variables are the *updates*, not rho_k and nu_k.
With the default initial std 0.05 the precision is ~400, whose float32 spacing (3e-5)
exceeds a typical step on rho (~1e-5): iterating on rho_k itself rounds every step away
and ``rho_k - rho_t`` comes out exactly 0. So phase 1 iterates on the increment
``delta`` of its parameter (start 0; for the precision reading ``delta = Delta_rho_k``
and the steps are the same maths as on rho) and forms ``Delta_rho_k`` from the final
``delta`` without cancellation (:meth:`LocalObjective.precision_change`).
Phase 2 iterates on ``z_k = nu_k - nu_k(init)`` (start 0) and returns
``Delta_nu_k = c_k mu_t + z_k`` with ``c_k = rho_k / rho_{t+1} - 1`` computed as
``(Delta_rho_k - Delta_rho) / rho_{t+1}``, ``Delta_rho = rho_{t+1} - rho_t`` the applied
global update (no difference of two ~400 numbers); the sampling mean is
``mu_k = mu_t + z_k / (1 + c_k)`` (= ``rho_{t+1} / rho_k nu_k``). The KL terms are written
in the same increments (``log1p``; the phase-1 KL gradient ``q (2 + q) / (1 + q)`` with
``q = sigma_k / sigma_t - 1`` is given explicitly), so nothing cancels either.

Gradient estimators (``estimator``):

* ``"reparameterization"`` (the paper, eq. ``task_loss``): a fresh full weight sample
  ``w_m = mean + std * eps_m`` per MC sample and device, each parameter tensor sampled
  directly in its layer shape ``[K, M, *shape]``. The gradient with respect to the
  standard deviation is formed as ``sum_m g_m (w_m - mean) / std`` (= ``sum_m g_m eps_m``),
  so the noise tensor is not kept alive for the backward pass.
* ``"local_reparameterization"`` (Kingma et al. 2015): the pre-activations of every
  dense layer are sampled, mean ``h mu`` and variance ``h^2 sigma^2``, with independent
  noise per sample and row (``Model.logits_lrt``). Same objective, lower-variance
  gradient, ``M B out`` instead of ``M in out`` random numbers per layer.

Noise (``noise``, :mod:`learning.runtime`): ``"philox"`` draws with :mod:`native.sampling`
(Philox-4x32-10 and a ziggurat; the exact estimator's whole sample of a device in one
sweep, the LRT's pre-activation noise on the real rows of each device), the numbers the
Numba backend draws; ``"tensorflow"`` with ``tf.random.stateless_normal``
(:func:`_draw_weights`, :func:`learning.posterior.device_normal`). Same distribution,
different numbers.

Randomness: device k's noise in step i depends only on ``fold_in(fold_in(seed, i), id_k)``
(``device_ids`` default ``0..K-1``), so a batch of K devices reproduces K single-device
runs exactly (XLA draws different normals from the same seed than TF's CPU kernel, so a
run replays bit-for-bit under the same ``jit_compile`` setting). Precision floor: every
iterate is clamped so that ``rho_t + Delta_rho_k >= min_precision``
(:meth:`LocalObjective.floor`), and the number of clamped entries is returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from learning.hyperparameters import BayesAirCompParameters
from learning.local import covariance
from learning.models.model import Model
from learning.posterior import device_seeds, kl_precision
from learning.runtime import NOISE_SOURCES, NUMBA_ARCHITECTURES

NOISE = tuple(n for n in NOISE_SOURCES if n != "auto")


@dataclass(frozen=True)
class LocalConfig:
    """Hyper-parameters of the local training (Table II defaults for MNIST).

    Attributes
    ----------
    kl_scale : float
        lambda in ``lambda_k = lambda pi_k / d`` (eq. ``localLoss``; the paper: K).
    learning_rate : float
        eta.
    local_steps : int
        E gradient steps per phase.
    mc_samples : int
        M Monte-Carlo samples per step (eq. ``task_loss``).
    estimator : str
        ``"reparameterization"`` or ``"local_reparameterization"``.
    min_precision : float
        Floor on every precision entry (1.0: no weight std above 1).
    phase2_prior : str
        ``"fresh"`` (N(mu_t, Sigma_{t+1})) or ``"previous"`` (N(mu_t, Sigma_t)).
    nll_reduction : str
        ``"sum"`` over the local dataset (the paper) or ``"mean"``.
    covariance_parameter : str
        The parameter phase 1's steps act on (:mod:`learning.local.covariance`):
        ``"precision"`` (the paper's text), ``"softplus_std"`` (bayesian-torch's),
        ``"log_std"`` or ``"log_precision"``. The transmitted update is the change of the
        precision whatever the reading.
    covariance_learning_rate : float or None
        Phase 1's step size (beyond the paper: the covariance parameter's own step);
        None: ``learning_rate``, the paper's single eta (:attr:`phase1_learning_rate`).

    How the steps run (backend, noise, XLA) is :class:`learning.runtime.Runtime`.
    """

    kl_scale: float
    learning_rate: float = 0.1
    local_steps: int = 3
    mc_samples: int = 5
    estimator: str = "reparameterization"
    min_precision: float = 1.0
    phase2_prior: str = "fresh"
    nll_reduction: str = "sum"
    covariance_parameter: str = "precision"
    covariance_learning_rate: float | None = None

    def __post_init__(self):
        # the keys' rules are the proposed method's model (learning.hyperparameters);
        # kl_scale is here the resolved number lambda, which may be 0 (no KL term)
        BayesAirCompParameters.check(**{key: getattr(self, key) for key in (
            "learning_rate", "local_steps", "mc_samples", "estimator", "min_precision",
            "phase2_prior", "nll_reduction", "covariance_parameter")})
        rate = self.covariance_learning_rate
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            raise ValueError(f"covariance_learning_rate: must be > 0 or None (got {rate!r})")
        if not self.kl_scale >= 0:
            raise ValueError(f"kl_scale: must be >= 0 (got {self.kl_scale!r})")

    @property
    def phase1_learning_rate(self) -> float:
        """The step size of phase 1 (eq. ``update_phase1``): ``covariance_learning_rate``,
        or ``learning_rate`` when that is None (the paper)."""
        if self.covariance_learning_rate is None:
            return self.learning_rate
        return float(self.covariance_learning_rate)

    @property
    def lrt(self) -> bool:
        """True for the local reparameterization."""
        return self.estimator == "local_reparameterization"


def _draw_weights(mean, std, seeds, num_mc: int, shape, stream: int) -> tf.Tensor:
    """``w = mean + std * eps`` per device, eps drawn inside the per-device map.

    Input: ``mean``, ``std`` ``[K or 1, *shape]``, ``seeds`` [K, 2]. Output: [K, M, *shape].
    Device k's eps is ``stateless_normal([M, *shape], fold_in(seeds[k], stream))`` (the
    stream of :func:`learning.posterior.device_normal`); drawing it next to its use keeps
    the noise of one device (a few MB) in cache and never materialises eps for all K.
    """
    shared_mean, shared_std = mean.shape[0] == 1, std.shape[0] == 1

    def one(i):
        seed = tf.random.experimental.stateless_fold_in(seeds[i], stream)
        eps = tf.random.stateless_normal([num_mc, *shape], seed)
        m = mean[0] if shared_mean else mean[i]
        s = std[0] if shared_std else std[i]
        return m + s * eps

    return tf.map_fn(one, tf.range(tf.shape(seeds)[0]), fn_output_signature=tf.float32)


def _sample_weights(mean, std, seeds, num_mc: int, shape, stream: int) -> tf.Tensor:
    """Differentiable weight sample ``[K, M, *shape]`` (see :func:`_draw_weights`).

    The backward pass uses ``eps = (w - mean) / std``, so no noise is kept for it:
    ``dL/dstd = sum_m g_m (w_m - mean) / std``.
    """

    @tf.custom_gradient
    def sample(mean, std):
        w = _draw_weights(mean, std, seeds, num_mc, shape, stream)

        def grad(g):
            g_mean = tf.reduce_sum(g, axis=1)
            g_std = tf.reduce_sum(g * (w - mean[:, None]), axis=1) / std
            if mean.shape[0] == 1:
                g_mean = tf.reduce_sum(g_mean, axis=0, keepdims=True)
            if std.shape[0] == 1:
                g_std = tf.reduce_sum(g_std, axis=0, keepdims=True)
            return g_mean, g_std

        return w, grad

    return sample(mean, std)


@tf.custom_gradient
def _log_precision_gap(u):
    """``log1p(u) - u / (1 + u)`` (= ``log(rho_q / rho_p) + rho_p / rho_q - 1`` for
    ``rho_q = rho_p (1 + u)``, Lemma 1's precision terms) with its derivative
    ``u / (1 + u)^2`` written out: autodiff would form it as ``1/(1+u) - 1/(1+u)^2``,
    which cancels to rounding noise for the ``u ~ 1e-8`` of a phase-1 update.
    Input/Output: ``[..., d]`` tf.float32 (elementwise).
    """
    one_plus = 1.0 + u

    def grad(g):
        return g * u / tf.square(one_plus)

    return tf.math.log1p(u) - u / one_plus, grad


def _std_change(reading: covariance.Reading, delta, rho_t, sigma_t):
    """``q = sigma_k / sigma_t - 1`` of the covariance reading, differentiable in
    ``delta`` with the reading's own slope (:meth:`learning.local.covariance.Reading.std_change`,
    the same formulas as the Numba kernels). Input/Output: ``[..., d]`` tf.float32."""
    anchor = reading.anchor(rho_t, sigma_t, tf.math)

    @tf.custom_gradient
    def change(delta):
        q, slope = reading.std_change(delta, sigma_t, anchor, tf.math)
        return q, lambda g: g * slope

    return change(delta)


@tf.custom_gradient
def _kl_gap(q):
    """:func:`learning.local.covariance.kl_gap` on tensors (its series below
    ``KL_SERIES_BOUND``) with the derivative ``2 q (2 + q) / (1 + q)`` written out
    (autodiff of the difference cancels at small q). Input/Output: ``[..., d]``."""
    series = covariance.kl_gap_series(q)
    exact = covariance.kl_gap_exact(q, tf.math)

    def grad(g):
        return g * 2.0 * covariance.kl_gap_slope(q)

    return tf.where(tf.abs(q) <= covariance.KL_SERIES_BOUND, series, exact), grad


def philox_lrt_noise(mask):
    """The LRT's pre-activation noise drawn by :mod:`native.sampling`, as a
    ``noise(device_seeds, shape, stream)`` for :meth:`learning.models.model.Model.logits_lrt`.

    Device k's noise of layer ``stream`` is ``standard_normal([S, n_k, out], seed_k,
    stream)`` on its ``n_k`` real rows (``mask[k] > 0``, in order), zeros on padding rows:
    what :mod:`learning.local.fused_lrt` draws. Input: ``mask`` [K, B] tf.float32; the returned
    function takes ``device_seeds`` [K, 2] tf.int32 and ``shape`` ``[S, B, out]`` and
    gives ``[K, S, B, out]`` tf.float32 (graph mode, ``numpy_function``; no XLA).
    """

    from native.sampling import standard_normal  # Numba: only where Philox noise is asked for

    def draw(seeds, mask, dims, stream):
        out = np.zeros((seeds.shape[0], *dims), np.float32)
        for k in range(seeds.shape[0]):
            rows = np.flatnonzero(mask[k] > 0)
            out[k][:, rows] = standard_normal([dims[0], rows.size, *dims[2:]], seeds[k], int(stream))
        return out

    def noise(seeds, shape, stream=0):
        dims = tf.stack([tf.cast(s, tf.int32) for s in shape])
        eps = tf.numpy_function(draw, [seeds, mask, dims, stream], tf.float32, stateful=False)
        return tf.reshape(eps, tf.concat([tf.shape(seeds)[:1], dims], 0))

    return noise


class LocalObjective:
    """The local objectives of both phases for all devices at once (the definitions).

    Parameters
    ----------
    model : Model
        The architecture.
    config : LocalConfig
        Hyper-parameters.
    noise : str
        ``"philox"`` or ``"tensorflow"``: the generator of the MC noise (module docstring).
    """

    def __init__(self, model: Model, config: LocalConfig, *, noise: str):
        if noise not in NOISE:
            raise ValueError(f"noise must be one of {NOISE}, got {noise!r}")
        if noise == "philox" and config.lrt and model.name not in NUMBA_ARCHITECTURES:
            raise ValueError(f"noise 'philox': the local-reparameterization graph of "
                             f"{model.name!r} draws its noise with TensorFlow")
        self.model = model
        self.config = config
        self.noise = noise
        self.reading = covariance.reading(config.covariance_parameter)

    def task_loss(self, mean, std, x, y, mask, step_seeds):
        """MC task loss (eq. ``task_loss``): ``[K]``.

        Input: mean and standard deviation of the sampling distribution ``[K or 1, d]``,
        data ``x`` [K, B, ...], ``y`` [K, B] int32, ``mask`` [K, B], ``step_seeds`` [K, 2].
        The mask also reaches the model (batch-norm statistics of the convnets skip
        padding rows; the MLP ignores it).
        """
        num_devices = tf.shape(x)[0]
        num_mc = self.config.mc_samples
        if not self.config.lrt and self.noise == "philox":
            logits = self.model.logits_sampled(mean, std, step_seeds, num_mc, x, mask)
        elif not self.config.lrt:
            means, stds = self.model.unflatten(mean), self.model.unflatten(std)
            params = [
                _sample_weights(m, s, step_seeds, num_mc, shape, stream=i)
                for i, (m, s, shape) in enumerate(
                    zip(means, stds, self.model.param_shapes, strict=True)
                )
            ]
            logits = self.model.logits_from_params(params, x, mask=mask)
        else:
            var = tf.square(std)
            if not self.model.lrt_shared_params:
                full = [num_devices, self.model.num_params]
                mean, var = tf.broadcast_to(mean, full), tf.broadcast_to(var, full)
            noise = {"noise": philox_lrt_noise(mask)} if self.noise == "philox" else {}
            logits = self.model.logits_lrt(mean, var, x, num_mc, step_seeds, mask=mask, **noise)
        labels = tf.broadcast_to(y[:, None], tf.shape(logits)[:-1])
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        nll = tf.reduce_sum(nll * mask[:, None], axis=-1)  # [K, M]
        if self.config.nll_reduction == "mean":
            nll = nll / tf.maximum(tf.reduce_sum(mask, -1, keepdims=True), 1.0)
        return tf.reduce_mean(nll, axis=1)

    def kl_weights(self, weights):
        """lambda_k = lambda pi_k / d, ``[K]``."""
        return self.config.kl_scale * weights / float(self.model.num_params)

    def objective(self, mean, rho, prior_mu, prior_rho, data_x, data_y, mask, weights, seeds):
        """Local objective (eq. ``localLoss``) of q_k = N(mean_k, diag(rho_k)^-1): ``[K]``."""
        task = self.task_loss(mean, tf.math.rsqrt(rho), data_x, data_y, mask, seeds)
        kl = kl_precision(mean, rho, prior_mu, prior_rho)
        return task + self.kl_weights(weights) * kl

    def rho_objective(self, delta, mu_t, rho_t, data_x, data_y, mask, weights, seeds):
        """Phase-1 objective in the increment: :meth:`objective` of ``N(mu_t, sigma_k^2)``
        with prior ``N(mu_t, Sigma_t)``: ``[K]``.

        Input: ``delta`` [K, d], the increment of the covariance parameter
        (:mod:`learning.local.covariance`: ``sigma_k = sigma_t (1 + q(delta))``); global
        ``mu_t``, ``rho_t`` [d], data, pi_k, seeds [K, 2]. The KL is Lemma 1 with equal
        means, ``1/2 sum gap(q)`` (no cancellation at small q).
        """
        sigma_t = tf.math.rsqrt(rho_t)
        q = _std_change(self.reading, delta, rho_t, sigma_t)
        std = covariance.std_of(q, sigma_t)
        task = self.task_loss(mu_t[None], std, data_x, data_y, mask, seeds)
        kl = 0.5 * tf.reduce_sum(_kl_gap(q), axis=-1)
        return task + self.kl_weights(weights) * kl

    def floor(self, delta, rho_t):
        """Clamp the phase-1 iterate ``delta`` [K, d] where ``rho_k`` would fall below
        ``min_precision`` (:meth:`learning.local.covariance.Reading.limit`): (clamped iterate
        [K, d], clamped entries per device [K] int32). The bound is formed as
        :meth:`learning.local.covariance.Reading.phase_constants` forms it for the Numba
        kernels: in float32 for the precision reading, else in float64 (an entry of
        ``rho_t`` at the floor gives 0), then rounded to float32."""
        if self.reading.code == covariance.PRECISION:
            limit = self.reading.limit(rho_t, self.config.min_precision, tf.math)
        else:
            wide = self.reading.limit(tf.cast(rho_t, tf.float64), self.config.min_precision, tf.math)
            limit = tf.cast(tf.where(tf.math.is_nan(wide), tf.zeros_like(wide), wide), tf.float32)
        if self.reading.increasing:
            return tf.minimum(delta, limit), tf.reduce_sum(tf.cast(delta > limit, tf.int32), axis=-1)
        return tf.maximum(delta, limit), tf.reduce_sum(tf.cast(delta < limit, tf.int32), axis=-1)

    def precision_change(self, delta, rho_t):
        """The transmitted ``Delta_rho_k = rho_k - rho_t`` [K, d] from the phase-1 iterate
        ``delta`` [K, d] (itself for the ``precision`` reading)."""
        if self.reading.code == covariance.PRECISION:
            return delta
        sigma_t = tf.math.rsqrt(rho_t)
        anchor = self.reading.anchor(rho_t, sigma_t, tf.math)
        q, _ = self.reading.std_change(delta, sigma_t, anchor, tf.math)
        return rho_t * covariance.relative_precision_change(q)

    def nu_objective(self, z, ratio, mu_t, rho_next, prior_rho, data_x, data_y, mask, weights, seeds):
        """Phase-2 objective in the increment ``z_k = nu_k - nu_k(init)``: ``[K]``.

        :meth:`objective` of ``N(mu_t + ratio z_k, Sigma_{t+1})`` (``ratio = rho_{t+1} /
        rho_k``, so the mean is ``rho_{t+1} / rho_k nu_k``) with prior
        ``N(mu_t, diag(prior_rho)^-1)``. Input: ``z``, ``ratio`` [K, d]; ``mu_t``,
        ``rho_next``, ``prior_rho`` [d] (``prior_rho`` is taken to be ``rho_next`` when
        ``phase2_prior="fresh"``); data, pi_k, seeds [K, 2].
        """
        shift = ratio * z  # mu_k - mu_t
        std = tf.math.rsqrt(rho_next)[None]
        task = self.task_loss(mu_t[None] + shift, std, data_x, data_y, mask, seeds)
        kl = 0.5 * tf.reduce_sum(prior_rho * tf.square(shift), axis=-1)
        if self.config.phase2_prior != "fresh":  # "fresh": q and prior share Sigma_{t+1}
            kl += 0.5 * tf.reduce_sum(_log_precision_gap(rho_next / prior_rho - 1.0))
        return task + self.kl_weights(weights) * kl

    def phase2_prior_precision(self, rho_t, rho_next):
        """The precision of phase 2's KL prior N(mu_t, diag(prior_rho)^-1): ``rho_next``
        (``phase2_prior = "fresh"``, Sigma_{t+1}) or ``rho_t`` (``"previous"``), [d]."""
        return rho_next if self.config.phase2_prior == "fresh" else rho_t

    @staticmethod
    def phase2_offset(delta_rho_k, delta_rho_global, rho_next):
        """``c_k = rho_k / rho_{t+1} - 1 = (Delta_rho_k - Delta_rho) / rho_{t+1}`` [K, d]
        (eq. ``nu_def``'s start ``nu_k = (1 + c_k) mu_t``), with no difference of two large
        precisions; phase 2's sampling ratio is ``rho_{t+1} / rho_k = 1 / (1 + c_k)``
        (eq. ``weighting_agg``)."""
        return (delta_rho_k - delta_rho_global) / rho_next

    @staticmethod
    def phase2_update(offset, mu_t, z):
        """The transmitted ``Delta_nu_k = nu_k - mu_t = c_k mu_t + z_k`` [K, d] from the
        phase-2 iterate ``z_k = nu_k - nu_k(init)``."""
        return offset * mu_t + z

    def step_seeds(self, seed, step, device_ids):
        """Per-device seeds of local step ``step``: ``[K, 2]``."""
        return device_seeds(tf.random.experimental.stateless_fold_in(seed, step), device_ids)

    def phase_seeds(self, seed, device_ids):
        """:meth:`step_seeds` of the E local steps of a phase: ``[E, K, 2]``."""
        return tf.stack([self.step_seeds(seed, step, device_ids) for step in range(self.config.local_steps)])
