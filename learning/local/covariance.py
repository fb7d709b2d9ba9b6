"""The covariance parameterization: the parameter a device's phase-1 steps act on.

The paper writes phase 1 as gradient steps on the precision itself (eq.
``update_phase1``: ``rho_k <- rho_k - eta dL/drho``). Its experiments used
bayesian-torch, whose variational parameter is the softplus parameter of the standard
deviation, ``sigma = log(1 + e^theta)``. The two readings take very different steps: a
step on rho changes rho by ``eta dL/dsigma rho^-3/2 / 2`` and so sigma by
``eta dL/dsigma rho^-3 / 4`` (3.3e-9 eta dL/dsigma at ``rho ~ 424``, sigma = 0.0486),
a step on theta changes sigma by ``eta dL/dsigma sigmoid(theta)^2`` (2.2e-3 eta
dL/dsigma): a ratio of 1.5e-6, as measured (precision_rel_change 1.5e-11 against 1e-5
per round at paper-MNIST size, docs/reproduction.md). This module defines every reading once, for all
training backends (:class:`learning.local.backend_tensorflow.TensorFlowSteps` and the Numba
kernels of :mod:`learning.local.fused_local` and :mod:`learning.local.fused_lrt`).

Whatever the reading, the device's local parameter is ``theta_k = theta(rho_t) +
delta`` with ``delta`` the iterate (starting at 0, so small steps are exact in
float32), and what the device transmits is the change of its *precision*,
``Delta_rho_k = rho_k - rho_t`` (eq. ``rho_normal``): the BS forms eq.
``precisionUpdate`` and an error-free channel still gives exact Gaussian conflation.

Every reading is written as the *relative change of the standard deviation*
``q = sigma_k / sigma_t - 1`` as a function of ``delta`` and its slope ``dq/ddelta``,
computed without cancellation (``expm1``, ``log1p``). The rest is shared:

* ``sigma_k = sigma_t (1 + q)``;
* KL to N(mu_t, Sigma_t) per entry (Lemma 1, eq. ``KL_div``, equal means)
  ``1/2 gap(q)``, ``gap(q) = q (2 + q) - 2 log1p(q)``, ``dgap/dq = 2 q (2 + q) / (1 + q)``;
* the chain rule of eq. ``localLoss``:
  ``dL/ddelta = (dL_task/dsigma sigma_t + lambda_k q (2 + q) / (1 + q)) dq/ddelta``
  (:func:`phase1_gradient`);
* ``Delta_rho_k = rho_t ((1 + q)^-2 - 1) = -rho_t q (2 + q) / (1 + q)^2``
  (the ``precision`` reading transmits ``delta`` itself, which is that value exactly);
* the precision floor ``rho_k >= min_precision`` as a bound on ``delta``
  (:meth:`Reading.limit`), an upper bound where q grows with delta, else a lower one.

Readings (``algorithm.covariance_parameter``):

====================  =========================  ==========================================
name                  theta                      q(delta), anchor b
====================  =========================  ==========================================
``precision``         rho (the paper's text)     ``(1 + x)^-1/2 - 1``, ``x = delta / b``, ``b = rho_t``
``softplus_std``      softplus^-1(sigma)         ``log1p(b expm1(delta)) / sigma_t``, ``b = sigmoid(theta_t)``
                      (bayesian-torch's rho)
``log_std``           log sigma                  ``expm1(delta)``
``log_precision``     log rho                    ``expm1(-delta / 2)``
====================  =========================  ==========================================

The formulas are written once over a math namespace ``xp`` and bound to ``math``
(the Numba kernels), ``tf.math`` (the TF graph) and ``numpy`` (per-phase constants).
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass

import numpy as np
from numba import njit

from learning.hyperparameters import COVARIANCE_PARAMETERS
from native.launch import read_only

PRECISION, SOFTPLUS_STD, LOG_STD, LOG_PRECISION = 0, 1, 2, 3
NAMES = COVARIANCE_PARAMETERS
"""The readings, indexed by their kernel code (``NAMES[code]``)."""

xp = math  # the math namespace the formulas below are written over (rebound per backend)


# -- the readings: q = sigma_k / sigma_t - 1 and dq/ddelta --------------------------------
def _precision_change_of_std(delta, sigma_t, b):
    x = delta / b
    root = xp.sqrt(1.0 + x)
    return -x / (root * (1.0 + root)), -0.5 / (b * root * root * root)


def _softplus_std_change_of_std(delta, sigma_t, b):
    grown = xp.expm1(delta)
    return xp.log1p(b * grown) / sigma_t, b * (1.0 + grown) / ((1.0 + b * grown) * sigma_t)


def _log_std_change_of_std(delta, sigma_t, b):
    q = xp.expm1(delta)
    return q, 1.0 + q


def _log_precision_change_of_std(delta, sigma_t, b):
    q = xp.expm1(-0.5 * delta)
    return q, -0.5 * (1.0 + q)


_FORMULAS = (
    _precision_change_of_std, _softplus_std_change_of_std, _log_std_change_of_std,
    _log_precision_change_of_std,
)


# -- the anchors and the floor: once per phase, on the host (xp = numpy) -------------------
def _precision_anchor(rho_t, sigma_t):
    return rho_t


def _softplus_std_anchor(rho_t, sigma_t):
    return -xp.expm1(-sigma_t)  # sigmoid(theta_t), theta_t = log(expm1(sigma_t))


def _no_anchor(rho_t, sigma_t):
    return sigma_t * 0.0


def _precision_limit(rho_t, sigma_t, b, min_precision):
    return min_precision - rho_t


def _softplus_std_limit(rho_t, sigma_t, b, min_precision):
    return xp.log1p(xp.expm1(min_precision**-0.5 - sigma_t) / b)


def _log_std_limit(rho_t, sigma_t, b, min_precision):
    return 0.5 * xp.log(rho_t / min_precision)


def _log_precision_limit(rho_t, sigma_t, b, min_precision):
    return xp.log(min_precision / rho_t)


@functools.cache
def _bind(function, namespace=math, **names):
    """``function`` with ``xp`` bound to ``namespace`` and the global ``names`` replaced
    (its code object unchanged; one function per binding)."""
    scope = dict(function.__globals__, xp=namespace, **names)
    return types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__)


@dataclass(frozen=True)
class Reading:
    """One covariance parameterization (see the module docstring).

    Attributes
    ----------
    name : str
        One of :data:`NAMES`.
    code : int
        Its index in :data:`NAMES` (what the Numba kernels switch on).
    increasing : bool
        True when q (sigma_k) grows with delta: the floor is then an upper bound on delta.
    """

    name: str
    code: int
    increasing: bool

    def anchor(self, rho_t, sigma_t, namespace=np):
        """The reading's per-entry constant ``b`` [d] from ``rho_t`` and
        ``sigma_t = rho_t^-1/2`` [d]."""
        function = (_precision_anchor, _softplus_std_anchor, _no_anchor, _no_anchor)[self.code]
        return _bind(function, namespace)(rho_t, sigma_t)

    def std_change(self, delta, sigma_t, anchor, namespace=np):
        """``(q, dq/ddelta)`` elementwise for arrays (``namespace=np``) or tensors
        (``namespace=tf.math``); ``delta``, ``sigma_t``, ``anchor`` broadcast."""
        return _bind(_FORMULAS[self.code], namespace)(delta, sigma_t, anchor)

    def limit(self, rho_t, min_precision: float, namespace=np):
        """The bound on delta at which ``rho_k = min_precision`` [d].

        ``rho_k >= min_precision`` is ``delta <= limit`` when :attr:`increasing`, else
        ``delta >= limit``. With ``namespace=np``: computed in float64 from ``rho_t``
        and returned as float32 (entries of rho_t at the floor give 0); with
        ``tf.math``: in ``rho_t``'s dtype.
        """
        function = (_precision_limit, _softplus_std_limit, _log_std_limit, _log_precision_limit)[self.code]
        if namespace is not np:
            sigma = namespace.rsqrt(rho_t)
            return _bind(function, namespace)(rho_t, sigma, self.anchor(rho_t, sigma, namespace),
                                              float(min_precision))
        rho = np.asarray(rho_t, np.float64)
        sigma = 1.0 / np.sqrt(rho)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = _bind(function, np)(rho, sigma, self.anchor(rho, sigma), float(min_precision))
        return np.nan_to_num(bound, nan=0.0).astype(np.float32)

    def phase_constants(self, rho_t, min_precision: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What a backend's phase-1 kernels need, once per phase: ``sigma_t``, the anchor
        ``b`` and :meth:`limit`, each float32 [d] from ``rho_t`` [d] (computed in float64 and
        rounded, except for the precision reading, whose kernels work on ``rho_t`` itself),
        read-only (:func:`native.launch.read_only`)."""
        if self.code == PRECISION:  # float32 throughout, as the kernels' precision loops use them
            rho32 = np.ascontiguousarray(rho_t, np.float32)
            constants = (np.float32(1.0) / np.sqrt(rho32), rho32, np.float32(min_precision) - rho32)
        else:
            rho = np.asarray(rho_t, np.float64)
            sigma = 1.0 / np.sqrt(rho)
            constants = (sigma.astype(np.float32), self.anchor(rho, sigma).astype(np.float32),
                         self.limit(rho, min_precision))
        return tuple(read_only(c) for c in constants)


