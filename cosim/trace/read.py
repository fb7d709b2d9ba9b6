"""Reading a trace: its committed rounds as NumPy arrays, and the one-screen summary.

:func:`read_trace` is safe while a writer has the file open (it sees the last flush);
:func:`summarize` is what ``cosim inspect`` prints. The schema is in ``docs/trace.md``;
:mod:`cosim.trace` re-exports these names. No TensorFlow.
"""

from __future__ import annotations

import contextlib
import math
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from cosim.limits import toml_loads
from cosim.trace.file_format import (
    CHECKPOINT_DROPPED,
    EVAL_COLUMNS,
    POSTERIOR_MEAN_COLUMNS,
    SCHEMA_VERSION,
    TraceError,
    _attr,
    _one_line,
    _open_for_reading,
    _valid_slot,
    read_dataset,
    read_live,
)
from cosim.trace.values import stored_problems


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
    def scenario(self) -> dict:
        """The stored scenario (``scenario_text``) as a dict; {} when absent or not TOML."""
        try:
            return toml_loads(self.scenario_text)
        except tomllib.TOMLDecodeError:
            return {}

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


def read_trace(path: str | Path) -> TraceData:
    """Read every committed round of a trace (safe while a writer has it open: a read
    that meets the writer's flush half-way is made again, :func:`read_live`).

    Raises
    ------
    TraceError
        One line naming the file, for any file this cannot read: missing, a directory,
        empty, not HDF5, truncated, damaged metadata, an HDF5 file that is not a trace
        (no ``schema_version``), a newer schema, or columns shorter than
        ``completed_rounds``, a dataset whose stored data fail their Fletcher-32
        checksum (named; traces written before checksums are read unchecked).
    """
    path = Path(path)

    def read() -> TraceData:
        with _open_for_reading(path) as file:
            try:
                return _read_open_trace(path, file)
            except TraceError:
                raise
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
                raise TraceError(f"cannot read trace {path}: damaged HDF5 file "
                                 f"({_one_line(exc)})") from None

    return read_live(path, read)


def _read_open_trace(path: Path, file: h5py.File) -> TraceData:
    attrs = {key: _attr(value) for key, value in file.attrs.items()}
    if "schema_version" not in attrs:
        raise TraceError(f"cannot read trace {path}: an HDF5 file, but not an aircomp-cosim trace "
                         "(no schema_version attribute)")
    if not isinstance(attrs["schema_version"], int) or attrs["schema_version"] > SCHEMA_VERSION:
        raise TraceError(f"cannot read trace {path}: schema_version {attrs['schema_version']!r} "
                         f"is not one this version reads (<= {SCHEMA_VERSION})")
    missing = [name for name in ("completed_rounds",) if name not in attrs] + [
        f"/{name}" for name in ("rounds", "devices") if not isinstance(file.get(name), h5py.Group)]
    if missing:
        raise TraceError(f"cannot read trace {path}: an incomplete trace (no {', '.join(missing)})")
    t = int(attrs["completed_rounds"])
    rounds, series = {}, {}
    for name, obj in file["rounds"].items():
        columns = {name: obj} if isinstance(obj, h5py.Dataset) else {f"{name}/{k}": v for k, v in obj.items()}
        for where, ds in columns.items():
            if not (isinstance(ds, h5py.Dataset) and ds.dtype.kind in "biuf" and ds.ndim >= 1):
                raise TraceError(f"cannot read trace {path}: /rounds/{where} is not a numeric column")
            if ds.shape[0] < t:
                raise TraceError(f"cannot read trace {path}: /rounds/{where} has {ds.shape[0]} rows, "
                                 f"fewer than completed_rounds = {t}")
        if isinstance(obj, h5py.Dataset):
            rounds[name] = read_dataset(obj, path, np.s_[:t])
        else:
            series[name] = {key: read_dataset(ds, path, np.s_[:t]) for key, ds in obj.items()}
    devices = {}
    for name, ds in file["devices"].items():
        if not isinstance(ds, h5py.Dataset):
            raise TraceError(f"cannot read trace {path}: /devices/{name} is not a dataset")
        devices[name] = read_dataset(ds, path)
    _refuse_stored_problems(path, rounds, series, devices)
    signals = sorted(int(n.split("_")[1]) for n in file.get("signals", {}))
    found = _valid_slot(file.get("checkpoint"), t)
    return TraceData(path, attrs, t, rounds, series, devices,
                     [r for r in signals if r < t], found[0] if found else None)


