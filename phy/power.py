"""Power control of the AirComp uplink: the update amplitudes v every device sends.

A device k sends, on subcarrier f of OFDM symbol n, the amplitude v (eq. ``Gen_x``)
at the transmit power ``p = u v^2`` (eq. ``PowerAlloc_1``) with
``u_kf = pi_k^2 gamma / (delta_bar |h_hat_kf|^2)``. The OFDM symbol budget
(eq. ``PowerConst``) is ``sum_f u_kf v_knf^2 <= P``. A power control chooses v >= 0
for every device and symbol at once; a distortion-free transmission has
``v = |Delta|``.

Options (all called as ``control(delta_abs, u, power_budget_w, channel_gain,
reference_gain) -> v``, see :class:`PowerControl`):

- :class:`OptimalPower` -- the KKT solution of the QCQP eq. ``OptPow``
  (eq. ``Opt_v``, :func:`optimal_amplitudes`), the paper's proposal;
- :class:`TruncatedInversion` -- the paper's TCI baseline;
- :class:`FullInversion` -- ``v = |Delta|`` without a power limit (a reference);
- :class:`IdealAggregation` -- no channel at all (``phy.aircomp.aggregate`` returns
  the exact weighted sum; the error-free reference).
"""

from __future__ import annotations

import tensorflow as tf

_MAX_NEWTON_ITERATIONS = 60


def _as_float64(x):
    """float64 tensor; Python floats are converted directly (not via float32)."""
    return tf.cast(tf.convert_to_tensor(x, dtype_hint=tf.float64), tf.float64)


_SEARCH_TOLERANCE = 1e-6
_CHUNK_ROWS = 256
"""Rows per call of a compiled row kernel: a ``[256, F]`` chunk (1 MiB at F = 1024 in
float32) stays in the CPU cache during its ~10 Newton passes."""


def _power_terms(a, u, lam, dtype):
    """S(lambda) = sum_f u a^2/(1+lambda u)^2 and dS/dlambda, in ``dtype``.

    Two reductions of one expression (XLA fuses them into one pass; a stacked
    reduction was measured 5-10x slower).
    """
    a = tf.cast(a, dtype)
    u = tf.cast(u, dtype)
    r = 1.0 / (1.0 + tf.cast(lam, dtype)[..., None] * u)
    wr2 = u * tf.square(a * r)
    s = tf.reduce_sum(wr2, axis=-1)
    ds = tf.reduce_sum(wr2 * u * r, axis=-1)
    return tf.cast(s, tf.float64), -2.0 * tf.cast(ds, tf.float64)


def _newton_step(s, ds, budget):
    """Newton correction on phi(lambda) = S^-1/2 - P^-1/2 (concave increasing)."""
    return 2.0 * s * (1.0 - tf.sqrt(s / budget)) / tf.where(ds < 0.0, ds, -tf.ones_like(ds))


def _kkt_multiplier(a, u, budget, max_iterations):
    """lambda >= 0 with sum_f u_f a_f^2 / (1 + lambda u_f)^2 = P, per leading index.

    ``a`` keeps its own dtype ([..., F]; cast inside each fused pass, so no float64
    copy of the update grid is materialised), ``u`` is float64 with dead entries
    (u = inf) set to 0 and may be narrower than ``a`` along the symbol axis
    ([K, 1, F] against [K, N, F]), ``budget`` float64 broadcastable to [...].

    Search: safeguarded Newton on phi(lambda) = S^-1/2 - P^-1/2, which is concave
    and increasing (More & Sorensen's secular-equation argument, with
    S = sum_f (a_f^2/u_f) / (1/u_f + lambda)^2), so Newton from lambda = 0 climbs
    monotonically to the root; a bracket [lo, hi] (hi = (sum_f a_f^2/u_f / P)^1/2 is
    always feasible) with bisection catches rounding. The search passes run in
    float32 (one fused pass over the grid each, twice as fast as float64) until the
    relative Newton correction is below 1e-6, then two Newton corrections in float64
    (quadratic convergence: 1e-6 -> 1e-12 -> float64 resolution) give lambda to full
    precision.
    """
    a64 = tf.cast(a, tf.float64)
    s0 = tf.reduce_sum(u * tf.square(a64), axis=-1)
    budget = tf.broadcast_to(budget, tf.shape(s0))
    active = s0 > budget
    # S(lambda) <= sum_f a_f^2 / (lambda^2 u_f), so this lambda is always feasible
    a2_over_u = tf.reduce_sum(tf.math.divide_no_nan(tf.square(a64), u), axis=-1)
    hi = tf.where(active, tf.sqrt(a2_over_u / budget), tf.zeros_like(s0))
    lo = tf.zeros_like(hi)
    lam = tf.zeros_like(hi)
    done = tf.logical_not(active)

    def body(i, lam, lo, hi, done):
        s, ds = _power_terms(a, u, lam, tf.float32)
        lo = tf.where(s > budget, lam, lo)
        hi = tf.where(s <= budget, lam, hi)
        step = _newton_step(s, ds, budget)
        newton = lam + step
        inside = (newton >= lo) & (newton <= hi) & (ds < 0.0)
        new = tf.where(inside, newton, 0.5 * (lo + hi))
        # converged: negligible Newton correction, or a bracket collapsed to float32 noise
        converged = (inside & (tf.abs(step) <= _SEARCH_TOLERANCE * newton)) | (
            hi - lo <= _SEARCH_TOLERANCE * hi
        )
        new = tf.where(done, lam, new)
        return i + 1, new, lo, hi, done | converged

    def cond(i, lam, lo, hi, done):
        return (i < max_iterations) & tf.logical_not(tf.reduce_all(done))

    _, lam, _, _, _ = tf.while_loop(
        cond, body, (tf.constant(0), lam, lo, hi, done), parallel_iterations=1
    )
    for _ in range(2):  # float64 polish
        s, ds = _power_terms(a, u, lam, tf.float64)
        lam = tf.where(active, tf.maximum(lam + _newton_step(s, ds, budget), 0.0), lam)
    return lam


