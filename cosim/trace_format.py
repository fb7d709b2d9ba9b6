"""What a trace file holds and how one is opened: the format's constants, the errors,
the checkpoint slots, and the read-only open that names what is wrong with a file.

:mod:`cosim.trace` writes traces (and re-exports these names), :mod:`cosim.trace_read`
reads them; both build on this module. No TensorFlow.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import h5py
import numpy as np

SCHEMA_VERSION = 1
EVAL_COLUMNS = ("test_accuracy", "test_nll", "ece")
"""``/rounds`` columns of an evaluation (NaN in rounds without one)."""
POSTERIOR_MEAN_COLUMNS = ("posterior_mean_accuracy", "posterior_mean_nll", "posterior_mean_ece")
"""``/rounds`` columns of the posterior mean's prediction (the proposed method's
``predict_mean_probs``): NaN in rounds without evaluation and for algorithms without a
posterior."""
RELIABILITY_SERIES = ("bin_confidence", "bin_accuracy", "bin_count")
"""``/rounds/reliability/<name>`` rows of an evaluation (NaN rows without one)."""
LIBVER = ("v108", "v108")
PACKAGES = ("tensorflow", "tensorflow-probability", "sionna-no-rt", "aircomp-cosim", "h5py", "numpy", "numba")
_SLOTS = ("slot_0", "slot_1")
CHECKPOINT_DROPPED = "checkpoint_dropped"
"""Root attribute (1) of a trace whose checkpoint :func:`drop_checkpoint` removed."""


class TraceError(Exception):
    """A trace that cannot be written, resumed or read as asked."""


class TraceExistsError(TraceError, FileExistsError):
    """The trace file already exists and overwriting was not asked for."""


@dataclass(frozen=True)
class Checkpoint:
    """A model state saved with the trace.

    Attributes
    ----------
    completed_rounds : int
        Number of rounds the state has gone through (resume starts at this round index).
    arrays : dict[str, np.ndarray]
        Named arrays (``algorithm.state_to_arrays``), dtypes and shapes preserved.
    attrs : dict[str, Any]
        JSON-compatible extras (e.g. ``cumulative_channel_uses``), exact round trip.
    """

    completed_rounds: int
    arrays: dict[str, np.ndarray]
    attrs: dict[str, Any]


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _fill_value(dtype: np.dtype) -> Any:
    return np.nan if np.issubdtype(dtype, np.floating) else -1


def _column_dtype(values: np.ndarray) -> np.dtype:
    if values.dtype.kind in "biu":
        return np.dtype(np.int64)
    if values.dtype.kind == "f":
        return np.dtype(np.float64)
    raise TypeError(f"trace columns must be numeric (got dtype {values.dtype})")


def _valid_slot(group: h5py.Group | None, limit: int) -> tuple[int, h5py.Group] | None:
    """Newest checkpoint slot with 0 <= completed_rounds <= limit."""
    best = None
    for name in _SLOTS:
        if group is not None and name in group:
            done = int(group[name].attrs.get("completed_rounds", -1))
            if 0 <= done <= limit and (best is None or done > best[0]):
                best = (done, group[name])
    return best


def _load_slot(slot: h5py.Group, done: int) -> Checkpoint:
    arrays = {name: slot[name][()] for name in slot}
    return Checkpoint(done, arrays, json.loads(slot.attrs.get("attrs_json", "{}")))


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


OPEN_RETRY_S = 0.2
"""Pause between attempts to open an HDF5 trace that does not open (the open may race
the writer's flush); a file that is not HDF5 at all is refused at once."""


def _one_line(exc: BaseException) -> str:
    """Why an open or a read failed, in one line: the OS's reason for an errno, else
    HDF5's message with its whitespace collapsed."""
    errno = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and errno:
        return os.strerror(errno)
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)  # unquoted
    return " ".join(text.split()) or type(exc).__name__


def _is_hdf5(path: Path) -> bool:
    try:
        return bool(h5py.is_hdf5(path))
    except (OSError, ValueError):
        return False


def _unopenable(path: Path, exc: OSError) -> str:
    """The reason an existing ``path`` does not open as HDF5, for :class:`TraceError`."""
    try:
        size = path.stat().st_size
    except OSError:
        size = None
    if size == 0:
        return "the file is empty (0 bytes)"
    if getattr(exc, "errno", None):
        return _one_line(exc)
    if not _is_hdf5(path):
        return "not an HDF5 file (no HDF5 signature)"
    reason = _one_line(exc).removeprefix("Unable to synchronously open file").strip()
    reason = reason.removeprefix("(").removesuffix(")")
    if reason.startswith("truncated file") and size is not None:
        stored = reason.rpartition("stored_eof = ")[2]
        return f"truncated ({size:,} bytes; its header says {int(stored):,})" if stored.isdigit() \
            else f"truncated ({reason})"
    return f"damaged HDF5 file ({reason})"


def _open_for_reading(path: Path, attempts: int = 5) -> h5py.File:
    """``path`` opened read-only, or :class:`TraceError` naming it (missing, a directory,
    empty, not HDF5, truncated or damaged). An HDF5 file that does not open is tried
    ``attempts`` times, :data:`OPEN_RETRY_S` apart; anything else fails at once."""
    if path.is_dir():
        raise TraceError(f"cannot read trace {path}: it is a directory")
    for attempt in range(attempts):
        try:
            # locking=False: HDF5 refuses a second open of a file in the same process with
            # different locking flags, and the writer opens with locking=False
            return h5py.File(path, "r", locking=False)
        except FileNotFoundError:
            raise TraceError(f"trace {path} does not exist") from None
        except OSError as exc:
            if attempt == attempts - 1 or not _is_hdf5(path):
                raise TraceError(f"cannot read trace {path}: {_unopenable(path, exc)}") from None
            time.sleep(OPEN_RETRY_S)  # an open that raced the writer's flush
    raise AssertionError("unreachable")
