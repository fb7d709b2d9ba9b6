"""The paper's kinds of figure, drawn from one or more HDF5 traces (matplotlib, Agg).

``plot_traces(paths, out_dir, x=...)`` writes:

- the accuracy figure: test accuracy of every evaluated round, one curve per trace,
  against the x-axis ``x`` chooses (:data:`ACCURACY_AXES`):

  * ``"total"`` (default) -> ``accuracy_vs_channel_uses.png``: cumulative channel
    uses, uplink + downlink OFDM symbols. The paper's Sec. VI-B plots "test accuracy
    ... as a function of the number of channel uses for downlink multicast and
    uplink local update aggregation" (Fig. "Comparison of wireless FL methods").
    With the default digital downlink this axis is > 99.9 % downlink
    (``docs/trace.md``), so uplink variants are compared better with ``"uplink"``;
  * ``"uplink"`` -> ``accuracy_vs_uplink_symbols.png``: cumulative uplink OFDM
    symbols (``cumulative_uplink_symbols``; for traces written before that column,
    the running sum of ``uplink_symbols``);
  * ``"rounds"`` -> ``accuracy_vs_rounds.png``: the round number (1-based);
- ``posterior.png`` (only when a trace has the proposed method's round metrics):
  the mean relative change of the global precision per round (log axis; rounds
  where it is exactly 0 leave a gap and are counted in the legend) and the median
  posterior std (with its 5-95 % band when stored), one curve per trace;
- ``ece.png``: expected calibration error per evaluated round, one curve per trace;
- ``reliability.png``: the reliability diagram of each trace's last evaluation
  (Section VI-C, eqs. conf/acc), one panel per trace;
- ``distortion_by_distance.png``: mean local update distortion per round for
  near / mid / far devices (thirds of the cell radius), one panel per phase of
  the first trace (Fig. "Average local update distortion").

All or nothing: every trace is read and checked before anything is drawn, the
figures are drawn in a temporary directory, and ``out_dir`` is created (and the
figures moved into it) only once all of them exist. A trace that cannot be read
(:class:`cosim.trace.TraceError`) or plotted, or an output directory that cannot be
written (:class:`PlotError`), leaves no output directory behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from cosim.trace import TraceData, read_trace

RINGS = (("near", 0.0, 1 / 3), ("mid", 1 / 3, 2 / 3), ("far", 2 / 3, 1.0 + 1e-9))
ACCURACY_AXES = {
    "total": ("accuracy_vs_channel_uses.png", "cumulative channel uses (OFDM symbols, uplink + downlink)"),
    "uplink": ("accuracy_vs_uplink_symbols.png", "cumulative uplink channel uses (OFDM symbols)"),
    "rounds": ("accuracy_vs_rounds.png", "round"),
}
"""``--x`` choice -> (file name of the accuracy figure, x-axis label)."""
DEFAULT_ACCURACY_AXIS = "total"


class PlotError(Exception):
    """Figures that cannot be drawn from a trace or written where asked (one line naming
    the trace or the directory); nothing is written."""


def _label(trace: TraceData, path: Path) -> str:
    return str(trace.attrs.get("name") or path.stem)


def _evaluated(trace: TraceData) -> np.ndarray:
    acc = trace.rounds.get("test_accuracy")
    if acc is None:
        return np.zeros(0, bool)
    return np.isfinite(acc)


def _evaluated_curves(
    traces: Sequence[TraceData], labels: Sequence[str], x_of, metric: str,
    xlabel: str, ylabel: str, path: Path,
) -> Path:
    """One curve per trace of ``metric`` against ``x_of(trace)`` over its evaluated rounds."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for trace, label in zip(traces, labels):
        ok = _evaluated(trace)
        ax.plot(x_of(trace)[ok], trace.rounds[metric][ok], marker=".", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, path)


def _check_axis(x: str) -> None:
    if x not in ACCURACY_AXES:
        raise ValueError(f"x (--x) must be one of {', '.join(map(repr, ACCURACY_AXES))}, got {x!r}")