def _dense_optimal(delta_abs, u, power_budget_w, max_iterations=_MAX_NEWTON_ITERATIONS):
    """Eq. ``Opt_v`` on every leading index at once (static shapes, XLA-compilable).

    Same inputs/outputs as :func:`optimal_amplitudes`, ``u`` float64 and
    ``power_budget_w`` float64 broadcastable to the leading axes.
    """
    dead = tf.math.is_inf(u)
    u_live = tf.where(dead, tf.zeros_like(u), u)
    lam = _kkt_multiplier(delta_abs, u_live, power_budget_w, max_iterations)
    v = tf.cast(delta_abs, tf.float64) / (1.0 + lam[..., None] * u_live)
    return tf.cast(tf.where(dead, tf.zeros_like(v), v), delta_abs.dtype)


@tf.function(jit_compile=True, reduce_retracing=True)
def _optimal_chunk(delta_abs, u, power_budget_w):
    """:func:`_dense_optimal` on one ``[_CHUNK_ROWS, F]`` chunk (compiled once per F)."""
    return _dense_optimal(delta_abs, u, power_budget_w)


def solve_rows(kernel, arrays, num_rows, out_signature):
    """Apply a per-row ``kernel`` to ``[R, ...]`` arrays in compiled chunks of 256 rows.

    ``arrays`` are padded with zeros to a multiple of ``_CHUNK_ROWS`` rows, the kernel
    runs on each ``[_CHUNK_ROWS, ...]`` chunk (two chunks at a time), and its outputs
    (a structure like ``out_signature``) are cut back to ``num_rows`` rows. R may be
    dynamic (0 included); the kernel sees static shapes only.
    """
    padding = (-num_rows) % _CHUNK_ROWS
    num_chunks = (num_rows + padding) // _CHUNK_ROWS

    def chunked(x):
        x = tf.pad(x, [[0, padding]] + [[0, 0]] * (x.shape.rank - 1))
        return tf.reshape(x, tf.concat([[num_chunks, _CHUNK_ROWS], tf.shape(x)[1:]], 0))

    out = tf.map_fn(lambda xs: kernel(*xs), tuple(chunked(x) for x in arrays),
                    fn_output_signature=out_signature, parallel_iterations=2)

    def unchunked(y):
        y = tf.reshape(y, tf.concat([[num_chunks * _CHUNK_ROWS], tf.shape(y)[2:]], 0))
        return y[:num_rows]

    return tf.nest.map_structure(unchunked, out)


