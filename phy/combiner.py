"""Receive combining at a multi-antenna BS: one unit-norm combiner per subcarrier.

With N_r BS antennas the uplink channel of device k on subcarrier f is a vector
``h_kf`` in C^{N_r}. The BS combines its antennas' received symbols with a vector
``m_f`` of unit norm, so the over-the-air sum of eq. ``ReceivedSignal`` becomes

    m_f^H y_f = sum_k (m_f^H h_kf) x_kf + m_f^H z_f,

and every device sees the *effective scalar channel* ``g_kf = m_f^H h_kf / ||m_f||``
(``||m_f|| = 1`` here). The noise ``m_f^H z_f`` of a unit-norm combiner is again
``CN(0, sigma_z^2)``, so power control, CSI models and the receiver of the single-antenna
path work on ``g`` unchanged (``cosim/engine.py`` does the coupling).

The combiners (``bs.combiner``, definitions and references in ``docs/choices.md``):

* ``"mrc_strongest"``: maximum-ratio combining towards the strongest device of the
  subcarrier, ``m_f = h_{k*f} / ||h_{k*f}||`` with ``k* = argmax_k ||h_kf||``;
* ``"centroid"``: the principal eigenvector of ``sum_k h_kf h_kf^H / ||h_kf||^2``, the
  chordal-distance centroid of the devices' channel directions on the Grassmann manifold
  (the closed form of Zhu & Huang, "MIMO over-the-air computation for high-mobility
  multimodal sensing", IEEE IoT J. 2019, with equal weights);
* ``"maxmin"``: ``argmax_{||m|| = 1} min_k |m^H h_kf|^2`` (the receive beamformer of Yang,
  Jiang, Shi and Ding, "Federated learning via over-the-air computation", IEEE TWC 2020,
  with all devices selected), by :func:`maxmin`: semidefinite relaxation (its dual by
  mirror descent, an upper bound) with Gaussian randomisation, then steepest ascent of the
  minimum on the unit sphere from the best candidates; within 2.2e-3 (relative) of a
  brute-force grid search in the N_r = 2 tests.

With N_r = 1 every combiner is ``m = 1`` (``g = h`` bit for bit).

NumPy only (float64 inside); no TensorFlow.
"""

from __future__ import annotations

import numpy as np

from phy.parameters import COMBINERS  # pydantic only: the names of ``bs.combiner``

MAXMIN_TOLERANCE = 1e-3
"""Default relative gap ``(bound - achieved) / bound`` at which :func:`maxmin` stops."""
MAXMIN_ITERATIONS = 800
"""Default iteration limit of :func:`maxmin`'s local ascent."""


def _per_subcarrier(h) -> np.ndarray:
    """``[K, N_r, F]`` -> ``[F, K, N_r]`` complex128 (ValueError on another rank)."""
    h = np.asarray(h)
    if h.ndim != 3:
        raise ValueError(f"h must be [K, N_r, F], got shape {h.shape}")
    return np.ascontiguousarray(np.transpose(h, (2, 0, 1)), np.complex128)


def _fix_phase(m: np.ndarray) -> np.ndarray:
    """``[F, N_r]`` unit vectors with the phase fixed: the largest entry real positive
    (a combiner is defined up to a common phase; this makes it reproducible)."""
    index = np.argmax(np.abs(m), axis=1)
    lead = m[np.arange(m.shape[0]), index]
    phase = np.where(np.abs(lead) > 0, lead / np.where(np.abs(lead) > 0, np.abs(lead), 1.0), 1.0)
    return m * np.conj(phase)[:, None]


def _normalise(m: np.ndarray) -> np.ndarray:
    """Rows of ``[F, N_r]`` to unit norm; a zero row becomes the first unit vector."""
    norm = np.linalg.norm(m, axis=1, keepdims=True)
    unit = np.zeros_like(m)
    unit[:, 0] = 1.0
    return np.where(norm > 0, m / np.where(norm > 0, norm, 1.0), unit)


