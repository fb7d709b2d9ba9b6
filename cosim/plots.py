"""Publication figures from one or more HDF5 traces (matplotlib, Agg; no TensorFlow).

``plot_traces(paths, out_dir, x=..., formats=..., dpi=..., size_in=...)`` writes every
figure below as ``STEM.FORMAT`` for each requested format (:data:`FORMATS`: PNG at
``dpi`` dots per inch; PDF and SVG are vector files: PDF embeds its TrueType fonts, SVG
draws text as paths, and neither carries a date, so equal figures give equal files).
Every figure holds every trace that has its data (one colour and marker per trace, the
same in every figure; the label is the trace's ``name``, with ``seed N`` added when
two traces share a name). Rounds are numbered from 0, as ``/rounds/round`` and
``cosim inspect`` number them, and round and symbol axes carry integer ticks only.

Figures (file stems):

- ``accuracy_vs_<axis>`` and ``nll_vs_<axis>``: test accuracy and test NLL
  (nats/sample) of every evaluated round against each requested x-axis
  (:data:`ACCURACY_AXES`):

  * ``"total"`` (default) -> ``*_vs_channel_uses``: cumulative channel uses, uplink +
    downlink OFDM symbols. The paper's Sec. VI-B plots "test accuracy ... as a
    function of the number of channel uses for downlink multicast and uplink local
    update aggregation" (Fig. "Comparison of wireless FL methods"). With the default
    digital downlink this axis is > 99.9 % downlink (``docs/trace.md``), so uplink
    variants are compared better with ``"uplink"``;
  * ``"uplink"`` -> ``*_vs_uplink_symbols``: cumulative uplink OFDM symbols
    (``cumulative_uplink_symbols``; for traces written before that column, the
    running sum of ``uplink_symbols``);
  * ``"rounds"`` -> ``*_vs_rounds``: the round index t (0-based);
- ``ece``: expected calibration error of every evaluated round against the round;
- ``reliability``: the reliability diagram of each trace's last evaluation (Section
  VI-C, eqs. conf/acc), one panel per trace: per-bin accuracy bars, gap bars from
  the bin's accuracy to its mean confidence (to the bin centre for traces without
  ``bin_confidence``), the samples per bin above the panel and the ECE in the title;
- ``posterior`` (the proposed method's round metrics): the mean relative change of
  the global precision per round (log axis; rounds where it is exactly 0 leave a
  gap and are counted in the legend) and the median posterior std (with its 5-95 %
  band when stored);
- ``distortion_by_distance``: mean local update distortion of near / mid / far
  devices (thirds of the cell radius ``cell.radius_m``) against cumulative uplink OFDM
  symbols (at the end of each round), one panel per phase, every trace (Fig.
  "Average local update distortion": colour = distance ring, line style and
  marker = trace);
- ``power_per_device``: per device against its distance to the BS, the mean transmit
  power (dBm, the budget ``power.tx_power_dbm`` dashed) and the share of its values
  attenuated by the power constraint, mean over rounds with the range over rounds
  as a bar, one row per phase;
- ``csi_nmse``: realised CSI NMSE (dB): median over devices per round with the
  5-95 % band over devices, and per device (mean over rounds) against distance;
  traces with perfect CSI (NMSE 0) are left out;
- ``cell_map``: the device drop (BS at the origin, the cell edge dashed), one panel
  per trace, coloured by path gain (dB) and, in a second row, by the device's mean
  local update distortion (summed over phases; devices never attenuated hollow).

A figure whose data no trace holds (an older trace, ``trace.per_device = false``, a
baseline without the posterior metrics, perfect CSI) is skipped: no file, and
``note`` (when given) receives one line saying which figure and why.

All or nothing: every trace is read and checked before anything is drawn, the
figures are drawn in a temporary directory, and ``out_dir`` is created (and the
figures moved into it) only once all of them exist. A trace that cannot be read
(:class:`cosim.trace.TraceError`) or plotted, or an output directory that cannot be
written (:class:`PlotError`), leaves no output directory behind.

The look (:data:`STYLE`: serif 8 pt text, inward ticks on all sides, thin lines, a
colour-blind-safe palette, constrained layout) is applied with
``matplotlib.rc_context`` while the figures are drawn and saved; the process's own
``rcParams`` are left as they were.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from cycler import cycler
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

from cosim.display_names import VALUES
from cosim.trace import TraceData, read_trace

RINGS = (("near", 0.0, 1 / 3), ("mid", 1 / 3, 2 / 3), ("far", 2 / 3, math.inf))
"""(name, inner, outer) distance rings as fractions of the cell radius R (inner <= r / R <
outer; a device beyond R counts as far)."""
RING_COLORS = {"near": "#0072B2", "mid": "#E69F00", "far": "#D55E00"}
ACCURACY_AXES = {
    "total": ("accuracy_vs_channel_uses", "cumulative channel uses (OFDM symbols, uplink + downlink)"),
    "uplink": ("accuracy_vs_uplink_symbols", "cumulative uplink channel uses (OFDM symbols)"),
    "rounds": ("accuracy_vs_rounds", "round"),
}
"""``--x`` choice -> (file stem of the accuracy figure, x-axis label); the NLL figure's
stem is the same with ``nll`` for ``accuracy``."""
DEFAULT_ACCURACY_AXIS = "total"

FORMATS = ("png", "pdf", "svg")
"""File formats ``plot_traces`` writes (``--format``)."""
DEFAULT_FORMATS = ("png",)
DEFAULT_DPI = 300.0
"""Resolution of PNG files, dots per inch (PDF and SVG are vector)."""
DEFAULT_PANEL_SIZE_IN = (3.5, 2.6)
"""(width, height) of one panel in inches: one column of a two-column paper."""
MAX_DPI = 2400.0
MAX_PANEL_IN = 40.0
COLORBAR_IN = 0.8
"""Width added to a figure for its colour bar and the bar's label, inches."""
MAX_PANEL_COLUMNS = 4
"""Figures with one panel per trace wrap after this many panels."""

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
"""Okabe-Ito colours, one per trace in order (colour-blind safe, distinct in grey)."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
PHASE_NAMES = {"rho": r"$\rho$", "nu": r"$\nu$"}
PHASE_ORDER = ("rho", "nu", "delta", "control", "perturbation")
"""Phases in the order the round runs them; other phase names follow, sorted."""

STYLE: dict[str, object] = {
    "font.family": "serif",
    "font.serif": ["STIXGeneral", "Times New Roman", "Nimbus Roman", "DejaVu Serif"],
    "mathtext.fontset": "stix",
    "font.size": 8.0,
    "axes.titlesize": 8.0,
    "axes.labelsize": 8.0,
    "xtick.labelsize": 7.0,
    "ytick.labelsize": 7.0,
    "legend.fontsize": 6.5,
    "legend.title_fontsize": 7.0,
    "figure.titlesize": 8.0,
    "axes.linewidth": 0.6,
    "axes.prop_cycle": cycler(color=list(PALETTE)),
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "grid.linestyle": ":",
    "lines.linewidth": 1.1,
    "lines.markersize": 3.5,
    "patch.linewidth": 0.5,
    "xtick.direction": "in",
    "ytick.direction": "in",
    "xtick.top": True,
    "ytick.right": True,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.minor.width": 0.4,
    "ytick.minor.width": 0.4,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "xtick.minor.size": 1.5,
    "ytick.minor.size": 1.5,
    "legend.frameon": True,
    "legend.framealpha": 0.9,
    "legend.edgecolor": "0.8",
    "legend.fancybox": False,
    "legend.borderpad": 0.3,
    "legend.handlelength": 2.0,
    "legend.labelspacing": 0.3,
    "figure.constrained_layout.use": True,
    "figure.constrained_layout.h_pad": 0.02,
    "figure.constrained_layout.w_pad": 0.02,
    "savefig.bbox": None,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "path",
    "svg.hashsalt": "aircomp-cosim",
    "image.cmap": "viridis",
}
"""Paper-like ``rcParams``, applied only inside :func:`style` (never globally)."""


class PlotError(Exception):
    """Figures that cannot be drawn from a trace or written where asked (one line naming
    the trace or the directory); nothing is written."""


class Skipped(Exception):
    """A figure none of the traces holds the data for; the message says what is missing
    (one line)."""


@dataclass(frozen=True)
class FigureOptions:
    """How figures are written.

    Attributes
    ----------
    formats : tuple of str
        File formats, a non-empty subset of :data:`FORMATS`, in this order, no repeats.
    dpi : float
        Resolution of PNG files in dots per inch, in (0, :data:`MAX_DPI`].
    panel_size_in : (float, float)
        (width, height) of one panel in inches, each in (0, :data:`MAX_PANEL_IN`]; a
        figure of r x c panels is about c W wide and r H tall (square panels such as
        the reliability diagram and the cell map are W wide).

    Raises
    ------
    ValueError
        Naming the field and the value, for anything outside the ranges above.
    """

    formats: tuple[str, ...] = DEFAULT_FORMATS
    dpi: float = DEFAULT_DPI
    panel_size_in: tuple[float, float] = DEFAULT_PANEL_SIZE_IN

    def __post_init__(self) -> None:
        formats = tuple(dict.fromkeys(str(f).lower() for f in self.formats))
        bad = [f for f in formats if f not in FORMATS]
        if not formats or bad:
            raise ValueError(f"formats (--format) must be one or more of {', '.join(FORMATS)}, "
                             f"got {list(self.formats)!r}")
        object.__setattr__(self, "formats", formats)
        dpi = float(self.dpi)
        if not (math.isfinite(dpi) and 0.0 < dpi <= MAX_DPI):
            raise ValueError(f"dpi (--dpi) must be > 0 and <= {MAX_DPI:g}, got {self.dpi!r}")
        object.__setattr__(self, "dpi", dpi)
        size = tuple(float(v) for v in self.panel_size_in)
        if len(size) != 2 or not all(math.isfinite(v) and 0.0 < v <= MAX_PANEL_IN for v in size):
            raise ValueError(f"panel_size_in (--size W,H) must be two sizes in inches, each > 0 and "
                             f"<= {MAX_PANEL_IN:g}, got {self.panel_size_in!r}")
        object.__setattr__(self, "panel_size_in", size)


def style():
    """A context manager applying :data:`STYLE` (``matplotlib.rc_context``)."""
    return matplotlib.rc_context(STYLE)


# --------------------------------------------------------------------------- helpers


def _check_axis(x: str) -> None:
    if x not in ACCURACY_AXES:
        raise ValueError(f"x (--x) must be one of {', '.join(map(repr, ACCURACY_AXES))}, got {x!r}")


def _axes_list(x: str | Iterable[str]) -> tuple[str, ...]:
    """``x`` as a tuple of distinct accuracy axes (a ValueError names a bad one)."""
    axes = (x,) if isinstance(x, str) else tuple(dict.fromkeys(x))
    if not axes:
        raise ValueError("x (--x) must name at least one axis")
    for axis in axes:
        _check_axis(axis)
    return axes


def accuracy_x(trace: TraceData, x: str = DEFAULT_ACCURACY_AXIS) -> np.ndarray:
    """The x values [T] of the accuracy figure for one trace, float64.

    Parameters
    ----------
    trace : TraceData
    x : {"total", "uplink", "rounds"}
        ``"total"``: ``cumulative_channel_uses`` (OFDM symbols, uplink + downlink);
        ``"uplink"``: ``cumulative_uplink_symbols`` (OFDM symbols), or the running sum
        of ``uplink_symbols`` for a trace without that column (or with NaN in it);
        ``"rounds"``: ``round``, the 0-based round index.
    """
    _check_axis(x)
    rounds = trace.rounds
    if x == "rounds":
        return rounds["round"].astype(np.float64)
    if x == "total":
        return np.asarray(rounds["cumulative_channel_uses"], np.float64)
    column = rounds.get("cumulative_uplink_symbols")
    if column is not None and np.all(np.isfinite(column)):
        return np.asarray(column, np.float64)
    return np.cumsum(np.asarray(rounds["uplink_symbols"], np.float64))


def _has_uplink(trace: TraceData) -> bool:
    return "cumulative_uplink_symbols" in trace.rounds or "uplink_symbols" in trace.rounds


def trace_labels(traces: Sequence[TraceData]) -> list[str]:
    """One legend label per trace, in the reader's words: the algorithm's display name
    (:data:`cosim.display_names.VALUES`, "Proposed", "FedAvg"; the trace's ``name``
    attribute, else its file stem, when the scenario names none), then, for labels two
    traces still share, whichever of the trace's name, ``seed N`` and the file stem tells
    them apart, in that order."""
    def algorithm(trace: TraceData) -> str | None:
        name = trace.scenario.get("algorithm", {}).get("name")
        return VALUES["algorithm.name"].get(name, name) if isinstance(name, str) else None

    names = [str(t.attrs.get("name") or t.path.stem) for t in traces]
    labels = [algorithm(t) or n for t, n in zip(traces, names)]
    parts = [names, [f"seed {t.attrs['seed']}" if "seed" in t.attrs else "" for t in traces],
             [t.path.stem for t in traces]]
    for part in parts:
        for label in {lab for lab in labels if labels.count(lab) > 1}:
            group = [i for i, lab in enumerate(labels) if lab == label]
            if len({part[i] for i in group}) > 1:
                for i in group:
                    labels[i] = f"{label}, {part[i]}" if part[i] and part[i] != label else label
    return labels


def _scenario_value(trace: TraceData, section: str, key: str) -> float | None:
    """The finite number ``[section] key`` of the trace's scenario, else None."""
    table = trace.scenario.get(section)
    value = table.get(key) if isinstance(table, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _cell_radius_m(trace: TraceData) -> float | None:
    """``cell.radius_m`` of the scenario, else the largest device distance; None without either."""
    radius = _scenario_value(trace, "cell", "radius_m")
    if radius is not None and radius > 0:
        return radius
    distance = trace.devices.get("distance_m")
    if distance is not None and distance.size:
        return float(np.max(distance))
    return None


def _phases(names: Iterable[str], prefix: str) -> list[str]:
    """Phase names of the datasets ``prefix<phase>`` among ``names``, in round order."""
    found = {n.removeprefix(prefix) for n in names if n.startswith(prefix)}
    return [p for p in PHASE_ORDER if p in found] + sorted(found - set(PHASE_ORDER))


def _phase_label(phase: str) -> str:
    return f"phase {PHASE_NAMES.get(phase, phase)}"


def _trace_style(index: int) -> dict:
    """Colour and marker of trace ``index`` (the same in every figure)."""
    return {"color": PALETTE[index % len(PALETTE)], "marker": MARKERS[index % len(MARKERS)]}


def _integer_x(ax) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))


