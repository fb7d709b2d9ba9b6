"""What a trace file holds and how one is opened: the format's constants, the errors,
the checkpoint slots, and the read-only open that names what is wrong with a file.

:mod:`cosim.trace` writes traces (and re-exports these names), :mod:`cosim.trace.read`
reads them; both build on this module. No TensorFlow.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from cosim.limits import MAX_ROUNDS
from cosim.printable import utf8_text
from cosim.trace.values import stored_problems
from native.memory import memory_budget

SCHEMA_VERSION = 1
EVAL_COLUMNS = ("test_accuracy", "test_nll", "ece")
"""``/rounds`` columns of an evaluation (NaN in rounds without one)."""
POSTERIOR_MEAN_COLUMNS = ("posterior_mean_accuracy", "posterior_mean_nll", "posterior_mean_ece")
"""``/rounds`` columns of the posterior mean's prediction (the proposed method's
``predict_mean_probs``): NaN in rounds without evaluation and for algorithms without a
posterior."""
RELIABILITY_SERIES = ("bin_confidence", "bin_accuracy", "bin_count")
"""``/rounds/reliability/<name>`` rows of an evaluation (NaN rows without one)."""
TIMING_COLUMNS = ("wall_s", "cpu_s")
"""``/rounds`` columns that time a round (its wall clock and its process's CPU): they differ
between any two runs of one scenario, so every comparison of traces leaves them out."""
LIBVER = ("v108", "v108")
PACKAGES = ("tensorflow", "tensorflow-probability", "sionna", "sionna-rt", "aircomp-cosim", "h5py", "numpy", "numba")
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


def whole_attr(value: Any, default: int = -1) -> int:
    """An attribute that holds a count (a checkpoint slot's ``completed_rounds``) as an
    int; ``default`` when it holds anything else (NaN, inf, 2.5, text, an array): a slot
    whose count cannot be read is not a valid one."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        return default
    return int(value) if np.isfinite(value) and float(value).is_integer() and abs(value) < 2**62 \
        else default


def _valid_slot(group: h5py.Group | None, limit: int) -> tuple[int, h5py.Group] | None:
    """Newest checkpoint slot with 0 <= completed_rounds <= limit."""
    best = None
    for name in _SLOTS:
        if group is not None and name in group:
            done = whole_attr(group[name].attrs.get("completed_rounds", -1))
            if 0 <= done <= limit and (best is None or done > best[0]):
                best = (done, group[name])
    return best


def _load_slot(slot: h5py.Group, done: int) -> Checkpoint:
    arrays = {name: slot[name][()] for name in slot}
    for name, values in arrays.items():
        if np.asarray(values).dtype.kind not in "biufc":  # text, objects
            kind = np.asarray(values).dtype
            raise TraceError(f"{slot.file.filename}: {slot.name}/{name} holds {kind}, not "
                             "numbers; the checkpoint cannot be used (use --overwrite to start "
                             "again)")
    try:
        attrs = json.loads(slot.attrs.get("attrs_json", "{}"))
    except (ValueError, TypeError):
        raise TraceError(f"{slot.file.filename}: {slot.name}/attrs_json is not JSON; the "
                         "checkpoint cannot be used (use --overwrite to start again)") from None
    if not isinstance(attrs, dict):
        raise TraceError(f"{slot.file.filename}: {slot.name}/attrs_json is not a JSON object")
    return Checkpoint(done, arrays, attrs)


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


OPEN_RETRY_S = 0.2
"""Pause between attempts to open an HDF5 trace that does not open (the open may race
the writer's flush); a file that is not HDF5 at all is refused at once."""


LIVE_READ_ATTEMPTS = 25
"""Reads of a trace another process is writing that may race its flushes (each
:data:`OPEN_RETRY_S` apart: 5 s in all) before :func:`read_live` calls it being written."""


def writer_pid(path: Path) -> int | None:
    """The id of the process writing the trace at ``path`` (the one holding its writer
    lock, :meth:`cosim.trace.TraceWriter.create`), or None when no process does or it
    cannot be told. Asks the system (``F_GETLK``) without taking a lock, so a run
    starting meanwhile is not refused. Linux's ``struct flock`` layout; elsewhere None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        query = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        kind, _, _, _, pid = struct.unpack("hh4xqqi4x", answer)
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None


def read_live(path: Path, read: Callable[[], Any]) -> Any:
    """``read()``, tried again while it fails with :class:`TraceError` and another
    process is writing ``path``: a reader that opens the file during the writer's flush
    sees part of the old state and part of the new (a ``completed_rounds`` ahead of its
    rows, a chunk half-written that fails its checksum), which a read a moment later
    does not. After :data:`LIVE_READ_ATTEMPTS` such reads the error says the trace is
    being written, never that it is damaged; a file nobody writes fails at once."""
    for attempt in range(LIVE_READ_ATTEMPTS):
        try:
            return read()
        except TraceError:
            pid = writer_pid(path)
            if pid is None:
                raise
            if attempt == LIVE_READ_ATTEMPTS - 1:
                raise TraceError(f"trace {path} is incomplete, being written by process {pid}: "
                                 f"{LIVE_READ_ATTEMPTS} reads met its writes half-way; read it "
                                 "again later") from None
            time.sleep(OPEN_RETRY_S)
    raise AssertionError("unreachable")


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


CHECKSUMS = "fletcher32"
"""Root attribute ``checksums`` of a trace whose datasets carry HDF5's Fletcher-32
checksum per chunk (every dataset with at least one element and one axis; HDF5 checks it
on every read). Traces without the attribute were written before checksums."""


def checksum_options(values: np.ndarray) -> dict[str, Any]:
    """``create_dataset`` keywords that checksum a dataset of ``values``' shape
    (Fletcher-32 needs chunks, so 0-d and empty arrays go without)."""
    return {"fletcher32": True} if values.ndim >= 1 and values.size > 0 else {}


def _is_checksum_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "filter returned failure" in text or "checksum" in text or "can't read data" in text


def read_dataset(ds: h5py.Dataset, path: Path, selection: Any = ()) -> np.ndarray:
    """``ds[selection]``, or :class:`TraceError` naming the file and the dataset when its
    stored bytes fail their checksum (or cannot be read)."""
    try:
        return ds[selection]
    except OSError as exc:
        if _is_checksum_failure(exc):
            raise TraceError(f"trace {path}: dataset {ds.name} is damaged (its stored data fail "
                             "their checksum); nothing was written to the file") from None
        raise


def damaged_datasets(file: h5py.File) -> list[str]:
    """The datasets of ``file`` whose stored data fail their checksum or cannot be read
    (every dataset read in full, chunk by chunk)."""
    damaged: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        try:
            if obj.chunks is None or obj.size == 0:
                obj[()]
            else:
                for chunk in obj.iter_chunks():
                    obj[chunk]
        except (OSError, ValueError, RuntimeError):
            damaged.append(f"/{name}")

    file.visititems(visit)
    return damaged


MAX_READ_BYTES = 16 * 2**30
"""The most bytes the committed rows of a trace's datasets may add up to when read."""
def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.2f} GiB" if nbytes >= 2**26 else f"{nbytes / 2**20:,.1f} MiB"


def _shape_problems(file: h5py.File, datasets: list[tuple[str, h5py.Dataset]], done: int) -> list[str]:
    """Datasets whose shapes are not the trace's own (K devices: the first axis of every
    ``/devices/*`` table and the row of every ``/rounds/per_device/*`` column, K the
    smallest of them), and reads that would take more than :func:`memory_budget` (the
    committed rows of ``/rounds``, all of ``/devices`` and of the checkpoints): headers
    only, nothing allocated."""
    problems: list[str] = []
    tables = [(where, d) for where, d in datasets if where.startswith("/devices/")]
    columns = [(where, d) for where, d in datasets if where.startswith("/rounds/per_device/")]
    sizes = [d.shape[0] for _, d in tables if d.ndim >= 1] + [
        d.shape[1] for _, d in columns if d.ndim == 2]
    k = min(sizes) if sizes else None
    for where, d in tables:
        if d.ndim == 0 or d.shape[0] != k:
            problems.append(f"{where} has shape {d.shape}, but the trace has {k} devices")
    for where, d in columns:
        if d.shape[1:] != (k,):
            problems.append(f"{where} has rows of shape {d.shape[1:]}, but the trace has "
                            f"{k} devices")
    need = []
    for where, d in datasets:
        row = int(np.prod(d.shape[1:], dtype=np.float64)) * d.dtype.itemsize if d.ndim else 0
        if where.startswith("/rounds/") and d.ndim >= 1:
            need.append((where, min(done, d.shape[0]) * float(row)))
        elif where.startswith(("/devices/", "/checkpoint/")):
            need.append((where, float(np.prod(d.shape, dtype=np.float64)) * d.dtype.itemsize))
    total, budget = sum(n for _, n in need), memory_budget(MAX_READ_BYTES)
    if need and total > budget:
        largest = max(need, key=lambda item: item[1])
        problems.append(f"reading it would take {_gib(total)}, more than the {_gib(budget)} this "
                        f"process may take ({largest[0]}: shape {file[largest[0]].shape})")
    return problems


def closed_file_problems(file: h5py.File) -> list[str]:
    """What makes ``file`` not a closed trace, one line each naming the object: a dataset
    whose data lives in another file (external storage, a virtual layout), an external or
    soft link (which may leave the file), ``completed_rounds`` that is not an integer in
    ``0..min(rows of /rounds/round, MAX_ROUNDS)``, committed rows that add up to more than
    :data:`MAX_READ_BYTES`. Reads headers only: nothing outside the file is opened."""
    problems: list[str] = []
    datasets: list[tuple[str, h5py.Dataset]] = []

    def walk(group: h5py.Group, prefix: str) -> None:
        for name in group:
            where = f"{prefix}/{name}"
            link = group.get(name, getlink=True)
            if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
                kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
                problems.append(f"{where} is {kind} (a trace holds its data itself)")
                continue
            item = group.get(name)
            if isinstance(item, h5py.Group):
                walk(item, where)
            elif isinstance(item, h5py.Dataset):
                if item.is_virtual:
                    problems.append(f"{where} is a virtual dataset (its data is in other files)")
                elif item.id.get_create_plist().get_external_count() > 0:
                    problems.append(f"{where} stores its data in an external file")
                else:
                    datasets.append((where, item))

    walk(file, "")
    raw = file.attrs.get("completed_rounds", 0)
    rows = file["rounds/round"].shape[0] if "rounds/round" in file and not problems else 0
    if isinstance(raw, np.ndarray) and raw.shape == ():
        raw = raw[()]
    whole = isinstance(raw, (int, np.integer)) or (isinstance(raw, (float, np.floating))
                                                   and float(raw).is_integer())
    done = int(raw) if whole else -1
    if not whole or not 0 <= done <= min(max(rows, 0), MAX_ROUNDS):
        problems.append(f"completed_rounds = {raw!r} cannot be real (the file holds {rows} rows "
                        f"of /rounds/round)")
    elif not problems:
        problems += _shape_problems(file, datasets, done)
    return problems + _attribute_problems(file)


ROOT_COUNTS = ("schema_version", "resume_count", "num_params", "checkpoint_dropped")
"""Root attributes that hold a whole number >= 0 when present (``docs/trace.md``)."""
ROOT_TEXT = ("scenario", "name", "algorithm", "started_at", "checksums")
"""Root attributes that hold text when present."""


def _attribute_problems(file: h5py.File) -> list[str]:
    """The root attributes a reader or a resume uses that hold what no run writes: a count
    (:data:`ROOT_COUNTS`, and ``seed``: any whole number) that is not one, text
    (:data:`ROOT_TEXT`) that is not text."""
    problems = []
    for key in (*ROOT_COUNTS, "seed"):
        if key in file.attrs:
            raw = file.attrs[key]
            value = whole_attr(raw, default=-1 if key != "seed" else None)
            if value is None or (key != "seed" and value < 0):
                problems.append(f"root attribute {key} = {_shown_attr(raw)} is not a whole number"
                                + (" >= 0" if key != "seed" else ""))
    for key in ROOT_TEXT:
        if key in file.attrs and not isinstance(file.attrs[key], (str, bytes)):
            problems.append(f"root attribute {key} = {_shown_attr(file.attrs[key])} is not text")
        elif key in file.attrs and isinstance(file.attrs[key], bytes):
            try:
                file.attrs[key].decode("utf-8")
            except UnicodeDecodeError:
                problems.append(f"root attribute {key} is not UTF-8 text")
    return problems


def _shown_attr(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= 60 else text[:60] + "..."


def stored_number_problems(file: h5py.File) -> list[str]:
    """:func:`cosim.trace.values.stored_problems` of the committed rows of every
    ``/rounds`` dataset and of every ``/devices`` table (what a resume reads back), in
    that order; one dataset in memory at a time (a wide trace's [T, K] columns)."""
    done = int(file.attrs.get("completed_rounds", 0))  # checked by closed_file_problems
    problems: list[str] = []

    def visit(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            problems.extend(stored_problems({name: obj[:done] if obj.ndim else obj[()]}, {}))

    if isinstance(file.get("rounds"), h5py.Group):
        file["rounds"].visititems(visit)
    if isinstance(file.get("devices"), h5py.Group):
        for name, ds in file["devices"].items():
            if isinstance(ds, h5py.Dataset):
                problems.extend(stored_problems({}, {name: ds[()]}))
    return problems


def check_closed(file: h5py.File, path: Path) -> None:
    """:class:`TraceError` naming ``path`` and the first objects of
    :func:`closed_file_problems`, if any."""
    try:
        problems = closed_file_problems(file)
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:  # damaged headers
        raise TraceError(f"cannot read trace {path}: damaged HDF5 file ({_one_line(exc)})") from None
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise TraceError(f"refusing trace {path}: " + "; ".join(problems[:3]) + more)


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFDIR: "a directory"}


def regular_file(path: Path, doing: str = "read") -> None:
    """:class:`TraceError` ("cannot DOING PATH: it is a FIFO ...") unless ``path`` is a
    regular file (links followed; a missing file passes, for the caller to name): a
    FIFO, a device or a socket is refused before anything opens it, so no read blocks."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TraceError(f"cannot {doing} {path}: {_one_line(exc)}") from None
    if stat.S_ISDIR(mode):
        return  # the caller says "it is a directory" its own way
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise TraceError(f"cannot {doing} {path}: it is {kind}, not a regular file")


def _open_for_reading(path: Path, attempts: int = 5) -> h5py.File:
    """``path`` opened read-only and checked closed (:func:`check_closed`), or
    :class:`TraceError` naming it (missing, a directory, empty, not HDF5, truncated or
    damaged, not closed). An HDF5 file that does not open is tried
    ``attempts`` times, :data:`OPEN_RETRY_S` apart; anything else fails at once."""
    regular_file(path, "read trace")  # first: also names a name too long, a link loop
    if path.is_dir():
        raise TraceError(f"cannot read trace {path}: it is a directory")
    for attempt in range(attempts):
        try:
            # locking=False: HDF5 refuses a second open of a file in the same process with
            # different locking flags, and the writer opens with locking=False
            file = h5py.File(path, "r", locking=False)
        except FileNotFoundError:
            raise TraceError(f"trace {path} does not exist") from None
        except OSError as exc:
            if attempt == attempts - 1 or not _is_hdf5(path):
                raise TraceError(f"cannot read trace {path}: {_unopenable(path, exc)}") from None
            time.sleep(OPEN_RETRY_S)  # an open that raced the writer's flush
            continue
        try:
            check_closed(file, path)
        except BaseException:
            file.close()
            raise
        return file
    raise AssertionError("unreachable")


def is_trace(path: str | Path) -> bool:
    """Whether ``path`` is an HDF5 file with this project's trace header."""
    path = Path(path)
    if not path.is_file() or not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r", locking=False) as file:
            return "schema_version" in file.attrs and "scenario" in file.attrs
    except OSError:
        return False


def _not_utf8(path: Path) -> str | None:
    """The reason ``path`` cannot be stored as text (its bytes are not UTF-8), or None."""
    try:
        utf8_text(str(path))
    except UnicodeDecodeError as exc:
        return (f"its name is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); a trace "
                "stores its path as UTF-8: rename it")
    return None


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


@dataclass(frozen=True)
class TraceTarget:
    """Where a run writes its trace and what it does there, decided once
    (:func:`check_trace_target`) and passed down as one value.

    ``action``: ``"resume"`` (an existing trace is continued), ``"replace"``
    (``--overwrite``: the trace is created, replacing one of this project that is there),
    ``"create"`` (the trace is created; nothing may be there) or ``"create_asked_resume"`` (``--resume`` of a trace that does not exist
    yet: a new run, said on stderr)."""

    path: Path
    action: str

    @property
    def resumes(self) -> bool:
        """Whether an existing trace is continued."""
        return self.action == "resume"

    @property
    def replaces(self) -> bool:
        """Whether creating the trace may replace an existing one (``--overwrite``)."""
        return self.action == "replace"


def check_trace_target(path: str | Path, *, resume: bool = False, overwrite: bool = False
                       ) -> TraceTarget:
    """The :class:`TraceTarget` of a run at ``path`` with ``--resume`` / ``--overwrite``,
    or :class:`TraceError` (one line naming the file) when it cannot write its trace
    there. Creates and writes nothing, so a run decides this before its set-up (and
    :meth:`TraceWriter.create` checks again, for library callers).

    Refused: a directory at ``path``; an existing file without ``resume`` or
    ``overwrite`` (:class:`TraceExistsError`); with ``overwrite``, an existing file that
    is not a trace of this project; and, unless an existing trace is resumed, a parent
    that is not a directory or not writable.
    """
    path = Path(path)
    try:
        _check_target(path, resume=resume, overwrite=overwrite)
        exists = path.exists()
    except TraceError:  # TraceExistsError is an OSError too
        raise
    except OSError as exc:  # a name longer than the system allows, a link loop, ...
        raise TraceError(f"cannot create trace {path}: {_os_reason(exc)}") from None
    if resume:
        return TraceTarget(path, "resume" if exists else "create_asked_resume")
    return TraceTarget(path, "replace" if overwrite else "create")


def _check_target(path: Path, *, resume: bool, overwrite: bool) -> None:
    if (reason := _not_utf8(path)) is not None:
        raise TraceError(f"cannot create trace {path}: {reason}")
    if path.is_dir():
        raise TraceError(f"cannot create trace {path}: it is a directory")
    if path.exists() or path.is_symlink():
        if resume:
            return
        if not overwrite:
            raise TraceExistsError(
                f"trace {path} already exists; continue it with --resume or replace it with --overwrite"
            )
        if not is_trace(path):
            raise TraceError(f"refusing to overwrite {path}: it is not an aircomp-cosim trace")
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink():  # a dangling link
            raise TraceError(f"cannot create trace {path}: {parent} is a broken link")
        parent = parent.parent
    if not parent.is_dir():
        raise TraceError(f"cannot create trace {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"cannot create trace {path}: {parent} is not writable")


MAX_CHUNK_BYTES = 2**17
"""The most bytes a chunk of a round dataset holds: a row wider than this (a
``/rounds/per_device`` row of more than 16,384 devices in float64) is split into equal
chunks of one row each (100,000 devices: 7 chunks of 14,286), so that no chunk outgrows
HDF5's 1 MiB chunk cache however many devices a cell has, and a read of some devices'
columns reads their chunks only."""


def row_chunks(row_shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, ...]:
    """The chunk shape of a round dataset of rows ``row_shape`` and ``dtype``: rows of
    ~16 KiB together (up to 512 rows, at least one), a row of one axis wider than
    :data:`MAX_CHUNK_BYTES` in equal pieces of one row. Rows up to 16,384 float64 values
    keep the chunks traces were written with before the split."""
    size = int(np.prod(row_shape, dtype=np.int64))
    chunk_rows = max(1, min(512, 2**14 // max(1, size * 8)))  # ~16 KiB chunks
    row_bytes = size * np.dtype(dtype).itemsize
    if len(row_shape) == 1 and row_bytes > MAX_CHUNK_BYTES:
        pieces = -(-row_bytes // MAX_CHUNK_BYTES)
        return (1, -(-size // pieces))
    return (chunk_rows, *row_shape)


def write_header(file: h5py.File, scenario_text: str, seed: int, attrs: Mapping[str, Any],
                  devices: Mapping[str, np.ndarray] | None) -> None:
    """A new trace's root attributes (schema, checksums, scenario, seed, start time,
    package versions, ``attrs``), its static ``/devices`` tables and its empty ``/rounds``."""
    file.attrs["schema_version"] = SCHEMA_VERSION
    file.attrs["checksums"] = CHECKSUMS
    file.attrs["scenario"] = utf8_text(scenario_text)  # its trace.path too
    file.attrs["seed"] = int(seed)
    file.attrs["started_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    for name, version in _package_versions().items():
        file.attrs[f"version_{name}"] = version
    file.attrs["resume_count"] = 0
    for key, value in attrs.items():
        file.attrs[key] = utf8_text(value) if isinstance(value, str) else value
    devices_group = file.create_group("devices")
    for name, value in (devices or {}).items():
        value = np.asarray(value)
        devices_group.create_dataset(name, data=value, **checksum_options(value))
    file.create_group("rounds")