def gains(h, m) -> np.ndarray:
    """The devices' effective gains ``|m_f^H h_kf|^2 / ||m_f||^2``.

    Input
    -----
    h : [K, N_r, F], complex
    m : [N_r, F], complex (nonzero columns)

    Output
    ------
    g2 : [K, F], float64
    """
    h = np.asarray(h, np.complex128)
    m = np.asarray(m, np.complex128)
    inner = np.einsum("rf,krf->kf", np.conj(m), h)
    return np.abs(inner) ** 2 / np.sum(np.abs(m) ** 2, axis=0)[None, :]


def effective_channel(h, m) -> np.ndarray:
    """The effective scalar channel ``g_kf = m_f^H h_kf`` of unit-norm combiners.

    Input
    -----
    h : [K, N_r, F], complex64
    m : [N_r, F], complex64, unit-norm columns

    Output
    ------
    g : [K, F], complex64
    """
    h = np.asarray(h)
    m = np.asarray(m)
    if h.ndim != 3 or m.shape != h.shape[1:]:
        raise ValueError(f"h must be [K, N_r, F] and m [N_r, F], got {h.shape} and {m.shape}")
    return np.einsum("rf,krf->kf", np.conj(m.astype(np.complex128)),
                     h.astype(np.complex128)).astype(np.complex64)


def mrc_strongest(h) -> np.ndarray:
    """MRC towards the strongest device of each subcarrier.

    Input
    -----
    h : [K, N_r, F], complex

    Output
    ------
    m : [N_r, F], complex128, ``h_{k*f} / ||h_{k*f}||`` with ``k* = argmax_k ||h_kf||``
    (the first device on a tie; the first unit vector where every channel is zero).
    """
    per_f = _per_subcarrier(h)  # [F, K, N]
    strongest = np.argmax(np.sum(np.abs(per_f) ** 2, axis=2), axis=1)
    m = per_f[np.arange(per_f.shape[0]), strongest]
    return _fix_phase(_normalise(m)).T


def _centroid(per_f: np.ndarray) -> np.ndarray:
    norms = np.sum(np.abs(per_f) ** 2, axis=2)  # [F, K]
    scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
    projectors = np.einsum("fkn,fk,fkm->fnm", per_f, scale, np.conj(per_f))
    _, vectors = np.linalg.eigh(projectors)
    return _fix_phase(_normalise(vectors[..., -1]))


def centroid(h) -> np.ndarray:
    """The Grassmann (chordal) centroid of the devices' channel directions.

    Input
    -----
    h : [K, N_r, F], complex

    Output
    ------
    m : [N_r, F], complex128, per subcarrier the principal eigenvector of
    ``sum_k h_kf h_kf^H / ||h_kf||^2`` (devices with a zero channel left out).
    """
    return _centroid(_per_subcarrier(h)).T


