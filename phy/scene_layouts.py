"""Devices where a person can stand: drops in a ray-traced scene's coordinates.

The layouts of ``channel.model = "ray_traced"`` (:data:`phy.parameters.SCENE_LAYOUTS`),
each given the scene as a :class:`phy.ray_tracing.RayTracedPlace` (``place``):

* :func:`radio_map`: devices at the centres of radio-map cells whose path gain lies in
  a stated range (a cell inside a building gets no ray, so no device stands there),
  between ``min_distance_m`` and ``radius_m`` of the BS in the plane and at least
  ``min_spacing_m`` apart, drawn at random from the run's geometry stream; every chosen
  position is traced and a device without a path, or whose traced path gain is outside
  the range (the radio map's gain is the mean over a cell; its centre may see far less:
  -136 dB in a cell of -100 dB or more, Munich, 2026-12-02), is replaced by the next
  candidate.
* :func:`scene_explicit`: devices at given ``[x, y]`` scene coordinates; one without a
  path is refused, naming its row.

Both return a :class:`phy.geometry.Deployment` whose ``positions_m`` are scene
coordinates and ``distances_m`` the distances to the BS in the plane. A layout that
cannot place K devices says so in one line naming the key to change (ValueError).
"""

from __future__ import annotations

import numpy as np

from phy.geometry import Deployment
from phy.parameters import RadioMap, SceneExplicit
from phy.path_cache import TracedPaths

_MAX_TRACES = 8
"""Rounds of replacement: devices without a path replaced by the next candidates."""


def _deployment(positions: np.ndarray, place) -> Deployment:
    offsets = positions - place.bs_xy_m[None, :]
    return Deployment(positions, np.hypot(offsets[:, 0], offsets[:, 1]))


def _spaced(order: np.ndarray, centres: np.ndarray, chosen: list[int], wanted: int,
            min_spacing_m: float) -> tuple[list[int], int]:
    """Up to ``wanted`` more candidates from ``order`` (indices into ``centres``), each at
    least ``min_spacing_m`` from the ``chosen`` ones and from each other; and how many
    of ``order`` were looked at."""
    taken: list[int] = []
    looked = 0
    for index in order:
        if len(taken) == wanted:
            break
        looked += 1
        others = chosen + taken
        if others and np.min(np.hypot(*(centres[others] - centres[index]).T)) < min_spacing_m:
            continue
        taken.append(int(index))
    return taken, looked


def radio_map(num_devices: int, radius_m: float, min_distance_m: float, path_gain_range_db,
              rng: np.random.Generator, place, min_spacing_m: float | None = None,
              radio_map_cell_m: float | None = None) -> Deployment:
    """K devices at radio-map cells of the scene whose path gain is in range.

    Input
    -----
    num_devices : int
        K >= 1.
    radius_m, min_distance_m : float
        The devices' distance to the BS in the plane lies in ``[min_distance_m, radius_m]`` [m].
    path_gain_range_db : [2], float
        ``[low, high]`` [dB]: a cell qualifies when ``low <= 10 log10(gain) <= high``.
    rng : np.random.Generator
        The geometry stream: the order in which candidates are drawn.
    place : phy.ray_tracing.RayTracedPlace
        The scene with the BS.
    min_spacing_m : float, optional
        Least distance between two devices [m] (unset: 1).
    radio_map_cell_m : float, optional
        Side of a radio-map cell [m] (unset: 2).

    Output
    ------
    Deployment
        ``positions_m`` [K, 2] scene x, y (cell centres), every device with a path whose
        traced gain is in ``path_gain_range_db``; the paths of the drop are stored in
        ``place``'s cache.
    """
    checked = RadioMap.check(num_devices=num_devices, radius_m=radius_m, min_distance_m=min_distance_m,
                             path_gain_range_db=path_gain_range_db, min_spacing_m=min_spacing_m,
                             radio_map_cell_m=radio_map_cell_m)
    spacing = checked.min_spacing_m if checked.min_spacing_m is not None else RadioMap.DEFAULTS["min_spacing_m"]
    cell = checked.radio_map_cell_m or RadioMap.DEFAULTS["radio_map_cell_m"]
    centres, gain = place.radio_map(checked.radius_m, cell)
    offsets = centres - place.bs_xy_m[None, :]
    distance = np.hypot(offsets[:, 0], offsets[:, 1])
    low, high = checked.path_gain_range_db
    with np.errstate(divide="ignore"):
        gain_db = 10.0 * np.log10(gain)
    candidates = np.flatnonzero((distance >= checked.min_distance_m) & (distance <= checked.radius_m)
                                & (gain_db >= low) & (gain_db <= high))
    order = rng.permutation(candidates)
    chosen: list[int] = []
    parts = []
    for _ in range(_MAX_TRACES):
        batch, looked = _spaced(order, centres, chosen, num_devices - len(chosen), spacing)
        order = order[looked:]
        if not batch:
            break
        traced = place.paths(centres[batch])
        with np.errstate(divide="ignore"):
            traced_db = 10.0 * np.log10(traced.path_gain)
        kept = np.flatnonzero(traced.has_path & (traced_db >= low) & (traced_db <= high))
        chosen += [batch[i] for i in kept]
        parts.append(traced.select(kept))
        if len(chosen) == num_devices:
            break
    if len(chosen) < num_devices:
        raise ValueError(
            f"cell.path_gain_range_db: only {len(chosen)} of cell.num_devices = {num_devices} devices "
            f"could be placed ({candidates.size} radio-map cells of {cell:g} m within "
            f"[{checked.min_distance_m:g}, {checked.radius_m:g}] m of the BS have a path gain in "
            f"[{low:g}, {high:g}] dB, at least {spacing:g} m apart, with a traced path in that range): widen "
            "cell.path_gain_range_db, raise cell.radius_m or lower cell.num_devices")
    positions = centres[chosen]
    place.remember(positions, TracedPaths.concatenate(parts))
    return _deployment(positions, place)


def scene_explicit(num_devices: int, radius_m: float, positions_m, place) -> Deployment:
    """Devices at ``positions_m`` [K, 2] (scene x, y [m]); ValueError naming
    ``cell.positions_m`` and the rows of the devices without a traced path.
    ``radius_m`` is not used (the positions are given)."""
    SceneExplicit.check(num_devices=num_devices, radius_m=radius_m, positions_m=positions_m)
    positions = np.asarray(positions_m, np.float64).reshape(-1, 2)
    traced = place.paths(positions)
    missing = np.flatnonzero(~traced.has_path)
    if missing.size:
        rows = ", ".join(f"row {i} {positions[i].tolist()}" for i in missing[:5])
        raise ValueError(f"cell.positions_m: {missing.size} device(s) have no traced path to the BS "
                         f"({rows}{', ...' if missing.size > 5 else ''}): inside a building or "
                         "shadowed beyond channel.max_depth; move them")
    return _deployment(positions, place)
