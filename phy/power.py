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

import numpy as np
import tensorflow as tf

from phy.grid_sums import gather_rows
from phy.optimal_rows import optimal_row_amplitudes, optimal_rows
from phy.parameters import (
    FullInversionControl,
    IdealControl,
    PowerControlParameters,
    PrivacyScalingControl,
    TruncatedInversionControl,
)

_MAX_NEWTON_ITERATIONS = 60
ATTENUATION_TOLERANCE = 1e-6
"""A value counts as attenuated when ``v < |Delta| (1 - ATTENUATION_TOLERANCE)``."""


def _as_float64(x):
    """float64 tensor; Python floats are converted directly (not via float32)."""
    return tf.cast(tf.convert_to_tensor(x, dtype_hint=tf.float64), tf.float64)


_SEARCH_TOLERANCE = 1e-6
_CHUNK_ROWS = 256
"""Rows per call of a compiled row kernel: a ``[256, F]`` chunk (1 MiB at F = 1024 in
float32) stays in the CPU cache during its ~10 Newton passes."""


def _power_terms(a, u, lam, dtype):
    """S(lambda) = sum_f u a^2/(1+lambda u)^2 and dS/dlambda, in ``dtype``.

    Two reductions of one expression (XLA fuses them into one pass).
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


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
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
    budgeted: bool = PowerControlParameters.budgeted
    """Whether the option respects ``sum_f u v^2 <= P`` (False for references); each
    class takes it from its parameters (:mod:`phy.parameters`), the one source."""
    over_the_air: bool = PowerControlParameters.over_the_air
    """False for the error-free reference: ``phy.aircomp.aggregate`` then returns the
    exact weighted sum without a channel (from its parameters, as ``budgeted``)."""
    scales_for_privacy: bool = PowerControlParameters.scales_for_privacy
    """True for a control whose common transmit scaling the uplink lowers, per phase, to
    meet a privacy target's noise floor instead of adding noise (:class:`PrivacyScaling`)."""

    def __call__(self, delta_abs, u, power_budget_w, channel_gain, reference_gain):
        raise NotImplementedError

    # ---------------------------------------------------------------- the fast path
    # phy.aircomp.aggregate's fast path asks each control three things: where a device
    # may send, the amplitude factor m of the rows that fit their budget (v = m |Delta|),
    # and the budget-bound rows' deviation from m |Delta|.

    def transmit_mask(self, channel_gain, reference_gain):
        """1.0 where a device may send (|h_hat|^2 > 0), else 0.0.

        Input: ``channel_gain`` |h_hat|^2 and ``reference_gain`` of matching rank
        (``[K, F]`` and ``[K, 1]``), tf.float32. Output: the same shape, tf.float32.
        """
        return tf.cast(channel_gain > 0.0, tf.float32)

    def regular_amplitude_mask(self, on, dead):
        """m of the rows that fit their budget (``v = m |Delta|``): 1 except on the
        subcarriers where a sending device has no channel estimate (``dead`` [K, F]
        bool). ``on``: :meth:`transmit_mask`. Output [K, F] tf.float32."""
        return 1.0 - tf.cast(dead, tf.float32)

    def budget_rows(self, updates, devices, symbols, u, est_gain, weights, mask, channel_gain,
                    reference_gain, power_budget_w, num_symbols, num_subcarriers, gain_rows=None):
        """The amplitudes of the rows (device ``devices[r]``, OFDM symbol ``symbols[r]``)
        that may exceed the budget, as corrections to ``m |Delta|``.

        Input: ``updates`` [K, d] f32; ``devices``, ``symbols`` [R] int32; ``u`` [K, F]
        f64 (+inf where dead); ``est_gain`` G, ``mask`` m, ``channel_gain`` [K, F] f32;
        ``reference_gain`` [K] f32; ``weights`` pi [K] f32; the budget P (W, f64);
        ``gain_rows`` [R] int32, the row of ``est_gain`` that is each row's G (None:
        ``devices``; a G per (device, symbol) is ``est_gain`` [K N, F] with
        ``gain_rows = devices N + symbols``).
        Output: ``corrections`` [N, F, 2] f32 (per symbol, summed over its rows,
        ``G sgn(Delta)(v - m|Delta|)`` and ``pi sgn(Delta)(v - m|Delta|)``), and per
        row its transmit power, distortion ``sum_f (v - |Delta|)^2`` and attenuated
        count, [R] f32, and the rows' state: what :meth:`row_amplitudes` on the same rows
        may reuse instead of solving them again (the KKT control's multipliers [R] f64;
        here nothing, ``[0]``). This generic form gathers the rows and runs the control's
        :meth:`dense` on them in chunks (:func:`solve_rows`).
        """
        kernel = _row_kernel_of(self)
        rows = tf.numpy_function(
            lambda u_, k_, n_: gather_rows(u_, k_, n_, num_subcarriers), [updates, devices, symbols],
            tf.float32, stateful=False,
        )
        row_spec = tf.TensorSpec([_CHUNK_ROWS], tf.float32)
        g_corr, w_corr, row_power, row_dist, row_att = solve_rows(
            lambda *xs: kernel(*xs, power_budget_w),
            (tf.ensure_shape(rows, [None, num_subcarriers]), tf.gather(u, devices),
             tf.gather(mask, devices), tf.gather(channel_gain, devices),
             tf.gather(reference_gain, devices),
             tf.gather(est_gain, devices if gain_rows is None else gain_rows),
             tf.gather(weights, devices)),
            tf.size(devices),
            (tf.TensorSpec([_CHUNK_ROWS, num_subcarriers], tf.float32),) * 2 + (row_spec,) * 3,
        )
        corrections = tf.math.unsorted_segment_sum(tf.stack([g_corr, w_corr], -1), symbols,
                                                   num_symbols)
        return corrections, row_power, row_dist, row_att, tf.zeros([0], tf.float64)

    def row_amplitudes(self, updates, devices, symbols, u, mask, channel_gain, reference_gain,
                       power_budget_w, num_subcarriers, row_state=None):
        """The signed amplitudes ``sgn(Delta) v`` of the rows (device ``devices[r]``, OFDM
        symbol ``symbols[r]``), for an uplink that needs the transmitted symbols
        (:mod:`phy.ofdm_time`). Called eagerly, with NumPy arrays.

        Input as :meth:`budget_rows` (NumPy), and the rows' state it returned for the same
        rows. Output: [R, F] np.float32. This generic form gathers the rows and runs the
        control's :meth:`dense` on them in chunks.
        """
        rows = gather_rows(updates, devices, symbols, num_subcarriers)
        kernel = _amplitude_kernel_of(self)
        devices = np.asarray(devices, np.int64)
        out = solve_rows(
            lambda *xs: kernel(*xs, tf.constant(float(power_budget_w), tf.float64)),
            (tf.constant(rows), tf.constant(np.asarray(u)[devices]),
             tf.constant(np.asarray(channel_gain)[devices]),
             tf.constant(np.asarray(reference_gain, np.float32)[devices])),
            len(devices), tf.TensorSpec([_CHUNK_ROWS, num_subcarriers], tf.float32),
        )
        return out.numpy()

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

    def budget_rows(self, updates, devices, symbols, u, est_gain, weights, mask, channel_gain,
                    reference_gain, power_budget_w, num_symbols, num_subcarriers, gain_rows=None):
        """:meth:`PowerControl.budget_rows` by :func:`phy.optimal_rows.optimal_rows`
        (eq. ``Opt_v`` on the rows where they lie in ``updates``: no gathered rows)."""
        g_corr, w_corr, row_power, row_dist, row_att, multipliers = tf.numpy_function(
            lambda *args: optimal_rows(*args, with_multipliers=True),
            [updates, devices, symbols, u, est_gain, weights, power_budget_w,
             devices if gain_rows is None else gain_rows],
            [tf.float32] * 5 + [tf.float64], stateful=False,
        )
        corrections = tf.stack([tf.ensure_shape(g_corr, [num_symbols, num_subcarriers]),
                                tf.ensure_shape(w_corr, [num_symbols, num_subcarriers])], -1)
        row_power, row_dist, row_att, multipliers = (
            tf.ensure_shape(t, [None]) for t in (row_power, row_dist, row_att, multipliers))
        return corrections, row_power, row_dist, row_att, multipliers

    def row_amplitudes(self, updates, devices, symbols, u, mask, channel_gain, reference_gain,
                       power_budget_w, num_subcarriers, row_state=None):
        """:meth:`PowerControl.row_amplitudes` by
        :func:`phy.optimal_rows.optimal_row_amplitudes` (the rows read where they lie; the
        multipliers :meth:`budget_rows` found, when given, are not solved again)."""
        return optimal_row_amplitudes(updates, devices, symbols, u, float(power_budget_w),
                                      row_state)


