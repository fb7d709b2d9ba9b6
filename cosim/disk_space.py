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
"""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["DiskFullError", "free_bytes", "release", "reserve"]

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