READINGS = {name: Reading(name, code, increasing=code in (SOFTPLUS_STD, LOG_STD))
            for code, name in enumerate(NAMES)}


def reading(name: str) -> Reading:
    """The :class:`Reading` called ``name``; ``ValueError`` naming the known ones."""
    if name not in READINGS:
        raise ValueError(f"unknown covariance parameter {name!r}; known: {list(NAMES)}")
    return READINGS[name]


# -- the shared algebra (arithmetic only: the same code for arrays, tensors and Numba) ------
def std_of(q, sigma_t):
    """``sigma_k = sigma_t (1 + q)``."""
    return sigma_t * (1.0 + q)


def kl_gap_slope(q):
    """``1/2 dgap/dq = q (2 + q) / (1 + q)``: the KL's gradient per unit lambda_k."""
    return q * (2.0 + q) / (1.0 + q)


def phase1_gradient(g_std, q, slope, sigma_t, kl_weight):
    """``dL/ddelta`` of eq. ``localLoss`` from ``g_std = dL_task/dsigma_k``:
    ``(g_std sigma_t + lambda_k q (2 + q) / (1 + q)) dq/ddelta``."""
    return (g_std * sigma_t + kl_weight * kl_gap_slope(q)) * slope


def relative_precision_change(q):
    """``rho_k / rho_t - 1 = (1 + q)^-2 - 1 = -q (2 + q) / (1 + q)^2``."""
    return -q * (2.0 + q) / ((1.0 + q) * (1.0 + q))


