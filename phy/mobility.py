"""Devices that move: straight lines reflected at the cell's walls, or random waypoints.

``mobility.model = "straight"`` (:data:`phy.parameters.MOBILITY_MODELS`): device k starts
at its drop position ``p_k(0)`` (:mod:`phy.geometry`) with a speed ``v_k`` [m/s] (the
scenario's value, or uniform in its ``[low, high]``) and a heading uniform in
``[0, 2 pi)``, and moves at constant velocity

``p_k(t + dt) = p_k(t) + u_k dt``, ``|u_k| = v_k``,

reflected specularly (``u <- u - 2 (u . n) n``, ``n`` the wall's normal at the hit) where it
meets the cell's edge ``|p| = radius_m`` or the exclusion circle ``|p| = min_distance_m``
around the BS, so it stays in the annulus ``min_distance_m <= |p| <= radius_m`` the
drop is made in. Speed and ``|p x u|`` are kept by each reflection (both walls are
centred on the BS), so the travelled distance is ``v_k t`` exactly, which the
time-correlated fading reads (:mod:`phy.doppler`).

:class:`StraightMotion` keeps the state at one time and advances it on demand
(:meth:`StraightMotion.positions_at` for times later than the state's, without changing
it; :meth:`StraightMotion.move_to` to move the state). Positions are a deterministic
function of the time since the run's start, so a resumed run that knows the time at its
first round gets the same positions.

``mobility.model = "random_waypoint"`` (:class:`RandomWaypoint`): device k walks at its
speed ``v_k`` in a straight line to a waypoint drawn uniformly over the area of the same
annulus, and on arrival turns to the next one, without pausing (the random waypoint model
of Johnson and Maltz, 1996, with zero pause time). Waypoint j of device k is drawn from its
own generator, seeded by the run's key, k and j, so the path is a function of the time
alone, whatever the steps it is advanced in.

No TensorFlow: NumPy float64.
"""

from __future__ import annotations

import numpy as np

MAX_REFLECTIONS = 1_000_000
"""Hang guard of :func:`advance`: its passes that reflect some device (at most one
reflection per device and pass) in one call."""


def speeds_mps(speed_mps, num_devices: int, rng: np.random.Generator) -> np.ndarray:
    """``[K]`` float64 speeds [m/s]: the value for every device, or uniform in
    ``[low, high]`` per device (a pair), drawn from ``rng`` (K draws either way, so the
    headings drawn after do not depend on which)."""
    draws = rng.random(num_devices)
    if isinstance(speed_mps, tuple | list):
        low, high = (float(v) for v in speed_mps)
        return low + (high - low) * draws
    return np.full(num_devices, float(speed_mps))


def _hit_times(p: np.ndarray, u: np.ndarray, radius_m: float, inner_m: float) -> np.ndarray:
    """``[K]`` time to the first wall along ``p + u t`` (inf for a device at rest)."""
    a = np.sum(u * u, axis=1)
    b = 2.0 * np.sum(p * u, axis=1)
    c_out = np.sum(p * p, axis=1) - radius_m ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        # the outer wall: the larger root (the device is inside, c <= 0 up to rounding)
        t_out = (-b + np.sqrt(np.maximum(b * b - 4.0 * a * c_out, 0.0))) / (2.0 * a)
        t_out = np.where(a > 0.0, t_out, np.inf)
        if inner_m > 0.0:  # the inner wall: the smaller root, when heading towards it
            disc = b * b - 4.0 * a * (np.sum(p * p, axis=1) - inner_m ** 2)
            t_in = (-b - np.sqrt(np.maximum(disc, 0.0))) / (2.0 * a)
            t_out = np.where((a > 0.0) & (b < 0.0) & (disc > 0.0) & (t_in >= 0.0),
                             np.minimum(t_out, t_in), t_out)
    return t_out


def advance(positions_m: np.ndarray, velocities_mps: np.ndarray, dt_s, radius_m: float,
            inner_m: float) -> tuple[np.ndarray, np.ndarray]:
    """The devices ``dt_s`` seconds later, reflected at ``|p| = radius_m`` and ``|p| = inner_m``.

    Input: ``positions_m`` [K, 2], ``velocities_mps`` [K, 2] (float64), ``dt_s`` >= 0 (one
    for all, or [K] one per row), the walls [m]. Output: new ``(positions [K, 2],
    velocities [K, 2])`` (the inputs are not changed). Each row is computed on its own, so
    a row's result does not depend on the others.
    """
    dt = np.asarray(dt_s, np.float64)
    if not np.all(dt >= 0.0):
        raise ValueError(f"dt_s must be >= 0, got {dt_s!r}")
    p, u = np.array(positions_m, np.float64), np.array(velocities_mps, np.float64)
    remaining = np.broadcast_to(dt, (p.shape[0],)).copy()
    remaining[np.sum(u * u, axis=1) == 0.0] = 0.0
    reflections = 0
    while np.any(remaining > 0.0):
        moving = np.flatnonzero(remaining > 0.0)
        t_hit = _hit_times(p[moving], u[moving], radius_m, inner_m)
        step = np.minimum(remaining[moving], t_hit)
        p[moving] += u[moving] * step[:, None]
        remaining[moving] -= step
        hit = moving[t_hit <= step]
        hit = hit[remaining[hit] > 0.0]
        if hit.size:
            r = np.hypot(p[hit, 0], p[hit, 1])
            n = p[hit] / r[:, None]
            u[hit] -= 2.0 * np.sum(u[hit] * n, axis=1)[:, None] * n
            outer = np.abs(r - radius_m) <= np.abs(r - inner_m)  # back onto the wall it hit
            p[hit] = n * np.where(outer, radius_m, inner_m)[:, None]
            reflections += 1
        if reflections > MAX_REFLECTIONS:
            raise RuntimeError(f"more than {MAX_REFLECTIONS} passes with reflections in {float(np.max(dt))} s")
    return p, u