def _refuse_stored_problems(path: Path, rounds: Mapping[str, np.ndarray],
                            series: Mapping[str, Mapping[str, np.ndarray]],
                            devices: Mapping[str, np.ndarray]) -> None:
    """:class:`TraceError` naming the file and the first datasets whose stored numbers
    no run writes (:mod:`cosim.trace.values`)."""
    columns = {**rounds, **{f"{group}/{name}": values for group, table in series.items()
                            for name, values in table.items()}}
    problems = stored_problems(columns, devices)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise TraceError(f"refusing trace {path}: " + "; ".join(problems[:3]) + more)


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


def uplink_cost(rounds: Mapping[str, np.ndarray]) -> tuple[float, float, float, float] | None:
    """The uplink's air time and the devices' transmit energy over a trace's committed
    rounds: ``(total_s, total_j, mean_s, mean_j)``, the totals from the last row of
    ``cumulative_uplink_seconds`` / ``cumulative_uplink_energy_j`` when finite, else the
    sums of ``uplink_seconds`` / ``uplink_energy_j`` (NaN when a round lacks them: a
    trace begun by a version without them), and the means of the latter over the rounds
    that have them. None when the trace has no such column or no round.
    """
    if "uplink_seconds" not in rounds or "uplink_energy_j" not in rounds or not rounds["uplink_seconds"].size:
        return None
    totals = []
    for row, total in (("uplink_seconds", "cumulative_uplink_seconds"),
                       ("uplink_energy_j", "cumulative_uplink_energy_j")):
        column = rounds.get(total)
        last = float(column[-1]) if column is not None and column.size else math.nan
        totals.append(last if math.isfinite(last) else float(np.sum(rounds[row])))
    with np.errstate(invalid="ignore"):
        means = [float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else math.nan
                 for v in (rounds["uplink_seconds"], rounds["uplink_energy_j"])]
    return totals[0], totals[1], means[0], means[1]


def _share(part: float, total: float) -> str:
    return f"{100.0 * part / total:.3g} %" if total > 0 else "-"


class quiet_numerics(contextlib.ContextDecorator):
    """NumPy's floating-point warnings off (``overflow encountered in reduce`` of a column
    of 1e308, ``Mean of empty slice`` of one all NaN): what a trace holds is summarised
    as inf or NaN, never as a warning with an internal source line on the terminal."""

    def __enter__(self):
        self._state = np.seterr(all="ignore")
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
        return self

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        np.seterr(**self._state)
        return False


@quiet_numerics()
def summarize(trace: str | Path | TraceData) -> str:
    """A plain-text table of what a trace holds and its final metrics (``cosim inspect``):
    of a trace file, or of what :func:`read_trace` returned for one (read once).

    Traces with posterior-mean evaluations get a ``post. mean`` line (the last one's
    ``posterior_mean_accuracy``, ``_nll``, ``_ece``). Traces with the proposed method's
    round metrics get a ``posterior`` line (the
    last round's ``precision_rel_change``, ``precision_changed_fraction`` and
    ``posterior_std_p50``), every trace with symbol counts a ``channel`` line
    (cumulative uplink and downlink OFDM symbols and their shares of the total), and
    every trace with the uplink's time and energy an ``uplink`` line (their totals and
    means per round: :func:`uplink_cost`).
    """
    data = trace if isinstance(trace, TraceData) else read_trace(trace)
    return "\n".join([*_header_lines(data), "", *_column_table(data), *_final_lines(data)])


def _header_lines(data: TraceData) -> list[str]:
    """:func:`summarize`'s lines before the column table: the trace, its scenario, rounds,
    checkpoint, devices and signals."""
    scenario = data.scenario
    planned = scenario.get("rounds", "?")
    lines = [
        f"trace {data.path}",
        f"  scenario {scenario.get('name', '?')!r}, seed {data.attrs.get('seed')}, "
        f"schema {data.attrs.get('schema_version')}, started {data.attrs.get('started_at')}, "
        f"resumed {data.attrs.get('resume_count', 0)} time(s)",
        f"  rounds   {data.completed_rounds} of {planned} completed; "
        f"checkpoint at round {data.checkpoint_round if data.checkpoint_round is not None else '-'}"
        + (" (dropped by `cosim study compact`)" if data.attrs.get(CHECKPOINT_DROPPED) else ""),
    ]
    if "checksums" not in data.attrs:
        lines.append("  note     written before checksums: its data are read unchecked")
    if data.devices:
        lines.append("  devices  " + ", ".join(f"{k} {list(v.shape)}" for k, v in data.devices.items()))
    if data.signal_rounds:
        lines.append(f"  signals  rounds {data.signal_rounds}")
    return lines


