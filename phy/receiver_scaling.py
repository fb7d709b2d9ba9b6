"""The receiver's scaling gamma chosen per phase with the combiner (``power.gamma = "joint"``).

In the analog chain (:mod:`phy.aircomp`) gamma sets both ends of the link: a device sends
at ``u_kf v^2`` with ``u_kf = pi_k^2 gamma / (delta_bar |h_hat_kf|^2)`` (eq.
``PowerAlloc_1``) under the budget ``sum_f u v^2 <= P`` (eq. ``PowerConst``), and the BS
scales by ``sqrt(delta_bar / gamma)`` (eq. ``delta_n``), so the estimate's receiver noise
is ``delta_bar sigma_z^2 / (2 gamma)`` per value whatever the channel. The paper fixes
gamma = sigma_z^2. A larger gamma lowers that noise as 1/gamma and makes more devices
attenuate (the power control's distortion); the channel after the combiner,
``|h_hat_kf|^2 = |m_f^H h_kf|^2``, sets where that happens.

The multi-antenna AirComp literature chooses the receiver's normalisation with the
combiner (Yang, Jiang, Shi, Ding, "Federated learning via over-the-air computation",
IEEE TWC 2020; Zhu and Huang, "MIMO over-the-air computation for
high-mobility multimodal sensing", IEEE IoT J. 2019): every device inverts its channel
exactly and ``eta = P min_k |m^H h_k|^2 / ||m||^2``, the largest scaling at which the
weakest device's inversion meets its budget. Here the analogue is
:func:`inversion_gamma`, on the model below. But the paper's power control does not
need every device to invert: a device whose budget binds attenuates its largest
amplitudes (eq. ``Opt_v``), so past that gamma the noise keeps falling while the
distortion grows from zero. :func:`joint_gamma` therefore takes the gamma that minimises
a bound on the estimate's mean squared error, distortion plus noise, by a one-dimensional
search from :func:`inversion_gamma` up (below it there is no distortion, and the noise
only falls with gamma).

The model is what the BS knows: the weights pi_k, the devices' reported update powers
``e_k = ||Delta_k||^2 / d`` (the scalars it already collects for delta_bar, eq.
``rho_avg``) and the effective channels they report, ``|h_hat_kf|^2`` after its combiner.
It does not know the values, so each device's OFDM symbol is modelled as flat,
``|Delta_kf|^2 = e_k`` on every subcarrier; the KKT amplitudes of that symbol are
``v_f = sqrt(e_k) / (1 + lambda_k u_kf)`` (eq. ``Opt_v``) and its distortion
``D_k = e_k sum_f (lambda_k u_kf / (1 + lambda_k u_kf))^2``. How the devices' errors add
up depends on how their signs agree, which the BS does not know; the paper bounds the
aggregated distortion by ``||xi||^2 <= sum_k pi_k ||e_k||^2`` (eq.
``distortion_upper_bound``, Jensen; tight when the errors align) and derives its power
control from that bound, and the same bound is used here. The squared error per OFDM
symbol is then at most::

    MSE(gamma) = sum_k pi_k D_k(gamma) + F delta_bar sigma_z^2 / (2 gamma),

the bound's two terms that depend on gamma in the paper's analysis (eqs. ``bound1``,
``bound2``: the distortion and the channel noise ``d delta_bar sigma_z^2 / (2 gamma)``).

Everything is NumPy float64 and deterministic (no random draw): the same inputs give the
same gamma.
"""

from __future__ import annotations

import numpy as np

GRID_POINTS_PER_DECADE = 4
GRID_DECADES = 8
"""The coarse search: gamma from :func:`inversion_gamma` over ``GRID_DECADES`` decades at
``GRID_POINTS_PER_DECADE`` points a decade, then golden-section search on log gamma
around the best grid point."""
SEARCH_TOLERANCE = 1e-3
"""Width of the golden-section bracket in log gamma (relative, in gamma) at which the
search stops."""
_NEWTON_ITERATIONS = 100
_NEWTON_TOLERANCE = 1e-10