def accuracy_x(trace: TraceData, x: str = DEFAULT_ACCURACY_AXIS) -> np.ndarray:
    """The x values [T] of the accuracy figure for one trace, float64.

    Parameters
    ----------
    trace : TraceData
    x : {"total", "uplink", "rounds"}
        ``"total"``: ``cumulative_channel_uses`` (OFDM symbols, uplink + downlink);
        ``"uplink"``: ``cumulative_uplink_symbols`` (OFDM symbols), or the running sum
        of ``uplink_symbols`` for a trace without that column (or with NaN in it);
        ``"rounds"``: ``round + 1``.
    """
    _check_axis(x)
    rounds = trace.rounds
    if x == "rounds":
        return rounds["round"].astype(np.float64) + 1.0
    if x == "total":
        return np.asarray(rounds["cumulative_channel_uses"], np.float64)
    column = rounds.get("cumulative_uplink_symbols")
    if column is not None and np.all(np.isfinite(column)):
        return np.asarray(column, np.float64)
    return np.cumsum(np.asarray(rounds["uplink_symbols"], np.float64))


def plot_accuracy(
    traces: Sequence[TraceData], labels: Sequence[str], out: Path, x: str = DEFAULT_ACCURACY_AXIS
) -> Path:
    """Test accuracy of every evaluated round against the ``x`` axis (:func:`accuracy_x`)."""
    _check_axis(x)
    file_name, xlabel = ACCURACY_AXES[x]
    return _evaluated_curves(
        traces, labels, lambda t: accuracy_x(t, x), "test_accuracy",
        xlabel, "test accuracy", out / file_name,
    )


def plot_posterior(traces: Sequence[TraceData], labels: Sequence[str], out: Path) -> Path | None:
    """``posterior.png``: precision_rel_change (log y) and posterior_std_p50 against rounds.

    Only traces holding both columns are drawn; None (no file) when no trace does.
    """
    have = [(t, lab) for t, lab in zip(traces, labels)
            if "precision_rel_change" in t.rounds and "posterior_std_p50" in t.rounds]
    if not have:
        return None
    fig, (change, std) = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    for trace, label in have:
        rounds = trace.rounds["round"] + 1
        rel = trace.rounds["precision_rel_change"]
        zeros = int(np.sum(rel == 0))
        text = f"{label} (0 in {zeros} rounds)" if zeros else label
        change.semilogy(rounds, np.where(rel > 0, rel, np.nan), marker=".", label=text)
        (line,) = std.plot(rounds, trace.rounds["posterior_std_p50"], marker=".", label=label)
        if "posterior_std_p05" in trace.rounds and "posterior_std_p95" in trace.rounds:
            std.fill_between(rounds, trace.rounds["posterior_std_p05"], trace.rounds["posterior_std_p95"],
                             color=line.get_color(), alpha=0.15, lw=0)
    change.set_ylabel(r"mean $|\rho_{t+1} - \rho_t| / \rho_t$ (0: gap)")
    std.set_ylabel("posterior std, median (band: 5-95 %)")
    for ax in (change, std):
        ax.set_xlabel("round")
        ax.grid(True, alpha=0.3)
        ax.legend()
    return _save(fig, out / "posterior.png")


def plot_ece(traces: Sequence[TraceData], labels: Sequence[str], out: Path) -> Path:
    return _evaluated_curves(
        traces, labels, lambda t: t.rounds["round"] + 1, "ece",
        "round", "expected calibration error", out / "ece.png",
    )


