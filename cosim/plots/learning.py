"""The learning figures: accuracy, NLL and ECE per round, the reliability diagram and
the posterior's movement (``docs/figures.md``). No TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cosim.plots.style import (
    ACCURACY_AXES,
    COUNT_AXES,
    PALETTE,
    FigureOptions,
    Skipped,
    _check_axis,
    _count_axis,
    _evaluated,
    _integer_x,
    _trace_linestyle,
    _trace_style,
    accuracy_x,
    legend_below,
    legend_outside,
    panel_figure,
    panel_grid,
    spans_decades,
    style,
)
from cosim.trace import TraceData

# --------------------------------------------------------------------------- figures


COMPANIONS = {
    "test_accuracy": "posterior_mean_accuracy",
    "test_nll": "posterior_mean_nll",
    "ece": "posterior_mean_ece",
}
"""The posterior mean's prediction drawn beside each predictive metric (dashed, the
trace's colour, no marker) in :func:`metric_figure`."""


def metric_figure(traces: Sequence[TraceData], labels: Sequence[str], metric: str, ylabel: str,
                  x: str, options: FigureOptions = FigureOptions()) -> Figure:
    """``/rounds/<metric>`` of every evaluated round (finite value) against ``x``
    (:func:`accuracy_x`), one curve per trace holding it; a trace that also holds the
    metric's posterior-mean counterpart (:data:`COMPANIONS`) gets it as a dashed curve
    of the same colour, labelled ``<label>, posterior mean``.

    Raises
    ------
    Skipped
        No trace holds a finite value of ``metric``.
    """
    _check_axis(x)
    have = [(i, t, lab) for i, (t, lab) in enumerate(zip(traces, labels))
            if metric in t.rounds and np.isfinite(t.rounds[metric]).any()]
    if not have:
        raise Skipped(f"no trace holds an evaluated /rounds/{metric}")
    several = len(have) > 1
    with style():
        fig, axes = panel_figure(options)
        ax = axes[0, 0]
        xs, ys = [], []
        companions = False
        for i, trace, label in have:
            ok = np.isfinite(trace.rounds[metric])
            xs.append(accuracy_x(trace, x)[ok])
            ys.append(trace.rounds[metric][ok])
            ax.plot(xs[-1], ys[-1], label=label, linestyle=_trace_linestyle(i), **_trace_style(i))
            companion = trace.rounds.get(COMPANIONS.get(metric, ""))
            if companion is not None and np.isfinite(companion).any():
                shown = np.isfinite(companion)
                companions = True
                ys.append(companion[shown])
                ax.plot(accuracy_x(trace, x)[shown], companion[shown], linestyle="--",
                        color=_trace_style(i)["color"],
                        label="_nolegend_" if several else f"{label}, posterior mean")
        log_x = _log_scale(options.log_x, xs)
        if log_x:
            ax.set_xscale("log")
            ax.set_xlabel(ACCURACY_AXES[x][1])
        elif x in COUNT_AXES:
            _count_axis(ax, ACCURACY_AXES[x][1], xs)
        else:  # seconds, joules: any real number
            ax.set_xlabel(ACCURACY_AXES[x][1])
        if _log_scale(options.log_y, ys):
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        handles = ax.get_legend_handles_labels()[0]
        if several and companions:
            handles.append(Line2D([], [], color="0.3", linestyle="--",
                                  label="posterior mean (dashed, the run's colour)"))
        if several:
            legend_outside(fig, handles)
        else:
            ax.legend(loc="best")
    return fig


def _log_scale(asked: bool | None, values: Sequence[np.ndarray]) -> bool:
    """A log axis when asked (``--log-x``, ``--log-y``), else when the values span over
    two decades (:func:`cosim.plots.style.spans_decades`)."""
    if asked is not None:
        return asked
    return spans_decades(np.concatenate(values)) if values else False


def reliability_figure(traces: Sequence[TraceData], labels: Sequence[str],
                       options: FigureOptions = FigureOptions()) -> Figure:
    """The reliability diagram of each trace's last evaluated round, one square panel per
    trace: bars of the bins' accuracy (``/rounds/reliability/bin_accuracy``), hatched gap
    bars from each bin's accuracy to its mean confidence (``bin_confidence``; the bin
    centre when the trace has none), the diagonal, each bin's sample count
    (``bin_count``, text above the panel, gid ``"bin_count"``) and the round and ECE in
    the panel's title.

    Raises
    ------
    Skipped
        No trace has an evaluated round.
    """
    if not any(_evaluated(t).any() for t in traces):
        raise Skipped("no trace has an evaluated round")
    rows, cols = panel_grid(len(traces))
    with style():
        fig, axes = panel_figure(options, rows, cols, square=True)
        for ax in axes.flat[len(traces):]:
            ax.set_visible(False)
        for ax, trace, label in zip(axes.flat, traces, labels):
            _reliability_panel(ax, trace, label)
        for row in axes:
            row[0].set_ylabel("accuracy")
        handles = [Patch(facecolor=PALETTE[0], edgecolor="black", lw=0.5, label="accuracy"),
                   Patch(facecolor="none", edgecolor=PALETTE[1], hatch="////", lw=0.8,
                         label="gap to the mean confidence"),
                   Line2D([], [], color="0.3", ls="--", lw=0.8, label="perfect calibration")]
        legend_below(fig, handles, ncols=3)
    return fig