def _model_terms(weights, energy_per_value, gain):
    """``c_kf = pi_k^2 e_k / (delta_bar |h_hat_kf|^2)`` [K, F] (the modelled full-inversion
    power per unit gamma; 0 on dead subcarriers and for silent devices), ``live`` [K, F]
    bool, and delta_bar (float)."""
    pi = np.asarray(weights, np.float64)
    e = np.asarray(energy_per_value, np.float64)
    g = np.asarray(gain, np.float64)
    delta_bar = float(np.sum(pi * e))
    sends = (pi != 0.0) & (e > 0.0)
    live = (g > 0.0) & sends[:, None]
    safe = delta_bar if delta_bar > 0.0 else 1.0
    c = np.where(live, (pi**2 * e / safe)[:, None] / np.where(live, g, 1.0), 0.0)
    return c, live, delta_bar


def inversion_gamma(weights, energy_per_value, gain, *, tx_power_w: float) -> float:
    """The largest gamma at which every sender's modelled channel inversion meets P.

    A device that sends ``v = |Delta|`` with flat ``|Delta_kf|^2 = e_k`` spends
    ``gamma pi_k^2 e_k / delta_bar * sum_f 1 / |h_hat_kf|^2`` per OFDM symbol (eq.
    ``PowerAlloc_1``, its live subcarriers), so::

        gamma_inv = min_k P delta_bar / (pi_k^2 e_k sum_f 1 / |h_hat_kf|^2),

    the analogue of Yang et al.'s ``eta = P min_k |m^H h_k|^2`` with F subcarriers and
    unequal weights. Input: ``weights`` pi [K], ``energy_per_value`` e_k [K],
    ``gain`` |h_hat|^2 [K, F] (after the combiner), P in W. Output: a float, +inf when
    no device sends on a live subcarrier.
    """
    c, _, _ = _model_terms(weights, energy_per_value, gain)
    per_device = np.sum(c, axis=1)
    binding = per_device > 0.0
    if not np.any(binding):
        return float("inf")
    return float(tx_power_w / np.max(per_device[binding]))


def _multipliers(c, target, start=None):
    """mu >= 0 per row with ``sum_f c_f / (1 + mu c_f)^2 = target`` where ``sum_f c_f >
    target`` (else 0): ``mu = lambda gamma / e_k`` of eq. ``Opt_v`` on the flat model
    (``lambda u_kf = mu c_kf``).

    Input: ``c`` [R, F] >= 0, ``target`` [R] > 0 (``P / gamma``), ``start`` [R] a first
    guess at or below the root (the roots of a smaller gamma; default 0). Newton on
    ``phi(mu)^(-1/2)`` (concave increasing: the secular-equation argument of
    :func:`phy.power.optimal_amplitudes`): from below the root it climbs monotonically;
    float64, stopped at relative change 1e-10."""
    s0 = np.sum(c, axis=1)
    active = s0 > target
    mu = np.zeros_like(s0)
    if not np.any(active):
        return mu
    ca, ta = c[active], target[active]
    m = np.zeros(ca.shape[0]) if start is None else np.asarray(start, np.float64)[active].copy()
    for _ in range(_NEWTON_ITERATIONS):
        r = 1.0 / (1.0 + m[:, None] * ca)
        cr2 = ca * r * r
        s = np.sum(cr2, axis=1)
        ds = -2.0 * np.sum(cr2 * ca * r, axis=1)
        # Newton on s^(-1/2) - t^(-1/2): step = 2 s (1 - sqrt(s / t)) / ds
        step = 2.0 * s * (1.0 - np.sqrt(s / ta)) / np.where(ds < 0.0, ds, -1.0)
        m = np.maximum(m + step, 0.0)
        if np.all(np.abs(step) <= _NEWTON_TOLERANCE * np.maximum(m, 1e-300)):
            break
    mu[active] = m
    return mu