class StraightMotion:
    """Constant-velocity motion in the annulus ``inner_m <= |p| <= radius_m`` (module docstring).

    Parameters
    ----------
    positions_m : [K, 2], float
        The drop (time 0).
    speed_mps : [K], float
        v_k >= 0.
    heading_rad : [K], float
        Direction of motion at time 0.
    radius_m, inner_m : float
        The cell's edge and the exclusion radius around the BS.
    """

    def __init__(self, positions_m, speed_mps, heading_rad, radius_m: float, inner_m: float = 0.0):
        self.initial_positions_m = np.array(positions_m, np.float64)
        self.speed_mps = np.array(speed_mps, np.float64)
        if np.any(self.speed_mps < 0.0) or not np.all(np.isfinite(self.speed_mps)):
            raise ValueError(f"speed_mps must be finite and >= 0, got {self.speed_mps}")
        heading = np.asarray(heading_rad, np.float64)
        self.initial_velocities_mps = self.speed_mps[:, None] * np.stack([np.cos(heading), np.sin(heading)], 1)
        self.radius_m, self.inner_m = float(radius_m), float(inner_m)
        self.time_s = 0.0
        self.positions_m = self.initial_positions_m.copy()
        self.velocities_mps = self.initial_velocities_mps.copy()

    def move_to(self, time_s: float) -> None:
        """Set the state to time ``time_s`` [s] since the start (from the current state
        when later, else from the drop)."""
        if time_s < self.time_s:
            self.time_s, self.positions_m = 0.0, self.initial_positions_m.copy()
            self.velocities_mps = self.initial_velocities_mps.copy()
        self.positions_m, self.velocities_mps = advance(self.positions_m, self.velocities_mps,
                                                        time_s - self.time_s, self.radius_m, self.inner_m)
        self.time_s = float(time_s)

    def positions_at(self, offsets_s, devices=None) -> np.ndarray:
        """``[T, K, 2]`` positions at ``offsets_s`` [T] seconds after the state's time
        (ascending, each >= 0; each advanced from the state, all T in one :func:`advance`
        of T K rows; the state is not changed); with ``devices`` [P] only theirs, ``[T, P, 2]``
        (the same values: each row is advanced on its own)."""
        offsets = np.atleast_1d(np.asarray(offsets_s, np.float64))
        if np.any(np.diff(offsets) < 0.0) or (offsets.size and offsets[0] < 0.0):
            raise ValueError(f"offsets_s must be ascending and >= 0, got {offsets}")
        rows = slice(None) if devices is None else np.asarray(devices)
        p, u = self.positions_m[rows], self.velocities_mps[rows]
        p, _ = advance(np.tile(p, (offsets.size, 1)), np.tile(u, (offsets.size, 1)),
                       np.repeat(offsets, p.shape[0]), self.radius_m, self.inner_m)
        return p.reshape(offsets.size, -1, 2)

    def travelled_m(self, time_s) -> np.ndarray:
        """``[..., K]`` distance travelled by ``time_s`` [s] (``v_k t``)."""
        return np.asarray(time_s, np.float64)[..., None] * self.speed_mps

    def walk(self, state, dt_s) -> tuple[np.ndarray, tuple]:
        """``(positions [K, 2], state)``: every device ``dt_s`` ([K], >= 0) seconds on from
        ``state`` (None: the drop), each row on its own, apart from the run's clock (the
        anchors of :mod:`phy.retraced_rays`, walked from point to point)."""
        p, u = (self.initial_positions_m, self.initial_velocities_mps) if state is None else state
        p, u = advance(p, u, dt_s, self.radius_m, self.inner_m)
        return p, (p, u)


def _uniform_annulus(rng: np.random.Generator, inner_m: float, radius_m: float) -> np.ndarray:
    """One point ``[2]`` uniform over the area of the annulus ``inner_m <= r <= radius_m``."""
    r = np.sqrt(rng.uniform(inner_m ** 2, radius_m ** 2))
    angle = rng.uniform(0.0, 2.0 * np.pi)
    return np.array([r * np.cos(angle), r * np.sin(angle)])


