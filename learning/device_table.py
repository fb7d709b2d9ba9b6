"""Per-device [K, d] state held on disk: :class:`DeviceTable`, :class:`TableStore`.

SCAFFOLD's ``c_k``, FedSMOO's ``mu_k`` and ``h_k``, FedGMT's ``h_k`` and signSGD's
``e_k`` (with error feedback) hold d float32 values for every device. At K = 100,000
and d = 118,282 one such table is 47 GB; a round that streams its devices
(``runtime.devices_in_memory``, ``cosim/streamed_round.py``) keeps each one in a file
instead and holds only the rows of the chunk it trains.

A table is *versioned*: version v of field ``name`` is the file ``<name>.v<v>.f32`` of
the store's directory (row-major float32, device k's row at byte offset ``4 d k``),
written once and never modified afterwards. Version 0 is zeros and has no file (every
algorithm starts its tables at zero). A round reads the rows of the version its state
refers to and writes its new rows into the next version (:class:`TableWriter`, a
``.partial`` file renamed into place by :meth:`TableWriter.seal` once every row is
written and synced), so a checkpoint that refers to a version refers to a complete file
that stays as it is. :meth:`TableStore.keep` deletes every version but those the states
it is given refer to (the run's last committed checkpoint and its current state).

Rows move with explicit reads and writes at offsets (``os.preadv``, ``os.pwrite``), not
a memory map: a file-backed mapping's resident pages count in the process's RSS, which
the point of streaming is to bound; the page cache the reads go through does not.

NumPy only (no TensorFlow): the algorithms wrap the rows they read in tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from pathlib import Path
from typing import Any

import numpy as np

from native.table_files import table_file_name, table_files

__all__ = ["DeviceTable", "MissingTableError", "TableStore", "TableWriter", "tables_of"]

_VALUE_BYTES = 4  # float32
_IO_BYTES = 1 << 30  # one read or write call moves at most this much (Linux caps one at ~2 GiB)


class MissingTableError(FileNotFoundError):
    """A version a checkpoint refers to is not on disk (or not whole); the message names
    the file."""


@dataclasses.dataclass(frozen=True)
class DeviceTable:
    """Version ``version`` of the per-device table ``name``: ``num_devices`` rows of
    ``num_values`` float32 each, read-only (version 0: zeros, without a file).

    Attributes
    ----------
    store : TableStore
    name : str
        The state field (``"c_k"``).
    version : int
        Rounds completed when it was written (0: the initial zeros).
    num_devices, num_values : int
        K and d.
    """

    store: TableStore
    name: str
    version: int
    num_devices: int
    num_values: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.num_devices, self.num_values

    @property
    def path(self) -> Path | None:
        """Its file (None for version 0)."""
        return None if self.version == 0 else self.store.path(self.name, self.version)

    def reference(self) -> np.ndarray:
        """What a checkpoint stores for it: ``[version, K, d]`` (int64)."""
        return np.array([self.version, self.num_devices, self.num_values], np.int64)

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo:hi`` ([hi - lo, d] float32, a new array), read from the file."""
        if not 0 <= lo <= hi <= self.num_devices:
            raise ValueError(f"{self.name}: rows {lo}:{hi} outside 0:{self.num_devices}")
        out = np.zeros((hi - lo, self.num_values), np.float32)
        if self.version == 0 or hi == lo:
            return out
        view = memoryview(out.reshape(-1).view(np.uint8))
        offset = lo * self.num_values * _VALUE_BYTES
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingTableError(f"{self.path}: version {self.version} of the device table "
                                    f"{self.name!r} is missing") from None
        try:
            done = 0
            while done < len(view):
                got = os.preadv(fd, [view[done:done + _IO_BYTES]], offset + done)
                if got == 0:
                    raise MissingTableError(f"{self.path}: ends at byte {offset + done}, before row {hi} "
                                            f"of {self.name!r} (a damaged device table)")
                done += got
        finally:
            os.close(fd)
        return out

    def rows_of(self, devices) -> np.ndarray:
        """The rows of ``devices`` (ascending consecutive population ids, a chunk's)."""
        ids = np.asarray(devices, np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.num_values), np.float32)
        lo, hi = int(ids[0]), int(ids[-1]) + 1
        if ids.size != hi - lo or np.any(np.diff(ids) != 1):
            raise ValueError(f"{self.name}: a table on disk reads consecutive devices (a chunk's), "
                             f"not {ids.size} scattered ones")
        return self.rows(lo, hi)

    def next_version(self, version: int) -> TableWriter:
        """A writer of version ``version`` (> this one) of the same table."""
        if int(version) <= self.version:
            raise ValueError(f"{self.name}: version {version} does not follow {self.version}")
        return TableWriter(self.store, self.name, int(version), self.num_devices, self.num_values)


