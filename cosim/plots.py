"""The paper's kinds of figure, drawn from one or more HDF5 traces (matplotlib, Agg).

``plot_traces(paths, out_dir)`` writes:

- ``accuracy_vs_channel_uses.png``: test accuracy against cumulative channel uses
  (uplink + downlink OFDM symbols), one curve per trace (Fig. "Comparison of
  wireless FL methods");
- ``ece.png``: expected calibration error per evaluated round, one curve per trace;
- ``reliability.png``: the reliability diagram of each trace's last evaluation
  (Section VI-C, eqs. conf/acc), one panel per trace;
- ``distortion_by_distance.png``: mean local update distortion per round for
  near / mid / far devices (thirds of the cell radius), one panel per phase of
  the first trace (Fig. "Average local update distortion").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from cosim.trace import TraceData, read_trace

RINGS = (("near", 0.0, 1 / 3), ("mid", 1 / 3, 2 / 3), ("far", 2 / 3, 1.0 + 1e-9))


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


def plot_accuracy(traces: Sequence[TraceData], labels: Sequence[str], out: Path) -> Path:
    return _evaluated_curves(
        traces, labels, lambda t: t.rounds["cumulative_channel_uses"], "test_accuracy",
        "cumulative channel uses (OFDM symbols, uplink + downlink)", "test accuracy",
        out / "accuracy_vs_channel_uses.png",
    )


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
    paths: Sequence[Path], out_dir: Path, labels: Sequence[str] | None = None
) -> list[Path]:
    """Draw every figure for ``paths`` into ``out_dir``; return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = [read_trace(p) for p in paths]
    names = list(labels) if labels else [_label(t, Path(p)) for t, p in zip(traces, paths)]
    written = [
        plot_accuracy(traces, names, out_dir),
        plot_ece(traces, names, out_dir),
        plot_reliability(traces, names, out_dir),
    ]
    distortion = plot_distortion(traces[0], names[0], out_dir)
    if distortion is not None:
        written.append(distortion)
    return written


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