def optimal_amplitudes(delta_abs, u, power_budget_w, *, max_iterations=_MAX_NEWTON_ITERATIONS):
    """KKT-optimal update amplitudes of the QCQP eq. ``OptPow`` (eq. ``Opt_v``).

    Solves, independently for every leading index (device, OFDM symbol)::

        minimize_v ||v - |Delta| ||^2  s.t.  u^T (v o v) <= P,  v >= 0

    whose solution is ``v = |Delta|`` if ``u^T |Delta|^2 <= P`` and otherwise
    ``v = |Delta| / (1 + lambda u)`` with the scalar ``lambda > 0`` solving
    ``sum_f u_f |Delta_f|^2 / (1 + lambda u_f)^2 = P``. lambda is found in float64 by
    a safeguarded Newton iteration on ``S(lambda)^-1/2 - P^-1/2`` (concave and
    increasing, so Newton from lambda = 0 climbs monotonically and quadratically to
    the root), kept inside a bracket ``[lo, hi]`` (``hi = (sum_f a_f^2/u_f / P)^1/2``
    is always feasible) with a bisection fallback; it stops per entry at relative
    change 1e-6 in float32 and is polished by two float64 Newton steps. Only the
    rows whose budget binds (``u^T |Delta|^2 > P``, decided in float64) are searched:
    they are gathered into a ``[rows, F]`` problem that a compiled kernel solves in
    chunks of 256 rows (each chunk stays in the CPU cache during its Newton passes);
    the other rows keep ``v = |Delta|`` exactly.

    Entries with ``u = inf`` (a subcarrier whose estimated gain is zero) get
    ``v = 0``; entries with ``Delta = 0`` get ``v = 0``; ``u = 0`` entries cost no
    power and keep ``v = |Delta|``.

    Parameters
    ----------
    delta_abs : [..., F], tf.float32 or tf.float64
        |Delta|, the update magnitudes (>= 0).
    u : [..., F] or broadcastable to it, float
        Power per squared amplitude (eq. ``PowerAlloc_1``), >= 0, may be +inf.
    power_budget_w : scalar or broadcastable to [...], float
        P, the OFDM-symbol power budget in W (> 0).
    max_iterations : int
        Cap on the Newton/bisection iterations (60 is far more than needed).

    Returns
    -------
    v : [..., F], dtype of ``delta_abs``
        The optimal amplitudes, ``0 <= v <= |Delta|``.
    """
    delta_abs = tf.convert_to_tensor(delta_abs)
    dtype = delta_abs.dtype
    u = _as_float64(u)
    shape = tf.broadcast_dynamic_shape(tf.shape(delta_abs), tf.shape(u))
    num_subcarriers = delta_abs.shape[-1]
    a = tf.reshape(tf.broadcast_to(delta_abs, shape), [-1, num_subcarriers])
    u = tf.reshape(tf.broadcast_to(u, shape), [-1, num_subcarriers])
    budget = tf.reshape(tf.broadcast_to(_as_float64(power_budget_w), shape[:-1]), [-1])
    dead = tf.math.is_inf(u)
    u_live = tf.where(dead, tf.zeros_like(u), u)
    s0 = tf.reduce_sum(u_live * tf.square(tf.cast(a, tf.float64)), axis=-1)
    rows = tf.where(s0 > budget)[:, 0]
    if max_iterations == _MAX_NEWTON_ITERATIONS:
        kernel = _optimal_chunk
    else:
        def kernel(a, u, budget):
            return _dense_optimal(a, u, budget, max_iterations)
    solved = solve_rows(
        kernel, (tf.gather(a, rows), tf.gather(u, rows), tf.gather(budget, rows)),
        tf.size(rows), tf.TensorSpec([_CHUNK_ROWS, num_subcarriers], dtype),
    )
    v = tf.where(dead, tf.zeros_like(a), a)
    v = tf.tensor_scatter_nd_update(v, rows[:, None], solved)
    return tf.reshape(v, shape)


class PowerControl:
    """Common interface of a power control.

    Call
    ----
    delta_abs : [K, N, F], tf.float32
        |Delta|, the devices' update magnitudes on the grid.
    u : [K, 1, F] (or [K, N, F]), tf.float64 or tf.float32
        ``pi_k^2 gamma / (delta_bar |h_hat|^2)`` (eq. ``PowerAlloc_1``), may be +inf.
    power_budget_w : scalar, float
        P, the OFDM-symbol power budget in W.
    channel_gain : [K, 1, F], tf.float32
        |h_hat|^2, each device's estimated channel power gain (linear).
    reference_gain : [K, 1, 1], tf.float32
        A reference gain per device for relative thresholds (the path gain if known,
        else the wideband mean of |h_hat|^2).

    Returns
    -------
    v : [K, N, F], tf.float32
        Amplitudes >= 0; the transmit power of a symbol is ``sum_f u v^2``.
    """

    name: str = ""
    budgeted: bool = True
    """Whether the option respects ``sum_f u v^2 <= P`` (False for references)."""

    def __call__(self, delta_abs, u, power_budget_w, channel_gain, reference_gain):
        raise NotImplementedError

    def dense(self, delta_abs, u, power_budget_w, channel_gain, reference_gain):
        """The same amplitudes with static shapes only (for XLA-compiled row kernels).

        ``u`` is float64 and may be as wide as ``delta_abs``; used by
        ``phy.aircomp.aggregate``'s fast path on gathered ``[rows, F]`` chunks (TCI and
        full inversion; its KKT rows run in :mod:`phy.optimal_rows` instead).
        """
        return self(delta_abs, u, power_budget_w, channel_gain, reference_gain)