def _column_table(data: TraceData) -> list[str]:
    """:func:`summarize`'s table: every round column and series with its shape, dtype,
    last value and range over the rows written."""
    rows = [("column", "shape", "dtype", "last", "min", "max")]
    for group, columns in [("", data.rounds), *((g + "/", c) for g, c in data.series.items())]:
        for name, values in columns.items():
            # NaN (float) and -1 (int) mark rows a column was not written (e.g. no evaluation)
            last = values[-1] if values.ndim == 1 and values.size else "-"
            lo, hi = _written_range(values)
            rows.append((group + name, str(list(values.shape)), str(values.dtype), _fmt(last), _fmt(lo), _fmt(hi)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _written_range(values: np.ndarray) -> tuple[Any, Any]:
    """The least and the largest written value of a column (NaN and +-inf of a float
    column, -1 of an integer one left out), in its dtype; ``("-", "-")`` when none is.
    Reduced in place (no copy of the written values: a [T, K] column of a wide trace)."""
    written = np.isfinite(values) if values.dtype.kind == "f" else values != -1
    if not written.any():
        return "-", "-"
    if values.dtype.kind == "f":
        top = np.finfo(values.dtype).max
        return np.min(values, where=written, initial=top), np.max(values, where=written, initial=-top)
    info = np.iinfo(values.dtype) if values.dtype.kind in "iu" else None
    if info is None:  # booleans
        return values[written].min(), values[written].max()
    return np.min(values, where=written, initial=info.max), np.max(values, where=written, initial=info.min)


def _final_lines(data: TraceData) -> list[str]:
    """:func:`summarize`'s lines after the table: the final metrics, the posterior, the
    channel uses, the uplink's cost and the wall time."""
    lines = []
    last = data.last_evaluated_round()
    if last is not None:
        metrics = ", ".join(f"{k} {_fmt(data.rounds[k][last])}"
                            for k in (*EVAL_COLUMNS, "cumulative_channel_uses")
                            if k in data.rounds)
        lines.extend(["", f"  final    (round {last}) {metrics}"])
    last_mean = data.last_evaluated_round("posterior_mean_accuracy")
    if last_mean is not None:
        metrics = ", ".join(f"{k.removeprefix('posterior_mean_')} {_fmt(data.rounds[k][last_mean])}"
                            for k in POSTERIOR_MEAN_COLUMNS if k in data.rounds)
        lines.append(f"  post. mean (round {last_mean}) {metrics} (prediction with the posterior mean)")
    present = [k for k in POSTERIOR_COLUMNS if k in data.rounds and data.rounds[k].size]
    if present:
        values = ", ".join(f"{k} {_fmt(data.rounds[k][-1])}" for k in present)
        lines.append(f"  posterior (round {data.completed_rounds - 1}) {values}")
    split = channel_use_split(data.rounds)
    if split is not None:
        up, down = split
        lines.append(f"  channel  {up + down:.6g} OFDM symbols: uplink {up:.6g} ({_share(up, up + down)}), "
                     f"downlink {down:.6g} ({_share(down, up + down)})")
    cost = uplink_cost(data.rounds)
    if cost is not None:
        seconds, joules, per_round_s, per_round_j = cost
        lines.append(f"  uplink   {seconds:.6g} s and {joules:.6g} J (devices' transmit energy) in "
                     f"{data.completed_rounds} rounds; per round {per_round_s:.6g} s, {per_round_j:.6g} J")
    if "wall_s" in data.rounds:
        cpu_s = data.rounds.get("cpu_s")  # every round timed, or no CPU figure (as cost.csv)
        cpu = f", CPU {np.sum(cpu_s):.1f} s" if cpu_s is not None and np.isfinite(cpu_s).all() else ""
        lines.append(f"  wall     {np.nansum(data.rounds['wall_s']):.1f} s{cpu} in {data.completed_rounds} rounds")
    return lines
