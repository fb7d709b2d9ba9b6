"""Cell geometry: drop K devices around a base station (BS) at the origin.

The paper (Section VI, Table II) drops K = 100 devices uniformly in a disk of
radius ``r_cvge`` = 300 m around the BS; the channel variance of device k is the
path gain ``r_k^-alpha_PL`` (Section III-A, below eq. ``ReceivedSignal``;
alpha_PL = 4).
Besides that drop this module offers an annulus, Gaussian clusters and an explicit
list of positions. All drops are NumPy code driven by a ``np.random.Generator``, so
the same generator state gives bit-identical positions.

Units: metres; the path gain is linear (dimensionless).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phy.parameters import Annulus, Clusters, Explicit, UniformDisk

_MAX_RESAMPLING_ROUNDS = 100


@dataclass(frozen=True)
class Deployment:
    """Positions of K devices in the plane of a BS at the origin.

    Parameters
    ----------
    positions_m : np.ndarray
        ``[K, 2]``, float64: x/y coordinates [m]. Stored read-only.
    distances_m : np.ndarray
        ``[K]``, float64: distance of each device to the BS [m]. Stored read-only.
    """

    positions_m: np.ndarray
    distances_m: np.ndarray

    def __post_init__(self) -> None:
        positions = np.array(self.positions_m, dtype=np.float64)
        distances = np.array(self.distances_m, dtype=np.float64)
        if positions.ndim != 2 or positions.shape[1] != 2 or positions.shape[0] < 1:
            raise ValueError(f"positions_m must have shape [K, 2] with K >= 1, got {positions.shape}")
        if distances.shape != (positions.shape[0],):
            raise ValueError(
                f"distances_m must have shape [{positions.shape[0]}], got {distances.shape}"
            )
        positions.flags.writeable = False
        distances.flags.writeable = False
        object.__setattr__(self, "positions_m", positions)
        object.__setattr__(self, "distances_m", distances)

    @property
    def num_devices(self) -> int:
        """K, the number of devices."""
        return int(self.distances_m.shape[0])


def _from_positions(positions_m: np.ndarray) -> Deployment:
    return Deployment(positions_m, np.hypot(positions_m[:, 0], positions_m[:, 1]))


def _ring_points(num: int, inner_m: float, radius_m: float, rng: np.random.Generator) -> np.ndarray:
    """``[num, 2]`` points uniform over the area of the ring inner_m <= r <= radius_m."""
    u = rng.random(num)
    r = np.sqrt(u * (radius_m**2 - inner_m**2) + inner_m**2)
    phi = rng.uniform(0.0, 2.0 * np.pi, num)
    return np.stack([r * np.cos(phi), r * np.sin(phi)], axis=-1)


def uniform_disk(
    num_devices: int, radius_m: float, min_distance_m: float, rng: np.random.Generator
) -> Deployment:
    """Devices uniform over the area of a disk, with an exclusion zone around the BS.

    The radius is drawn as ``r = sqrt(U (R^2 - r0^2) + r0^2)``, U ~ U(0, 1), and the
    angle uniformly, so the density is uniform over the area of the ring
    ``r0 <= r <= R`` (the paper's drop: R = 300 m, Section VI).

    Parameters
    ----------
    num_devices : int
        K >= 1.
    radius_m : float
        Cell radius R > 0 [m].
    min_distance_m : float
        Exclusion radius r0, 0 <= r0 < R [m].
    rng : np.random.Generator
        Source of randomness.

    Returns
    -------
    Deployment
        positions ``[K, 2]`` and distances ``[K]`` in [r0, R].
    """
    UniformDisk.check(num_devices=num_devices, radius_m=radius_m, min_distance_m=min_distance_m)
    return _from_positions(_ring_points(int(num_devices), min_distance_m, radius_m, rng))


def annulus(
    num_devices: int, inner_radius_m: float, radius_m: float, rng: np.random.Generator
) -> Deployment:
    """Devices uniform over the area of the annulus ``inner_radius_m <= r <= radius_m``.

    Same sampling as :func:`uniform_disk`; useful to place all devices at the cell edge
    or in a distance ring.
    """
    Annulus.check(num_devices=num_devices, inner_radius_m=inner_radius_m, radius_m=radius_m)
    return _from_positions(_ring_points(int(num_devices), inner_radius_m, radius_m, rng))


def clusters(
    num_devices: int,
    num_clusters: int,
    cluster_std_m: float,
    radius_m: float,
    min_distance_m: float,
    rng: np.random.Generator,
) -> Deployment:
    """Devices in Gaussian clusters (hot spots) inside the cell.

    Cluster centres are uniform over the ring ``min_distance_m <= r <= radius_m`` (as in
    :func:`uniform_disk`). Device k belongs to cluster ``k mod num_clusters`` (cluster
    sizes differ by at most one) and sits at its centre plus an isotropic Gaussian
    offset of standard deviation ``cluster_std_m`` per coordinate. Devices that land
    outside the ring are **resampled** (new Gaussian offset around the same centre),
    for up to 100 rounds; any device still outside after that (only when the clusters
    are much wider than the cell) is moved radially onto the nearest admissible radius
    (**clipped**). All distances are therefore in ``[min_distance_m, radius_m]``.

    Parameters
    ----------
    num_devices : int
        K >= 1.
    num_clusters : int
        Number of clusters, 1 <= num_clusters <= K.
    cluster_std_m : float
        Standard deviation of the offsets per coordinate, >= 0 [m].
    radius_m, min_distance_m : float
        Cell radius and exclusion radius [m], 0 <= min_distance_m < radius_m.
    rng : np.random.Generator
        Source of randomness.

    Returns
    -------
    Deployment
    """
    Clusters.check(num_devices=num_devices, num_clusters=num_clusters, cluster_std_m=cluster_std_m,
                   radius_m=radius_m, min_distance_m=min_distance_m)
    k, c = int(num_devices), int(num_clusters)
    centres = _ring_points(c, min_distance_m, radius_m, rng)
    owner = np.arange(k) % c
    positions = centres[owner] + cluster_std_m * rng.standard_normal((k, 2))
    for _ in range(_MAX_RESAMPLING_ROUNDS):
        r = np.hypot(positions[:, 0], positions[:, 1])
        outside = np.flatnonzero((r < min_distance_m) | (r > radius_m))
        if outside.size == 0:
            break
        positions[outside] = centres[owner[outside]] + cluster_std_m * rng.standard_normal(
            (outside.size, 2)
        )
    r = np.hypot(positions[:, 0], positions[:, 1])
    r_clipped = np.clip(r, min_distance_m, radius_m)
    # A device exactly at the origin (only possible with min_distance_m = 0) needs no move.
    scale = np.divide(r_clipped, r, out=np.ones_like(r), where=r > 0)
    positions = positions * scale[:, None]
    return Deployment(positions, np.clip(np.hypot(positions[:, 0], positions[:, 1]),
                                         min_distance_m, radius_m))


def explicit(positions_m: np.ndarray, min_distance_m: float = 0.0) -> Deployment:
    """Devices at given positions.

    Parameters
    ----------
    positions_m : array_like
        ``[K, 2]`` x/y coordinates [m], finite.
    min_distance_m : float
        Every device must be at least this far from the BS (default 0) [m].

    Returns
    -------
    Deployment
    """
    positions = np.array(positions_m, dtype=np.float64)
    if positions.ndim != 2 or positions.shape[1] != 2 or positions.shape[0] < 1:
        raise ValueError(f"positions_m must have shape [K, 2] with K >= 1, got {positions.shape}")
    Explicit.check(positions_m=positions.tolist(), min_distance_m=min_distance_m)
    return _from_positions(positions)


def path_gain(distances_m: np.ndarray, path_loss_exponent: float) -> np.ndarray:
    """Large-scale path gain ``r^-alpha`` (the channel variance of Section III-A).

    Parameters
    ----------
    distances_m : array_like
        ``[K]`` distances r > 0 [m].
    path_loss_exponent : float
        alpha >= 0 (paper: 4).

    Returns
    -------
    np.ndarray
        ``[K]``, float64: linear path gain ``r^-alpha``.
    """
    r = np.asarray(distances_m, dtype=np.float64)
    if r.size == 0:
        raise ValueError(f"distances_m must hold at least one distance, got shape {r.shape}")
    if not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"distances_m must be positive and finite, got min {np.min(r)!r}")
    if not np.isfinite(path_loss_exponent) or path_loss_exponent < 0:
        raise ValueError(
            f"path_loss_exponent must be a finite number >= 0, got {path_loss_exponent!r}"
        )
    return r ** (-float(path_loss_exponent))


def horizontal_direction(azimuth_rad, zenith_rad) -> np.ndarray:
    """``[..., 2]`` float64: the x, y of the unit vector at ``zenith_rad`` from the vertical
    and ``azimuth_rad`` from x (Sionna's ``r(theta, phi)``; what a device moving in the
    plane at ``v`` sees as the Doppler ``v . r / lambda`` of a ray from that direction)."""
    azimuth, zenith = np.asarray(azimuth_rad, np.float64), np.asarray(zenith_rad, np.float64)
    return np.stack([np.sin(zenith) * np.cos(azimuth), np.sin(zenith) * np.sin(azimuth)], axis=-1)
