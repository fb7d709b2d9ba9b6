"""Paths traced anew as devices walk: ``channel.retrace_every_m`` of a ray-traced cell in motion.

The local-area model of :mod:`phy.moving_rays` turns the paths traced at a device's drop
with its displacement; it holds while the device stays within metres of that point, and
its path gain stays the drop's. With ``channel.retrace_every_m = R`` a device's paths are
traced again each time it has walked R metres: device k's *anchors* are the points of its
trajectory where it had travelled ``j R`` (anchor 0 its drop), reached at ``t_kj = j R / v_k``,
and at time t it uses the paths traced at its current anchor ``j = floor(v_k t / R)``,
turned by its displacement from there:

``H_knf(t) = sum_p a^(j)_knp exp(j 2 pi r^(j)_kp . (p_k(t) - q_kj) / lambda) exp(-j 2 pi f tau^(j)_kp)``

So the path gain follows the place (a device that walks behind a building loses its line
of sight at the next anchor), each path keeps its own Doppler between anchors, and no
channel is evaluated more than R from where its paths were traced. At an anchor the channel
passes from one trace's local-area extrapolation to the next trace; the jump is the local
model's error over R. An anchor whose trace has no path (the device stands inside a
building, as the motion knows no walls but the cell's, or is shadowed beyond
``channel.max_depth``) is not used: the device keeps the paths of its latest anchor with a
path.

Anchors are functions of the seed alone: anchor j of device k is its drop walked j steps
of ``R / v_k`` seconds (:meth:`phy.mobility.StraightMotion.walk`, each device on its own,
apart from the run's clock; the same point, to float rounding, as the motion's position at
``t_kj``), and its traced paths are read from a cache entry of its own position
(:meth:`phy.ray_tracing.RayTracedPlace.paths_each`: in a large scene a receiver's traced
paths can depend on the receivers traced beside it, so an anchor is traced once and read
back thereafter). A run resumed at any round, or another run of the same seed and cell,
therefore uses the paths the first one traced, while the cache holds them. The paths in
memory are the drop's and those of the round's anchors:
:meth:`RetracedMovingChannel.start_round` lets the others go (read back from the cache
when asked for again).

No TensorFlow: NumPy, and Sionna RT through :class:`phy.ray_tracing.RayTracedPlace`.
"""

from __future__ import annotations

import numpy as np

from phy.moving_rays import TracedMovingChannel, TracedPathFading
from phy.path_cache import TracedPaths