class _Model:
    """The flat-symbol model of one phase (module docstring), evaluated at one gamma at a
    time with the KKT multipliers of a smaller gamma as the Newton start."""

    def __init__(self, weights, energy_per_value, gain, tx_power_w, noise_power_w):
        c, live, delta_bar = _model_terms(weights, energy_per_value, gain)
        pi = np.asarray(weights, np.float64)
        e = np.asarray(energy_per_value, np.float64)
        sending = (pi != 0.0) & (e > 0.0)
        rows = np.any(live, axis=1)
        self.c, self.e, self.pi = c[rows], e[rows], pi[rows]
        # subcarriers without estimate send nothing (v = 0): e_k each, whatever gamma
        self.dead = float(np.sum(pi * e * np.sum(~live & sending[:, None], axis=1)))
        self.noise = c.shape[1] * delta_bar * noise_power_w / 2.0
        self.tx_power_w = float(tx_power_w)

    def __call__(self, gamma, start=None):
        """``(MSE per OFDM symbol, its distortion part, the multipliers mu [R])`` at
        ``gamma``."""
        target = np.full(self.e.shape, self.tx_power_w / gamma)
        mu = _multipliers(self.c, target, start)
        x = mu[:, None] * self.c
        distortion = float(np.sum(self.pi * self.e * np.sum(np.square(x / (1.0 + x)), axis=1)))
        distortion += self.dead
        return distortion + self.noise / gamma, distortion, mu


def modelled_mse(gamma_w, weights, energy_per_value, gain, *, tx_power_w: float,
                 noise_power_w: float) -> np.ndarray:
    """The model's bound on the estimate's squared error per OFDM symbol at each ``gamma_w``.

    ``sum_k pi_k D_k(gamma) + F delta_bar sigma_z^2 / (2 gamma)`` (module docstring): the
    paper's bound on the aggregated distortion (eq. ``distortion_upper_bound``) with the
    flat-symbol KKT distortion of every sender, plus the receiver noise of eq. ``delta_n``
    over the F subcarriers. Input: ``gamma_w`` [G] (> 0), ``weights`` [K],
    ``energy_per_value`` [K], ``gain`` [K, F], P and sigma_z^2 in W. Output: [G] float64.
    """
    model = _Model(weights, energy_per_value, gain, tx_power_w, noise_power_w)
    gammas = np.atleast_1d(np.asarray(gamma_w, np.float64))
    return np.array([model(float(g))[0] for g in gammas])


def joint_gamma(weights, energy_per_value, gain, *, tx_power_w: float, noise_power_w: float,
                fallback_w: float | None = None) -> float:
    """gamma minimising :func:`modelled_mse`, searched from :func:`inversion_gamma` up.

    A log grid of ``GRID_POINTS_PER_DECADE`` points a decade over ``GRID_DECADES``
    decades from ``gamma_inv`` (each point's Newton started from the previous point's
    multipliers; it stops once the distortion alone exceeds the best error so far, since
    the distortion grows with gamma), then golden-section search on log gamma between the
    best grid point's neighbours to a relative width of ``SEARCH_TOLERANCE``. Without receiver noise
    (sigma_z^2 = 0) the error is smallest at any gamma up to ``gamma_inv``, which is
    returned.

    Input: ``weights`` pi [K], ``energy_per_value`` e_k = ||Delta_k||^2 / d [K],
    ``gain`` |h_hat|^2 [K, F] after the combiner, P and sigma_z^2 (W); ``fallback_w``:
    what to return when no device sends on a live subcarrier (nothing to scale; default
    sigma_z^2, the paper's value). Output: gamma in W, a positive float.
    """
    lower = inversion_gamma(weights, energy_per_value, gain, tx_power_w=tx_power_w)
    if not np.isfinite(lower):
        value = noise_power_w if fallback_w is None else fallback_w
        return float(value) if value > 0.0 else 1.0
    if not noise_power_w > 0.0:
        return lower
    model = _Model(weights, energy_per_value, gain, tx_power_w, noise_power_w)
    steps = GRID_POINTS_PER_DECADE * GRID_DECADES
    grid = np.log(lower) + np.arange(steps + 1) * (np.log(10.0) / GRID_POINTS_PER_DECADE)
    values, roots, mu = np.full(steps + 1, np.inf), [], None
    for i, point in enumerate(grid):
        values[i], distortion, mu = model(float(np.exp(point)), mu)
        roots.append(mu)
        if distortion > np.min(values):
            break  # the distortion only grows with gamma: no larger gamma does better
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, steps)]
    start = roots[best - 1] if best > 0 else None  # the multipliers at gamma = e^lo

    def mse(log_gamma):
        return model(float(np.exp(log_gamma)), start)[0]

    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = mse(a), mse(b)
    while hi - lo > SEARCH_TOLERANCE:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = mse(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = mse(b)
    candidates = np.array([grid[best], a, b])
    chosen = candidates[int(np.argmin([values[best], fa, fb]))]
    return float(np.exp(chosen))