class TableWriter:
    """Version ``version`` of table ``name`` being written: :meth:`write` a chunk's rows
    at their offset, then :meth:`seal` (every row written: synced and renamed into place)
    or :meth:`discard`. The file's bytes are allocated when it opens, so a full disk is
    met before any row is written."""

    def __init__(self, store: TableStore, name: str, version: int, num_devices: int, num_values: int):
        self.store, self.name, self.version = store, name, int(version)
        self.num_devices, self.num_values = int(num_devices), int(num_values)
        self.final = store.path(name, self.version)
        self.partial = self.final.with_name(self.final.name + ".partial")
        self.written = np.zeros(self.num_devices, bool)
        store.directory.mkdir(exist_ok=True)
        self._fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        size = self.num_devices * self.num_values * _VALUE_BYTES
        try:
            try:
                os.posix_fallocate(self._fd, 0, size)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                os.ftruncate(self._fd, size)  # cannot allocate ahead: a sparse file
        except BaseException:
            self.discard()
            raise

    def write(self, lo: int, values) -> None:
        """Rows ``lo:lo + len(values)`` ([m, d], cast to float32)."""
        values = np.ascontiguousarray(values, np.float32)
        hi = lo + values.shape[0]
        if values.ndim != 2 or values.shape[1] != self.num_values or not 0 <= lo <= hi <= self.num_devices:
            raise ValueError(f"{self.name}: rows {lo}:{hi} of shape {values.shape} do not fit "
                             f"[{self.num_devices}, {self.num_values}]")
        view = memoryview(values.reshape(-1).view(np.uint8))
        offset, done = lo * self.num_values * _VALUE_BYTES, 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:done + _IO_BYTES], offset + done)
        self.written[lo:hi] = True

    @property
    def started(self) -> bool:
        """Whether any row was written."""
        return bool(self.written.any())

    def seal(self) -> DeviceTable:
        """The complete version: every row written (else ValueError), the file synced and
        renamed to its final name (the directory synced too)."""
        if not self.written.all():
            missing = int(np.count_nonzero(~self.written))
            raise ValueError(f"{self.name}: version {self.version} lacks {missing} devices' rows")
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        os.replace(self.partial, self.final)
        self.store.sync_directory()
        return DeviceTable(self.store, self.name, self.version, self.num_devices, self.num_values)

    def discard(self) -> None:
        """Close and delete the unfinished file (nothing refers to it)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            self.partial.unlink()


@dataclasses.dataclass(frozen=True)
class TableStore:
    """The directory of a run's device tables (``<trace stem>-device-tables`` beside its
    trace, :func:`cosim.world.build_world`), created at the first write."""

    directory: Path

    def path(self, name: str, version: int) -> Path:
        return self.directory / table_file_name(name, version)

    def zeros(self, name: str, num_devices: int, num_values: int) -> DeviceTable:
        """Version 0 of ``name``: zeros, no file."""
        return DeviceTable(self, name, 0, int(num_devices), int(num_values))

    def open(self, name: str, reference) -> DeviceTable:
        """The version a checkpoint's ``reference`` (:meth:`DeviceTable.reference`) names:
        :class:`MissingTableError` naming the file when it is not on disk whole."""
        values = np.asarray(reference)
        if values.shape != (3,) or values.dtype.kind not in "iu":
            raise ValueError(f"{name}: a device table's reference is [version, K, d] integers, "
                             f"got {values.dtype} {values.shape}")
        version, k, d = (int(v) for v in values)
        table = DeviceTable(self, name, version, k, d)
        if version > 0:
            try:
                size = table.path.stat().st_size
            except FileNotFoundError:
                raise MissingTableError(f"{table.path}: version {version} of the device table {name!r}, "
                                        "which the checkpoint refers to, is missing") from None
            if size != k * d * _VALUE_BYTES:
                raise MissingTableError(f"{table.path}: {size:,} bytes where version {version} of "
                                        f"{name!r} has {k * d * _VALUE_BYTES:,} ([{k}, {d}] float32)")
        return table

    def files(self) -> list[Path]:
        """Every version file (and unfinished one) in the directory."""
        return table_files(self.directory)

    def keep(self, *states: Any) -> list[Path]:
        """Delete every version file that none of ``states``' tables (:func:`tables_of`)
        is, and every unfinished one; the deleted paths."""
        kept = {table.path for state in states for table in tables_of(state).values()}
        gone = [p for p in self.files() if p not in kept]
        for path in gone:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if gone:
            self.sync_directory()
        return gone

    def sync_directory(self) -> None:
        """fsync the directory (a rename or deletion in it durable); ignored where the
        file system cannot."""
        with contextlib.suppress(OSError):
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def tables_of(state: Any) -> dict[str, DeviceTable]:
    """The :class:`DeviceTable` fields of a dataclass ``state`` by name (none otherwise)."""
    if state is None or not dataclasses.is_dataclass(state):
        return {}
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)
            if isinstance(getattr(state, f.name), DeviceTable)}