class PrivacyScaling(OptimalPower):
    """Liu and Simeone's adaptive power scaling ("Privacy for free: wireless federated
    learning via uncoded transmission with adaptive power control", IEEE JSAC 2021),
    on the KKT control: the devices meet a privacy target by sending *less* power, not
    by adding noise.

    In their over-the-air scheme every device inverts its channel with one common power
    scaling factor alpha_t, so the received signal of a device is ``sqrt(alpha_t)`` times
    its (bounded) update against the channel noise: alpha_t is the Gaussian mechanism's
    knob, and where the power budget already keeps alpha_t low enough the channel noise
    gives the privacy "for free". Here the common factor is ``s^2`` on the paper's
    ``gamma`` (eq. ``PowerAlloc_1``) and on the budget P: the uplink
    (:class:`phy.uplink.RoundLink`, with ``[privacy]``'s floor) runs this control at
    ``(s^2 gamma, s^2 P)``, which leaves the KKT amplitudes v of eq. ``Opt_v`` unchanged
    (the multiplier scales by 1/s^2) and scales every device's transmitted amplitude
    ``sqrt(u) v``, its power (by s^2) and both sensitivity bounds of :mod:`phy.privacy`
    (by s) alike; the BS's scaling ``sqrt(delta_bar / (s^2 gamma))`` restores the sum, so
    the estimate's noise grows by 1/s^2: the accuracy it costs. Per round and phase the
    uplink takes the largest ``s <= 1`` that puts the worst device at the floor with the
    receiver noise alone (``s = 1``, the KKT control itself, where the channel already
    meets it: privacy for free); no artificial noise is added. As amplitudes this is
    :class:`OptimalPower`.
    """

    name = "privacy_scaling"
    scales_for_privacy = PrivacyScalingControl.scales_for_privacy


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
        self.gain_threshold = TruncatedInversionControl.check(
            tci_gain_threshold=gain_threshold).tci_gain_threshold
        self.absolute = bool(absolute)

    def _on(self, channel_gain, reference_gain):
        """Where the estimated gain reaches the threshold (bool, ``channel_gain``'s shape)."""
        threshold = self.gain_threshold
        if not self.absolute:
            threshold = threshold * tf.cast(reference_gain, channel_gain.dtype)
        return (channel_gain >= threshold) & (channel_gain > 0.0)

    def transmit_mask(self, channel_gain, reference_gain):
        """1.0 where the estimated gain reaches the threshold, else 0.0."""
        return tf.cast(self._on(channel_gain, reference_gain), tf.float32)

    def regular_amplitude_mask(self, on, dead):
        """TCI sends ``|Delta|`` on its on-subcarriers only: ``m = on``."""
        return on

    def __call__(self, delta_abs, u, power_budget_w, channel_gain, reference_gain):
        on = self._on(channel_gain, reference_gain)
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
    budgeted = FullInversionControl.budgeted

    def __call__(self, delta_abs, u, power_budget_w=None, channel_gain=None, reference_gain=None):
        dead = tf.math.is_inf(tf.broadcast_to(u, tf.shape(delta_abs)))
        return tf.where(dead, tf.zeros_like(delta_abs), delta_abs)