def plot_reliability(traces: Sequence[TraceData], labels: Sequence[str], out: Path) -> Path:
    fig, axes = plt.subplots(1, len(traces), figsize=(3.2 * len(traces), 3.4), squeeze=False)
    for ax, trace, label in zip(axes[0], traces, labels):
        ok = np.flatnonzero(_evaluated(trace))
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        if ok.size:
            last = ok[-1]
            acc = trace.reliability["bin_accuracy"][last]
            count = trace.reliability["bin_count"][last]
            bins = acc.shape[0]
            edges = np.linspace(0.0, 1.0, bins + 1)
            heights = np.where(count > 0, np.nan_to_num(acc), 0.0)
            ax.bar(edges[:-1], heights, width=1.0 / bins, align="edge", edgecolor="k", alpha=0.7)
            ece = trace.rounds["ece"][last]
            ax.set_title(f"{label}\nECE = {ece:.3f} (round {int(trace.rounds['round'][last]) + 1})")
        else:
            ax.set_title(f"{label}\n(no evaluation)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
    axes[0][0].set_ylabel("accuracy")
    return _save(fig, out / "reliability.png")


def plot_distortion(trace: TraceData, label: str, out: Path) -> Path | None:
    names = sorted(k for k in trace.per_device if k.startswith("local_distortion_"))
    distance = trace.devices.get("distance_m")
    if not names or distance is None:
        return None
    radius = float(np.max(distance))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        values = trace.per_device[name]
        rounds = trace.rounds["round"] + 1
        for ring, lo, hi in RINGS:
            members = (distance >= lo * radius) & (distance < hi * radius)
            if members.any():
                mean = values[:, members].mean(axis=1)
                # a ring with no attenuation at all in a round has distortion 0: leave a gap
                ax.semilogy(rounds, np.where(mean > 0, mean, np.nan), marker=".", label=ring)
        ax.set_title(f"{label}: phase {name.removeprefix('local_distortion_')}")
        ax.set_xlabel("round")
        ax.set_ylabel("mean local update distortion (0: gap)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    return _save(fig, out / "distortion_by_distance.png")


def plot_traces(
    paths: Sequence[Path],
    out_dir: Path,
    labels: Sequence[str] | None = None,
    x: str = DEFAULT_ACCURACY_AXIS,
) -> list[Path]:
    """Draw every figure for ``paths`` into ``out_dir``; return the files written.

    ``x`` is the accuracy figure's axis (``"total"``, ``"uplink"`` or ``"rounds"``,
    :data:`ACCURACY_AXES`); a ``ValueError`` names any other value before anything is drawn.
    All or nothing (module docstring): ``out_dir`` and its parents are created only
    when every figure has been drawn.

    Raises
    ------
    cosim.trace.TraceError
        A trace that cannot be read (missing, not HDF5, truncated, damaged, not a trace).
    PlotError
        A trace with no completed round or without a column the figures need, or an
        ``out_dir`` that is not a directory or cannot be written.
    """
    _check_axis(x)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PlotError(f"cannot write figures to {out_dir}: it is not a directory")
    traces = [read_trace(p) for p in paths]
    for trace in traces:
        _check_plottable(trace, x)
    names = list(labels) if labels else [_label(t, Path(p)) for t, p in zip(traces, paths)]
    with tempfile.TemporaryDirectory(prefix="cosim-plot-") as scratch:
        drawn = _draw(traces, names, Path(scratch), x)
        return _move_into(drawn, out_dir)


def _check_plottable(trace: TraceData, x: str) -> None:
    """PlotError naming the trace when it has no round or lacks a column the figures read."""
    if trace.completed_rounds == 0:
        raise PlotError(f"cannot plot {trace.path}: it holds no completed round")
    need = ["round", "test_accuracy", "ece"]
    if x == "total":
        need.append("cumulative_channel_uses")
    elif x == "uplink" and "cumulative_uplink_symbols" not in trace.rounds:
        need.append("uplink_symbols")
    missing = [f"/rounds/{name}" for name in need if name not in trace.rounds]
    if _evaluated(trace).any():
        missing += [f"/rounds/reliability/{name}" for name in ("bin_accuracy", "bin_count")
                    if name not in trace.reliability]
    if missing:
        raise PlotError(f"cannot plot {trace.path}: it has no {', '.join(missing)} column")


def _move_into(drawn: list[Path], out_dir: Path) -> list[Path]:
    """Move the drawn figures into ``out_dir`` (created with its parents); on a failure,
    remove what was moved and the directory if this call created it."""
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    moved: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for figure in drawn:
            moved.append(Path(shutil.move(figure, out_dir / figure.name)))
    except OSError as exc:
        for figure in moved:
            figure.unlink(missing_ok=True)
        for directory in created:  # deepest first
            try:
                directory.rmdir()
            except OSError:
                break
        raise PlotError(f"cannot write figures to {out_dir}: {exc.strerror or exc}") from None
    return moved


def _draw(traces: Sequence[TraceData], names: Sequence[str], out_dir: Path, x: str) -> list[Path]:
    """Every figure into ``out_dir`` (an existing directory); the files written."""
    written = [
        plot_accuracy(traces, names, out_dir, x=x),
        plot_ece(traces, names, out_dir),
        plot_reliability(traces, names, out_dir),
    ]
    for extra in (plot_distortion(traces[0], names[0], out_dir),
                  plot_posterior(traces, names, out_dir)):
        if extra is not None:
            written.append(extra)
    return written


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
