"""The figures' look and common pieces: the paper-like style, options, errors, labels and axes.

:data:`STYLE` (serif 8 pt text, inward ticks on all sides, thin lines, a colour-blind-safe
palette, constrained layout) is applied with ``matplotlib.rc_context`` inside
:func:`style` only. :func:`trace_labels` names traces in the reader's words
(:mod:`cosim.display_names`). The figure families are :mod:`cosim.plots.learning` and
:mod:`cosim.plots.phy`; :mod:`cosim.plots` draws them all. No TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from cycler import cycler
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator

from cosim.display_names import VALUES, value_label
from cosim.trace import TraceData

RINGS = (("near", 0.0, 1 / 3), ("mid", 1 / 3, 2 / 3), ("far", 2 / 3, math.inf))
"""(name, inner, outer) distance rings as fractions of the cell radius R (inner <= r / R <
outer; a device beyond R counts as far)."""
RING_COLORS = {"near": "#0072B2", "mid": "#E69F00", "far": "#D55E00"}
ACCURACY_AXES = {
    "total": ("accuracy_vs_channel_uses", "cumulative channel uses (OFDM symbols, uplink + downlink)"),
    "uplink": ("accuracy_vs_uplink_symbols", "cumulative uplink channel uses (OFDM symbols)"),
    "uplink_seconds": ("accuracy_vs_uplink_seconds", "cumulative uplink air time (s)"),
    "uplink_energy": ("accuracy_vs_uplink_energy", "cumulative device transmit energy (J)"),
    "rounds": ("accuracy_vs_rounds", "round"),
}
"""``--x`` choice -> (file stem of the accuracy figure, x-axis label); the NLL figure's
stem is the same with ``nll`` for ``accuracy``."""
RUNNING_TOTAL_AXES = {
    "uplink": ("cumulative_uplink_symbols", "uplink_symbols"),
    "uplink_seconds": ("cumulative_uplink_seconds", "uplink_seconds"),
    "uplink_energy": ("cumulative_uplink_energy_j", "uplink_energy_j"),
}
"""The axes that are a running total: ``--x`` choice -> (its ``cumulative_*`` column,
the per-round column it sums, for traces without the former)."""
COUNT_AXES = ("total", "uplink", "rounds")
"""The axes of whole numbers (integer ticks); seconds and joules are not."""
DEFAULT_ACCURACY_AXIS = "uplink"
"""The accuracy and NLL figures' default x: the uplink's channel uses, what an AirComp
method changes (the total of the paper's Sec. VI-B is over 99.9 % downlink with the
default digital downlink: 1.0e8 of the quickstart's symbols against 13,920 uplink ones)."""

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
    log_x, log_y : bool or None
        The accuracy, NLL and ECE figures' x and y scales: True log (``--log-x``,
        ``--log-y``), False linear, None (the default) log where the data span over two
        decades (:func:`spans_decades`).

    Raises
    ------
    ValueError
        Naming the field and the value, for anything outside the ranges above.
    """

    formats: tuple[str, ...] = DEFAULT_FORMATS
    dpi: float = DEFAULT_DPI
    panel_size_in: tuple[float, float] = DEFAULT_PANEL_SIZE_IN
    log_x: bool | None = None
    log_y: bool | None = None

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
    x : {"total", "uplink", "uplink_seconds", "uplink_energy", "rounds"}
        ``"total"``: ``cumulative_channel_uses`` (OFDM symbols, uplink + downlink);
        ``"uplink"``: ``cumulative_uplink_symbols`` (OFDM symbols), or the running sum
        of ``uplink_symbols`` for a trace without that column (or with NaN in it);
        ``"uplink_seconds"``: ``cumulative_uplink_seconds`` (s), likewise else the
        running sum of ``uplink_seconds``; ``"uplink_energy"``:
        ``cumulative_uplink_energy_j`` (J), else the running sum of ``uplink_energy_j``
        (NaN from a round without it on); ``"rounds"``: ``round``, the 0-based round
        index.
    """
    _check_axis(x)
    rounds = trace.rounds
    if x == "rounds":
        return rounds["round"].astype(np.float64)
    if x == "total":
        return np.asarray(rounds["cumulative_channel_uses"], np.float64)
    total, per_round = RUNNING_TOTAL_AXES[x]
    column = rounds.get(total)
    if column is not None and np.all(np.isfinite(column)):
        return np.asarray(column, np.float64)
    return np.cumsum(np.asarray(rounds[per_round], np.float64))


def has_axis(trace: TraceData, x: str) -> bool:
    """Whether ``trace`` holds the columns :func:`accuracy_x` reads for ``x``."""
    if x == "rounds":
        return "round" in trace.rounds
    if x == "total":
        return "cumulative_channel_uses" in trace.rounds
    return any(name in trace.rounds for name in RUNNING_TOTAL_AXES[x])


def _has_uplink(trace: TraceData) -> bool:
    return has_axis(trace, "uplink")


LABEL_IGNORED = ("trace.",)
"""Scenario keys (prefixes) :func:`differing_keys` leaves out: where a trace was written
says nothing about the run."""


def _flat(table: dict, prefix: str = "") -> dict[str, object]:
    """A scenario table as dotted keys -> values (lists kept whole)."""
    flat: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differing_keys(traces: Sequence[TraceData]) -> list[str]:
    """The dotted scenario keys whose value is not the same in every trace (a key some
    trace lacks counts), in the first trace's order but ``seed`` last, leaving out
    :data:`LABEL_IGNORED` (the trace's path) and ``name`` when another key differs."""
    flats = [_flat(t.scenario) for t in traces]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    found = [k for k in keys if not k.startswith(LABEL_IGNORED)
             and len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]
    found = [k for k in found if k != "name"] or found
    return sorted(found, key=lambda k: k == "seed")  # the seed last: "FedAvg, seed 2"