def _count_axis(ax, label: str, values: Sequence[np.ndarray]) -> None:
    """x-axis of whole-number counts (rounds, OFDM symbols): integer ticks; above 10^4
    the tick labels are in units of 10^(3m) named in the axis label (no offset text,
    which would sit on the label)."""
    _integer_x(ax)
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    largest = max((float(v.max()) for v in finite if v.size), default=0.0)
    if largest < 1e4:
        ax.set_xlabel(label)
        return
    exponent = 3 * math.floor(math.log10(largest) / 3)
    scale = 10.0 ** exponent
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / scale:g}"))
    ax.set_xlabel(f"{label}, $\\times 10^{{{exponent}}}$")


def _figure(options: FigureOptions, rows: int = 1, cols: int = 1, *, square: bool = False,
            extra_width_in: float = 0.0, **kwargs) -> tuple[Figure, np.ndarray]:
    """A figure of ``rows`` x ``cols`` panels of :attr:`FigureOptions.panel_size_in`
    (``square``: W x W), ``extra_width_in`` inches wider (room for a colour bar), and
    its axes [rows, cols]."""
    width, height = options.panel_size_in
    if square:
        height = width
    return plt.subplots(rows, cols, figsize=(width * cols + extra_width_in, height * rows),
                        squeeze=False, **kwargs)


