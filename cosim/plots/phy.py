"""The PHY figures: local update distortion by distance, transmit power per device, CSI
error and the cell map (``docs/figures.md``). No TensorFlow.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence

import numpy as np

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib

matplotlib.use("Agg")
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, Patch
from matplotlib.ticker import MaxNLocator

from cosim.plots.device_bins import (
    MAX_DEVICE_MARKS,
    DeviceBins,
    binned,
    device_bins,
    draw_bins,
    draw_map_bins,
    map_caption,
)
from cosim.plots.style import (
    COLORBAR_IN,
    LINESTYLES,
    MARKERS,
    PHASE_ORDER,
    RING_COLORS,
    RINGS,
    FigureOptions,
    Skipped,
    _cell_radius_m,
    _count_axis,
    _db,
    _has_uplink,
    _integer_x,
    _legend_rows,
    _phase_label,
    _phases,
    _scenario_value,
    _trace_style,
    accuracy_x,
    legend_below,
    legend_outside,
    panel_figure,
    style,
)
from cosim.trace import TraceData
from phy.parameters import CHANNEL_MODELS  # pydantic only


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
        if members.any():  # over the ring's devices that sent (NaN: did not send)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a round none of them sent
                out[ring] = np.nanmean(values[:, members], axis=1)
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
        fig, axes = panel_figure(options, 1, len(phases))
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
                 options: FigureOptions = FigureOptions(), *,
                 max_device_marks: int = MAX_DEVICE_MARKS) -> Figure:
    """Per device against its distance to the BS (m; the device index when a trace has no
    ``/devices/distance_m``): the mean transmit power in dBm (``tx_power_w_<phase>``,
    mean over the phase's OFDM symbols, then over rounds; the bar spans the rounds' range;
    the scenario's budget ``power.tx_power_dbm`` dashed) and the attenuated share of its
    values in % (``clipped_fraction_<phase>``, mean and range over rounds). One row per
    phase, one column per quantity some trace holds, one colour and marker per trace.
    A trace of more than ``max_device_marks`` devices is drawn in bins of its devices by
    distance (:mod:`cosim.plots.device_bins`): per bin the median of the devices' means
    over rounds and their 10-90 % band, its legend label saying "K devices in B bins of
    ~K/B".

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
    bins = {i: b for i, t in enumerate(traces)
            if (b := _trace_bins(t, max_device_marks)) is not None}
    with style():
        fig, axes = panel_figure(options, len(phases), len(quantities), sharex=True)
        any_distance = False
        budgets: dict[float, list[int]] = {}
        for i, trace in enumerate(traces):
            budget = _scenario_value(trace, "power", "tx_power_dbm")
            if budget is not None and any(f"tx_power_w_{p}" in trace.per_device for p in phases):
                budgets.setdefault(budget, []).append(i)
        for row, phase in zip(axes, phases):
            for ax, quantity in zip(row, quantities):
                for i, trace in enumerate(traces):
                    any_distance |= _device_marks(ax, trace, i, quantity, phase, bins.get(i))
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
        handles = _power_legend(labels, budgets, bins)
        if bins:  # the long "K devices in B bins" labels: as many columns as fit, wrapped
            legend_outside(fig, handles)
        else:
            legend_below(fig, handles, ncols=min(len(handles), 3))
    return fig


def _trace_bins(trace: TraceData, max_device_marks: int) -> DeviceBins | None:
    """The bins of a trace's devices by distance (else index) when it has more than
    ``max_device_marks`` devices (:func:`cosim.plots.device_bins.binned`), else None."""
    width = max((v.shape[1] for v in trace.per_device.values() if v.ndim == 2), default=0)
    if not binned(width, max_device_marks):
        return None
    distance = trace.devices.get("distance_m")
    return device_bins(distance if distance is not None else np.arange(width))


def _device_marks(ax, trace: TraceData, i: int, quantity: str, phase: str,
                  bins: DeviceBins | None = None) -> bool:
    """Trace ``i``'s marks of :func:`power_figure` on ``ax``: per device the mean over
    rounds of ``quantity`` in ``phase`` and the range over rounds as a bar (with ``bins``:
    the bins' medians of those means and their band, :func:`draw_bins`); whether the x is
    the distance (else the device index). Nothing when the trace lacks the column."""
    values = trace.per_device.get(f"{quantity}{phase}")
    if values is None:
        return False
    distance = trace.devices.get("distance_m")
    where = distance if distance is not None else np.arange(values.shape[1])
    if bins is not None:  # the bins' medians of the devices' means over rounds
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            mean = np.nanmean(values, axis=0)
        mean = _db(mean / 1e-3) if quantity == "tx_power_w_" else 100.0 * mean
        draw_bins(ax, bins, mean, _trace_style(i), hollow=bool(i % 2))
        return distance is not None
    per_round = _db(values / 1e-3) if quantity == "tx_power_w_" else 100.0 * values
    # NaN: a round the device did not send in ([participation]); a device that never sent
    # has no mark
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        mean = (_db(np.nanmean(values, axis=0) / 1e-3) if quantity == "tx_power_w_"
                else np.nanmean(per_round, axis=0))
        low = np.nanmin(np.where(np.isfinite(per_round), per_round, np.nan), axis=0)
        high = np.nanmax(np.where(np.isfinite(per_round), per_round, np.nan), axis=0)
    style_i = _trace_style(i)
    _range_bars(ax, where, low, high, color=style_i["color"], lw=0.6, alpha=0.7)
    ax.plot(where, mean, ls="none", mfc="none" if i % 2 else style_i["color"], mew=0.8, **style_i)
    return distance is not None


def _range_bars(ax, x: np.ndarray, low: np.ndarray, high: np.ndarray, **line) -> None:
    """What ``ax.vlines(x, low, high, **line)`` draws (a bar per entry; none where any of
    the three is not finite; the data limits widened to the bars), built from a plain
    [N, 2, 2] array: vlines makes a masked array per bar, seconds for 100,000 devices."""
    x, low, high = (np.asarray(v, np.float64).ravel() for v in (x, low, high))
    segments = np.empty((x.size, 2, 2))
    segments[:, :, 0] = x[:, None]
    segments[:, 0, 1], segments[:, 1, 1] = low, high
    segments[~(np.isfinite(x) & np.isfinite(low) & np.isfinite(high))] = np.nan
    bars = LineCollection(segments, **line)
    ax.add_collection(bars, autolim=False)
    if segments.size and np.isfinite(segments).any():
        limits = bars.get_datalim(ax.transData)
        ax.update_datalim([(np.nanmin(limits.xmin), np.nanmin(limits.ymin)),
                           (np.nanmax(limits.xmax), np.nanmax(limits.ymax))])
        ax.autoscale_view()


def _power_legend(labels: Sequence[str], budgets: dict[float, list[int]],
                  bins: dict[int, DeviceBins] | None = None) -> list[Line2D]:
    """:func:`power_figure`'s legend: a marker per trace (a line through it, and "K
    devices in B bins of ~K/B", for a trace drawn in ``bins``), a dashed line per budget
    (grey when there is one, else its first trace's colour), the range bar when a trace
    has per-device marks, the band when one is drawn in bins."""
    bins = bins or {}
    handles = []
    for i, label in enumerate(labels):
        line = (dict(ls="-", lw=0.8, label=f"{label}: median of {bins[i].caption}") if i in bins
                else dict(ls="none", label=label))
        handles.append(Line2D([], [], mfc="none" if i % 2 else _trace_style(i)["color"], mew=0.8,
                              **line, **_trace_style(i)))
    handles += [Line2D([], [], color="0.3" if len(budgets) == 1 else _trace_style(owners[0])["color"],
                       ls="--", lw=0.8, label=f"budget P = {budget:g} dBm")
                for budget, owners in budgets.items()]
    if len(bins) < len(labels):
        handles.append(Line2D([], [], color="0.3", ls="none", marker="|", ms=8, mew=0.6,
                              label="range over rounds"))
    if bins:
        handles.append(Patch(color="0.3", alpha=0.2, lw=0,
                             label="band: 10-90 % of a bin's devices (mean over rounds)"))
    return handles


def csi_figure(traces: Sequence[TraceData], labels: Sequence[str],
               options: FigureOptions = FigureOptions(), *,
               max_device_marks: int = MAX_DEVICE_MARKS) -> Figure:
    """Realised CSI NMSE ``||ĥ_k − h_k||² / ||h_k||²`` (``/rounds/per_device/csi_nmse``) in
    dB: left, the median over devices per round with the 5-95 % band over devices; right,
    each device's mean over rounds against its distance to the BS (m); of a trace of more
    than ``max_device_marks`` devices, the median of those means in bins of its devices
    by distance with their 10-90 % band (:mod:`cosim.plots.device_bins`), said in a
    legend on the right ("K devices in B bins of ~K/B"). Traces whose NMSE is 0
    everywhere (perfect CSI) are left out.

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
        fig, axes = panel_figure(options, 1, 2)
        per_round, per_device = axes[0]
        any_distance = False
        binned_handles = []
        for i, trace, label in have:
            nmse = trace.per_device["csi_nmse"]
            rounds = trace.rounds["round"]
            style_i = _trace_style(i)
            per_round.plot(rounds, _db(np.nanmedian(nmse, axis=1)), label=label, **style_i)
            per_round.fill_between(rounds, _db(np.nanpercentile(nmse, 5, axis=1)),
                                   _db(np.nanpercentile(nmse, 95, axis=1)),
                                   color=style_i["color"], alpha=0.15, lw=0)
            any_distance |= "distance_m" in trace.devices
            binned_handles += _csi_per_device(per_device, trace, i, label, max_device_marks)
        per_round.set_xlabel("round")
        _integer_x(per_round)
        per_round.set_ylabel("CSI NMSE (dB), median over devices")
        per_device.set_xlabel("distance to the BS (m)" if any_distance else "device")
        per_device.set_ylabel("CSI NMSE (dB), mean over rounds")
        per_round.legend(loc="best", title="band: 5-95 % of devices")
        if binned_handles:
            band = Patch(color="0.3", alpha=0.2, lw=0, label="band: 10-90 % of a bin's devices")
            per_device.legend(handles=[*binned_handles, band], loc="best")
    return fig


def _csi_per_device(ax, trace: TraceData, i: int, label: str, max_device_marks: int) -> list[Line2D]:
    """Trace ``i``'s right panel of :func:`csi_figure` on ``ax``: each device's mean NMSE
    over rounds (dB) against its distance (else its index), or above ``max_device_marks``
    devices the bins' medians and band; the legend handle of a binned trace (else none)."""
    nmse = trace.per_device["csi_nmse"]
    distance = trace.devices.get("distance_m")
    where = distance if distance is not None else np.arange(nmse.shape[1])
    mean_db = _db(np.nanmean(nmse, axis=0))
    style_i = _trace_style(i)
    if not binned(nmse.shape[1], max_device_marks):
        ax.plot(where, mean_db, ls="none", label=label, **style_i)
        return []
    bins = device_bins(where)
    draw_bins(ax, bins, mean_db, style_i)
    return [Line2D([], [], lw=0.8, label=f"{label}: median of {bins.caption}", **style_i)]


def cell_map_figure(traces: Sequence[TraceData], labels: Sequence[str],
                    options: FigureOptions = FigureOptions(), *,
                    max_device_marks: int = MAX_DEVICE_MARKS) -> Figure:
    """The device drop of each trace (``/devices/position_m``, m; BS at the origin, the
    cell edge ``cell.radius_m`` dashed), one square panel per trace; row 1 coloured by
    path gain (``/devices/path_gain`` in dB), row 2 by each device's mean local update
    distortion (value², summed over phases, mean over rounds; log colour scale; devices
    never attenuated hollow). A row no trace has data for is left out; each row has one
    colour scale for all its panels. A trace in a ray-traced scene is drawn in the
    scene's coordinates, the BS at ``channel.bs_position_m``, over the scene's buildings
    seen from above (grey; the scene loaded, no path traced; devices only, with one line
    on standard error, where the scene cannot be loaded: :func:`_scene_footprints`).
    A trace of more than ``max_device_marks`` devices is drawn in hexagons, each
    coloured by the median of its devices (:func:`cosim.plots.device_bins.draw_map_bins`;
    the title says "K devices in B hexagons of ~K/B (median)").

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
    footprints = _scene_footprints(t for t, _ in have)
    with style():
        fig, axes = panel_figure(options, len(rows), n, square=True, extra_width_in=COLORBAR_IN)
        for r, (quantity, values_of) in enumerate(rows):
            values = [values_of(t) for t, _ in have]
            log = "distortion" in quantity
            norm = _row_norm(values, log)
            cmap = "viridis" if not log else "plasma"
            mappable = None
            for ax, (trace, label), v in zip(axes[r], have, values):
                _map_panel(ax, trace, footprints)
                position = trace.devices["position_m"]
                many = binned(len(position), max_device_marks)
                mappable = _device_dots(ax, position, v, log, cmap, norm, many) or mappable
                if r == 0:
                    ax.set_title(f"{label}\n{map_caption(ax, len(position))}" if many else label)
                if ax is axes[r][0]:
                    ax.set_ylabel("y (m)")
                if r == len(rows) - 1:
                    ax.set_xlabel("x (m)")
            bar = fig.colorbar(mappable or ScalarMappable(Normalize(0.0, 1.0), cmap), ax=list(axes[r]),
                               label=quantity, shrink=0.9, pad=0.02, aspect=25)
            bar.ax.set_visible(mappable is not None)  # a row without values keeps the rows' widths
        _map_legend(fig)
    return fig


def _row_norm(values: Sequence[np.ndarray | None], log: bool) -> LogNorm | Normalize | None:
    """The colour scale of a map row over its panels' finite ``values`` (positive ones on
    a ``log`` scale), widened when they are all one value; None without any."""
    finite = np.concatenate([v[np.isfinite(v) & ((v > 0) if log else True)]
                             for v in values if v is not None] or [np.zeros(0)])
    if not finite.size:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    if hi <= lo:
        lo, hi = (lo / 2, hi * 2) if log else (lo - 1.0, hi + 1.0)
    return LogNorm(lo, hi) if log else Normalize(lo, hi)


def _map_legend(fig: Figure) -> None:
    """One legend below the map panels of what their artists are labelled (the buildings,
    devices without a value), each label once; none when nothing is labelled."""
    handles: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    legend_below(fig, list(handles.values()))


def _device_dots(ax, position: np.ndarray, values: np.ndarray | None, log: bool, cmap: str,
                 norm, many: bool = False):
    """One panel's devices of :func:`cell_map_figure` at ``position`` [K, 2] (m): coloured
    by ``values`` [K] under ``norm``, hollow where a device has no (positive, on a log
    scale) value, all hollow with a note when the trace lacks the quantity (``many``: in
    hexagons, :func:`draw_map_bins`); the coloured artist (for the colour bar), or None."""
    if many:
        shown = np.zeros(len(position), bool) if values is None else (
            np.isfinite(values) & (values > 0) if log else np.isfinite(values))
        coloured = draw_map_bins(ax, position, values, shown, cmap, norm, None if values is None
                                 else "never attenuated" if log else "no value")
        if values is None:
            ax.text(0.5, 0.02, "(not in this trace)", transform=ax.transAxes, ha="center",
                    va="bottom", fontsize=6)
        return coloured
    if values is None:
        ax.scatter(position[:, 0], position[:, 1], s=14, facecolors="none", edgecolors="0.4", lw=0.6)
        ax.text(0.5, 0.02, "(not in this trace)", transform=ax.transAxes, ha="center",
                va="bottom", fontsize=6)
        return None
    positive = np.isfinite(values) & (values > 0) if log else np.isfinite(values)
    if (~positive).any():
        ax.scatter(position[~positive, 0], position[~positive, 1], s=14, facecolors="none",
                   edgecolors="0.35", lw=0.6, label="never attenuated" if log else "no value")
    if positive.any() and norm is not None:
        return ax.scatter(position[positive, 0], position[positive, 1], c=values[positive], s=14,
                          cmap=cmap, norm=norm, edgecolors="black", linewidths=0.3, zorder=3)
    return None


def _device_distortion(trace: TraceData) -> np.ndarray | None:
    """[K] mean over rounds of the device's local distortion summed over phases; None
    without any ``local_distortion_<phase>``."""
    phases = _phases(trace.per_device, "local_distortion_")
    if not phases:
        return None
    return np.sum([np.mean(trace.per_device[f"local_distortion_{p}"], axis=0) for p in phases], axis=0)


def _scene_channel(trace: TraceData) -> dict:
    """The ``[channel]`` table of a trace whose devices stand in a traced scene (its
    registry entry says: scene coordinates), else ``{}``."""
    channel = trace.scenario.get("channel")
    channel = channel if isinstance(channel, dict) else {}
    model = CHANNEL_MODELS.get(channel.get("model"))
    return channel if model is not None and model.parameters.scene_coordinates else {}


def _bs_xy_m(trace: TraceData) -> tuple[float, float]:
    """The BS's x, y [m]: ``channel.bs_position_m`` of a ray-traced scenario (the devices'
    positions are scene coordinates), else the origin."""
    position = _scene_channel(trace).get("bs_position_m")
    if (not isinstance(position, list) or len(position) != 3
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in position)):
        return 0.0, 0.0
    return float(position[0]), float(position[1])


def _scene_of(trace: TraceData) -> str | None:
    """``channel.scene`` of a trace whose devices stand in a traced scene, else None."""
    scene = _scene_channel(trace).get("scene")
    return scene if isinstance(scene, str) else None


def _scene_footprints(traces) -> dict[str, np.ndarray | None]:
    """``{channel.scene: [T, 3, 2] triangles seen from above}`` of the traces in a traced
    scene (:func:`phy.ray_tracing.scene_footprints`: the scene loaded, nothing traced),
    None for a scene that cannot be loaded here (no Sionna RT, no LLVM, the file
    elsewhere): its panels show the devices only, said in one line on standard error."""
    out: dict[str, np.ndarray | None] = {}
    for scene in filter(None, map(_scene_of, traces)):
        if scene in out:
            continue
        from phy.ray_tracing import scene_footprints  # Sionna RT imported only here, on need

        try:
            out[scene] = scene_footprints(scene)
        except ValueError as error:
            out[scene] = None
            print(f"cell_map: devices only, no buildings drawn: {error}", file=sys.stderr, flush=True)
    return out


def _draw_footprints(ax, triangles: np.ndarray) -> None:
    """The buildings from above: the ``triangles`` [T, 3, 2] (m) inside the panel's
    limits, filled grey, below the devices."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    xs, ys = triangles[..., 0], triangles[..., 1]
    inside = ((xs.max(axis=1) >= x0) & (xs.min(axis=1) <= x1)
              & (ys.max(axis=1) >= y0) & (ys.min(axis=1) <= y1))
    ax.add_collection(PolyCollection(triangles[inside], facecolors="0.78", edgecolors="0.78",
                                     linewidths=0.2, zorder=1, label="buildings (from above)"),
                      autolim=False)