def _key_label(key: str, value) -> str:
    """One differing key's value in a legend label (:func:`value_label`; ``seed 2``)."""
    if key == "seed":
        return f"seed {value}"
    return value_label(key, value)


def trace_labels(traces: Sequence[TraceData]) -> list[str]:
    """One legend label per trace, in the reader's words. Of several traces, the values
    of the scenario keys in which they differ (:func:`differing_keys`, each by
    :func:`cosim.display_names.value_label`: "FedAvg, P = 10 dBm, seed 2"). Of one trace,
    or of traces whose scenarios are the same, the algorithm's display name
    (:data:`cosim.display_names.VALUES`, "Proposed", "FedAvg"; the trace's ``name``
    attribute, else its file stem, when the scenario names none); then, for labels two
    traces still share, whichever of the trace's name, ``seed N`` and the file stem tells
    them apart, in that order."""
    def algorithm(trace: TraceData) -> str | None:
        name = trace.scenario.get("algorithm", {}).get("name")
        return VALUES["algorithm.name"].get(name, name) if isinstance(name, str) else None

    names = [str(t.attrs.get("name") or t.path.stem) for t in traces]
    labels = [algorithm(t) or n for t, n in zip(traces, names)]
    keys = differing_keys(traces) if len(traces) > 1 else []
    if keys:
        flats = [_flat(t.scenario) for t in traces]
        labels = [", ".join(_key_label(k, f[k]) for k in keys if k in f) or label
                  for f, label in zip(flats, labels)]
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
    """Colour and marker of trace ``index`` (the same in every figure): the palette's
    colours with their markers, each time round the markers shifted by one, so that no two
    of 64 traces look alike (:func:`_trace_linestyle` adds the line style to curves)."""
    turn = index // len(PALETTE)
    return {"color": PALETTE[index % len(PALETTE)], "marker": MARKERS[(index + turn) % len(MARKERS)]}


def _trace_linestyle(index: int) -> str:
    """The line style of trace ``index``'s curves: solid for the first 8, then the next
    style each time round the palette."""
    return LINESTYLES[(index // len(PALETTE)) % len(LINESTYLES)]


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


def panel_figure(options: FigureOptions, rows: int = 1, cols: int = 1, *, square: bool = False,
            extra_width_in: float = 0.0, **kwargs) -> tuple[Figure, np.ndarray]:
    """A figure of ``rows`` x ``cols`` panels of :attr:`FigureOptions.panel_size_in`
    (``square``: W x W), ``extra_width_in`` inches wider (room for a colour bar), and
    its axes [rows, cols]."""
    width, height = options.panel_size_in
    if square:
        height = width
    return plt.subplots(rows, cols, figsize=(width * cols + extra_width_in, height * rows),
                        squeeze=False, **kwargs)


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, cols) for ``n`` panels, at most :data:`MAX_PANEL_COLUMNS` per row."""
    cols = min(n, MAX_PANEL_COLUMNS)
    return math.ceil(n / cols), cols


def _db(values: np.ndarray) -> np.ndarray:
    """10 log10 of ``values``; NaN where a value is not > 0."""
    values = np.asarray(values, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, 10.0 * np.log10(np.where(values > 0, values, 1.0)), np.nan)


def spans_decades(values, ratio: float = 100.0) -> bool:
    """True when every finite value is positive and the largest is over ``ratio`` times
    the smallest (joules from an analog round at 0 dBm to a digital one's): such an axis
    is drawn on a log scale. Never for an axis that starts at 0 (rounds)."""
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values)]
    return bool(values.size) and values.min() > 0 and values.max() > ratio * values.min()


LEGEND_ROW_IN = 0.12
"""The height of one row of a legend (6.5 pt text, 0.3 em apart), inches."""
LEGEND_FREE_ROWS = 2
"""Rows a legend below the panel takes from the panel's height; each further row makes
the figure taller by :data:`LEGEND_ROW_IN` (the panel keeps its size)."""


def legend_outside(fig: Figure, handles: list) -> None:
    """One legend below the panels, in as many columns as the figure's width holds for
    its longest label (a label longer than a line wrapped); the figure grows by the rows
    beyond :data:`LEGEND_FREE_ROWS`, so that no panel shrinks away however many runs it
    shows."""
    if not handles:
        return
    width_chars = int(fig.get_figwidth() * 72 / 3.4)  # 6.5 pt serif: about 3.4 pt a character
    for handle in handles:
        if len(handle.get_label()) > width_chars - 6:
            handle.set_label(textwrap.fill(handle.get_label(), width_chars - 6))
    labels = [h.get_label().split("\n") for h in handles]
    longest = max(len(line) for label in labels for line in label)
    ncols = max(1, min(len(handles), width_chars // (longest + 6)))
    rows = math.ceil(len(handles) / ncols) * max(len(label) for label in labels)
    extra = max(0, rows - LEGEND_FREE_ROWS) * LEGEND_ROW_IN
    if extra:
        fig.set_figheight(fig.get_figheight() + extra)
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols)


def legend_below(fig: Figure, handles: list, ncols: int | None = None) -> None:
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
