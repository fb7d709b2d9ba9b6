"""Bad command-line input: :class:`UsageError` (``cosim`` exits 2 with its one line) and
the check of a trace path the commands read (:func:`existing_trace`). Imports nothing
heavy; the CLI and its command modules share it."""

from __future__ import annotations

import os
from pathlib import Path


class UsageError(Exception):
    """Bad command-line input (exit status 2, no traceback)."""


def existing_trace(path: str) -> Path:
    """``path`` as a trace file to read; UsageError naming it when it is missing, a
    directory or not a regular file."""
    p = Path(path)
    try:
        os.stat(p)
    except FileNotFoundError:
        raise UsageError(f"no such trace file: {path}") from None
    except OSError as exc:  # a name too long, a link loop, a directory not searchable
        raise UsageError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    if p.is_dir():
        raise UsageError(f"cannot read trace {path}: it is a directory")
    if not p.is_file():
        raise UsageError(f"cannot read trace {path}: not a regular file")
    return p