def _grid(n: int) -> tuple[int, int]:
    """(rows, cols) for ``n`` panels, at most :data:`MAX_PANEL_COLUMNS` per row."""
    cols = min(n, MAX_PANEL_COLUMNS)
    return math.ceil(n / cols), cols


def _db(values: np.ndarray) -> np.ndarray:
    """10 log10 of ``values``; NaN where a value is not > 0."""
    values = np.asarray(values, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, 10.0 * np.log10(np.where(values > 0, values, 1.0)), np.nan)


def _legend_below(fig: Figure, handles: list, ncols: int | None = None) -> None:
    """One legend for the whole figure, below its panels."""
    if handles:
        fig.legend(handles=handles, loc="outside lower center",
                   ncols=ncols or min(len(handles), 4))


def _legend_rows(fig: Figure, rows: list[list]) -> None:
    """One legend below the panels with one row per non-empty list of ``rows`` (padded with
    empty entries so that matplotlib's column-major filling keeps each list on its row)."""
    rows = [row for row in rows if row]
    if not rows:
        return
    cols = max(len(row) for row in rows)
    blank = Line2D([], [], alpha=0.0, label=" ")
    handles = [row[c] if c < len(row) else blank for c in range(cols) for row in rows]
    fig.legend(handles=handles, loc="outside lower center", ncols=cols)