class OptimalPower(PowerControl):
    """KKT-optimal amplitudes (eq. ``Opt_v``), see :func:`optimal_amplitudes`."""

    name = "optimal"

    def __call__(self, delta_abs, u, power_budget_w, channel_gain=None, reference_gain=None):
        return optimal_amplitudes(delta_abs, u, power_budget_w)


class TruncatedInversion(PowerControl):
    """Truncated channel inversion (TCI), the paper's baseline.

    On subcarriers whose estimated gain reaches the threshold the device inverts
    the channel (it sends its update scaled by one common factor, so the BS receives
    ``pi_k sqrt(gamma/delta_bar) s Delta``); below the threshold it stays silent
    (v = 0). The common factor ``s = min(1, sqrt(P / sum_{f on} u_f Delta_f^2))`` per
    (device, OFDM symbol) enforces the symbol budget (eq. ``PowerConst``).

    Parameters
    ----------
    gain_threshold : float
        Threshold on |h_hat_kf|^2 (>= 0). Relative to the device's reference gain
        (its path gain r_k^-alpha when the caller supplies it, else the wideband
        mean of |h_hat_k|^2), i.e. on the small-scale fading power, unless
        ``absolute=True``, in which case it is an absolute linear power gain.
        For i.i.d. Rayleigh fading a relative threshold t silences a fraction
        ``1 - exp(-t)`` of the subcarriers.
    absolute : bool
        Interpret ``gain_threshold`` as an absolute |h|^2 (default False).
    """

    name = "truncated_inversion"

    def __init__(self, gain_threshold: float, *, absolute: bool = False) -> None:
        if not gain_threshold >= 0.0:
            raise ValueError(f"gain_threshold must be >= 0, got {gain_threshold!r}")
        self.gain_threshold = float(gain_threshold)
        self.absolute = bool(absolute)

    def __call__(self, delta_abs, u, power_budget_w, channel_gain, reference_gain):
        threshold = self.gain_threshold
        if not self.absolute:
            threshold = threshold * tf.cast(reference_gain, channel_gain.dtype)
        on = (channel_gain >= threshold) & (channel_gain > 0.0)
        u64 = tf.where(on, tf.cast(u, tf.float64), tf.zeros_like(u, tf.float64))
        a = tf.cast(delta_abs, tf.float64)
        power = tf.reduce_sum(u64 * a * a, axis=-1, keepdims=True)
        budget = _as_float64(power_budget_w)
        scale = tf.where(power > budget, tf.sqrt(budget / power), tf.ones_like(power))
        v = tf.where(on, a * scale, tf.zeros_like(a))
        return tf.cast(v, delta_abs.dtype)


class FullInversion(PowerControl):
    """Full channel inversion without a power limit: ``v = |Delta|`` (a reference).

    Subcarriers with zero estimated gain (u = inf) cannot be inverted and send 0.
    """

    name = "full_inversion"
    budgeted = False

    def __call__(self, delta_abs, u, power_budget_w=None, channel_gain=None, reference_gain=None):
        dead = tf.math.is_inf(tf.broadcast_to(u, tf.shape(delta_abs)))
        return tf.where(dead, tf.zeros_like(delta_abs), delta_abs)


class IdealAggregation(PowerControl):
    """No channel at all: ``phy.aircomp.aggregate`` returns ``sum_k pi_k Delta_k`` exactly.

    As an amplitude rule it is ``v = |Delta|`` (zero distortion); the aggregate
    bypasses the MAC, the noise and the power budget.
    """

    name = "ideal"
    budgeted = False

    def __call__(self, delta_abs, u=None, power_budget_w=None, channel_gain=None,
                 reference_gain=None):
        return delta_abs


_REGISTRY = {
    "optimal": OptimalPower,
    "truncated_inversion": TruncatedInversion,
    "full_inversion": FullInversion,
    "ideal": IdealAggregation,
}


def make_power_control(name: str, **kwargs) -> PowerControl:
    """Build a power control by name.

    Parameters
    ----------
    name : {"optimal", "truncated_inversion", "full_inversion", "ideal"}
    **kwargs
        Constructor arguments (``gain_threshold``, ``absolute`` for TCI).
    """
    if name not in _REGISTRY:
        raise ValueError(f"power control name must be one of {sorted(_REGISTRY)}, got {name!r}")
    return _REGISTRY[name](**kwargs)
