"""``cosim verify``: is each trace whole? Checked without TensorFlow and without writing.

A trace is **ok** (every dataset reads back and passes its Fletcher-32 checksum, the file
is closed: :func:`cosim.trace.file_format.closed_file_problems`, and every planned round is
committed), **incomplete** (whole, but fewer committed rounds than its scenario plans:
resume it), **damaged** (a dataset fails its checksum or cannot be read, a header is
damaged, or the file is not closed; named) or **not a trace** (not HDF5, or HDF5 without
the trace header). A directory is verified as a study directory (its ``runs/*.h5``) or,
failing that, every ``*.h5`` in it. Traces written before checksums are verified for
readability only, and say so.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cosim.limits import toml_loads
from cosim.trace.file_format import (
    TraceError,
    _is_hdf5,
    _open_for_reading,
    damaged_datasets,
    read_live,
    regular_file,
    stored_number_problems,
    writer_pid,
)

__all__ = ["Verdict", "verify_paths"]

STATES = ("ok", "incomplete", "damaged", "unreadable", "not a trace")


@dataclass(frozen=True)
class Verdict:
    """One file's state (one of :data:`STATES`) and a one-line detail."""

    path: Path
    state: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.path}: {self.state}" + (f" ({self.detail})" if self.detail else "")


def verify_trace(path: Path) -> Verdict:
    """The state of the trace at ``path``. A trace another process is writing is
    "incomplete" and says so; a check that meets the writer's flush half-way is made
    again (:func:`cosim.trace.file_format.read_live`), and one that keeps failing while the
    writer runs is reported as being written, not as damaged."""
    try:
        regular_file(path, "verify")  # a FIFO, a device, a socket: refused, never opened
    except TraceError as error:
        return Verdict(path, "not a trace", str(error).partition(": ")[2])
    if path.is_file() and not os.access(path, os.R_OK):  # before the signature check reads it
        return Verdict(path, "unreadable", "permission denied: this user may not read it")
    if not path.is_file() or not _is_hdf5(path):
        reason = "no such file" if not path.exists() and not path.is_symlink() else (
            "a broken symbolic link" if not path.exists() else "not an HDF5 file")
        return Verdict(path, "not a trace", reason)
    try:
        verdict = read_live(path, lambda: _verify_once(path))
    except _Damaged as damaged:  # and nobody writes it
        return damaged.verdict
    except TraceError as error:  # read_live's: it is being written
        return Verdict(path, "incomplete", str(error))
    pid = writer_pid(path)
    if pid is not None and verdict.state in ("ok", "incomplete"):
        detail = "; ".join(x for x in (verdict.detail, f"being written by process {pid}") if x)
        return Verdict(path, "incomplete", detail)
    return verdict


class _Damaged(TraceError):
    """A verdict of "damaged", raised so that :func:`read_live` may try again."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.detail)
        self.verdict = verdict


def _verify_once(path: Path) -> Verdict:
    try:
        file = _open_for_reading(path)
    except TraceError as error:
        raise _Damaged(Verdict(path, "damaged", str(error))) from None
    with file:
        if "schema_version" not in file.attrs:
            return Verdict(path, "not a trace", "an HDF5 file without the trace header")
        damaged = damaged_datasets(file)
        if damaged:
            more = f" and {len(damaged) - 3} more" if len(damaged) > 3 else ""
            raise _Damaged(Verdict(path, "damaged", f"dataset {', '.join(damaged[:3])}{more} "
                                   "fails its checksum or cannot be read"))
        stored = stored_number_problems(file)
        if stored:  # a number no run writes: refused by every reader, named here
            raise _Damaged(Verdict(path, "damaged", "; ".join(stored[:3])))
        done = int(file.attrs.get("completed_rounds", 0))
        try:
            planned = int(toml_loads(str(file.attrs.get("scenario", ""))).get("rounds", done))
        except (tomllib.TOMLDecodeError, TypeError, ValueError, OverflowError):
            planned = done
        note = "" if "checksums" in file.attrs else "written before checksums: read back, not checked"
    if done < planned:
        return Verdict(path, "incomplete", f"{done} of {planned} rounds" + (f"; {note}" if note else ""))
    return Verdict(path, "ok", note)


def _targets(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    runs = path / "runs"
    return sorted(runs.glob("*.h5")) if runs.is_dir() else sorted(path.glob("*.h5"))


def verify_paths(paths: list[str | Path]) -> list[Verdict]:
    """A verdict per trace named or found in the directories named (an empty directory
    is one "not a trace" verdict)."""
    verdicts: list[Verdict] = []
    for given in map(Path, paths):
        folder = given / "runs" if (given / "runs").is_dir() else given
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):
            verdicts.append(Verdict(folder, "unreadable", "permission denied: this user may not list it"))
            continue
        targets = _targets(given)
        if not targets:
            verdicts.append(Verdict(given, "not a trace", "a directory without traces"))
        for target in targets:
            try:
                verdicts.append(verify_trace(target))
            except (OSError, RuntimeError, KeyError, ValueError) as error:
                verdicts.append(Verdict(target, "damaged", " ".join(str(error).split())))
    return verdicts
