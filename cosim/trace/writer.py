"""The run trace: one HDF5 file per run, appended one round at a time, crash-safe and resumable.

Schema (full list with units and dtypes in ``docs/trace.md``)::

    /                  attrs: schema_version, scenario (resolved TOML), seed, started_at,
                              version_<package>, completed_rounds, resume_count
    /devices/          static per device: position_m [K,2], distance_m [K], num_samples [K], label_hist [K,C]
    /rounds/<col>      [T] one row per round (scalars: round, test_accuracy, ...)
    /rounds/<group>/   [T, n] rows of a per-round vector (per_device: [T, K]; reliability: [T, B])
    /signals/round_NNNNN/<name>   opt-in raw signals of selected rounds
    /checkpoint/slot_0, slot_1    double-buffered model state for resume

Creation is atomic: :meth:`TraceWriter.create` builds the header, the root
attributes and the ``/devices`` tables in a hidden sibling (:func:`partial_path`) and
renames it to the trace's name, so a file under that name is always a complete trace.

Commit protocol (what makes a round atomic for readers and resume). During round
t the engine appends to row t of any dataset (datasets are created on first use;
earlier rows are filled with NaN for floats, -1 for integers) and may write a
checkpoint into the slot *not* holding the newest valid one (that slot is first
marked invalid and flushed). :meth:`TraceWriter.commit` then pads every round
dataset to t + 1 rows, flushes (all data of the round is in the file), and only
then sets the root attribute ``completed_rounds = t + 1`` and flushes again. A
reader trusts rows ``< completed_rounds`` only; a file killed at any moment opens
and holds every committed round. :meth:`TraceWriter.resume` restarts from the
newest valid checkpoint (``completed_rounds`` of that slot <= the root's) and
truncates every longer dataset back to it.

Concurrency. The file uses the HDF5 1.8 format (``libver=("v108", "v108")``), not
``"latest"``: a killed writer of a 1.10+ format file leaves the superblock's
"open for write" flag set, and the file then refuses to open until ``h5clear -s``.
SWMR is not used either (it needs every dataset created up front and forbids
attribute updates). The writer opens the file with HDF5 file locking disabled
(``locking=False``), so any other process can open it read-only while the run
goes on (``h5py.File(path, "r")``, no ``HDF5_USE_FILE_LOCKING`` needed), and takes
a POSIX ``lockf`` lock of its own so that a second *writer* is refused (not
``flock``: HDF5's own file locking, on by default in readers, is ``flock``, and an
exclusive one would refuse them). A ``lockf`` lock is dropped when the process closes
*any* descriptor of the file, so the writer takes it after HDF5 has opened the file
and a process that writes a trace must not also open it for reading. Readers
see the state of the last flush; :func:`read_trace` retries an open that races a
flush.

A full disk stops the writer at the room it reserves before each flush, never half-way
through one; a write that fails all the same abandons the file where its last flush
left it (:mod:`cosim.disk_space`, :meth:`TraceWriter._writing`).

The module is split by concern: the format's constants, errors, checkpoint slots, the
read-only open and the target checks in :mod:`cosim.trace.file_format`, reading and the
summary in :mod:`cosim.trace.read`, what a resume checks before it writes in
:mod:`cosim.trace.compare`; this module writes and resumes, and re-exports the names
(``from cosim.trace import ...`` is the API).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from cosim.disk_space import (
    DiskFullError,
    abandon,
    free_bytes,
    release,
    release_failures,
    reserve,
    size_text,
    write_failure,
)
from cosim.printable import utf8_text
from cosim.trace import exit_point
from cosim.trace.compare import _check_resumable, _comparable
from cosim.trace.file_format import (
    _SLOTS,
    EVAL_COLUMNS,
    LIBVER,
    POSTERIOR_MEAN_COLUMNS,
    RELIABILITY_SERIES,
    SCHEMA_VERSION,
    TIMING_COLUMNS,
    Checkpoint,
    TraceError,
    TraceExistsError,
    TraceTarget,
    _column_dtype,
    _fill_value,
    _load_slot,
    _one_line,
    _os_reason,
    _package_versions,
    _unopenable,
    _valid_slot,
    check_trace_target,
    checksum_options,
    is_trace,
    regular_file,
    row_chunks,
    whole_attr,
    write_header,
)
from cosim.trace.read import (
    TraceData,
    channel_use_split,
    read_trace,
    summarize,
)

__all__ = [
    "EVAL_COLUMNS",
    "POSTERIOR_MEAN_COLUMNS",
    "RELIABILITY_SERIES",
    "SCHEMA_VERSION",
    "TIMING_COLUMNS",
    "Checkpoint",
    "TraceData",
    "TraceError",
    "TraceExistsError",
    "TraceTarget",
    "TraceWriter",
    "channel_use_split",
    "check_trace_target",
    "is_trace",
    "partial_path",
    "read_trace",
    "summarize",
]


def partial_path(path: str | Path) -> Path:
    """Where :meth:`TraceWriter.create` builds the trace before renaming it to ``path``
    (a hidden sibling: ``.NAME.partial``; a kill during creation may leave one
    behind, which the next creation overwrites)."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def _create_exclusively(path: Path) -> None:
    """Create ``path`` as a new empty regular file (never through an existing name or
    link: ``O_EXCL | O_NOFOLLOW``), for HDF5 to open."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644))


FLUSH_MARGIN_BYTES = 2**18
"""Bytes reserved before every flush on top of the data written since the last one
(chunks, checkpoint arrays, signals, :data:`NEW_DATASET_BYTES` per new dataset): room
for HDF5's metadata. Measured on the tests' trace (300 rounds, 2026-11-27): a flush
added at most 3.9 KiB more than the data written since the one before."""
NEW_DATASET_BYTES = 2**12
"""The metadata a new dataset may add to the file (its object header, its chunk
index's first node), counted on top of its first chunk."""


def _resume_failure(path: Path, exc: BaseException) -> TraceError | None:
    """The :class:`TraceError` a failed :meth:`TraceWriter.resume` raises instead of
    ``exc`` (a full disk, the system's fault, h5py's fault of a damaged file), or None
    when ``exc`` itself is raised."""
    if isinstance(exc, DiskFullError) or (isinstance(exc, (OSError, RuntimeError))
                                          and "errno = " in str(exc)):
        return TraceError(f"cannot resume {path}: {write_failure(exc)}; the trace was "
                          "left as it was: resume it once there is room")
    if isinstance(exc, OSError) and exc.errno:  # the system's fault now, not the file's
        return TraceError(f"cannot resume {path}: {_os_reason(exc)}")
    if isinstance(exc, (RuntimeError, OSError, KeyError)):  # h5py's faults of a damaged file
        return TraceError(f"cannot resume {path}: damaged HDF5 file ({_one_line(exc)}; a full "
                          "disk while it was written can do this): delete it to run it "
                          "again in a study, or use `cosim run --overwrite`")
    return None


class TraceWriter:
    """Appends rounds to a trace file; see the module docstring for the commit protocol.

    Create with :meth:`create` or :meth:`resume`, never directly. Use as a context
    manager or call :meth:`close`. Per round: any number of :meth:`append_round`,
    :meth:`append_per_device`, :meth:`append_series`, :meth:`write_signals`, at most
    one :meth:`write_checkpoint`, then :meth:`commit`.
    """

    def __init__(self, file: h5py.File, path: Path, lock_fd: int):
        self._file = file
        self.path = path
        self._lock_fd = lock_fd
        self._completed = int(file.attrs["completed_rounds"])
        found = _valid_slot(file.get("checkpoint"), self._completed)
        self._checkpoint_round = found[0] if found else None
        self._checkpoint_written = False
        self._pending = 0  # bytes written since the last flush (an upper bound)
        self._failed: str | None = None  # why the writer was abandoned
        self._open: dict[str, h5py.Dataset] = {}
        """The round datasets written so far, kept open: a dataset closed after each
        write would write its cached chunk then, outside the flush whose room is
        reserved (:meth:`_flush`)."""
        self.version_changes: dict[str, tuple[str, str]] = {}
        """On resume: package -> (version that wrote the trace, this one), where they differ."""

    @contextlib.contextmanager
    def _writing(self):
        """Around every write: a write the system refuses (a full disk, a quota, an I/O
        error) abandons the file where its last completed flush left it
        (:func:`_abandon`) and raises :class:`TraceError` in one line naming the file,
        the round and what resumes; later calls raise it again."""
        if self._failed is not None:
            raise TraceError(self._failed)
        try:
            with release_failures() as released:
                yield
            if released:  # a write that failed where h5py could not raise it
                raise released[0]
        except (OSError, RuntimeError) as exc:
            t = self._completed
            reason = write_failure(exc)
            if isinstance(exc, DiskFullError) and self._lock_fd >= 0:
                free = free_bytes(self._lock_fd)
                need = self._pending + FLUSH_MARGIN_BYTES
                reason += (f" ({size_text(free)} free, the round needs about {size_text(need)})"
                           if free is not None else "")
            with release_failures():  # the open datasets go with the file, into the sink
                abandon(self._file, self._lock_fd)
                self._open.clear()
            self._lock_fd = -1
            exit_point.closed()
            held = f"rounds 0-{t - 1}" if t > 0 else "no round yet"
            if self._checkpoint_round:
                again = f"--resume continues it from round {self._checkpoint_round}"
            else:
                again = "--resume starts it again from round 0"
            self._failed = (f"cannot write round {t} of trace {self.path}: {reason}; nothing "
                            f"committed is lost (it holds {held}): {again} once there is room")
            raise TraceError(self._failed) from None

    def _flush(self) -> None:
        """Reserve what this flush may add (:data:`FLUSH_MARGIN_BYTES` and what was written
        since the last one), then flush: a full disk stops the writer before it."""
        reserve(self._lock_fd, self._pending + FLUSH_MARGIN_BYTES)
        self._file.flush()
        self._pending = 0

    def _count(self, ds: h5py.Dataset | np.ndarray) -> None:
        """Add what writing (one row of chunks of) ``ds`` may add to the file to the pending
        bytes: every chunk a row touches (one, but for a row wider than
        :data:`cosim.trace.file_format.MAX_CHUNK_BYTES`)."""
        if isinstance(ds, h5py.Dataset) and ds.chunks is not None:
            per_row = int(np.prod([-(-n // c) for n, c in zip(ds.shape[1:], ds.chunks[1:])], dtype=np.int64))
            self._pending += per_row * (int(np.prod(ds.chunks, dtype=np.int64)) * ds.dtype.itemsize + 4)
        else:
            self._pending += int(ds.nbytes) + 4

    # ----------------------------------------------------------------- opening
    @staticmethod
    def _lock(path: Path) -> int:
        regular_file(path, "open trace")  # never a FIFO or a device
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise TraceError(f"cannot open trace {path}: {_os_reason(exc)}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise TraceError(f"{path} is being written by another process") from None
        return fd

    @classmethod
    def create(
        cls,
        path: str | Path,
        scenario_text: str,
        seed: int,
        *,
        overwrite: bool = False,
        devices: Mapping[str, np.ndarray] | None = None,
        **attrs: Any,
    ) -> TraceWriter:
        """Start a new trace at ``path`` (parent directories are created).

        The header (schema version, scenario, seed, package versions), ``attrs`` (root
        attributes: str, int, float; e.g. ``name=``) and the static ``devices`` tables
        (``/devices/<name>``: position_m [K,2], distance_m [K], ...) are written to a hidden sibling
        (:func:`partial_path`) and flushed before it is renamed to ``path``: a file
        under the trace's name is always a complete, openable trace, whenever a kill
        hits. ``overwrite`` replaces an existing trace of this project by that rename
        (the old one stays until the new one is complete); it refuses anything else
        at ``path``. Raises :class:`TraceExistsError` if the file exists and
        ``overwrite`` is False, :class:`TraceError` for file-system faults (one line
        naming the file).
        """
        path = Path(path)
        check_trace_target(path, overwrite=overwrite)
        partial = cls._fresh_partial(path)
        file, lock_fd, ours = None, None, True
        exit_point.opened()  # from here a process asked to end waits for a flush or close
        try:
            file = h5py.File(partial, "w", libver=LIBVER, locking=False)
            # HDF5 opens and closes the file while creating it, which drops lockf locks:
            # the lock is taken on the created file
            try:
                lock_fd = cls._lock(partial)
            except TraceError:  # another process's file now: not ours to remove
                ours = False
                raise
            write_header(file, scenario_text, seed, attrs, devices)
            file.attrs["completed_rounds"] = 0
            reserve(lock_fd, FLUSH_MARGIN_BYTES)
            file.flush()
            os.replace(partial, path)
        except BaseException as exc:
            if file is not None:  # nothing more reaches the partial file, which goes
                abandon(file, None)
            if ours:
                partial.unlink(missing_ok=True)
            if lock_fd is not None:
                os.close(lock_fd)
            exit_point.closed()
            if isinstance(exc, (OSError, RuntimeError)):
                raise TraceError(f"cannot create trace {path}: {write_failure(exc)}") from None
            raise
        return cls(file, path, lock_fd)

    @classmethod
    def _fresh_partial(cls, path: Path) -> Path:
        """The hidden sibling of ``path`` (:func:`partial_path`), created empty and
        exclusively (one left by a killed creation removed first; a trace or a sibling
        another process holds is refused, as is a symbolic link); its parents created."""
        if path.exists():
            os.close(cls._lock(path))  # refuse to clobber a trace another process is writing
        partial = partial_path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if partial.is_symlink():
                raise TraceError(f"cannot create trace {path}: {partial} is a symbolic link "
                                 "(refusing to write through it; remove it)")
            if partial.exists():  # left by a killed creation, or another process creating it now
                os.close(cls._lock(partial))
                partial.unlink()
            _create_exclusively(partial)
        except OSError as exc:
            raise TraceError(f"cannot create trace {path}: {_os_reason(exc)}") from None
        return partial

    @classmethod
    def resume(
        cls, path: str | Path, scenario_text: str | None = None, *, rounds_may_grow: bool = False
    ) -> tuple[TraceWriter, Checkpoint | None, int]:
        """Reopen a trace to continue it from its newest valid checkpoint.

        Checks the schema version and (if given) that ``scenario_text`` equals the
        stored scenario (with ``rounds_may_grow``, up to a larger top-level
        ``rounds``: the caller then records the new scenario with :meth:`set_attrs`
        and resets what only the old last round had, :meth:`reset_cells`); truncates every round dataset and signal group beyond the
        checkpoint (a crash mid-round, or rounds committed after the last
        checkpoint) and returns ``(writer, checkpoint, start)``: the checkpoint is
        None when there is none (start from round 0), and ``start`` (equal to
        ``writer.completed_rounds``) is the round index to run next.
        """
        path = Path(path)
        if not path.exists():
            raise TraceError(f"cannot resume: trace {path} does not exist (run without --resume)")
        fd = cls._lock(path)
        exit_point.opened()  # from here a process asked to end waits for a flush or close
        try:
            file = h5py.File(path, "r+", libver=LIBVER, locking=False)
        except OSError as exc:
            os.close(fd)
            exit_point.closed()
            raise TraceError(f"cannot open trace {path}: {_unopenable(path, exc)}") from None
        writing = False  # until the checks pass, the file is only read
        try:
            stored = _check_resumable(file, path, scenario_text, rounds_may_grow)
            found = _valid_slot(file.get("checkpoint"), int(file.attrs["completed_rounds"]))
            checkpoint = _load_slot(found[1], found[0]) if found else None
            restart = checkpoint.completed_rounds if checkpoint else 0
            writing = True
            changed = cls._reopen(file, fd, restart, stored, scenario_text)
        except BaseException as exc:
            if writing:  # nothing more of a failed resume reaches the file
                abandon(file, fd)
            else:  # refused: closed as it was opened (HDF5 restores its header's flags)
                file.close()
                os.close(fd)
            exit_point.closed()
            failure = _resume_failure(path, exc)
            if failure is not None:
                raise failure from None
            raise
        writer = cls(file, path, fd)
        writer.version_changes = changed
        return writer, checkpoint, restart

    @classmethod
    def _reopen(cls, file: h5py.File, fd: int, restart: int, stored: str,
                scenario_text: str | None) -> dict[str, tuple[str, str]]:
        """Write a checked trace back to round ``restart`` (:meth:`_truncate`), count the
        resume, record the package versions when they changed (``resumed_with_versions``),
        store ``scenario_text`` when it is the same run, reserve the flush margin and
        flush; returns the changed versions, name -> ``(stored, now)``."""
        cls._truncate(file, restart)
        file.attrs["completed_rounds"] = restart
        file.attrs["resume_count"] = whole_attr(file.attrs.get("resume_count", 0), 0) + 1
        now = _package_versions()
        changed = {name: (str(file.attrs.get(f"version_{name}", "unknown")), version)
                   for name, version in now.items()
                   if str(file.attrs.get(f"version_{name}", "unknown")) != version}
        if changed:  # rounds from `restart` on are written by other code: recorded
            history = json.loads(str(file.attrs.get("resumed_with_versions", "[]")))
            history.append({"from_round": restart, "versions": now})
            file.attrs["resumed_with_versions"] = json.dumps(history)
        if scenario_text is not None and _comparable(stored) == _comparable(scenario_text):
            file.attrs["scenario"] = utf8_text(scenario_text)  # the same run; its trace.path as now
        reserve(fd, FLUSH_MARGIN_BYTES)
        file.flush()
        return changed

    def reset_cells(self, row: int, names: list[str]) -> None:
        """Set row ``row`` of each listed ``/rounds`` dataset (path relative to
        ``/rounds``, e.g. ``"ece"``, ``"reliability/bin_count"``; absent ones are
        skipped) back to its fill value (NaN / -1), and flush."""
        with self._writing():
            found = [ds for ds in (self._file["rounds"].get(name) for name in names)
                     if isinstance(ds, h5py.Dataset) and ds.shape[0] > row]
            for ds in found:
                self._count(ds)
            reserve(self._lock_fd, self._pending + FLUSH_MARGIN_BYTES)  # before any write
            for ds in found:
                ds[row] = _fill_value(ds.dtype)
            self._flush()

    @staticmethod
    def _truncate(file: h5py.File, rows: int) -> None:
        def visit(_name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and obj.shape[0] > rows:
                obj.resize(rows, axis=0)

        file["rounds"].visititems(visit)
        for slot in file.get("checkpoint", {}).values():
            if whole_attr(slot.attrs.get("completed_rounds", -1)) > rows:
                slot.attrs["completed_rounds"] = -1  # written by an uncommitted round
        for name in list(file.get("signals", {})):
            if int(name.split("_")[1]) >= rows:
                del file["signals"][name]

    # ----------------------------------------------------------------- per round
    @property
    def stored_scenario(self) -> str:
        """The scenario TOML recorded in the trace (root attribute ``scenario``)."""
        return str(self._file.attrs["scenario"])

    @property
    def completed_rounds(self) -> int:
        """Rounds committed so far; the next round written is row ``completed_rounds``."""
        return self._completed

    def _row(self, group: h5py.Group, name: str, values: np.ndarray) -> None:
        t = self._completed
        key = f"{group.name}/{name}"
        ds = self._open.get(key)
        if ds is None and name in group:
            ds = self._open[key] = group[name]
        if ds is not None:
            if ds.shape[1:] != values.shape:
                raise ValueError(f"{ds.name}: rows have shape {ds.shape[1:]}, got {values.shape}")
        else:
            dtype = _column_dtype(values)
            ds = group.create_dataset(name, shape=(t + 1, *values.shape), maxshape=(None, *values.shape),
                                      dtype=dtype, chunks=row_chunks(values.shape, dtype),
                                      fillvalue=_fill_value(dtype), fletcher32=True)
            self._open[key] = ds
            self._pending += NEW_DATASET_BYTES
        if ds.shape[0] < t + 1:
            ds.resize(t + 1, axis=0)
        if ds.dtype.kind == "i" and values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0):
            raise ValueError(f"{ds.name} holds integers, got {values}")
        ds[t] = values
        self._count(ds)

    def append_round(self, record: Mapping[str, float | int]) -> None:
        """Scalar columns of the current round: /rounds/<key> [T] (float64 or int64).

        May be called several times per round; a key written twice keeps the last value.
        The ``round`` column is written by :meth:`commit` (if given, it must equal the row).
        """
        for key, value in record.items():
            if key == "round":
                if int(value) != self._completed:
                    raise ValueError(f"record round {value} != the trace's current round {self._completed}")
                continue  # written as int64 by commit()
            with self._writing():
                self._row(self._file["rounds"], key, np.asarray(value))

    def append_series(self, group: str, name: str, values: np.ndarray) -> None:
        """A vector row of the current round: /rounds/<group>/<name> [T, *values.shape]."""
        values = np.asarray(values)
        if values.ndim < 1:
            raise ValueError(f"append_series({group!r}, {name!r}) needs an array, got a scalar")
        with self._writing():
            self._row(self._file["rounds"].require_group(group), name, values)

    def append_per_device(self, name: str, values: np.ndarray) -> None:
        """One value per device for the current round: /rounds/per_device/<name> [T, K]."""
        self.append_series("per_device", name, values)

    def write_signals(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Raw arrays of the current round (complex allowed): /signals/round_NNNNN/<name>."""
        with self._writing():
            group = self._file.require_group("signals").require_group(f"round_{self._completed:05d}")
            arrays = {name: np.asarray(value) for name, value in arrays.items()}
            for value in arrays.values():
                self._count(value)
                self._pending += NEW_DATASET_BYTES
            reserve(self._lock_fd, self._pending + FLUSH_MARGIN_BYTES)  # large ones go at once
            for name, value in arrays.items():
                if name in group:
                    del group[name]
                group.create_dataset(name, data=value, **checksum_options(value))

    def write_checkpoint(self, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any] | None = None) -> None:
        """Save the state reached at the end of the current round (valid once committed).

        Writes into the slot that does not hold the newest valid checkpoint, in
        place when names, shapes and dtypes are unchanged (the file does not grow).
        ``attrs`` must be JSON-serialisable; floats round-trip exactly.
        """
        arrays = {key: np.asarray(value) for key, value in arrays.items()}
        with self._writing():
            root = self._file.require_group("checkpoint")
            newest = _valid_slot(root, self._completed)
            name = _SLOTS[1] if newest is not None and newest[1].name.endswith(_SLOTS[0]) else _SLOTS[0]
            slot = root.require_group(name)
            slot.attrs["completed_rounds"] = -1  # invalid while it is rewritten
            for value in arrays.values():  # room for the arrays too, before any is written
                self._count(value)
            self._flush()
            for key in [k for k in slot if k not in arrays]:
                del slot[key]
            for key, value in arrays.items():
                if key in slot and (slot[key].shape != value.shape or slot[key].dtype != value.dtype):
                    del slot[key]
                if key in slot:
                    slot[key][...] = value
                else:
                    slot.create_dataset(key, data=value, **checksum_options(value))
                    self._pending += NEW_DATASET_BYTES
                self._count(value)
            slot.attrs["attrs_json"] = json.dumps(dict(attrs or {}))
            slot.attrs["completed_rounds"] = self._completed + 1
            self._checkpoint_written = True

    def set_attrs(self, **attrs: Any) -> None:
        """Add or replace root attributes (str, int, float)."""
        with self._writing():
            for key, value in attrs.items():
                value = utf8_text(value) if isinstance(value, str) else value
                self._file.attrs[key] = value
                self._pending += len(str(value).encode())

    def append(self, record: Any) -> None:
        """Write an engine round record: any object with ``round`` (int), ``scalars``
        (dict) and optionally ``per_device``, ``reliability``, ``signals`` (dicts of arrays)."""
        if int(record.round) != self._completed:
            raise ValueError(f"record round {record.round} != the trace's current round {self._completed}")
        self.append_round(record.scalars)
        for name, values in (getattr(record, "per_device", None) or {}).items():
            self.append_per_device(name, values)
        for name, values in (getattr(record, "reliability", None) or {}).items():
            self.append_series("reliability", name, values)
        if getattr(record, "signals", None):
            self.write_signals(record.signals)

    def commit_round(
        self,
        round_index: int,
        checkpoint: Mapping[str, np.ndarray] | None = None,
        checkpoint_attrs: Mapping[str, Any] | None = None,
    ) -> int:
        """:meth:`write_checkpoint` (if ``checkpoint`` is given) then :meth:`commit`, checking the round."""
        if int(round_index) != self._completed:
            raise ValueError(f"commit_round({round_index}) but the trace's current round is {self._completed}")
        if checkpoint is not None:
            self.write_checkpoint(checkpoint, checkpoint_attrs)
        return self.commit()

    def commit(self) -> int:
        """Finish the current round atomically; returns the new ``completed_rounds``."""
        t = self._completed

        def pad(_name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and obj.shape[0] < t + 1:
                obj.resize(t + 1, axis=0)
                self._count(obj)

        with self._writing():
            self._row(self._file["rounds"], "round", np.asarray(t, dtype=np.int64))
            self._file["rounds"].visititems(pad)
            self._flush()
            self._file.attrs["completed_rounds"] = t + 1
            self._flush()
        self._completed = t + 1
        if self._checkpoint_written:
            self._checkpoint_round, self._checkpoint_written = t + 1, False
        exit_point.flushed()  # the round is on disk: a process asked to end ends here
        return self._completed

    def column(self, name: str) -> np.ndarray | None:
        """The committed rows of the scalar column ``/rounds/<name>`` ([completed_rounds],
        stored dtype), or None when the trace has no such column."""
        ds = self._file["rounds"].get(name)
        if not isinstance(ds, h5py.Dataset):
            return None
        return ds[: self._completed]

    def round_columns(self) -> dict[str, np.ndarray]:
        """Every scalar column of ``/rounds`` by name, its committed rows
        ([completed_rounds], stored dtype)."""
        return {name: ds[: self._completed] for name, ds in self._file["rounds"].items()
                if isinstance(ds, h5py.Dataset) and ds.ndim == 1}

    def flush(self) -> None:
        with self._writing():
            self._flush()
        exit_point.flushed()

    def close(self) -> None:
        """Flush and close (uncommitted rows stay beyond ``completed_rounds`` and are
        ignored); the disk space reserved ahead is given back. After a failed write
        (:class:`TraceError` from a write) there is nothing left to close."""
        if self._failed is not None or self._lock_fd < 0:
            return
        with self._writing():
            if self._file.id.valid:
                self._flush()
                self._open.clear()
                self._file.close()
        release(self._lock_fd)
        os.close(self._lock_fd)
        self._lock_fd = -1
        exit_point.closed()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