def _min_gain(per_f: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``[F, K, N]``, unit ``[F, N]`` -> ``[F]`` ``min_k |m^H h_k|^2``."""
    return np.min(np.abs((per_f @ np.conj(m)[:, :, None])[:, :, 0]) ** 2, axis=1)


def _gains_of(per_f: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``[F, K, N]``, ``[F, N, C]`` unit columns -> ``[F, K, C]`` gains ``|m_c^H h_k|^2``."""
    return np.abs(per_f @ np.conj(m)) ** 2


def _min_norm_direction(a: np.ndarray, usable: np.ndarray, iterations: int = 30) -> np.ndarray:
    """``[F, J, N]`` gradients, ``[F, J]`` bool -> ``[F, N]``: the least-norm point of the
    convex hull of the usable gradients (real inner product), by Frank-Wolfe with exact line
    search: the steepest ascent direction of their minimum."""
    gram = np.real(np.conj(a) @ np.swapaxes(a, 1, 2))  # [F, J, J]
    lam = np.where(usable, 0.0, 0.0)
    first = np.argmax(usable, axis=1)
    lam[np.arange(a.shape[0]), first] = 1.0
    for _ in range(iterations):
        grad = (gram @ lam[:, :, None])[:, :, 0]
        grad = np.where(usable, grad, np.inf)
        j = np.argmin(grad, axis=1)
        e = np.zeros_like(lam)
        e[np.arange(a.shape[0]), j] = 1.0
        d = e - lam
        gd = np.sum((gram @ d[:, :, None])[:, :, 0] * d, axis=1)
        step = np.clip(np.where(gd > 0, -np.sum(np.where(usable, grad, 0.0) * d, axis=1)
                                / np.where(gd > 0, gd, 1.0), 0.0), 0.0, 1.0)
        lam += step[:, None] * d
    return (lam[:, None, :] @ a)[:, 0, :]


def _ascend(hs: np.ndarray, m: np.ndarray, value: np.ndarray, iterations: int,
            tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Steepest ascent of ``min_k |m^H h_k|^2`` on the unit sphere from ``m`` [F, N] (value
    [F]): the direction is the least-norm point of the convex hull of the tangent gradients
    of the devices within ``eps`` (relative) of the minimum (at most 2 N + 2 of them), a step
    is kept only if it raises the minimum; returns the best combiners seen and their min
    gains. A subcarrier stops when ``tolerance`` relative improvement took more than 40
    iterations, or its step fell below 1e-9 rad."""
    num_f, num_k, num_n = hs.shape
    near = min(num_k, 2 * num_n + 2)
    best, best_value = m.copy(), value.copy()
    angles = np.full(num_f, 0.1)
    eps = np.full(num_f, 0.05)
    mark, since = value.copy(), np.zeros(num_f, int)
    active = np.ones(num_f, bool)
    for _ in range(iterations):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        hh, mm = hs[idx], best[idx]
        inner = (hh @ np.conj(mm)[:, :, None])[:, :, 0]  # m^H h_k
        g = np.abs(inner) ** 2
        order = np.argsort(g, axis=1)[:, :near]
        g_near = np.take_along_axis(g, order, axis=1)
        usable = g_near <= g_near[:, :1] * (1.0 + eps[idx, None])  # a prefix of each row
        width = int(np.max(np.sum(usable, axis=1)))
        order, usable = order[:, :width], usable[:, :width]
        h_near = np.take_along_axis(hh, order[:, :, None], axis=1)  # [F, J, N]
        grads = h_near * np.conj(np.take_along_axis(inner, order, axis=1))[:, :, None]
        grads -= (grads @ np.conj(mm)[:, :, None]) * mm[:, None, :]
        direction = _min_norm_direction(grads, usable)
        theta = angles[idx, None]
        trial = _normalise(np.cos(theta) * mm + np.sin(theta) * _normalise(direction))
        trial_value = _min_gain(hh, trial)
        better = trial_value > best_value[idx]
        best[idx[better]] = trial[better]
        best_value[idx[better]] = trial_value[better]
        angles[idx] = np.where(better, np.minimum(angles[idx] * 1.5, 0.5), angles[idx] * 0.5)
        eps[idx] = np.where(better, eps[idx], np.minimum(eps[idx] * 2.0, 1.0))
        eps[idx] = np.where(better & (angles[idx] < 1e-3), eps[idx] * 0.5, eps[idx])
        gained = best_value[idx] > mark[idx] * (1.0 + tolerance)
        mark[idx] = np.where(gained, best_value[idx], mark[idx])
        since[idx] = np.where(gained, 0, since[idx] + 1)
        active[idx] = (since[idx] <= 40) & (angles[idx] > 1e-9)
    return best, best_value


def maxmin(h, *, tolerance: float = MAXMIN_TOLERANCE, max_iterations: int = MAXMIN_ITERATIONS,
           dual_iterations: int = 100, num_starts: int = 12, num_random: int = 256,
           seed: int = 0,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The max-min receive combiner, ``argmax_{||m|| = 1} min_k |m^H h_kf|^2`` per subcarrier.

    Semidefinite relaxation with randomisation, then local refinement (the recipe of
    Sidiropoulos, Davidson and Luo 2006 for max-min multicast beamforming, which Yang et
    al. 2020 use for the receive beamformer), batched over the F subcarriers:

    1. the relaxation's dual ``U_f = min_{w in simplex} lambda_max(sum_k w_k h_kf h_kf^H)``
       by exponentiated-gradient mirror descent (subgradient ``|v^H h_k|^2 / U`` of the
       principal eigenvector ``v``, step ``1 / sqrt(i + 1)``, ``dual_iterations``
       iterations): ``U_f`` bounds the optimum from above, and the average of the ``v v^H``
       approximates the relaxation's solution ``M_f``;
    2. candidates: every ``v`` seen (the best kept), the ``centroid``, every device's MRC
       direction and ``num_random`` draws ``CN(0, M_f)`` (normalised); the ``num_starts``
       best by their min gain start
    3. projected ascent on the unit sphere of the soft minimum
       ``-log(sum_k exp(-beta g_k / g_min)) / beta`` (beta raised from 10 to 1000), each
       step kept only if it raises the true minimum; a start stops once 40 iterations
       brought less than ``tolerance`` relative gain (or after ``max_iterations``).

    The relaxation is not tight in general (N_r >= 2, K >= 3), so ``U_f`` is a bound,
    not a stopping rule. On the brute-force tests (N_r = 2, K <= 10, a 600 x 1200 grid
    of unit vectors: ``tests/phy/test_combiner.py``) the result is within ``3e-3``
    relative of the grid's optimum (the grid's own resolution is of that order).

    Input
    -----
    h : [K, N_r, F], complex

    Output
    ------
    m : [N_r, F], complex128, unit-norm columns
    achieved : [F], float64, ``min_k |m_f^H h_kf|^2``
    bound : [F], float64, the relaxation's bound ``U_f >= achieved``
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if int(max_iterations) < 2:
        raise ValueError(f"max_iterations must be >= 2, got {max_iterations!r}")
    per_f = _per_subcarrier(h)
    scale = np.max(np.sum(np.abs(per_f) ** 2, axis=2), axis=1)  # [F] strongest ||h||^2
    scale = np.where(scale > 0, scale, 1.0)
    hs = per_f / np.sqrt(scale)[:, None, None]  # gains in [0, 1]
    bound, best, average = _maxmin_dual(hs, dual_iterations)  # step 1
    candidates = _maxmin_candidates(hs, best, average, num_random, seed)  # step 2
    m = _maxmin_refine(hs, candidates, num_starts, max_iterations, tolerance)  # step 3
    return m.T, _min_gain(per_f, m), bound * scale


def _maxmin_dual(hs: np.ndarray, dual_iterations: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1 of :func:`maxmin`: the relaxation's dual by exponentiated-gradient mirror
    descent from uniform weights, starting from the ``centroid``.

    Input
    -----
    hs : [F, K, N_r], complex128, scaled so that the strongest gain is 1

    Output
    ------
    bound : [F], float64, ``U_f`` (of the scaled channel)
    best : [F, N_r], complex128, the best of the centroid and every principal eigenvector seen
    average : [F, N_r, N_r], complex128, the mean of the ``v v^H``: ``M_f``
    """
    num_f, num_k, num_n = hs.shape
    hs_h = np.conj(np.swapaxes(hs, 1, 2))  # [F, N, K]
    bound = np.full(num_f, np.inf)
    best = _centroid(hs)
    best_value = _min_gain(hs, best)
    w = np.full((num_f, num_k), 1.0 / num_k)
    average = np.zeros((num_f, num_n, num_n), np.complex128)
    for i in range(dual_iterations):
        r = (hs_h * w[:, None, :]) @ hs  # sum_k w_k h_k h_k^H, conj-transposed: same eigvecs
        values, vectors = np.linalg.eigh(np.conj(r))
        v = vectors[..., -1]
        bound = np.minimum(bound, values[:, -1])
        average += v[:, :, None] * np.conj(v)[:, None, :]
        g = np.abs((hs @ np.conj(v)[:, :, None])[:, :, 0]) ** 2
        value = np.min(g, axis=1)
        better = value > best_value
        best[better], best_value[better] = v[better], value[better]
        logw = np.log(np.maximum(w, 1e-300)) - g / (bound[:, None] * np.sqrt(i + 1.0))
        logw -= np.max(logw, axis=1, keepdims=True)
        w = np.exp(logw)
        w /= np.sum(w, axis=1, keepdims=True)
    average /= dual_iterations
    return bound, best, average


def _maxmin_candidates(hs: np.ndarray, best: np.ndarray, average: np.ndarray,
                       num_random: int, seed: int) -> np.ndarray:
    """Step 2 of :func:`maxmin`: the best vector of step 1, every device's MRC direction
    and ``num_random`` draws ``CN(0, M_f)`` from ``seed`` (normalised).

    Input
    -----
    hs : [F, K, N_r], complex128
    best : [F, N_r], complex128
    average : [F, N_r, N_r], complex128, ``M_f``

    Output
    ------
    candidates : [F, N_r, 1 + K + num_random], complex128
    """
    num_f, num_k, num_n = hs.shape
    rng = np.random.default_rng(seed)
    values, vectors = np.linalg.eigh(average)
    root = vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]  # M = root root^H
    draws = (rng.standard_normal((num_n, num_random))
             + 1j * rng.standard_normal((num_n, num_random))) / np.sqrt(2.0)
    return np.concatenate([
        best[:, :, None],
        np.swapaxes(_normalise(hs.reshape(-1, num_n)).reshape(num_f, num_k, num_n), 1, 2),
        np.swapaxes(_normalise(np.swapaxes(root @ draws, 1, 2).reshape(-1, num_n)).reshape(
            num_f, num_random, num_n), 1, 2),
    ], axis=2)  # [F, N, C]


def _maxmin_refine(hs: np.ndarray, candidates: np.ndarray, num_starts: int,
                   max_iterations: int, tolerance: float) -> np.ndarray:
    """Step 3 of :func:`maxmin`: the ``num_starts`` best candidates by their min gain,
    each refined by :func:`_ascend`; the best result per subcarrier, normalised with its
    phase fixed.

    Input
    -----
    hs : [F, K, N_r], complex128
    candidates : [F, N_r, C], complex128

    Output
    ------
    m : [F, N_r], complex128, unit-norm rows
    """
    num_f, _, num_n = hs.shape
    worst = np.min(_gains_of(hs, candidates), axis=1)  # [F, C]
    starts = min(int(num_starts), candidates.shape[2])
    order = np.argsort(-worst, axis=1, kind="stable")[:, :starts]
    chosen = np.take_along_axis(candidates, order[:, None, :], axis=2)  # [F, N, S]
    chosen_value = np.take_along_axis(worst, order, axis=1)  # [F, S]
    flat = np.swapaxes(chosen, 1, 2).reshape(-1, num_n)
    refined, refined_value = _ascend(np.repeat(hs, starts, axis=0), flat, chosen_value.ravel(),
                                     int(max_iterations), tolerance)
    pick = np.argmax(refined_value.reshape(num_f, starts), axis=1)
    m = refined.reshape(num_f, starts, num_n)[np.arange(num_f), pick]
    return _fix_phase(_normalise(m))


class ReceiveCombiner:
    """The BS's receive combiner of one round, one unit-norm vector per subcarrier.

    Parameters
    ----------
    name : str
        ``"mrc_strongest"``, ``"centroid"`` or ``"maxmin"`` (:data:`phy.parameters.COMBINERS`).
    tolerance : float
        :func:`maxmin`'s relative gap (default :data:`MAXMIN_TOLERANCE`).
    max_iterations : int
        :func:`maxmin`'s iteration limit per stage (default :data:`MAXMIN_ITERATIONS`).

    Input
    -----
    h : [K, N_r, F], complex64
        The devices' channels to the BS's N_r antennas.

    Output
    ------
    m : [N_r, F], complex64, unit-norm columns; ``m = 1`` when N_r = 1.
    """

    def __init__(self, name: str, *, tolerance: float = MAXMIN_TOLERANCE,
                 max_iterations: int = MAXMIN_ITERATIONS):
        if name not in COMBINERS:
            raise ValueError(f"combiner must be one of {tuple(COMBINERS)}, got {name!r}")
        self.name = name
        self.tolerance = float(tolerance)
        self.max_iterations = int(max_iterations)

    def __call__(self, h) -> np.ndarray:
        h = np.asarray(h)
        if h.ndim != 3:
            raise ValueError(f"h must be [K, N_r, F], got shape {h.shape}")
        if h.shape[1] == 1:
            return np.ones((1, h.shape[2]), np.complex64)
        if self.name == "mrc_strongest":
            m = mrc_strongest(h)
        elif self.name == "centroid":
            m = centroid(h)
        else:
            m, _, _ = maxmin(h, tolerance=self.tolerance, max_iterations=self.max_iterations)
        return m.astype(np.complex64)


class CombinedUplink:
    """The time-domain uplink of a multi-antenna BS: one
    :class:`phy.ofdm_time.TimeDomainUplink` per antenna (the devices' waveforms through that
    antenna's delay lines, with the same timing and carrier offsets), demodulated per
    antenna and combined per subcarrier, ``y[n, f] = sum_r conj(m[r, f]) y_r[n, f]``. It
    offers the interface :func:`phy.aircomp.aggregate` uses of a single uplink.

    Parameters
    ----------
    uplinks : sequence of TimeDomainUplink
        N_r uplinks with the same K and F.
    combiner : [N_r, F], complex64
        Unit-norm columns (:class:`ReceiveCombiner`).

    Call
    ----
    x : [K, N, F], complex64

    Output
    ------
    y : [N, F], complex64, the combined grid without noise.
    """

    def __init__(self, uplinks, combiner):
        self.uplinks = tuple(uplinks)
        combiner = np.asarray(combiner, np.complex64)
        if not self.uplinks or combiner.shape != (len(self.uplinks), self.uplinks[0].num_subcarriers):
            raise ValueError(f"combiner must be [N_r = {len(self.uplinks)}, F], got {combiner.shape}")
        shapes = {(u.num_devices, u.num_subcarriers) for u in self.uplinks}
        if len(shapes) != 1:
            raise ValueError(f"the uplinks must share K and F, got {sorted(shapes)}")
        self.combiner = combiner
        self._weights = np.conj(combiner)

    @property
    def num_devices(self) -> int:
        return self.uplinks[0].num_devices

    def subset(self, rows) -> CombinedUplink:
        """The devices ``rows`` [K'] only, on every antenna, with the same combiner."""
        return CombinedUplink([u.subset(rows) for u in self.uplinks], self.combiner)

    @property
    def num_subcarriers(self) -> int:
        return self.uplinks[0].num_subcarriers

    @property
    def cut_power_fraction(self) -> np.ndarray | None:
        """[K]: the share of each device's path power cut, averaged over the antennas."""
        parts = [u.cut_power_fraction for u in self.uplinks]
        return None if any(p is None for p in parts) else np.mean(parts, axis=0)

    def isi_free(self) -> np.ndarray:
        """[K] bool: free of inter-symbol interference on every antenna."""
        return np.all([u.isi_free() for u in self.uplinks], axis=0)

    def frequency_responses(self) -> np.ndarray:
        """[K, N_r, F] complex64: every antenna's offset-free response."""
        return np.stack([u.frequency_response() for u in self.uplinks], axis=1)

    def frequency_response(self) -> np.ndarray:
        """[K, F] complex64: the effective response ``m_f^H G_kf``."""
        return effective_channel(self.frequency_responses(), self.combiner)

    def _combine(self, per_antenna) -> np.ndarray:
        y = np.zeros_like(per_antenna[0], np.complex64)
        for weight, part in zip(self._weights, per_antenna, strict=True):
            y += weight[None, :] * part
        return y

    def __call__(self, x) -> np.ndarray:
        return self._combine([u(x) for u in self.uplinks])

    def transmit(self, updates, precoder, mask, devices, symbols, row_amplitudes,
                 num_symbols: int) -> np.ndarray:
        """:meth:`phy.ofdm_time.TimeDomainUplink.transmit` on every antenna, combined."""
        return self._combine([u.transmit(updates, precoder, mask, devices, symbols, row_amplitudes,
                                         num_symbols) for u in self.uplinks])

    def reference(self, x) -> np.ndarray:
        """:meth:`phy.ofdm_time.TimeDomainUplink.reference` (Sionna's blocks) on every antenna,
        combined."""
        return self._combine([u.reference(x) for u in self.uplinks])