def _evaluated(trace: TraceData) -> np.ndarray:
    acc = trace.rounds.get("test_accuracy")
    if acc is None:
        return np.zeros(0, bool)
    return np.isfinite(acc)


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
    with style():
        fig, axes = _figure(options)
        ax = axes[0, 0]
        xs = []
        for i, trace, label in have:
            ok = np.isfinite(trace.rounds[metric])
            xs.append(accuracy_x(trace, x)[ok])
            ax.plot(xs[-1], trace.rounds[metric][ok], label=label, **_trace_style(i))
            companion = trace.rounds.get(COMPANIONS.get(metric, ""))
            if companion is not None and np.isfinite(companion).any():
                shown = np.isfinite(companion)
                ax.plot(accuracy_x(trace, x)[shown], companion[shown], linestyle="--",
                        color=_trace_style(i)["color"], label=f"{label}, posterior mean")
        _count_axis(ax, ACCURACY_AXES[x][1], xs)
        ax.set_ylabel(ylabel)
        ax.legend(loc="best")
    return fig


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
    rows, cols = _grid(len(traces))
    with style():
        fig, axes = _figure(options, rows, cols, square=True)
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
        _legend_below(fig, handles, ncols=3)
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
        fig, axes = _figure(options, 1, 2, sharex=True)
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
            ax.legend(loc="best")
    return fig


def ring_distortion(trace: TraceData, phase: str) -> dict[str, np.ndarray]:
    """Mean local update distortion (``/rounds/per_device/local_distortion_<phase>``,
    value²) over the devices of each ring of :data:`RINGS` (thirds of the cell radius,
    :func:`_cell_radius_m`), per round: ``{ring: [T]}`` for the rings with devices."""
    values = trace.per_device[f"local_distortion_{phase}"]
    distance = trace.devices["distance_m"]
    radius = _cell_radius_m(trace)
    out = {}
    for ring, lo, hi in RINGS:
        members = (distance >= lo * radius) & (distance < hi * radius)
        if members.any():
            out[ring] = values[:, members].mean(axis=1)
    return out


