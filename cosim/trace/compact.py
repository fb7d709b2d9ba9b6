"""``cosim study compact``'s rewrite of a finished trace without its model state:
:func:`drop_checkpoint`."""

from __future__ import annotations

import os
from pathlib import Path

import h5py

from cosim.trace.file_format import (
    CHECKPOINT_DROPPED,
    LIBVER,
    TraceError,
    _one_line,
    _open_for_reading,
)
from cosim.trace.writer import TraceWriter, _create_exclusively
from native.table_files import drop_table_files


def drop_checkpoint(path: str | Path) -> int:
    """Rewrite the trace at ``path`` without ``/checkpoint`` (the model state kept for
    resume) and mark it ``checkpoint_dropped = 1``; the bytes freed (with the per-device
    tables a streamed run kept beside it for its resume, which only a resume reads:
    :func:`native.table_files.drop_table_files`).

    Everything a reader uses (the root attributes, ``/devices``, ``/rounds``,
    ``/signals``) is copied unchanged into a hidden sibling (``.NAME.compact``), which
    then replaces the trace while this process still holds the trace's writer lock: a
    kill at any moment leaves the trace whole, with or without its checkpoint, and no
    run can start writing to it in between. :meth:`TraceWriter.resume` refuses a marked
    trace (it could only start again from round 0). A trace without ``/checkpoint`` is
    marked too (0 bytes freed); one marked already is left as it is. Raises
    :class:`TraceError` for a file that is not a readable trace, or one another process
    is writing; the sibling is removed whatever stops the rewrite.
    """
    path = Path(path)
    fd = TraceWriter._lock(path)  # refuse a trace a run is writing
    compact = path.with_name(f".{path.name}.compact")
    before = path.stat().st_size
    try:
        # the lock lasts while HDF5's own descriptor of the file is open: replace inside
        with _open_for_reading(path) as source:
            if "schema_version" not in source.attrs:
                raise TraceError(f"{path} is not an aircomp-cosim trace")
            if source.attrs.get(CHECKPOINT_DROPPED):  # tables a kill after the rename left
                return drop_table_files(path)
            if compact.is_symlink() or compact.exists():  # a stale one, or planted
                compact.unlink()
            _create_exclusively(compact)
            with h5py.File(compact, "w", libver=LIBVER, locking=False) as target:
                for key, value in source.attrs.items():
                    target.attrs[key] = value
                target.attrs[CHECKPOINT_DROPPED] = 1
                for name in source:
                    if name != "checkpoint":
                        source.copy(source[name], target, name=name)
            os.replace(compact, path)
        tables = drop_table_files(path)
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        compact.unlink(missing_ok=True)
        raise TraceError(f"cannot compact trace {path}: {_one_line(exc)}") from None
    except BaseException:
        compact.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return before - path.stat().st_size + tables