def _reliability_panel(ax, trace: TraceData, label: str) -> None:
    ok = np.flatnonzero(_evaluated(trace))
    if not ok.size:
        reliability_panel(ax, None, None, None, f"{label}\n(no evaluated round)")
        return
    last = ok[-1]
    conf = trace.reliability.get("bin_confidence")
    ece = trace.rounds["ece"][last]
    round_index = int(trace.rounds["round"][last])
    reliability_panel(ax, trace.reliability["bin_accuracy"][last],
                      None if conf is None else conf[last], trace.reliability["bin_count"][last],
                      f"{label}\nround {round_index}, ECE = {ece:.3f}")


def reliability_panel(ax, accuracy, confidence, count, title: str) -> None:
    """One reliability diagram on ``ax``: the bins' ``accuracy`` [B] as bars, hatched gap
    bars to their mean ``confidence`` [B] (the bin centres when None or not finite),
    the diagonal, each bin's sample ``count`` [B] above the panel (gid ``"bin_count"``)
    and ``title``; with ``accuracy`` None only the frame and the title."""
    ax.plot([0, 1], [0, 1], color="0.3", ls="--", lw=0.8, zorder=4)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("confidence (top: samples per bin)")
    if accuracy is None:
        ax.set_title(title)
        return
    acc = np.asarray(accuracy, float)
    count = np.nan_to_num(np.asarray(count, float))
    bins = acc.shape[0]
    edges = np.linspace(0.0, 1.0, bins + 1)
    centres = 0.5 * (edges[:-1] + edges[1:])
    filled = count > 0
    heights = np.where(filled, np.nan_to_num(acc), 0.0)
    have_conf = confidence is not None and np.isfinite(np.asarray(confidence)[filled]).all()
    confidence = np.where(filled, confidence, centres) if have_conf else centres
    ax.bar(edges[:-1], heights, width=1.0 / bins, align="edge", color=PALETTE[0], alpha=0.75,
           edgecolor="black", lw=0.5, zorder=2)
    # gap bars: hatched outlines from the bin's accuracy to its mean confidence (drawn over
    # the accuracy bar where the bin is under-confident)
    ax.bar(edges[:-1][filled], (confidence - heights)[filled], bottom=heights[filled],
           width=1.0 / bins, align="edge", facecolor="none", edgecolor=PALETTE[1],
           hatch="////", lw=0.8, gid="gap", zorder=3)
    size = 5.5 if bins <= 10 else 4.5
    for centre, n in zip(centres, count):
        ax.text(centre, 1.01, f"{int(n)}", transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize=size, rotation=0 if bins <= 10 else 90, gid="bin_count",
                clip_on=False)
    where = "" if have_conf else " (gap to the bin centre)"
    ax.set_title(f"{title}{where}", pad=11)


def posterior_figure(traces: Sequence[TraceData], labels: Sequence[str],
                     options: FigureOptions = FigureOptions()) -> Figure:
    """``precision_rel_change`` (log y; exact zeros leave a gap, counted in the legend) and
    ``posterior_std_p50`` (5-95 % band when stored) against the round, one curve per trace
    holding both.

    Raises
    ------
    Skipped
        No trace holds both columns (only the proposed method writes them).
    """
    have = [(i, t, lab) for i, (t, lab) in enumerate(zip(traces, labels))
            if "precision_rel_change" in t.rounds and "posterior_std_p50" in t.rounds]
    if not have:
        raise Skipped("no trace holds /rounds/precision_rel_change and posterior_std_p50 "
                      "(the proposed method's round metrics)")
    with style():
        fig, axes = panel_figure(options, 1, 2, sharex=True)
        change, std = axes[0]
        for i, trace, label in have:
            rounds = trace.rounds["round"]
            rel = trace.rounds["precision_rel_change"]
            zeros = int(np.sum(rel == 0))
            text = f"{label} (0 in {zeros} rounds)" if zeros else label
            change.semilogy(rounds, np.where(rel > 0, rel, np.nan), label=text, **_trace_style(i))
            std.plot(rounds, trace.rounds["posterior_std_p50"], label=label, **_trace_style(i))
            if "posterior_std_p05" in trace.rounds and "posterior_std_p95" in trace.rounds:
                std.fill_between(rounds, trace.rounds["posterior_std_p05"],
                                 trace.rounds["posterior_std_p95"],
                                 color=_trace_style(i)["color"], alpha=0.15, lw=0)
        change.set_ylabel(r"mean $|\rho_{t+1} - \rho_t| / \rho_t$ (0: gap)")
        std.set_ylabel("posterior std, median (band: 5-95 %)")
        for ax in (change, std):
            ax.set_xlabel("round")
            _integer_x(ax)
            if len(have) == 1:
                ax.legend(loc="best")
        if len(have) > 1:  # one legend for both panels, outside them
            legend_outside(fig, change.get_legend_handles_labels()[0])
    return fig