def distortion_figure(traces: Sequence[TraceData], labels: Sequence[str],
                      options: FigureOptions = FigureOptions()) -> Figure:
    """Mean local update distortion (value², ``/rounds/per_device/local_distortion_<phase>``
    averaged over the devices of a ring) of near / mid / far devices (:data:`RINGS`,
    thirds of ``cell.radius_m``) against the cumulative uplink OFDM symbols at the end of
    each round (:func:`accuracy_x` ``"uplink"``); one panel per phase, log y (a ring
    without any attenuation in a round has distortion 0: a gap). Colour = ring, line
    style and marker = trace; one line per (trace, ring with devices), its gid
    ``"<label>|<ring>"``.

    Raises
    ------
    Skipped
        No trace holds a ``local_distortion_<phase>``, ``/devices/distance_m`` and
        uplink symbol counts.
    """
    have = [(i, t, lab) for i, (t, lab) in enumerate(zip(traces, labels))
            if _phases(t.per_device, "local_distortion_") and "distance_m" in t.devices
            and _has_uplink(t)]
    if not have:
        raise Skipped("no trace holds /rounds/per_device/local_distortion_<phase> with "
                      "/devices/distance_m and uplink symbol counts")
    phases = _phases({n for _, t, _ in have for n in t.per_device}, "local_distortion_")
    with style():
        fig, axes = _figure(options, 1, len(phases))
        for ax, phase in zip(axes[0], phases):
            for i, trace, label in have:
                if f"local_distortion_{phase}" not in trace.per_device:
                    continue
                symbols = accuracy_x(trace, "uplink")
                for ring, mean in ring_distortion(trace, phase).items():
                    ax.semilogy(symbols, np.where(mean > 0, mean, np.nan), color=RING_COLORS[ring],
                                ls=LINESTYLES[i % len(LINESTYLES)], marker=MARKERS[i % len(MARKERS)],
                                gid=f"{label}|{ring}")
            ax.set_title(_phase_label(phase))
            _count_axis(ax, "cumulative uplink OFDM symbols",
                        [accuracy_x(t, "uplink") for _, t, _ in have])
        axes[0, 0].set_ylabel("mean local update distortion (0: gap)")
        rings = [Line2D([], [], color=RING_COLORS[r], label=text) for r, text in
                 zip(RING_COLORS, ("near (r < R/3)", "mid (R/3 ≤ r < 2R/3)", "far (r ≥ 2R/3)"))]
        runs = [Line2D([], [], color="0.2", ls=LINESTYLES[i % len(LINESTYLES)],
                       marker=MARKERS[i % len(MARKERS)], label=label)
                for i, _, label in have] if len(have) > 1 else []
        _legend_rows(fig, [rings, runs])
    return fig


def power_figure(traces: Sequence[TraceData], labels: Sequence[str],
                 options: FigureOptions = FigureOptions()) -> Figure:
    """Per device against its distance to the BS (m; the device index when a trace has no
    ``/devices/distance_m``): the mean transmit power in dBm (``tx_power_w_<phase>``,
    mean over the phase's OFDM symbols, then over rounds; the bar spans the rounds' range;
    the scenario's budget ``power.tx_power_dbm`` dashed) and the attenuated share of its
    values in % (``clipped_fraction_<phase>``, mean and range over rounds). One row per
    phase, one column per quantity some trace holds, one colour and marker per trace.

    Raises
    ------
    Skipped
        No trace holds ``tx_power_w_<phase>`` or ``clipped_fraction_<phase>``.
    """
    quantities = [q for q in ("tx_power_w_", "clipped_fraction_")
                  if any(_phases(t.per_device, q) for t in traces)]
    if not quantities:
        raise Skipped("no trace holds /rounds/per_device/tx_power_w_<phase> or "
                      "clipped_fraction_<phase>")
    names = {n for t in traces for n in t.per_device}
    found = {p for q in quantities for p in _phases(names, q)}
    phases = [p for p in PHASE_ORDER if p in found] + sorted(found - set(PHASE_ORDER))
    with style():
        fig, axes = _figure(options, len(phases), len(quantities), sharex=True)
        any_distance = False
        budgets: dict[float, list[int]] = {}
        for i, trace in enumerate(traces):
            budget = _scenario_value(trace, "power", "tx_power_dbm")
            if budget is not None and any(f"tx_power_w_{p}" in trace.per_device for p in phases):
                budgets.setdefault(budget, []).append(i)
        for row, phase in zip(axes, phases):
            for ax, quantity in zip(row, quantities):
                for i, trace in enumerate(traces):
                    values = trace.per_device.get(f"{quantity}{phase}")
                    if values is None:
                        continue
                    distance = trace.devices.get("distance_m")
                    any_distance |= distance is not None
                    where = distance if distance is not None else np.arange(values.shape[1])
                    if quantity == "tx_power_w_":
                        per_round = _db(values / 1e-3)
                    else:
                        per_round = 100.0 * values
                    mean = (_db(np.mean(values, axis=0) / 1e-3) if quantity == "tx_power_w_"
                            else np.mean(per_round, axis=0))
                    with np.errstate(all="ignore"):
                        low = np.nanmin(np.where(np.isfinite(per_round), per_round, np.nan), axis=0)
                        high = np.nanmax(np.where(np.isfinite(per_round), per_round, np.nan), axis=0)
                    style_i = _trace_style(i)
                    ax.vlines(where, low, high, color=style_i["color"], lw=0.6, alpha=0.7)
                    ax.plot(where, mean, ls="none", mfc="none" if i % 2 else style_i["color"],
                            mew=0.8, **style_i)
                if quantity == "tx_power_w_":
                    for budget, owners in budgets.items():
                        color = "0.3" if len(budgets) == 1 else _trace_style(owners[0])["color"]
                        ax.axhline(budget, color=color, ls="--", lw=0.8)
                    ax.set_ylabel(f"transmit power (dBm), {_phase_label(phase)}")
                else:
                    ax.set_ylabel(f"attenuated values (%), {_phase_label(phase)}")
                    top = min(ax.get_ylim()[1], 104.0)
                    ax.set_ylim(-0.03 * top, top)  # markers at 0 % stay whole
        for ax in axes[-1]:
            ax.set_xlabel("distance to the BS (m)" if any_distance else "device")
        handles = [Line2D([], [], ls="none", mfc="none" if i % 2 else _trace_style(i)["color"],
                          mew=0.8, label=label, **_trace_style(i))
                   for i, label in enumerate(labels)]
        handles += [Line2D([], [], color="0.3" if len(budgets) == 1 else _trace_style(owners[0])["color"],
                           ls="--", lw=0.8, label=f"budget P = {budget:g} dBm")
                    for budget, owners in budgets.items()]
        handles.append(Line2D([], [], color="0.3", ls="none", marker="|", ms=8, mew=0.6,
                              label="range over rounds"))
        _legend_below(fig, handles, ncols=min(len(handles), 3))
    return fig


