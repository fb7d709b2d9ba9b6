"""Over-the-air aggregation of one phase with the devices streamed in chunks.

:func:`phy.aircomp.aggregate` takes every device's update ``[K, d]`` at once. At massive
access that array does not fit (K = 100,000 at d = 118,282 is 47 GB), so
:class:`AggregateStream` takes the same phase chunk by chunk (``add(lo, hi, updates)``,
rows ``lo:hi`` of the senders) and holds only what the chain needs of every device:
per (device, OFDM symbol) the three row sums of :func:`phy.grid_sums.grid_sums` ([K, N, 3]
float32: 139 MB at K = 100,000, N = 116), per device its weight, CSI-dependent scale and
reference gain, the running ``[N, F]`` sums, and the rows that may reach the power budget.

The chain (:func:`phy.aircomp.chain`) is linear in the devices except where ``delta_bar``
enters: ``delta_bar = sum_k pi_k ||Delta_k||^2 / d`` (eq. ``rho_avg``) is known only after
the last chunk, and it decides which rows (device k, symbol n) the budget binds
(``coef_k = pi_k^2 gamma / delta_bar``, eq. ``PowerAlloc_1``). Everything else is a sum
over devices or a per-device value:

- the linear part ``sum_k G_kf m_kf Delta_knf`` and TCI's off-subcarrier part are summed
  chunk by chunk;
- the row sums are kept, and the rows' transmit power and distortion are formed from
  them at the end, with the final ``delta_bar``;
- a row whose budget binds needs its F values. After chunk j the partial sum
  ``delta_bar_j <= delta_bar`` is a lower bound, so ``coef`` computed from it is an upper
  bound, and every row that could bind under the final ``delta_bar`` is among those
  that bind under ``delta_bar_j``: those rows' values are kept ([R, F] float32, with R the
  candidates; rows that never come near the budget are never kept). At the end the
  chain's own screening picks the binding rows among them, and the power control's own
  kernel (:meth:`phy.power.PowerControl.budget_rows`) solves them, one OFDM symbol at a
  time.

The result is :class:`phy.aircomp_parts.AirCompResult`, as :func:`phy.aircomp.aggregate`'s.
Per-device values and ``delta_bar`` are the chain's to the bit where the
per-row sums are (they do not depend on the other devices); the estimate's linear part is
summed in another order (chunk partial sums in float32), so it agrees with the one-call
chain to float32 rounding of the sum (tested, ``tests/phy/test_aircomp_stream.py``), and
the KKT control's rows are solved without warm starts across a device's symbols (the
same Newton iteration to its tolerance).

With a channel per OFDM symbol (``h`` [K, N, F], moving devices) the devices still send
as ``h_hat`` dictates and only the estimate gain changes, to ``G_knf``
(:func:`phy.symbol_gains.symbol_gains`): each chunk forms its rows' gains from its rows of
``h`` (``h[lo:hi]``: an array, or a :class:`phy.uplink.moving_link.SymbolChannel` that
evaluates them then), and the rows kept as budget candidates keep their gains beside
their values. Whether G is pi exactly (every symbol's channel equal to the estimate, every
subcarrier live) is decided over all devices at the start, a few devices at a time.

Not streamed (refused by :class:`AggregateStream`): the time-domain uplink and kept
signals (both need every device's transmitted symbols at once).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from phy import aircomp_parts as parts
from phy.aircomp_parts import AirCompResult
from phy.grid import GroupingRule
from phy.grid_sums import gather_rows, grid_sums
from phy.power import PowerControl
from phy.stream_rows import RowOrder
from phy.symbol_gains import channel_is_estimate, symbol_gains

_SCREEN_MARGIN = 1e-3  # the chain's (phy.aircomp)
_BOUND_SLACK = 1.0 - 1e-4
"""Factor on the partial ``delta_bar`` (float64) so that it stays below the chain's final
float32 one (relative rounding ~1e-6): the screening bound is then a bound."""
_OPEN_CHUNK = 512
"""Devices per step of the per-device prologue over all K (the exact-gain flag; each
device's flag is its own, so the step changes no bit). TensorFlow's CPU allocator (oneDNN's,
on by default) keeps the peak of its tensors for the process: a step's eager temporaries
(about 100 bytes per device and subcarrier) stay resident. 4,096 devices a step left
0.38 GiB at K = 10,000, F = 1,024 (measured, ``benchmarks/README.md``), 512 0.009 GiB; the chunk's
own prologue in ``add`` takes its devices at once."""
_OPEN_CHUNK_PER_SYMBOL = 64
"""The same with a channel per OFDM symbol (each device's [N, F] channel is evaluated)."""


class AggregateStream:
    """One phase of :func:`phy.aircomp.aggregate` with the updates in chunks (module
    docstring).

    Parameters
    ----------
    num_values : int
        d, the values per device.
    weights : [K], float
        pi_k of every sender.
    h, h_hat : [K, F], complex64
        True channel and each device's estimate; ``h`` may be [K, N, F], a channel per
        OFDM symbol (any object whose ``h[lo:hi]`` gives those rows, module docstring).
    power_control, tx_power_w, noise_power_w, gamma_w, seed, path_gain, public_delta_bar
        As :func:`phy.aircomp.aggregate`.

    ``add(lo, hi, updates)`` takes rows ``lo:hi`` ([hi - lo, d] float32), in order, every row
    once; ``finish()`` returns the :class:`~phy.aircomp_parts.AirCompResult`.
    """

    def __init__(self, num_values: int, weights, h, h_hat, *, power_control: PowerControl,
                 tx_power_w: float, noise_power_w: float, gamma_w: float, seed,
                 path_gain=None, public_delta_bar: float | None = None):
        self.per_symbol = len(h.shape) == 3
        self.h = h if self.per_symbol else tf.convert_to_tensor(h, tf.complex64)
        self.h_hat = tf.convert_to_tensor(h_hat, tf.complex64)
        self.weights = tf.convert_to_tensor(weights, tf.float32)
        num_devices, num_subcarriers = self.h_hat.shape
        expected = (num_devices, -(-int(num_values) // int(num_subcarriers)), num_subcarriers)
        if tuple(h.shape) not in (tuple(self.h_hat.shape), expected) or self.weights.shape != (num_devices,):
            raise ValueError(f"h must be [K, F] like h_hat, or [K, N, F] = {list(expected)}, and weights [K]; "
                             f"got {list(h.shape)}, {list(self.h_hat.shape)} and {self.weights.shape}")
        for name, value in (("tx_power_w", tx_power_w), ("gamma_w", gamma_w)):
            if not float(value) > 0.0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.rule = GroupingRule(int(num_values), int(num_subcarriers))
        self.control, self.seed = power_control, tf.convert_to_tensor(seed, tf.int32)
        self.tx_power_w, self.noise_power_w = float(tx_power_w), float(noise_power_w)
        self.gamma = tf.constant(float(gamma_w), tf.float64)
        self.public = 0.0 if public_delta_bar is None else float(public_delta_bar)
        self.reference_gain = (tf.reduce_mean(tf.square(tf.abs(self.h_hat)), axis=1) if path_gain is None
                               else tf.convert_to_tensor(path_gain, tf.float32))
        n, f = self.rule.num_symbols, self.rule.num_subcarriers
        self.sums = np.zeros((num_devices, n, 3), np.float32)
        self.off_count = np.zeros((num_devices, n), np.float32)
        self.unit = np.ones(num_devices, np.float64)
        self.dead_device = np.zeros(num_devices, bool)
        self.linear = np.zeros((n, f), np.float32)
        self.off_sum = np.zeros((n, f), np.float32)
        self.ideal = np.zeros(int(num_values), np.float32)
        self.partial = 0.0  # sum_k pi_k ||Delta_k||^2 over the rows added (float64)
        self.kept_rows: list[np.ndarray] = []   # [R_j, 2] (device, symbol)
        self.kept_values: list[np.ndarray] = []  # [R_j, F] float32
        self.kept_gains: list[np.ndarray] = []  # [R_j, F] float32, G_knf of those rows (per symbol)
        self.rows = RowOrder(num_devices, "the analog stream")
        self.exact_gain = power_control.over_the_air and self._exact_gain()

    @property
    def num_devices(self) -> int:
        return int(self.weights.shape[0])

    def _terms(self, rows):
        """The chain's per-device prologue (:func:`phy.aircomp_parts.device_terms`) of the
        devices ``rows`` (a slice or an index tensor)."""
        pick = (lambda t: t[rows]) if isinstance(rows, slice) else (lambda t: tf.gather(t, rows))
        h = None if self.per_symbol else pick(self.h)  # per symbol the terms read h_hat only
        return parts.device_terms(pick(self.weights), h, pick(self.h_hat), pick(self.reference_gain),
                                  self.gamma, self.control, per_symbol=self.per_symbol)

    def _estimate_gain(self, rows, w, c, dead):
        pick = (lambda t: t[rows]) if isinstance(rows, slice) else (lambda t: tf.gather(t, rows))
        return parts.estimate_gain(w, c, pick(self.h_hat), dead, tf.constant(self.exact_gain))

    def _exact_gain(self) -> bool:
        """The chain's ``G = pi`` shortcut holds for every device (perfect CSI, every
        amplitude regular): the same flag as one call over all K."""
        if self.per_symbol:  # stops at the first chunk with a difference (a moving device: at once)
            for lo in range(0, self.num_devices, _OPEN_CHUNK_PER_SYMBOL):
                hi = min(lo + _OPEN_CHUNK_PER_SYMBOL, self.num_devices)
                *_, mask = self._terms(slice(lo, hi))
                if not channel_is_estimate(np.asarray(self.h[lo:hi]), self.h_hat[lo:hi].numpy(), mask.numpy()):
                    return False
            return True
        for lo in range(0, self.num_devices, _OPEN_CHUNK):
            hi = min(lo + _OPEN_CHUNK, self.num_devices)
            *_, mask = self._terms(slice(lo, hi))
            if not bool(tf.reduce_all(self.h[lo:hi] == self.h_hat[lo:hi]) & tf.reduce_all(mask > 0.0)):
                return False
        return True

    def add(self, lo: int, hi: int, updates) -> None:
        """Rows ``lo:hi`` of the senders' updates, [hi - lo, d] float32."""
        updates = tf.convert_to_tensor(self.rows.take(lo, hi, updates), tf.float32)
        if int(updates.shape[1]) != self.rule.num_values:
            raise ValueError(f"updates must be [{hi - lo}, {self.rule.num_values}], got {updates.shape}")
        if not self.control.over_the_air:
            self.ideal += tf.linalg.matvec(updates, self.weights[lo:hi], transpose_a=True).numpy()
            self.sums[lo:hi, 0, 1] = tf.reduce_sum(tf.square(updates), axis=1).numpy()
            return
        w, _, _, phase, c, on, inv_gain, unit, dead, mask = self._terms(slice(lo, hi))
        if self.per_symbol:  # G_knf from the chunk's channel per symbol (phy.symbol_gains)
            h_hat = self.h_hat[lo:hi]
            est_gain, coeff = symbol_gains(np.asarray(self.h[lo:hi]), h_hat.numpy(), phase.numpy(),
                                           tf.abs(h_hat).numpy(), w.numpy(), dead.numpy(), mask.numpy(),
                                           exact=self.exact_gain)
        else:
            est_gain = self._estimate_gain(slice(lo, hi), w, c, dead)
            coeff = (est_gain * mask).numpy()
        sums, linear = grid_sums(updates, tf.cast(inv_gain / unit[:, None], tf.float32).numpy(),
                                 on.numpy(), coeff)
        self.sums[lo:hi], self.unit[lo:hi] = sums, unit.numpy()
        self.linear += linear
        self.dead_device[lo:hi] = tf.reduce_any(dead, axis=1).numpy()
        off = 1.0 - mask
        if bool(tf.reduce_any(off > 0.0)):  # TCI's off-subcarriers: the grid is formed only then
            grid = self.rule.to_grid(updates)
            self.off_sum -= tf.reduce_sum(grid * (w[:, None] * off)[:, None, :], 0).numpy()
            self.off_count[lo:hi] = tf.matmul(tf.cast(grid != 0.0, tf.float32), off[..., None])[..., 0].numpy()
        self.partial += float(np.dot(w.numpy().astype(np.float64), sums[..., 1].sum(axis=1, dtype=np.float64)))
        self._keep_candidates(lo, hi, updates, w.numpy(), sums[..., 0], est_gain if self.per_symbol else None)

    def _keep_candidates(self, lo: int, hi: int, updates, w, row_energy, gains=None) -> None:
        """Keep the rows of lo:hi whose budget could bind under any ``delta_bar`` at least
        the partial one (and every row of a device with a dead subcarrier), with their
        gains G_knf when ``gains`` [hi - lo, N, F] (a channel per symbol)."""
        special = np.repeat(self.dead_device[lo:hi, None], row_energy.shape[1], axis=1)
        if self.control.budgeted:
            lower = self.public if self.public > 0.0 else self.partial * _BOUND_SLACK / self.rule.num_values
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                scale = np.where(w == 0.0, 0.0, w.astype(np.float64) ** 2 * float(self.gamma) / lower)
                scale = scale * self.unit[lo:hi]
                power = np.where(row_energy > 0.0, scale[:, None] * row_energy, 0.0)
            bound = np.float32(self.tx_power_w) * np.float32(1.0 - _SCREEN_MARGIN)
            special |= (power > bound) | ~np.isfinite(power) | ~np.isfinite(row_energy)
        devices, symbols = np.nonzero(special)
        if devices.size:
            self.kept_values.append(gather_rows(updates, devices, symbols, self.rule.num_subcarriers))
            self.kept_rows.append(np.stack([devices + lo, symbols], 1))
            if gains is not None:
                self.kept_gains.append(np.asarray(gains)[devices, symbols])

    def finish(self) -> AirCompResult:
        """The phase's result once every row was added."""
        self.rows.check_done()
        rule, w = self.rule, self.weights
        if not self.control.over_the_air:
            delta_bar = tf.reduce_sum(w * tf.constant(self.sums[:, 0, 1])) / rule.num_values
            zeros = tf.zeros([self.num_devices], tf.float32)
            return AirCompResult(tf.constant(self.ideal), rule.num_symbols, delta_bar, zeros, zeros,
                                 zeros, zeros, tf.constant(0.0), tf.constant(0.0))
        sums = tf.constant(self.sums)
        delta_bar = parts.reported_or_public(
            tf.reduce_sum(w * tf.reduce_sum(sums[..., 1], axis=1)) / rule.num_values,
            tf.constant(self.public, tf.float32))
        coef = parts.coefficient(w, self.gamma, delta_bar)
        power = (tf.cast(coef * self.unit, tf.float32)[:, None] * sums[..., 0]).numpy()
        dist, att = self.sums[..., 2].copy(), self.off_count.copy()
        corrections = np.zeros((rule.num_symbols, rule.num_subcarriers, 2), np.float32)
        rows, values, gains = self._binding_rows(power)
        for n in np.unique(rows[:, 1]):
            at = np.nonzero(rows[:, 1] == n)[0]
            corr, row_power, row_dist, row_att = self._solve(rows[at, 0], values[at], coef,
                                                             None if gains is None else gains[at])
            corrections[n] += corr
            power[rows[at, 0], n], dist[rows[at, 0], n], att[rows[at, 0], n] = row_power, row_dist, row_att
        clean = self.linear + corrections[..., 0]
        xi = tf.constant(corrections[..., 1] + self.off_sum)
        noise = tf.sqrt(parts.rx_scale(delta_bar, self.gamma)) * parts.receiver_noise(
            self.seed, [rule.num_symbols, rule.num_subcarriers], tf.constant(self.noise_power_w, tf.float64))
        received = tf.constant(np.add(clean, noise.numpy()))
        out = parts.finish(
            rule, received, delta_bar, local_distortion=tf.reduce_sum(tf.constant(dist), axis=1),
            power=tf.constant(power), attenuated=tf.reduce_sum(tf.constant(att), axis=1),
            aggregated_distortion=tf.reduce_sum(tf.square(xi)),
            noise_power_w=tf.constant(self.noise_power_w, tf.float64), gamma_w=self.gamma)
        return AirCompResult(num_symbols=rule.num_symbols, **out)

    def _binding_rows(self, power):
        """The kept rows the chain's screening marks with the final ``delta_bar``:
        ``([R, 2] (device, symbol), [R, F] values, [R, F] gains G_knf or None)``."""
        if not self.kept_rows:
            empty = np.zeros((0, self.rule.num_subcarriers), np.float32)
            return np.zeros((0, 2), np.int64), empty, (empty if self.per_symbol else None)
        rows, values = np.concatenate(self.kept_rows), np.concatenate(self.kept_values)
        gains = np.concatenate(self.kept_gains) if self.per_symbol else None
        special = self.dead_device[rows[:, 0]]
        if self.control.budgeted:
            row_power = power[rows[:, 0], rows[:, 1]]
            bound = np.float32(self.tx_power_w) * np.float32(1.0 - _SCREEN_MARGIN)
            special = special | (row_power > bound) | ~np.isfinite(row_power)
        return rows[special], values[special], (None if gains is None else gains[special])

    def _solve(self, devices, values, coef, gains=None):
        """The power control's kernel on rows of one OFDM symbol: each row a device of one
        symbol of F values (with a channel per symbol, ``gains`` [R, F] their G_knf).
        Output: corrections [F, 2] and per row power, distortion, attenuated count."""
        index = tf.constant(devices, tf.int32)
        w, gain, gain64, _, c, _, _, _, dead, mask = self._terms(index)
        est_gain = self._estimate_gain(index, w, c, dead) if gains is None else tf.constant(gains)
        u = parts.allocation(tf.gather(coef, index), gain64, dead)
        rows = tf.range(len(devices), dtype=tf.int32)
        corrections, row_power, row_dist, row_att, _ = self.control.budget_rows(
            tf.constant(values), rows, tf.zeros_like(rows), u, est_gain, w, mask, gain,
            tf.gather(self.reference_gain, index), tf.constant(self.tx_power_w, tf.float64),
            1, self.rule.num_subcarriers)
        return (np.asarray(corrections)[0], np.asarray(row_power), np.asarray(row_dist),
                np.asarray(row_att))
