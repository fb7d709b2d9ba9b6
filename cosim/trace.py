"""The run trace: one HDF5 file per run, appended one round at a time, crash-safe and resumable.

Schema (full list with units and dtypes in ``docs/trace.md``)::

    /                  attrs: schema_version, scenario (resolved TOML), seed, started_at,
                              version_<package>, completed_rounds, resume_count
    /devices/          static per device: position_m [K,2], distance_m [K], num_samples [K], label_hist [K,C]
    /rounds/<col>      [T] one row per round (scalars: round, test_accuracy, ...)
    /rounds/<group>/   [T, n] rows of a per-round vector (per_device: [T, K]; reliability: [T, B])
    /signals/round_NNNNN/<name>   opt-in raw signals of selected rounds
    /checkpoint/slot_0, slot_1    double-buffered model state for resume

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
a POSIX ``lockf`` lock of its own so that a second *writer* is refused. Readers
see the state of the last flush; :func:`read_trace` retries an open that races a
flush.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import h5py
import numpy as np

__all__ = [
    "SCHEMA_VERSION",
    "Checkpoint",
    "TraceData",
    "TraceError",
    "TraceExistsError",
    "TraceWriter",
    "channel_use_split",
    "read_trace",
    "summarize",
]

SCHEMA_VERSION = 1
LIBVER = ("v108", "v108")
PACKAGES = ("tensorflow", "tensorflow-probability", "sionna-no-rt", "aircomp-cosim", "h5py", "numpy", "numba")
_SLOTS = ("slot_0", "slot_1")


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


def _valid_slot(group: h5py.Group | None, limit: int) -> tuple[int, h5py.Group] | None:
    """Newest checkpoint slot with 0 <= completed_rounds <= limit."""
    best = None
    for name in _SLOTS:
        if group is not None and name in group:
            done = int(group[name].attrs.get("completed_rounds", -1))
            if 0 <= done <= limit and (best is None or done > best[0]):
                best = (done, group[name])
    return best


def _load_slot(slot: h5py.Group, done: int) -> Checkpoint:
    arrays = {name: slot[name][()] for name in slot}
    return Checkpoint(done, arrays, json.loads(slot.attrs.get("attrs_json", "{}")))


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

    # ----------------------------------------------------------------- opening
    @staticmethod
    def _lock(path: Path) -> int:
        fd = os.open(path, os.O_RDWR)
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
        **attrs: Any,
    ) -> TraceWriter:
        """Start a new trace at ``path`` (parent directories are created).

        Raises ``TraceExistsError`` if the file exists and ``overwrite`` is False.
        Keyword ``attrs`` become root attributes (str, int, float; e.g. ``name=``).
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise TraceExistsError(
                f"trace {path} already exists; continue it with --resume or replace it with --overwrite"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            fd = cls._lock(path)  # refuse to clobber a trace another process is writing
            os.close(fd)
        file = h5py.File(path, "w", libver=LIBVER, locking=False)
        file.attrs["schema_version"] = SCHEMA_VERSION
        file.attrs["scenario"] = scenario_text
        file.attrs["seed"] = int(seed)
        file.attrs["started_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        for name, version in _package_versions().items():
            file.attrs[f"version_{name}"] = version
        file.attrs["resume_count"] = 0
        for key, value in attrs.items():
            file.attrs[key] = value
        file.create_group("devices")
        file.create_group("rounds")
        file.attrs["completed_rounds"] = 0
        file.flush()
        return cls(file, path, cls._lock(path))

    @classmethod
    def resume(
        cls, path: str | Path, scenario_text: str | None = None
    ) -> tuple[TraceWriter, Checkpoint | None, int]:
        """Reopen a trace to continue it from its newest valid checkpoint.

        Checks the schema version and (if given) that ``scenario_text`` equals the
        stored scenario; truncates every round dataset and signal group beyond the
        checkpoint (a crash mid-round, or rounds committed after the last
        checkpoint) and returns ``(writer, checkpoint, start)``: the checkpoint is
        None when there is none (start from round 0), and ``start`` (equal to
        ``writer.completed_rounds``) is the round index to run next.
        """
        path = Path(path)
        if not path.exists():
            raise TraceError(f"cannot resume: trace {path} does not exist (run without --resume)")
        fd = cls._lock(path)
        try:
            file = h5py.File(path, "r+", libver=LIBVER, locking=False)
        except OSError as exc:
            os.close(fd)
            raise TraceError(f"cannot open trace {path}: {exc}") from None
        try:
            version = file.attrs.get("schema_version")
            if version != SCHEMA_VERSION:
                raise TraceError(f"{path}: trace schema version {version}, this program writes {SCHEMA_VERSION}")
            stored = str(file.attrs["scenario"])
            if scenario_text is not None and scenario_text != stored:
                diff = list(difflib.unified_diff(stored.splitlines(), scenario_text.splitlines(),
                                                 "trace", "now", n=0, lineterm=""))
                diff = [line for line in diff[2:] if not line.startswith("@@")][:10]
                raise TraceError(f"cannot resume {path}: the scenario differs from the one in the trace "
                                 "(use --overwrite to start again):\n  " + "\n  ".join(diff))
            found = _valid_slot(file.get("checkpoint"), int(file.attrs["completed_rounds"]))
            checkpoint = _load_slot(found[1], found[0]) if found else None
            restart = checkpoint.completed_rounds if checkpoint else 0
            cls._truncate(file, restart)
            file.attrs["completed_rounds"] = restart
            file.attrs["resume_count"] = int(file.attrs.get("resume_count", 0)) + 1
            file.flush()
        except BaseException:
            file.close()
            os.close(fd)
            raise
        return cls(file, path, fd), checkpoint, restart

    @staticmethod
    def _truncate(file: h5py.File, rows: int) -> None:
        def visit(_name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and obj.shape[0] > rows:
                obj.resize(rows, axis=0)

        file["rounds"].visititems(visit)
        for slot in file.get("checkpoint", {}).values():
            if int(slot.attrs.get("completed_rounds", -1)) > rows:
                slot.attrs["completed_rounds"] = -1  # written by an uncommitted round
        for name in list(file.get("signals", {})):
            if int(name.split("_")[1]) >= rows:
                del file["signals"][name]

    # ----------------------------------------------------------------- per round
    @property
    def completed_rounds(self) -> int:
        """Rounds committed so far; the next round written is row ``completed_rounds``."""
        return self._completed

    def _row(self, group: h5py.Group, name: str, values: np.ndarray) -> None:
        t = self._completed
        if name in group:
            ds = group[name]
            if ds.shape[1:] != values.shape:
                raise ValueError(f"{ds.name}: rows have shape {ds.shape[1:]}, got {values.shape}")
        else:
            dtype = _column_dtype(values)
            chunk_rows = max(1, min(512, 2**14 // max(1, values.size * 8)))  # ~16 KiB chunks
            ds = group.create_dataset(name, shape=(t + 1, *values.shape), maxshape=(None, *values.shape),
                                      dtype=dtype, chunks=(chunk_rows, *values.shape),
                                      fillvalue=_fill_value(dtype))
        if ds.shape[0] < t + 1:
            ds.resize(t + 1, axis=0)
        if ds.dtype.kind == "i" and values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0):
            raise ValueError(f"{ds.name} holds integers, got {values}")
        ds[t] = values

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
            self._row(self._file["rounds"], key, np.asarray(value))

    def append_series(self, group: str, name: str, values: np.ndarray) -> None:
        """A vector row of the current round: /rounds/<group>/<name> [T, *values.shape]."""
        values = np.asarray(values)
        if values.ndim < 1:
            raise ValueError(f"append_series({group!r}, {name!r}) needs an array, got a scalar")
        self._row(self._file["rounds"].require_group(group), name, values)

    def append_per_device(self, name: str, values: np.ndarray) -> None:
        """One value per device for the current round: /rounds/per_device/<name> [T, K]."""
        self.append_series("per_device", name, values)

    def write_signals(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Raw arrays of the current round (complex allowed): /signals/round_NNNNN/<name>."""
        group = self._file.require_group("signals").require_group(f"round_{self._completed:05d}")
        for name, value in arrays.items():
            if name in group:
                del group[name]
            group.create_dataset(name, data=np.asarray(value))

    def write_devices(self, **arrays: np.ndarray) -> None:
        """Static per-device arrays: /devices/<name> (position_m [K,2], distance_m [K], ...).

        Rewrites a dataset of the same name (a restart from round 0 writes them again).
        """
        group = self._file["devices"]
        for name, value in arrays.items():
            if name in group:
                del group[name]
            group.create_dataset(name, data=np.asarray(value))
        self._file.flush()

    def write_checkpoint(self, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any] | None = None) -> None:
        """Save the state reached at the end of the current round (valid once committed).

        Writes into the slot that does not hold the newest valid checkpoint, in
        place when names, shapes and dtypes are unchanged (the file does not grow).
        ``attrs`` must be JSON-serialisable; floats round-trip exactly.
        """
        root = self._file.require_group("checkpoint")
        newest = _valid_slot(root, self._completed)
        name = _SLOTS[1] if newest is not None and newest[1].name.endswith(_SLOTS[0]) else _SLOTS[0]
        slot = root.require_group(name)
        slot.attrs["completed_rounds"] = -1  # invalid while it is rewritten
        self._file.flush()
        for key in [k for k in slot if k not in arrays]:
            del slot[key]
        for key, value in arrays.items():
            value = np.asarray(value)
            if key in slot and (slot[key].shape != value.shape or slot[key].dtype != value.dtype):
                del slot[key]
            if key in slot:
                slot[key][...] = value
            else:
                slot.create_dataset(key, data=value)
        slot.attrs["attrs_json"] = json.dumps(dict(attrs or {}))
        slot.attrs["completed_rounds"] = self._completed + 1

    def set_attrs(self, **attrs: Any) -> None:
        """Add or replace root attributes (str, int, float)."""
        for key, value in attrs.items():
            self._file.attrs[key] = value

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
        self._row(self._file["rounds"], "round", np.asarray(t, dtype=np.int64))

        def pad(_name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and obj.shape[0] < t + 1:
                obj.resize(t + 1, axis=0)

        self._file["rounds"].visititems(pad)
        self._file.flush()
        self._file.attrs["completed_rounds"] = t + 1
        self._file.flush()
        self._completed = t + 1
        return self._completed

    def column(self, name: str) -> np.ndarray | None:
        """The committed rows of the scalar column ``/rounds/<name>`` ([completed_rounds],
        stored dtype), or None when the trace has no such column."""
        ds = self._file["rounds"].get(name)
        if not isinstance(ds, h5py.Dataset):
            return None
        return ds[: self._completed]

    def read_checkpoint(self) -> Checkpoint | None:
        """The newest committed checkpoint, or None."""
        found = _valid_slot(self._file.get("checkpoint"), self._completed)
        return _load_slot(found[1], found[0]) if found else None

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Flush and close (uncommitted rows stay beyond ``completed_rounds`` and are ignored)."""
        if self._file.id.valid:
            self._file.flush()
            self._file.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- reading


@dataclass
class TraceData:
    """A trace's committed content, as NumPy arrays (rows < ``completed_rounds`` only).

    Attributes
    ----------
    path : Path
    attrs : dict[str, Any]
        Root attributes (schema_version, scenario, seed, started_at, version_*, ...).
    completed_rounds : int
        T, the number of committed rounds.
    rounds : dict[str, np.ndarray]
        Scalar columns, each [T] (``pandas.DataFrame(trace.rounds)`` gives a table).
    series : dict[str, dict[str, np.ndarray]]
        Vector rows per group, each [T, n]: ``series["per_device"]`` ([T, K]),
        ``series["reliability"]`` ([T, B]).
    devices : dict[str, np.ndarray]
        Static per-device arrays.
    signal_rounds : list[int]
        Rounds with raw signals under /signals (read them with h5py).
    checkpoint_round : int or None
        ``completed_rounds`` of the newest valid checkpoint.
    """

    path: Path
    attrs: dict[str, Any]
    completed_rounds: int
    rounds: dict[str, np.ndarray]
    series: dict[str, dict[str, np.ndarray]]
    devices: dict[str, np.ndarray]
    signal_rounds: list[int] = field(default_factory=list)
    checkpoint_round: int | None = None

    @property
    def scenario_text(self) -> str:
        return str(self.attrs.get("scenario", ""))

    @property
    def per_device(self) -> dict[str, np.ndarray]:
        return self.series.get("per_device", {})

    @property
    def reliability(self) -> dict[str, np.ndarray]:
        return self.series.get("reliability", {})

    def last_evaluated_round(self, column: str = "test_accuracy") -> int | None:
        """Index of the last round whose ``column`` is not NaN (None if never evaluated)."""
        values = self.rounds.get(column)
        if values is None:
            return None
        rows = np.flatnonzero(~np.isnan(values))
        return int(rows[-1]) if rows.size else None


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _open_for_reading(path: Path, attempts: int = 5) -> h5py.File:
    for attempt in range(attempts):
        try:
            # locking=False: HDF5 refuses a second open of a file in the same process with
            # different locking flags, and the writer opens with locking=False
            return h5py.File(path, "r", locking=False)
        except FileNotFoundError:
            raise TraceError(f"trace {path} does not exist") from None
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)  # an open that raced the writer's flush
    raise AssertionError("unreachable")


def read_trace(path: str | Path) -> TraceData:
    """Read every committed round of a trace (safe while a writer has it open)."""
    path = Path(path)
    with _open_for_reading(path) as file:
        attrs = {key: _attr(value) for key, value in file.attrs.items()}
        if "schema_version" not in attrs:
            raise TraceError(f"{path} is not an aircomp-cosim trace (no schema_version attribute)")
        t = int(attrs["completed_rounds"])
        rounds, series = {}, {}
        for name, obj in file["rounds"].items():
            if isinstance(obj, h5py.Dataset):
                rounds[name] = obj[:t]
            else:
                series[name] = {key: ds[:t] for key, ds in obj.items()}
        devices = {name: ds[()] for name, ds in file["devices"].items()}
        signals = sorted(int(n.split("_")[1]) for n in file.get("signals", {}))
        found = _valid_slot(file.get("checkpoint"), t)
    return TraceData(path, attrs, t, rounds, series, devices,
                     [r for r in signals if r < t], found[0] if found else None)


def _fmt(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return "nan" if np.isnan(value) else f"{value:.6g}"
    return str(value)


POSTERIOR_COLUMNS = ("precision_rel_change", "precision_changed_fraction", "posterior_std_p50")
"""Round metrics of the proposed method that ``cosim inspect`` shows on its posterior line."""


def channel_use_split(rounds: Mapping[str, np.ndarray]) -> tuple[float, float] | None:
    """Cumulative (uplink, downlink) OFDM symbols over a trace's committed rounds.

    From the last row of ``cumulative_uplink_symbols`` / ``cumulative_downlink_symbols``
    when the trace has them (and they are finite); otherwise, for traces written
    before the split, the sums of ``uplink_symbols`` / ``downlink_symbols``. None when
    neither is there or the trace holds no round.
    """
    pairs = (("cumulative_uplink_symbols", "cumulative_downlink_symbols"),
             ("uplink_symbols", "downlink_symbols"))
    for index, (up, down) in enumerate(pairs):
        if up not in rounds or down not in rounds or not rounds[up].size:
            continue
        if index == 0:
            values = (float(rounds[up][-1]), float(rounds[down][-1]))
            if all(np.isfinite(values)):
                return values
        else:
            return float(np.nansum(rounds[up])), float(np.nansum(rounds[down]))
    return None


def _share(part: float, total: float) -> str:
    return f"{100.0 * part / total:.3g} %" if total > 0 else "-"


def summarize(path: str | Path) -> str:
    """A plain-text table of what a trace holds and its final metrics (``cosim inspect``).

    Traces with the proposed method's round metrics get a ``posterior`` line (the
    last round's ``precision_rel_change``, ``precision_changed_fraction`` and
    ``posterior_std_p50``), and every trace with symbol counts a ``channel`` line
    (cumulative uplink and downlink OFDM symbols and their shares of the total).
    """
    import tomllib

    data = read_trace(path)
    try:
        scenario = tomllib.loads(data.scenario_text)
    except tomllib.TOMLDecodeError:
        scenario = {}
    planned = scenario.get("rounds", "?")
    lines = [
        f"trace {data.path}",
        f"  scenario {scenario.get('name', '?')!r}, seed {data.attrs.get('seed')}, "
        f"schema {data.attrs.get('schema_version')}, started {data.attrs.get('started_at')}, "
        f"resumed {data.attrs.get('resume_count', 0)} time(s)",
        f"  rounds   {data.completed_rounds} of {planned} completed; "
        f"checkpoint at round {data.checkpoint_round if data.checkpoint_round is not None else '-'}",
    ]
    if data.devices:
        lines.append("  devices  " + ", ".join(f"{k} {list(v.shape)}" for k, v in data.devices.items()))
    if data.signal_rounds:
        lines.append(f"  signals  rounds {data.signal_rounds}")
    rows = [("column", "shape", "dtype", "last", "min", "max")]
    for group, columns in [("", data.rounds), *((g + "/", c) for g, c in data.series.items())]:
        for name, values in columns.items():
            # NaN (float) and -1 (int) mark rows a column was not written (e.g. no evaluation)
            finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values[values != -1]
            last = values[-1] if values.ndim == 1 and values.size else "-"
            lo, hi = (finite.min(), finite.max()) if finite.size else ("-", "-")
            rows.append((group + name, str(list(values.shape)), str(values.dtype), _fmt(last), _fmt(lo), _fmt(hi)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines.append("")
    lines.extend("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
    last = data.last_evaluated_round()
    if last is not None:
        metrics = ", ".join(f"{k} {_fmt(data.rounds[k][last])}"
                            for k in ("test_accuracy", "test_nll", "ece", "cumulative_channel_uses")
                            if k in data.rounds)
        lines.extend(["", f"  final    (round {last}) {metrics}"])
    present = [k for k in POSTERIOR_COLUMNS if k in data.rounds and data.rounds[k].size]
    if present:
        values = ", ".join(f"{k} {_fmt(data.rounds[k][-1])}" for k in present)
        lines.append(f"  posterior (round {data.completed_rounds - 1}) {values}")
    split = channel_use_split(data.rounds)
    if split is not None:
        up, down = split
        lines.append(f"  channel  {up + down:.6g} OFDM symbols: uplink {up:.6g} ({_share(up, up + down)}), "
                     f"downlink {down:.6g} ({_share(down, up + down)})")
    if "wall_s" in data.rounds:
        lines.append(f"  wall     {np.nansum(data.rounds['wall_s']):.1f} s in {data.completed_rounds} rounds")
    return "\n".join(lines)