def _map_panel(ax, trace: TraceData, footprints: dict[str, np.ndarray | None] | None = None) -> None:
    """BS marker, cell edge, equal axes and limits of one map panel; in a traced scene
    the buildings from above (``footprints``: :func:`_scene_footprints`)."""
    position = trace.devices["position_m"]
    x, y = _bs_xy_m(trace)
    radius = _cell_radius_m(trace) or float(np.max(np.hypot(position[:, 0] - x, position[:, 1] - y)))
    ax.add_patch(Circle((x, y), radius, fill=False, ls="--", lw=0.6, color="0.5"))
    ax.plot([x], [y], marker="^", color="black", ms=6, ls="none", zorder=4)
    ax.annotate("BS", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=6, zorder=5,
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.7))
    limit = 1.06 * radius
    ax.set_xlim(x - limit, x + limit)
    ax.set_ylim(y - limit, y + limit)
    ax.set_aspect("equal")
    ax.grid(False)
    centred = (x, y) == (0.0, 0.0)  # symmetric ticks about the BS at the origin
    ax.xaxis.set_major_locator(MaxNLocator(5, integer=True, symmetric=centred))
    ax.yaxis.set_major_locator(MaxNLocator(5, integer=True, symmetric=centred))
    triangles = (footprints or {}).get(_scene_of(trace))
    if triangles is not None:
        _draw_footprints(ax, triangles)