class RetracedMovingChannel(TracedMovingChannel):
    """:class:`phy.moving_rays.TracedMovingChannel` whose devices' paths are traced anew
    every ``every_m`` metres they walk (module docstring).

    Parameters
    ----------
    motion, num_subcarriers, compute_seconds_per_round, bs_xy_m
        As :class:`phy.moving_rays.TracedMovingChannel`.
    drop : phy.path_cache.TracedPaths
        The drop's paths (anchor 0 of every device), with directions of arrival.
    frequencies_hz : np.ndarray
        ``[F]`` float64: the subcarriers' baseband frequencies.
    carrier_frequency_hz : float
    place : phy.ray_tracing.RayTracedPlace
        The scene (built with ``arrivals=True``) that traces the anchors.
    every_m : float
        R > 0 [m].

    Attributes
    ----------
    traces : int
        The anchors' lookups so far (each reads its anchors from the cache and traces those
        it lacks in one solver call).
    """

    def __init__(self, motion, drop: TracedPaths, frequencies_hz: np.ndarray, carrier_frequency_hz: float,
                 num_subcarriers: int, compute_seconds_per_round: float, bs_xy_m: np.ndarray, place, every_m: float):
        self.every_m = float(every_m)
        if not self.every_m > 0.0:
            raise ValueError(f"every_m must be > 0, got {every_m!r}")
        self.place, self.traces = place, 0
        self._frequencies_hz, self._carrier_hz = np.asarray(frequencies_hz, np.float64), float(carrier_frequency_hz)
        super().__init__(motion, TracedPathFading(drop, self._frequencies_hz, self._carrier_hz), num_subcarriers,
                         compute_seconds_per_round, bs_xy_m)
        num_devices = drop.num_devices
        self._bank = drop  # the fading's rows ("slots"): the anchors' paths in use
        self._slot_origin_m = self.origins_m.copy()  # [S, 2] each slot's anchor, centred on the BS
        self._slot_of = {(k, 0): k for k in range(num_devices)}  # a resolved anchor (k, j) -> its slot
        self._used = {(k, 0): 0 for k in range(num_devices)}  # (k, j) -> the anchor whose paths it uses
        self._anchor_m = {(k, 0): self.origins_m[k].copy() for k in range(num_devices)}
        self._walk_state, self._walked = None, np.zeros(num_devices, np.int64)  # each device's last anchor walked

    # ------------------------------------------------------------------ anchors
    def _anchor_index(self, times_s) -> np.ndarray:
        """``[..., K]`` int64: each device's anchor at absolute times ``times_s`` [...]."""
        return np.floor(self.motion.travelled_m(np.asarray(times_s, np.float64)) / self.every_m).astype(np.int64)

    def _walk_to(self, pairs) -> None:
        """Record the positions of the anchors ``pairs`` ``(k, j)``: each device walked from
        its drop in steps of ``R / v_k`` seconds (:meth:`phy.mobility.StraightMotion.walk`,
        every row on its own), so anchor j is the same point whenever and in whichever run
        it is asked for, whatever the rounds' start times."""
        wanted = np.zeros(self._walked.size, np.int64)
        np.maximum.at(wanted, [k for k, _ in pairs], [j for _, j in pairs])
        speed = np.asarray(self.motion.speed_mps, np.float64)
        step = np.divide(self.every_m, speed, out=np.zeros_like(speed), where=speed > 0.0)
        while np.any(self._walked < wanted):
            going = self._walked < wanted
            positions, self._walk_state = self.motion.walk(self._walk_state, np.where(going, step, 0.0))
            self._walked[going] += 1
            for k in np.flatnonzero(going):
                self._anchor_m[(int(k), int(self._walked[k]))] = positions[k].copy()

    def _resolve(self, pairs) -> None:
        """Give every anchor ``(k, j)`` of ``pairs`` the anchor whose paths it uses and
        that anchor a slot, tracing what is needed in as few calls as it takes."""
        pending = sorted({(k, j) for k, j in pairs if (k, j) not in self._used})
        traced = {}
        while pending:  # trace the unknown ones; a pathless anchor needs its predecessor's answer
            fresh = [pair for pair in pending if pair not in traced]
            if fresh:
                found = self._trace(fresh)
                traced.update({pair: found.select([i]) if found.has_path[i] else None
                               for i, pair in enumerate(fresh)})
            waiting = []
            for k, j in pending:
                if traced[(k, j)] is not None:
                    self._used[(k, j)] = j
                elif (k, j - 1) in self._used:
                    self._used[(k, j)] = self._used[(k, j - 1)]
                else:
                    waiting += [(k, j - 1), (k, j)]
            pending = sorted(set(waiting) - set(self._used))
        loads = sorted({(k, self._used[(k, j)]) for k, j in pairs} - set(self._slot_of))
        if loads:
            missing = [pair for pair in loads if traced.get(pair) is None]  # kept paths of an earlier round
            if missing:
                found = self._trace(missing)
                traced.update({pair: found.select([i]) for i, pair in enumerate(missing)})
            self._add([traced[pair] for pair in loads], loads)

    def _trace(self, pairs) -> TracedPaths:
        self._walk_to(pairs)
        positions = np.array([self._anchor_m[pair] for pair in pairs]) + self.bs_xy_m[None, :]
        self.traces += 1
        return self.place.paths_each(positions)

    def _add(self, paths: list[TracedPaths], pairs) -> None:
        first = self._bank.num_devices
        self._bank = TracedPaths.concatenate([self._bank, *paths])
        self._slot_of.update({pair: first + i for i, pair in enumerate(pairs)})
        self._slot_origin_m = np.concatenate([self._slot_origin_m, np.array([self._anchor_m[p] for p in pairs])])
        self.fading = TracedPathFading(self._bank, self._frequencies_hz, self._carrier_hz)

    def _slots(self, offsets_s, devices) -> np.ndarray:
        """``[T, k]`` int64: the slots of ``devices`` [k] at ``offsets_s`` [T] after the round's start."""
        devices = np.asarray(devices, np.int64)
        anchors = self._anchor_index(self.motion.time_s + np.atleast_1d(np.asarray(offsets_s, np.float64)))
        anchors = anchors[:, devices]  # [T, k]
        asked = np.stack([np.broadcast_to(devices, anchors.shape), anchors], axis=-1).reshape(-1, 2)
        distinct, index = np.unique(asked, axis=0, return_inverse=True)  # about one per device
        pairs = [(int(k), int(j)) for k, j in distinct]
        self._resolve(pairs)
        slots = np.array([self._slot_of[(k, self._used[(k, j)])] for k, j in pairs], np.int64)
        return slots[index.reshape(-1)].reshape(anchors.shape)

    # ------------------------------------------------------------------ the clock
    def start_round(self, t: int) -> float:
        """As :meth:`MovingChannel.start_round`; the paths of anchors no longer reached are let go."""
        start = super().start_round(t)
        devices = np.arange(self.doppler_hz.shape[0])
        current = set(self._slots([0.0], devices)[0].tolist()) | set(range(devices.size))  # the drop's stay
        kept = {pair: slot for pair, slot in self._slot_of.items() if slot in current}
        order = sorted(set(kept.values()))
        renumber = {slot: i for i, slot in enumerate(order)}
        self._bank = self._bank.select(order)
        self._slot_origin_m = self._slot_origin_m[order]
        self._slot_of = {pair: renumber[slot] for pair, slot in kept.items()}
        self.fading = TracedPathFading(self._bank, self._frequencies_hz, self._carrier_hz)
        return start

    # ------------------------------------------------------------------ the channel
    def path_gain_at(self, offsets_s, devices=None) -> np.ndarray:
        """``[T, K]`` (``[T, P]`` with ``devices``): each device's traced path gain at its
        anchor then."""
        devices = np.arange(self.doppler_hz.shape[0]) if devices is None else np.asarray(devices)
        slots = self._slots(offsets_s, devices)  # may trace, and so extend the fading
        return self.fading.path_gain[slots]

    def _moved(self, offsets_s, devices) -> tuple[np.ndarray, np.ndarray]:
        """``(slots [T, k], displacement [T, k, 2])`` from each slot's anchor."""
        slots = self._slots(offsets_s, devices)
        return slots, self.motion.positions_at(offsets_s, devices) - self._slot_origin_m[slots]

    def at(self, offset_s: float, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`TracedMovingChannel.at`, each device's paths those of its anchor."""
        devices = np.arange(self.doppler_hz.shape[0])[rows]
        slots, moved = self._moved([offset_s], devices)
        return self._antennas(self.fading.at(moved[0], slots[0])), self.fading.path_gain[slots[0]].copy()

    def per_symbol(self, start_s: float, symbol_s: float, num_symbols: int, rows: slice = slice(None)) -> np.ndarray:
        """As :meth:`TracedMovingChannel.per_symbol`; a device that reaches an anchor within
        the phase takes the new paths from the first symbol whose middle lies past it."""
        devices = np.arange(self.doppler_hz.shape[0])[rows]
        offsets = float(start_s) + (np.arange(int(num_symbols)) + 0.5) * float(symbol_s)
        slots, moved = self._moved(offsets, devices)
        h = self.fading.at(moved, slots[0])  # [N, k, N_r, F]
        for n in np.flatnonzero(np.any(slots != slots[0], axis=1)):
            changed = np.flatnonzero(slots[n] != slots[0])
            h[n, changed] = self.fading.at(moved[n, changed], slots[n, changed])
        return np.ascontiguousarray(self._antennas(np.moveaxis(h, 0, 1)))

    def owned_at(self, offsets_s, devices, subcarriers, combiner=None) -> np.ndarray:
        """As :meth:`TracedMovingChannel.owned_at`, each pair through its device's anchor at each time."""
        offsets = np.atleast_1d(np.asarray(offsets_s, np.float64))
        devices, subcarriers = np.asarray(devices), np.asarray(subcarriers)
        needed, index = np.unique(devices, return_inverse=True)
        slots, moved = self._moved(offsets, needed)
        slots, moved = slots[:, index], moved[:, index]  # [T, P], [T, P, 2]
        weights = None
        if self.num_antennas > 1:
            if combiner is None:
                raise ValueError(f"owned_at with {self.num_antennas} antennas needs the combiner [N_r, F]")
            weights = np.conj(np.asarray(combiner, np.complex128))[:, subcarriers]
        patterns, which = np.unique(slots, axis=0, return_inverse=True)
        out = np.empty(slots.shape, np.complex64)
        for i, pattern in enumerate(patterns):  # the times at which every pair is at the same anchors
            times = np.flatnonzero(which.reshape(-1) == i)
            out[times] = self.fading.at_pairs(moved[times], pattern, subcarriers, weights)
        return out

    def aging_correlation(self, lag_s, devices=None, at_s: float = 0.0) -> np.ndarray:
        """As :meth:`TracedMovingChannel.aging_correlation`, from the paths of each device's
        anchor at ``at_s`` seconds after the round's start (the estimate's time)."""
        devices = np.arange(self.doppler_hz.shape[0]) if devices is None else np.asarray(devices)
        slots = self._slots([at_s], devices)[0]
        return self.fading.correlation(self.motion.velocities_mps[devices], lag_s, slots)

    def state_columns(self) -> dict[str, np.ndarray]:
        """As :meth:`TracedMovingChannel.state_columns`, ``traced_displacement_m`` from each
        device's current anchor, and ``trace_anchor``: the anchor whose paths it uses."""
        devices = np.arange(self.doppler_hz.shape[0])
        columns = super().state_columns()
        slots = self._slots([0.0], devices)[0]
        moved = self.motion.positions_m - self._slot_origin_m[slots]
        columns["traced_displacement_m"] = np.hypot(moved[:, 0], moved[:, 1])
        anchors = self._anchor_index(self.motion.time_s)
        columns["trace_anchor"] = np.array([self._used[(int(k), int(anchors[k]))] for k in devices], np.float64)
        return columns