def csi_figure(traces: Sequence[TraceData], labels: Sequence[str],
               options: FigureOptions = FigureOptions()) -> Figure:
    """Realised CSI NMSE ``||ĥ_k − h_k||² / ||h_k||²`` (``/rounds/per_device/csi_nmse``) in
    dB: left, the median over devices per round with the 5-95 % band over devices; right,
    each device's mean over rounds against its distance to the BS (m). Traces whose NMSE
    is 0 everywhere (perfect CSI) are left out.

    Raises
    ------
    Skipped
        No trace holds a non-zero ``csi_nmse``.
    """
    have = [(i, t, lab) for i, (t, lab) in enumerate(zip(traces, labels))
            if "csi_nmse" in t.per_device and np.nanmax(t.per_device["csi_nmse"], initial=0.0) > 0]
    if not have:
        if any("csi_nmse" in t.per_device for t in traces):
            raise Skipped("every trace has perfect CSI (/rounds/per_device/csi_nmse is 0)")
        raise Skipped("no trace holds /rounds/per_device/csi_nmse")
    with style():
        fig, axes = _figure(options, 1, 2)
        per_round, per_device = axes[0]
        any_distance = False
        for i, trace, label in have:
            nmse = trace.per_device["csi_nmse"]
            rounds = trace.rounds["round"]
            style_i = _trace_style(i)
            per_round.plot(rounds, _db(np.nanmedian(nmse, axis=1)), label=label, **style_i)
            per_round.fill_between(rounds, _db(np.nanpercentile(nmse, 5, axis=1)),
                                   _db(np.nanpercentile(nmse, 95, axis=1)),
                                   color=style_i["color"], alpha=0.15, lw=0)
            distance = trace.devices.get("distance_m")
            any_distance |= distance is not None
            where = distance if distance is not None else np.arange(nmse.shape[1])
            per_device.plot(where, _db(np.nanmean(nmse, axis=0)), ls="none", label=label, **style_i)
        per_round.set_xlabel("round")
        _integer_x(per_round)
        per_round.set_ylabel("CSI NMSE (dB), median over devices")
        per_device.set_xlabel("distance to the BS (m)" if any_distance else "device")
        per_device.set_ylabel("CSI NMSE (dB), mean over rounds")
        per_round.legend(loc="best", title="band: 5-95 % of devices")
    return fig


