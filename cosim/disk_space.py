"""Room on the disk before a write that must not stop half-way.

HDF5 writes a flush's metadata in several places of the file (object headers in place,
new blocks at its end, the superblock's end-of-file address); a flush that meets a full
disk half-way leaves a file whose headers point past its recorded end, which no longer
opens. :func:`reserve` allocates the bytes a flush may add *before* it starts, beyond
the file's end without changing its size (Linux ``fallocate`` with
``FALLOC_FL_KEEP_SIZE``): the flush then writes into blocks the file already owns, and
a disk that is full (or fills up meanwhile, from any process) is met by the reservation,
where nothing has been written yet. Where the file system cannot allocate ahead
(``EOPNOTSUPP``: some network and FUSE file systems), the free space reported by
``statvfs`` is checked instead (no guarantee against another process filling the disk
in between). :func:`release` gives back what a closed file did not use.

When a write fails all the same (a raw chunk HDF5 writes outside a flush),
:func:`abandon` closes the HDF5 file without another byte reaching it, and
:func:`release_failures` collects the failures h5py can only print.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import sys
import tempfile
from typing import Any

__all__ = ["DiskFullError", "abandon", "free_bytes", "release", "release_failures", "reserve",
           "size_text", "write_failure"]

_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE (linux/falloc.h)
_FULL = (errno.ENOSPC, errno.EDQUOT)

try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _fallocate = _libc.fallocate
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int
except (OSError, AttributeError):  # not Linux: only the statvfs check
    _fallocate = None


class DiskFullError(OSError):
    """There is not room for the bytes asked for (errno ``ENOSPC`` or ``EDQUOT``)."""


def free_bytes(fd: int) -> int | None:
    """Bytes an unprivileged writer may still allocate on ``fd``'s file system (None if
    unknown)."""
    try:
        stat = os.fstatvfs(fd)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def reserve(fd: int, nbytes: int) -> None:
    """Make sure ``nbytes`` bytes after the end of ``fd``'s file can be written without
    meeting a full disk: allocated to the file (its size unchanged), or, where the file
    system cannot allocate ahead, free on it. Raises :class:`DiskFullError` (nothing
    written, nothing allocated) when they are not to be had."""
    nbytes = max(0, int(nbytes))
    if nbytes == 0:
        return
    end = os.fstat(fd).st_size
    if _fallocate is not None:
        if _fallocate(fd, _KEEP_SIZE, end, nbytes) == 0:
            return
        code = ctypes.get_errno()
        if code in _FULL:
            raise DiskFullError(code, os.strerror(code))
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
    free = free_bytes(fd)
    if free is not None and free < nbytes:
        raise DiskFullError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def release(fd: int) -> None:
    """Give back the blocks allocated beyond the end of ``fd``'s file by :func:`reserve`
    (a truncation to its own size; errors are ignored: the blocks are only space)."""
    try:
        os.ftruncate(fd, os.fstat(fd).st_size)
    except OSError:
        pass


def write_failure(exc: BaseException) -> str:
    """Why a write to a trace failed, in one line: the system's reason (h5py reports a
    failed ``write`` as a RuntimeError whose text carries ``errno = N``)."""
    code = getattr(exc, "errno", None)
    if not (isinstance(exc, OSError) and code):
        found = re.search(r"errno = (\d+)", str(exc))
        code = int(found.group(1)) if found else None
    return os.strerror(code) if code else (" ".join(str(exc).split()) or type(exc).__name__)


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


@contextlib.contextmanager
def release_failures():
    """Collect (and keep off stderr) the errors HDF5 reports only while h5py releases an
    object: a dataset closed after a failed write tries to write its cached chunks
    again, and h5py can only print that ("Exception ignored in ... __dealloc__"). The
    block's caller treats a collected error as the write failure it is."""
    caught: list[BaseException] = []
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if "h5py" in str(unraisable.object) and isinstance(unraisable.exc_value, (OSError, RuntimeError)):
            caught.append(unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield caught
    finally:
        sys.unraisablehook = previous


def abandon(file: Any, lock_fd: int | None) -> None:
    """Close ``file`` without another byte reaching it: HDF5's descriptor is first pointed
    at an anonymous in-memory file, so whatever HDF5 still holds (the uncommitted round's
    rows, dirty headers) is flushed there. After a write failed half-way, this keeps the
    file as the last completed flush left it (a further flush, or HDF5's own retry on
    close, would write headers in place around the hole the failed write left)."""
    if file is not None:
        try:
            fd = file.id.get_vfd_handle()
            try:
                sink = os.memfd_create("abandoned-trace")
            except (AttributeError, OSError):
                sink = os.dup(tempfile.TemporaryFile().fileno())
            os.dup2(sink, fd)
            os.close(sink)
        except (OSError, RuntimeError, ValueError, TypeError):
            pass
        with release_failures():
            try:
                file.close()
            except (OSError, RuntimeError, ValueError):
                pass
    if lock_fd is not None and lock_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(lock_fd)
