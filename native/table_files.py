"""The files of the per-device tables a streamed run keeps on disk, by name.

:mod:`learning.device_table` writes them (``<name>.v<version>.f32``, and
``<name>.v<version>.f32.partial`` while a round writes the next version) into the
directory :func:`table_directory` of the run's trace; ``cosim`` deletes them (compact,
overwrite) from these names without importing ``learning``.
"""

from __future__ import annotations

import re
from pathlib import Path

TABLE_FILE = re.compile(r"^(?P<name>\w+)\.v(?P<version>\d+)\.f32(?P<partial>\.partial)?$")
"""A version file's name (``partial`` set for an unfinished one)."""


def table_file_name(name: str, version: int) -> str:
    """``<name>.v<version>.f32``."""
    return f"{name}.v{int(version)}.f32"


def table_directory(trace_path: str | Path) -> Path:
    """``<trace stem>-device-tables`` beside the trace (``runs/quickstart-seed1.h5`` ->
    ``runs/quickstart-seed1-device-tables``)."""
    trace_path = Path(trace_path)
    return trace_path.with_name(f"{trace_path.stem}-device-tables")


def table_files(directory: str | Path) -> list[Path]:
    """Every version file (and unfinished one) in ``directory`` (none when it is absent)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if TABLE_FILE.match(p.name))


def drop_table_files(trace_path: str | Path) -> int:
    """Delete the version files beside the trace at ``trace_path``, and their directory
    once empty (a directory holding other files stays); the bytes freed."""
    directory = table_directory(trace_path)
    files = table_files(directory)
    freed = 0
    for path in files:
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    if files:
        try:
            directory.rmdir()
        except OSError:
            pass
    return freed