def cell_map_figure(traces: Sequence[TraceData], labels: Sequence[str],
                    options: FigureOptions = FigureOptions()) -> Figure:
    """The device drop of each trace (``/devices/position_m``, m; BS at the origin, the
    cell edge ``cell.radius_m`` dashed), one square panel per trace; row 1 coloured by
    path gain (``/devices/path_gain`` in dB), row 2 by each device's mean local update
    distortion (value², summed over phases, mean over rounds; log colour scale; devices
    never attenuated hollow). A row no trace has data for is left out; each row has one
    colour scale for all its panels.

    Raises
    ------
    Skipped
        No trace holds ``/devices/position_m`` with path gains or local distortions.
    """
    have = [(t, lab) for t, lab in zip(traces, labels) if "position_m" in t.devices]
    rows: list[tuple[str, Callable[[TraceData], np.ndarray | None]]] = []
    if any("path_gain" in t.devices for t, _ in have):
        rows.append(("path gain (dB)", lambda t: _db(t.devices["path_gain"])
                     if "path_gain" in t.devices else None))
    if any(_phases(t.per_device, "local_distortion_") for t, _ in have):
        rows.append(("mean local update distortion", _device_distortion))
    if not have or not rows:
        raise Skipped("no trace holds /devices/position_m with /devices/path_gain or "
                      "/rounds/per_device/local_distortion_<phase>")
    n = len(have)
    with style():
        fig, axes = _figure(options, len(rows), n, square=True, extra_width_in=COLORBAR_IN)
        for r, (quantity, values_of) in enumerate(rows):
            values = [values_of(t) for t, _ in have]
            log = "distortion" in quantity
            finite = np.concatenate([v[np.isfinite(v) & ((v > 0) if log else True)]
                                     for v in values if v is not None] or [np.zeros(0)])
            norm = None
            if finite.size:
                lo, hi = float(finite.min()), float(finite.max())
                if hi <= lo:
                    lo, hi = (lo / 2, hi * 2) if log else (lo - 1.0, hi + 1.0)
                norm = LogNorm(lo, hi) if log else Normalize(lo, hi)
            cmap = "viridis" if not log else "plasma"
            mappable = None
            for ax, (trace, label), v in zip(axes[r], have, values):
                _map_panel(ax, trace)
                position = trace.devices["position_m"]
                if v is None:
                    ax.scatter(position[:, 0], position[:, 1], s=14, facecolors="none",
                               edgecolors="0.4", lw=0.6)
                    ax.text(0.5, 0.02, "(not in this trace)", transform=ax.transAxes, ha="center",
                            va="bottom", fontsize=6)
                else:
                    positive = np.isfinite(v) & (v > 0) if log else np.isfinite(v)
                    if (~positive).any():
                        ax.scatter(position[~positive, 0], position[~positive, 1], s=14,
                                   facecolors="none", edgecolors="0.35", lw=0.6,
                                   label="never attenuated" if log else "no value")
                        ax.legend(loc="upper right", fontsize=5.5, handletextpad=0.2,
                                  borderpad=0.2)
                    if positive.any() and norm is not None:
                        mappable = ax.scatter(position[positive, 0], position[positive, 1],
                                              c=v[positive], s=14, cmap=cmap, norm=norm,
                                              edgecolors="black", linewidths=0.3, zorder=3)
                if r == 0:
                    ax.set_title(label)
                if ax is axes[r][0]:
                    ax.set_ylabel("y (m)")
                if r == len(rows) - 1:
                    ax.set_xlabel("x (m)")
            if mappable is not None:
                fig.colorbar(mappable, ax=list(axes[r]), label=quantity, shrink=0.9,
                             pad=0.02, aspect=25)
    return fig


def _device_distortion(trace: TraceData) -> np.ndarray | None:
    """[K] mean over rounds of the device's local distortion summed over phases; None
    without any ``local_distortion_<phase>``."""
    phases = _phases(trace.per_device, "local_distortion_")
    if not phases:
        return None
    return np.sum([np.mean(trace.per_device[f"local_distortion_{p}"], axis=0) for p in phases], axis=0)


def _map_panel(ax, trace: TraceData) -> None:
    """BS marker, cell edge, equal axes and limits of one map panel."""
    position = trace.devices["position_m"]
    radius = _cell_radius_m(trace) or float(np.max(np.hypot(position[:, 0], position[:, 1])))
    ax.add_patch(Circle((0.0, 0.0), radius, fill=False, ls="--", lw=0.6, color="0.5"))
    ax.plot([0.0], [0.0], marker="^", color="black", ms=6, ls="none", zorder=4)
    ax.annotate("BS", (0.0, 0.0), xytext=(4, 4), textcoords="offset points", fontsize=6)
    limit = 1.06 * radius
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.grid(False)
    ax.xaxis.set_major_locator(MaxNLocator(5, integer=True, symmetric=True))
    ax.yaxis.set_major_locator(MaxNLocator(5, integer=True, symmetric=True))


# --------------------------------------------------------------------------- driver


def figures(traces: Sequence[TraceData], labels: Sequence[str],
            x: str | Iterable[str] = DEFAULT_ACCURACY_AXIS,
            options: FigureOptions = FigureOptions()) -> Iterator[tuple[str, Callable[[], Figure]]]:
    """The figures in the order they are written: yields ``(stem, builder)`` with
    ``builder()`` returning a :class:`matplotlib.figure.Figure` or raising :class:`Skipped`
    (``traces`` and ``labels`` as in :func:`plot_traces`, one label per trace)."""
    for axis in _axes_list(x):
        stem = ACCURACY_AXES[axis][0]
        yield stem, lambda a=axis: metric_figure(traces, labels, "test_accuracy", "test accuracy",
                                                 a, options)
        yield stem.replace("accuracy", "nll", 1), lambda a=axis: metric_figure(
            traces, labels, "test_nll", "test NLL (nats/sample)", a, options)
    yield "ece", lambda: metric_figure(traces, labels, "ece", "expected calibration error",
                                       "rounds", options)
    yield "reliability", lambda: reliability_figure(traces, labels, options)
    yield "posterior", lambda: posterior_figure(traces, labels, options)
    yield "distortion_by_distance", lambda: distortion_figure(traces, labels, options)
    yield "power_per_device", lambda: power_figure(traces, labels, options)
    yield "csi_nmse", lambda: csi_figure(traces, labels, options)
    yield "cell_map", lambda: cell_map_figure(traces, labels, options)


