"""Publication figures from one or more HDF5 traces (matplotlib, Agg; no TensorFlow).

``plot_traces(paths, out_dir, x=..., formats=..., dpi=..., size_in=...)`` writes every
figure below as ``STEM.FORMAT`` for each requested format (:data:`FORMATS`: PNG at
``dpi`` dots per inch; PDF and SVG are vector files: PDF embeds its TrueType fonts, SVG
draws text as paths, and neither carries a date, so equal figures give equal files).
Every figure holds every trace that has its data (one colour and marker per trace, the
same in every figure; the labels are the values of the scenario keys in which the
traces differ, or of one trace its algorithm's display name:
:func:`cosim.plots.style.trace_labels`; of several traces the legend sits below the
panel, :func:`cosim.plots.style.legend_outside`; an axis spanning over two decades is
logarithmic unless ``log_x`` / ``log_y`` say otherwise). Rounds are numbered from 0, as ``/rounds/round`` and
``cosim inspect`` number them, and round and symbol axes carry integer ticks only.

Figures (file stems):

- ``accuracy_vs_<axis>`` and ``nll_vs_<axis>``: test accuracy and test NLL
  (nats/sample) of every evaluated round against each requested x-axis
  (:data:`ACCURACY_AXES`):

  * ``"uplink"`` (default, :data:`DEFAULT_ACCURACY_AXIS`) -> ``*_vs_uplink_symbols``:
    cumulative uplink OFDM symbols (``cumulative_uplink_symbols``; for traces written
    before that column, the running sum of ``uplink_symbols``), what an AirComp method
    changes;
  * ``"total"`` -> ``*_vs_channel_uses``: cumulative channel uses, uplink +
    downlink OFDM symbols. The paper's Sec. VI-B plots "test accuracy ... as a
    function of the number of channel uses for downlink multicast and uplink local
    update aggregation" (Fig. "Comparison of wireless FL methods"). With the default
    digital downlink this axis is > 99.9 % downlink (``docs/trace.md``), so uplink
    variants are compared better with ``"uplink"``;
  * ``"uplink_seconds"`` -> ``*_vs_uplink_seconds``: cumulative uplink air time in
    seconds (``cumulative_uplink_seconds``, else the running sum of ``uplink_seconds``),
    which puts schemes of different symbol counts and numerologies on one time axis;
  * ``"uplink_energy"`` -> ``*_vs_uplink_energy``: cumulative transmit energy of the
    devices in joules (``cumulative_uplink_energy_j``, else the running sum of
    ``uplink_energy_j``);
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
  as a bar, one row per phase; a trace of more than 2,000 devices in 50 bins by
  distance, the bins' medians and 10-90 % bands (:mod:`cosim.plots.device_bins`);
- ``csi_nmse``: realised CSI NMSE (dB): median over devices per round with the
  5-95 % band over devices, and per device (mean over rounds) against distance (in
  bins above 2,000 devices, as ``power_per_device``); traces with perfect CSI (NMSE 0)
  are left out;
- ``cell_map``: the device drop (BS at the origin, or where ``channel.bs_position_m`` puts it in a
  ray-traced scene; the cell edge dashed), one panel
  per trace, coloured by path gain (dB) and, in a second row, by the device's mean
  local update distortion (summed over phases; devices never attenuated hollow); a
  trace of more than 2,000 devices in hexagons, each the median of its devices.

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

The module is split by concern: the style, options, labels and axes in
:mod:`cosim.plots.style`, the learning figures in :mod:`cosim.plots.learning`, the PHY
figures in :mod:`cosim.plots.phy` (the bins of many devices in
:mod:`cosim.plots.device_bins`); this module draws them all and saves them, and
re-exports the figure functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from cosim.atomic_write import OutputError, check_output_path, new_file_mode
from cosim.plots.learning import (
    metric_figure,
    posterior_figure,
    reliability_figure,
    reliability_panel,
)
from cosim.plots.phy import (
    cell_map_figure,
    csi_figure,
    distortion_figure,
    power_figure,
    ring_distortion,
)
from cosim.plots.style import (
    ACCURACY_AXES,
    DEFAULT_ACCURACY_AXIS,
    DEFAULT_DPI,
    DEFAULT_FORMATS,
    DEFAULT_PANEL_SIZE_IN,
    FORMATS,
    MAX_DPI,
    MAX_PANEL_IN,
    RING_COLORS,
    RINGS,
    RUNNING_TOTAL_AXES,
    STYLE,
    FigureOptions,
    PlotError,
    Skipped,
    _axes_list,
    _evaluated,
    accuracy_x,
    has_axis,
    style,
    trace_labels,
)

__all__ = [
    "ACCURACY_AXES",
    "DEFAULT_ACCURACY_AXIS",
    "DEFAULT_DPI",
    "DEFAULT_FORMATS",
    "DEFAULT_PANEL_SIZE_IN",
    "FORMATS",
    "MAX_DPI",
    "MAX_PANEL_IN",
    "RINGS",
    "RING_COLORS",
    "STYLE",
    "FigureOptions",
    "PlotError",
    "Skipped",
    "accuracy_x",
    "cell_map_figure",
    "csi_figure",
    "distortion_figure",
    "figures",
    "fold_offsets_into_labels",
    "metric_figure",
    "plot_traces",
    "posterior_figure",
    "power_figure",
    "reliability_figure",
    "reliability_panel",
    "ring_distortion",
    "save_figure",
    "style",
    "trace_labels",
]
from cosim.printable import printable
from cosim.trace import TraceData, read_trace
from cosim.trace.read import quiet_numerics

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


@quiet_numerics()  # values near the float limits: drawn as stored, no warning on the terminal
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
    log_x: bool | None = None,
    log_y: bool | None = None,
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
        Accuracy / NLL x-axes (``"total"``, ``"uplink"``, ``"uplink_seconds"``,
        ``"uplink_energy"``, ``"rounds"``: :data:`ACCURACY_AXES`), one pair of figures each.
    formats : iterable of str
        Subset of :data:`FORMATS`.
    dpi : float
        PNG resolution, dots per inch.
    size_in : (float, float)
        (width, height) of one panel, inches (:class:`FigureOptions`).
    note : callable, optional
        Receives one line per figure skipped for want of data.
    log_x, log_y : bool or None
        The accuracy, NLL and ECE figures' scales (:class:`FigureOptions`): True log,
        False linear, None log where the data span over two decades.

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
    options = FigureOptions(tuple(formats), dpi, tuple(size_in), log_x, log_y)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PlotError(f"cannot write figures to {out_dir}: it is not a directory")
    traces = [read_trace(p) for p in paths]
    for trace in traces:
        _check_plottable(trace, axes)
    # labels are text, never matplotlib math: a "$" is drawn as a dollar sign, a control
    # character as its escape (\x1b, as the command line shows it)
    names = [printable(str(n), keep="\n").replace("$", r"\$")
             for n in (list(labels) if labels else trace_labels(traces))]
    try:
        with tempfile.TemporaryDirectory(prefix="cosim-plot-") as scratch:
            try:
                drawn = _draw(traces, names, Path(scratch), axes, options, note)
            except OSError as exc:
                raise PlotError(f"cannot draw the figures in {scratch} (the temporary "
                                f"directory): {exc.strerror or exc}; nothing was written to "
                                f"{out_dir}") from None
            return _move_into(drawn, out_dir)
    except OSError as exc:  # the temporary directory itself
        raise PlotError(f"cannot make a temporary directory to draw the figures in: "
                        f"{exc.strerror or exc}; nothing was written to {out_dir}") from None


def _check_plottable(trace: TraceData, axes: Sequence[str]) -> None:
    """PlotError naming the trace when it has no round or lacks a column the figures read."""
    if trace.completed_rounds == 0:
        raise PlotError(f"cannot plot {trace.path}: it holds no completed round")
    need = ["round", "test_accuracy", "ece"]
    for axis in axes:  # the per-round column names what an older trace lacks
        if not has_axis(trace, axis):
            need.append("cumulative_channel_uses" if axis == "total" else RUNNING_TOTAL_AXES[axis][1])
    missing = [f"/rounds/{name}" for name in need if name not in trace.rounds]
    if _evaluated(trace).any():
        missing += [f"/rounds/reliability/{name}" for name in ("bin_accuracy", "bin_count")
                    if name not in trace.reliability]
    if missing:
        raise PlotError(f"cannot plot {trace.path}: it has no {', '.join(missing)} column")


def _move_into(drawn: list[Path], out_dir: Path) -> list[Path]:
    """Put the drawn figures into ``out_dir`` (created with its parents), never through a
    planted link, and replace the figures already there only once every new one is whole:
    each is first copied to a fresh file beside its name (so this works when the scratch
    directory is on another file system), all of them flushed to disk, and only then
    renamed onto their names. A failure while copying (a full disk) removes the copies
    and the directories this call created, and leaves every earlier figure as it was."""
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    copies: list[tuple[Path, Path]] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for figure in drawn:
            target = out_dir / figure.name
            try:
                check_output_path(target, inside=out_dir)
            except OutputError as exc:
                raise PlotError(str(exc)) from None
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=out_dir)
            os.close(fd)
            copies.append((Path(name), target))
            shutil.copyfile(figure, name)
            with open(name, "rb+") as written:
                os.fsync(written.fileno())
                os.fchmod(written.fileno(), new_file_mode())  # mkstemp's 0o600: the umask's
    except (OSError, PlotError) as exc:
        for tmp, _ in copies:
            tmp.unlink(missing_ok=True)
        for directory in created:  # deepest first
            try:
                directory.rmdir()
            except OSError:
                break
        if isinstance(exc, PlotError):
            raise
        raise PlotError(f"cannot write figures to {out_dir}: {exc.strerror or exc}; the "
                        "figures already there were left as they were") from None
    moved: list[Path] = []
    for tmp, target in copies:  # renames need no room: each figure old or new, whole
        os.replace(tmp, target)
        moved.append(target)
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