class IdealAggregation(PowerControl):
    """No channel at all: ``phy.aircomp.aggregate`` returns ``sum_k pi_k Delta_k`` exactly.

    As an amplitude rule it is ``v = |Delta|`` (zero distortion); the aggregate
    bypasses the MAC, the noise and the power budget.
    """

    name = "ideal"
    budgeted = IdealControl.budgeted
    over_the_air = IdealControl.over_the_air

    def __call__(self, delta_abs, u=None, power_budget_w=None, channel_gain=None,
                 reference_gain=None):
        return delta_abs


_KERNELS = {}


def configuration_key(control: PowerControl) -> tuple:
    """What a compiled graph of ``control`` depends on: its class and attributes (two
    instances configured alike share one graph); its identity where an attribute is not
    hashable (the caller then keeps ``control`` alive with the graph)."""
    key = (type(control), tuple(sorted(vars(control).items())))
    try:
        hash(key)
    except TypeError:
        return (type(control), id(control))
    return key


def _compiled_for(control: PowerControl, kind: str, build):
    """``build()``'s XLA-compiled row kernel for ``control``, one per kind and configuration
    (:func:`configuration_key`), not per instance."""
    key = (kind, *configuration_key(control))
    if key not in _KERNELS:  # the control kept alive with it (an identity key stays its own)
        _KERNELS[key] = (control, tf.function(build(), jit_compile=True, reduce_retracing=True,
                                                 autograph=False))
    return _KERNELS[key][1]


