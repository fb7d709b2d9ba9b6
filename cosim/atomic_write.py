"""Files that appear complete or not at all, never written through a planted link.

Every file a command writes whole (``status.json``, the study's copy, the report's CSV,
Parquet and figures) goes through :func:`atomic_output`: a temporary file created
exclusively (``mkstemp``: a new random name, ``O_EXCL``, so never an existing name or
link) next to the target, written, flushed to disk, given the mode a plain ``open``
would give a new file (``0o666`` less the user's umask, :func:`new_file_mode`; ``mkstemp``
makes it ``0o600``), then renamed onto the target (``os.replace``: readers see the old
file or the new one). A target that is a symbolic
link is refused: the rename would replace the link, but a link where an output belongs
is someone else's plan, and the command says so instead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["OutputError", "atomic_output", "check_output_path", "new_file_mode",
           "write_bytes_atomic", "write_text_atomic"]

_UMASK_LOCK = threading.Lock()


def new_file_mode() -> int:
    """The mode of a new file under this process's umask: ``0o666 & ~umask`` (0o644 under
    the usual 022), what ``open(path, "w")`` would create."""
    with _UMASK_LOCK:  # the umask is read by setting it: put it back at once
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


class OutputError(OSError):
    """An output that cannot be written where it belongs (naming it)."""


def check_output_path(path: Path, *, inside: Path | None = None) -> Path:
    """``path`` if a command may write it: not a symbolic link, and (with ``inside``)
    within that directory once resolved; else :class:`OutputError` naming it."""
    if path.is_symlink():
        raise OutputError(f"refusing to write {path}: it is a symbolic link")
    if inside is not None:
        resolved, root = path.resolve(), inside.resolve()
        if resolved != root and root not in resolved.parents:
            raise OutputError(f"refusing to write {path}: it is outside {inside}")
    return path


@contextlib.contextmanager
def atomic_output(path: str | Path, *, inside: Path | None = None) -> Iterator[Path]:
    """Yield a fresh temporary path next to ``path`` to write; on success it is flushed
    and renamed onto ``path``, on any error removed (``path`` untouched)."""
    path = check_output_path(Path(path), inside=inside)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _failed(path, exc) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
            os.fchmod(written.fileno(), new_file_mode())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a quota: named by the output, not its temporary
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OutputError):
            raise
        raise _failed(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _failed(path: Path, exc: OSError) -> OutputError:
    """``exc`` as an :class:`OutputError` whose ``filename`` is the output ``path`` (its
    ``errno`` and ``strerror`` kept)."""
    return OutputError(exc.errno, exc.strerror or str(exc), str(path))


def write_bytes_atomic(path: str | Path, data: bytes, *, inside: Path | None = None) -> None:
    with atomic_output(path, inside=inside) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str, *, inside: Path | None = None) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), inside=inside)
