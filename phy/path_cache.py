"""Traced paths and the folder that keeps them: :class:`TracedPaths`, :class:`PathCache`.

Tracing a drop in a real scene takes tens of seconds (Sionna RT, 100 devices, depth 3),
and its result depends only on the scene's files, the BS, the devices' positions, the
carrier and the solver's settings. :class:`PathCache` keeps each result as one ``.npz``
file named by the SHA-256 of those settings (:func:`cache_key`), with the SHA-256 of its
arrays inside it: a run that finds the entry traces nothing, a changed setting is a new
name, and an entry whose arrays do not match their checksum is refused with one line
naming the file (delete it to trace again). Writes are atomic (a temporary file renamed
over the name).

NumPy and the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_CHECKSUM = "checksum_sha256"


@dataclass(frozen=True)
class TracedPaths:
    """The uplink paths of K devices to the N_r antennas of the BS, one drop.

    Parameters
    ----------
    a : np.ndarray
        ``[K, N_r, P]``, complex64: baseband path coefficients of device k's path p at BS
        antenna n (absolute: ``sum_p |a_knp|^2`` is the path gain), 0 where device k has
        fewer than P paths.
    tau_s : np.ndarray
        ``[K, P]``, float32: path delays [s], device k's first path at 0, 0 where there
        is no path.
    arrival_xy : np.ndarray, optional
        ``[K, P, 2]``, float32: the x, y components of the unit vector from device k
        towards where its path p arrives from, ``r(theta_R, phi_R)`` of Sionna RT (the
        paths are traced from the BS to the devices; the directions are reciprocal), 0
        where there is no path. A device moving at ``v`` [m/s] in the plane sees path p
        shifted by ``v . r / lambda`` [Hz] (:mod:`phy.moving_rays`). None when not traced
        (a place at rest does not keep them).
    """

    a: np.ndarray
    tau_s: np.ndarray
    arrival_xy: np.ndarray | None = None

    def __post_init__(self) -> None:
        a = np.asarray(self.a, np.complex64)
        tau = np.asarray(self.tau_s, np.float32)
        if a.ndim != 3 or tau.shape != (a.shape[0], a.shape[2]):
            raise ValueError(f"a must be [K, N_r, P] and tau_s [K, P], got {a.shape} and {tau.shape}")
        arrival = None if self.arrival_xy is None else np.asarray(self.arrival_xy, np.float32)
        if arrival is not None and arrival.shape != (*tau.shape, 2):
            raise ValueError(f"arrival_xy must be [K, P, 2] = {[*tau.shape, 2]}, got {list(arrival.shape)}")
        for array in (a, tau, arrival):
            if array is not None:
                array.flags.writeable = False
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "tau_s", tau)
        object.__setattr__(self, "arrival_xy", arrival)

    @property
    def num_devices(self) -> int:
        """K."""
        return int(self.a.shape[0])

    @property
    def path_gain(self) -> np.ndarray:
        """``[K]`` float64: ``sum_p |a_knp|^2`` averaged over the BS antennas (linear)."""
        power = np.abs(self.a.astype(np.complex128)) ** 2
        return np.mean(np.sum(power, axis=2), axis=1)

    @property
    def has_path(self) -> np.ndarray:
        """``[K]`` bool: whether device k has at least one path with power."""
        return self.path_gain > 0

    def select(self, devices) -> TracedPaths:
        """The paths of ``devices`` (indices), in that order, trailing empty paths dropped."""
        devices = np.asarray(devices, np.int64)
        return _trimmed(self.a[devices], self.tau_s[devices],
                        None if self.arrival_xy is None else self.arrival_xy[devices])

    @staticmethod
    def concatenate(parts: list[TracedPaths]) -> TracedPaths:
        """The devices of ``parts`` one after the other (P padded with empty paths)."""
        num_paths = max(p.a.shape[2] for p in parts)
        a = np.concatenate([np.pad(p.a, [(0, 0), (0, 0), (0, num_paths - p.a.shape[2])]) for p in parts])
        tau = np.concatenate([np.pad(p.tau_s, [(0, 0), (0, num_paths - p.tau_s.shape[1])]) for p in parts])
        arrival = None
        if all(p.arrival_xy is not None for p in parts):
            arrival = np.concatenate([np.pad(p.arrival_xy, [(0, 0), (0, num_paths - p.arrival_xy.shape[1]), (0, 0)])
                                      for p in parts])
        return _trimmed(a, tau, arrival)

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"a": a, "tau_s": tau_s}`` (and ``"arrival_xy"`` when traced) for
        :meth:`PathCache.store`."""
        arrays = {"a": self.a, "tau_s": self.tau_s}
        if self.arrival_xy is not None:
            arrays["arrival_xy"] = self.arrival_xy
        return arrays

    @staticmethod
    def of(arrays: Mapping[str, np.ndarray]) -> TracedPaths:
        """The paths of a cache entry's ``arrays`` (:meth:`arrays`)."""
        return TracedPaths(arrays["a"], arrays["tau_s"], arrays.get("arrival_xy"))


def _trimmed(a: np.ndarray, tau: np.ndarray, arrival: np.ndarray | None = None) -> TracedPaths:
    """The paths without the trailing path indices no device uses (at least one kept)."""
    used = np.flatnonzero(np.any(np.abs(a) > 0, axis=(0, 1)))
    keep = int(used[-1]) + 1 if used.size else 1
    return TracedPaths(a[:, :, :keep], tau[:, :keep], None if arrival is None else arrival[:, :keep])


def cache_key(settings: Mapping) -> str:
    """SHA-256 (hex) of ``settings``' canonical JSON (sorted keys, floats as Python
    writes them, so 1.5 and 1.50000001 are different keys)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def arrays_checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 (hex) over the arrays' names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


class CacheEntryDamaged(ValueError):
    """An entry that cannot be read or whose arrays do not match its checksum."""


class PathCache:
    """A folder of traced results, one checksummed ``<key>.npz`` per setting.

    Parameters
    ----------
    folder : str | Path
        Created on the first :meth:`store`.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        """The entry's file."""
        return self.folder / f"{key}.npz"

    def load(self, key: str) -> tuple[dict[str, np.ndarray], str] | None:
        """``(arrays, checksum)`` of the entry ``key``, or None when there is none;
        :class:`CacheEntryDamaged` (one line naming the file) when it cannot be read or
        its arrays do not match the checksum stored with them."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as entry:
                arrays = {name: entry[name] for name in entry.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise CacheEntryDamaged(f"traced-paths cache entry {path} cannot be read ({error}); "
                                    "delete it to trace the drop again") from None
        stored = arrays.pop(_CHECKSUM, None)
        checksum = arrays_checksum(arrays)
        if stored is None or str(stored) != checksum:
            raise CacheEntryDamaged(f"traced-paths cache entry {path} is damaged (its arrays do not "
                                    "match their SHA-256); delete it to trace the drop again")
        return arrays, checksum

    def store(self, key: str, arrays: Mapping[str, np.ndarray]) -> str:
        """Write the entry ``key`` atomically; its checksum."""
        checksum = arrays_checksum(arrays)
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".npz", dir=self.folder)
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez(file, **arrays, **{_CHECKSUM: np.array(checksum)})
            os.replace(temporary, self.path(key))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return checksum