def _row_kernel_of(control: PowerControl):
    """The budget-bound row kernel of ``control`` (:func:`_compiled_for`).

    Input: the rows' signed updates ``[C, F]`` f32, ``u`` ``[C, F]`` f64 (+inf where
    dead), the amplitude mask m ``[C, F]`` f32 (the regular-row amplitude is
    ``m |Delta|``), |h_hat|^2 and the reference gain, the estimate gain G and the
    weight pi of the row's device, the budget. Output: ``G sgn(Delta) (v - m|Delta|)``
    and ``pi sgn(Delta) (v - m|Delta|)`` ``[C, F]``, the row's transmit power,
    distortion ``sum_f (v - |Delta|)^2`` and number of attenuated values ``[C]``.
    """
    def build():
        def kernel(delta, u, mask, gain, reference, est_gain, weight, budget):
            delta_abs = tf.abs(delta)
            v = control.dense(delta_abs, u, budget, gain, reference[:, None])
            sqrt_u = tf.cast(tf.sqrt(tf.where(tf.math.is_inf(u), tf.zeros_like(u), u)),
                             tf.float32)
            corr = tf.sign(delta) * v - delta * mask
            return (
                est_gain * corr,
                weight[:, None] * corr,
                tf.reduce_sum(tf.square(sqrt_u * v), axis=-1),
                tf.reduce_sum(tf.square(v - delta_abs), axis=-1),
                tf.reduce_sum(
                    tf.cast(v < delta_abs * (1.0 - ATTENUATION_TOLERANCE), tf.float32), axis=-1
                ),
            )

        return kernel

    return _compiled_for(control, "corrections", build)


def _amplitude_kernel_of(control: PowerControl):
    """The kernel ``sgn(Delta) v`` of ``control`` on gathered rows (:func:`_compiled_for`).
    Input: the rows' signed updates ``[C, F]`` f32, ``u`` ``[C, F]`` f64, |h_hat|^2
    ``[C, F]`` f32, the reference gain ``[C]`` f32, the budget. Output ``[C, F]`` f32."""
    def build():
        def kernel(delta, u, gain, reference, budget):
            return tf.sign(delta) * control.dense(tf.abs(delta), u, budget, gain,
                                                  reference[:, None])

        return kernel

    return _compiled_for(control, "amplitudes", build)