KL_SERIES_BOUND = 0.01
"""Below this |q| the KL gap is summed from its series (relative truncation error < 2e-11:
about q^5 / 7 at |q| = 0.01)."""


def kl_gap_series(q):
    """``gap(q) = q (2 + q) - 2 log1p(q)`` (twice the per-entry KL of Lemma 1 with equal
    means) from its series ``2 q^2 - 2/3 q^3 + 1/2 q^4 - 2/5 q^5 + 1/3 q^6``: no
    cancellation at small q."""
    return q * q * (2.0 + q * (-2.0 / 3.0 + q * (0.5 + q * (-0.4 + q / 3.0))))


def _kl_gap_exact(q):
    return q * (2.0 + q) - 2.0 * xp.log1p(q)


def kl_gap_exact(q, namespace=np):
    """``gap(q) = q (2 + q) - 2 log1p(q)`` as written (for ``|q| > KL_SERIES_BOUND``), on
    arrays (``namespace=np``) or tensors (``tf.math``)."""
    return _bind(_kl_gap_exact, namespace)(q)


def kl_gap(q: np.ndarray) -> np.ndarray:
    """:func:`kl_gap_series` where ``|q| <= KL_SERIES_BOUND``, else :func:`kl_gap_exact`,
    in float64. Input/Output: arrays."""
    q = np.asarray(q, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = kl_gap_exact(q)
    return np.where(np.abs(q) <= KL_SERIES_BOUND, kl_gap_series(q), exact)


# -- Numba forms -------------------------------------------------------------------------
_NUMBA = tuple(njit(inline="always", fastmath=True, error_model="numpy")(_bind(f, math)) for f in _FORMULAS)
_nb_precision, _nb_softplus_std, _nb_log_std, _nb_log_precision = _NUMBA
nb_std_of = njit(inline="always", fastmath=True)(std_of)
nb_kl_gap_slope = njit(inline="always", fastmath=True)(kl_gap_slope)
nb_phase1_gradient = njit(inline="always", fastmath=True)(_bind(phase1_gradient, kl_gap_slope=nb_kl_gap_slope))
nb_relative_precision_change = njit(inline="always", fastmath=True)(relative_precision_change)


@njit(inline="always", fastmath=True, error_model="numpy")
def nb_std_change(code, delta, sigma_t, b):
    """:meth:`Reading.std_change` of reading ``code`` on scalars (the transcendentals in
    the inputs' float type, the rest in float64)."""
    if code == SOFTPLUS_STD:
        return _nb_softplus_std(delta, sigma_t, b)
    if code == LOG_STD:
        return _nb_log_std(delta, sigma_t, b)
    if code == LOG_PRECISION:
        return _nb_log_precision(delta, sigma_t, b)
    return _nb_precision(delta, sigma_t, b)


SERIES_DELTA_BOUND = 0.0099
"""``|delta|`` at or below which the kernels' vectorised loops take ``q``, ``dq/ddelta`` and
the KL gap of the transcendental readings (``softplus_std``, ``log_std``,
``log_precision``) from series in float32 (:func:`nb_std_change_series`); the other
entries go through the exact forms (:func:`nb_std_change`) in a second pass. A bound on
the iterate alone, so both passes take the same decision bit for bit; it keeps ``|q| <=
KL_SERIES_BOUND`` (``|q| <= |delta| (1 + |delta|)`` for every reading: ``sigmoid(theta) <=
softplus(theta)``)."""

_F32 = np.float32


@njit(inline="always", fastmath=True, error_model="numpy")
def _expm1_series32(x):
    """``expm1(x)`` for float32 ``|x| <= 0.01`` (relative truncation error < 1e-11)."""
    return x * (_F32(1.0) + x * (_F32(0.5) + x * (_F32(1.0 / 6.0) + x * (_F32(1.0 / 24.0)
                                                                          + x * _F32(1.0 / 120.0)))))


@njit(inline="always", fastmath=True, error_model="numpy")
def _log1p_series32(z):
    """``log1p(z)`` for float32 ``|z| <= 0.01`` (relative truncation error < 2e-11)."""
    return z * (_F32(1.0) + z * (_F32(-0.5) + z * (_F32(1.0 / 3.0) + z * (_F32(-0.25)
                                                                         + z * _F32(0.2)))))


@njit(inline="always", fastmath=True, error_model="numpy")
def nb_inv1p_series32(x):
    """``1 / (1 + x)`` for float32 ``|x| <= 0.01`` (relative truncation error < 1e-12):
    no division in a vectorised loop."""
    return _F32(1.0) - x * (_F32(1.0) - x * (_F32(1.0) - x * (_F32(1.0) - x * (_F32(1.0) - x))))


@njit(inline="always", fastmath=True, error_model="numpy")
def nb_kl_gap_series32(q):
    """:func:`kl_gap_series` in float32 (for ``|q| <= KL_SERIES_BOUND``)."""
    return q * q * (_F32(2.0) + q * (_F32(-2.0 / 3.0) + q * (_F32(0.5) + q * (_F32(-0.4)
                                                                             + q * _F32(1.0 / 3.0)))))


@njit(inline="always", fastmath=True, error_model="numpy")
def nb_std_change_series(code, delta, sigma_t, b):
    """``(q, dq/ddelta)`` of the transcendental reading ``code`` on float32 scalars from
    series, arithmetic only (so a loop of them vectorises); exact to float32 rounding for
    ``|delta| <= SERIES_DELTA_BOUND``, meaningless (but finite or not, never used) above.
    ``sigma_t`` and ``b`` float32."""
    one = _F32(1.0)
    if code == SOFTPLUS_STD:
        grown = _expm1_series32(delta)
        z = b * grown
        inverse = one / sigma_t  # the one division
        return _log1p_series32(z) * inverse, b * (one + grown) * nb_inv1p_series32(z) * inverse
    if code == LOG_STD:
        q = _expm1_series32(delta)
        return q, one + q
    q = _expm1_series32(_F32(-0.5) * delta)  # LOG_PRECISION
    return q, _F32(-0.5) * (one + q)


@njit(inline="always", fastmath=True, error_model="numpy")
def nb_series_applies(delta):
    """True where :func:`nb_std_change_series` is exact (``|delta| <= SERIES_DELTA_BOUND``)."""
    return abs(delta) <= _F32(SERIES_DELTA_BOUND)


@njit(nogil=True, fastmath=False, error_model="numpy")
def series_mask(delta):
    """``(beyond, keep)``: the number of entries of ``delta`` (float32 [n]) where
    :func:`nb_series_applies` does not, and (when there are any) the bool [n] of those it
    applies to (else an empty array). ``beyond`` is exactly the number of False in
    ``keep``, NaN entries included (beyond the series): compiled without fast-math, whose
    no-NaN assumption let the two loops disagree on a NaN (15 counted, 24 written, heap
    corrupted by :func:`precision_change_row` in a diverging run)."""
    beyond = 0
    for i in range(delta.size):
        beyond += np.int64(not nb_series_applies(delta[i]))
    if beyond == 0:
        return beyond, np.empty(0, np.bool_)
    keep = np.empty(delta.size, np.bool_)
    for i in range(delta.size):
        keep[i] = nb_series_applies(delta[i])
    return beyond, keep


_nb_kl_gap_series = njit(inline="always", fastmath=True)(kl_gap_series)
_nb_kl_gap_exact = njit(inline="always", fastmath=True)(_bind(_kl_gap_exact, math))


@njit(inline="always", fastmath=True)
def nb_kl_gap(q):
    """:func:`kl_gap` on a float64 scalar."""
    if abs(q) <= KL_SERIES_BOUND:
        return _nb_kl_gap_series(q)
    return _nb_kl_gap_exact(q)


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def precision_change_row(code, delta, sigma_t, b, rho_t, out):
    """The transmitted ``Delta_rho_k`` of one device from its final iterate ``delta``
    (float32 [d] each; ``out`` may be ``delta``): ``delta`` itself for the precision
    reading, else ``rho_t`` times :func:`relative_precision_change` (``q`` from the series
    where they apply, :data:`SERIES_DELTA_BOUND`)."""
    if code == PRECISION:
        out[:] = delta
        return
    beyond, keep = series_mask(delta)
    exact = np.empty(beyond, np.float32)  # the entries beyond the series, from the exact forms
    if beyond:
        j = 0
        for i in range(delta.size):
            if not keep[i] and j < beyond:  # j < beyond: never past ``exact``, whatever the inputs
                q, _ = nb_std_change(code, delta[i], sigma_t[i], b[i])
                exact[j] = np.float32(np.float64(rho_t[i]) * nb_relative_precision_change(q))
                j += 1
    if out.ctypes.data != delta.ctypes.data:
        out[:] = delta
    for i in range(out.size):  # in place: one array read and written, so the loop vectorises
        q, _ = nb_std_change_series(code, out[i], sigma_t[i], b[i])
        inverse = nb_inv1p_series32(q)
        out[i] = -rho_t[i] * q * (_F32(2.0) + q) * (inverse * inverse)
    if beyond:
        j = 0
        for i in range(out.size):
            if not keep[i] and j < beyond:
                out[i] = exact[j]
                j += 1