class RandomWaypoint:
    """Random waypoints without pause in the annulus ``inner_m <= |p| <= radius_m`` (module docstring).

    Parameters
    ----------
    positions_m : [K, 2], float
        The drop (time 0).
    speed_mps : [K], float
        v_k >= 0.
    key : int
        The run's key of the waypoints (waypoint j of device k from ``default_rng([key, k, j])``).
    radius_m, inner_m : float
        The annulus the waypoints are drawn in (a straight leg between two of its points
        may cut the inner circle: the exclusion radius is a bound on the drop and the
        waypoints, not on the legs).
    """

    def __init__(self, positions_m, speed_mps, key: int, radius_m: float, inner_m: float = 0.0):
        self.initial_positions_m = np.array(positions_m, np.float64)
        self.speed_mps = np.array(speed_mps, np.float64)
        if np.any(self.speed_mps < 0.0) or not np.all(np.isfinite(self.speed_mps)):
            raise ValueError(f"speed_mps must be finite and >= 0, got {self.speed_mps}")
        self.key, self.radius_m, self.inner_m = int(key), float(radius_m), float(inner_m)
        self._reset()

    def _reset(self) -> None:
        self.time_s = 0.0
        self.positions_m = self.initial_positions_m.copy()
        self.legs = np.zeros(self.positions_m.shape[0], np.int64)
        self.targets_m = np.stack([self.waypoint(k, 0) for k in range(self.positions_m.shape[0])])

    @property
    def velocities_mps(self) -> np.ndarray:
        """``[K, 2]`` float64: each device's velocity now, towards its waypoint (0 for one at rest)."""
        toward = self.targets_m - self.positions_m
        length = np.hypot(toward[:, 0], toward[:, 1])
        return self.speed_mps[:, None] * toward / np.where(length > 0.0, length, 1.0)[:, None]

    def waypoint(self, device: int, leg: int) -> np.ndarray:
        """``[2]`` waypoint ``leg`` of ``device``."""
        return _uniform_annulus(np.random.default_rng([self.key, int(device), int(leg)]),
                                self.inner_m, self.radius_m)

    def _advance(self, positions, legs, targets, dt_s):
        """The state ``dt_s`` seconds on (one for all, or [K] one per device)."""
        p, legs, targets = positions.copy(), legs.copy(), targets.copy()
        remaining = np.where(self.speed_mps > 0.0, np.asarray(dt_s, np.float64), 0.0)
        while np.any(remaining > 0.0):
            for k in np.flatnonzero(remaining > 0.0):
                gap = np.hypot(*(targets[k] - p[k]))
                reach = self.speed_mps[k] * remaining[k]
                if reach < gap:
                    p[k] += (targets[k] - p[k]) * (reach / gap)
                    remaining[k] = 0.0
                else:
                    p[k] = targets[k]
                    remaining[k] -= gap / self.speed_mps[k]
                    legs[k] += 1
                    targets[k] = self.waypoint(k, legs[k])
        return p, legs, targets

    def move_to(self, time_s: float) -> None:
        """Set the state to time ``time_s`` [s] (from the current state when later, else
        from the drop)."""
        if time_s < self.time_s:
            self._reset()
        self.positions_m, self.legs, self.targets_m = self._advance(
            self.positions_m, self.legs, self.targets_m, time_s - self.time_s)
        self.time_s = float(time_s)

    def positions_at(self, offsets_s, devices=None) -> np.ndarray:
        """``[T, K, 2]`` positions at ``offsets_s`` [T] (ascending, >= 0) seconds after the
        state's time (the state is not changed); with ``devices`` [P] only theirs, ``[T, P, 2]``
        (all are advanced: a waypoint's device index is its own)."""
        offsets = np.atleast_1d(np.asarray(offsets_s, np.float64))
        if np.any(np.diff(offsets) < 0.0) or (offsets.size and offsets[0] < 0.0):
            raise ValueError(f"offsets_s must be ascending and >= 0, got {offsets}")
        p, legs, targets, now, out = self.positions_m, self.legs, self.targets_m, 0.0, []
        for offset in offsets:
            p, legs, targets = self._advance(p, legs, targets, float(offset) - now)
            now = float(offset)
            out.append(p)
        positions = np.stack(out) if out else np.zeros((0, *p.shape))
        return positions if devices is None else positions[:, np.asarray(devices)]

    def travelled_m(self, time_s) -> np.ndarray:
        """``[..., K]`` distance travelled by ``time_s`` [s] (``v_k t``)."""
        return np.asarray(time_s, np.float64)[..., None] * self.speed_mps

    def walk(self, state, dt_s) -> tuple[np.ndarray, tuple]:
        """As :meth:`StraightMotion.walk` (each device along its own waypoints)."""
        if state is None:
            state = (self.initial_positions_m, np.zeros(self.speed_mps.size, np.int64),
                     np.stack([self.waypoint(k, 0) for k in range(self.speed_mps.size)]))
        p, legs, targets = self._advance(*state, dt_s)
        return p, (p, legs, targets)