def plot_traces(
    paths: Sequence[Path],
    out_dir: Path,
    labels: Sequence[str] | None = None,
    x: str | Iterable[str] = DEFAULT_ACCURACY_AXIS,
    *,
    formats: Iterable[str] = DEFAULT_FORMATS,
    dpi: float = DEFAULT_DPI,
    size_in: tuple[float, float] = DEFAULT_PANEL_SIZE_IN,
    note: Callable[[str], None] | None = None,
) -> list[Path]:
    """Draw every figure (module docstring) for ``paths`` into ``out_dir``; the files written,
    figure by figure, each in the order of ``formats``.

    Parameters
    ----------
    paths : sequence of Path
        HDF5 traces, one curve / panel each.
    out_dir : Path
        Created with its parents only when every figure has been drawn (all or nothing).
    labels : sequence of str, optional
        One legend label per trace (default: :func:`trace_labels`).
    x : str or iterable of str
        Accuracy / NLL x-axes (``"total"``, ``"uplink"``, ``"rounds"``,
        :data:`ACCURACY_AXES`), one pair of figures each.
    formats : iterable of str
        Subset of :data:`FORMATS`.
    dpi : float
        PNG resolution, dots per inch.
    size_in : (float, float)
        (width, height) of one panel, inches (:class:`FigureOptions`).
    note : callable, optional
        Receives one line per figure skipped for want of data.

    Raises
    ------
    ValueError
        A bad ``x``, ``formats``, ``dpi`` or ``size_in`` (naming it), before anything is drawn.
    cosim.trace.TraceError
        A trace that cannot be read (missing, not HDF5, truncated, damaged, not a trace).
    PlotError
        A trace with no completed round or without a column the figures need, or an
        ``out_dir`` that is not a directory or cannot be written.
    """
    axes = _axes_list(x)
    options = FigureOptions(tuple(formats), dpi, tuple(size_in))
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PlotError(f"cannot write figures to {out_dir}: it is not a directory")
    traces = [read_trace(p) for p in paths]
    for trace in traces:
        _check_plottable(trace, axes)
    names = list(labels) if labels else trace_labels(traces)
    with tempfile.TemporaryDirectory(prefix="cosim-plot-") as scratch:
        drawn = _draw(traces, names, Path(scratch), axes, options, note)
        return _move_into(drawn, out_dir)


def _check_plottable(trace: TraceData, axes: Sequence[str]) -> None:
    """PlotError naming the trace when it has no round or lacks a column the figures read."""
    if trace.completed_rounds == 0:
        raise PlotError(f"cannot plot {trace.path}: it holds no completed round")
    need = ["round", "test_accuracy", "ece"]
    if "total" in axes:
        need.append("cumulative_channel_uses")
    if "uplink" in axes and "cumulative_uplink_symbols" not in trace.rounds:
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


def _draw(traces: Sequence[TraceData], names: Sequence[str], out_dir: Path, axes: Sequence[str],
          options: FigureOptions, note: Callable[[str], None] | None) -> list[Path]:
    """Every figure into ``out_dir`` (an existing directory); the files written."""
    written: list[Path] = []
    for stem, build in figures(traces, names, axes, options):
        try:
            fig = build()
        except Skipped as reason:
            if note is not None:
                note(f"no {stem} figure: {reason}")
            continue
        written += save_figure(fig, out_dir / stem, options)
    return written


def fold_offsets_into_labels(fig: Figure) -> bool:
    """Move every axis's offset or scale text (Matplotlib's "1e8" at the end of an axis,
    where a long label runs into it) into the axis label, as "label [1e8]"; the ticks keep
    their scaled values. Call after a draw (the text is set when the ticks are formatted);
    returns whether a label changed, so that the caller lays the figure out again."""
    folded = False
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            offset = axis.get_offset_text()
            if offset.get_visible() and offset.get_text() and axis.get_label_text():
                offset.set_visible(False)
                axis.set_label_text(f"{axis.get_label_text()} [{offset.get_text()}]")
                folded = True
    return folded


def save_figure(fig: Figure, stem: Path, options: FigureOptions = FigureOptions()) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` for every format of ``options`` (PNG at
    ``options.dpi``; PDF and SVG without a creation date, so equal figures give equal
    files), close it, and return the paths."""
    paths = []
    try:
        with style():
            # lay the figure out once and keep that layout for every format: the
            # constrained layout otherwise starts from the previous format's result
            fig.draw_without_rendering()
            if fold_offsets_into_labels(fig):
                fig.draw_without_rendering()
            fig.set_layout_engine("none")
            for fmt in options.formats:
                path = stem.with_name(f"{stem.name}.{fmt}")
                metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
                fig.savefig(path, format=fmt, dpi=options.dpi, metadata=metadata)
                paths.append(path)
    finally:
        plt.close(fig)
    return paths
