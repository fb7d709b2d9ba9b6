"""Per-device values of many devices drawn as bins: above :data:`MAX_DEVICE_MARKS`
devices a per-device figure draws, instead of one mark per device, the devices sorted by
their x (distance to the BS, else index) in :data:`DEVICE_BINS` bins of equal count, each
bin as the median of its devices' values (a line with the trace's marker at the bin's
median x) and the 10-90 % range of those values (a band); the cell map draws it in
hexagons, each coloured by the median of its devices (:func:`draw_map_bins`). No
TensorFlow.

Why a fixed number of devices and not the figure's pixels: one figure is saved as PNG,
PDF and SVG alike (vector files have no pixel count), and a trace should give the same
kind of figure whatever ``--dpi`` and ``--size``. 2,000 is about twice the pixel columns
of a default panel (3.5 in at 300 dpi: 1,050 px, the axes about 900 of them), where a
3.5 pt marker is some 15 px wide: above it every pixel column holds two or more devices
and their marks lie tens deep, so single devices no longer read, while every run up to
a few hundred devices (the scenarios' K = 100) keeps its per-device marks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_DEVICE_MARKS = 2_000
"""A trace of more devices than this is drawn in bins in the per-device figures."""
DEVICE_BINS = 50
"""Bins of a binned per-device figure (50 markers across the 3 in of a default panel's
axes: one every 4 pt)."""
BAND_PERCENTILES = (10.0, 90.0)
"""The band of a bin: these percentiles of its devices' values."""


@dataclass(frozen=True)
class DeviceBins:
    """Devices grouped by x into bins of equal count (sizes differ by at most one).

    Attributes
    ----------
    members : tuple of [n_b] int arrays
        The device indices of each bin, in increasing x.
    x : [B] float
        The median x of each bin's devices.
    devices : int
        Devices binned (those with a finite x).
    """

    members: tuple[np.ndarray, ...]
    x: np.ndarray
    devices: int

    @property
    def caption(self) -> str:
        """The figures' legend text: "K devices in B bins of ~K/B"."""
        count = len(self.members)
        size = round(self.devices / count) if count else 0
        return f"{self.devices:,} devices in {count} bins of ~{size:,}"


def binned(devices: int, max_marks: int = MAX_DEVICE_MARKS) -> bool:
    """Whether a trace of ``devices`` devices is drawn in bins: more than ``max_marks``.

    Raises
    ------
    ValueError
        ``max_marks`` not an integer >= 1 (naming it and the value).
    """
    if isinstance(max_marks, bool) or not isinstance(max_marks, int | np.integer) or max_marks < 1:
        raise ValueError(f"max_device_marks must be an integer >= 1, got {max_marks!r}")
    return devices > max_marks


def device_bins(x: np.ndarray, bins: int = DEVICE_BINS) -> DeviceBins:
    """The devices of ``x`` [K] (non-finite x left out) sorted by x (ties in index order)
    and split into ``min(bins, K)`` bins of equal count."""
    x = np.asarray(x, np.float64).ravel()
    keep = np.flatnonzero(np.isfinite(x))
    order = keep[np.argsort(x[keep], kind="stable")]
    members = tuple(np.array_split(order, min(bins, order.size))) if order.size else ()
    centre = np.array([np.median(x[m]) for m in members], np.float64)
    return DeviceBins(members, centre, int(order.size))


def bin_stats(bins: DeviceBins, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, low, high) [B] of ``values`` [K] over each bin's devices with a finite
    value, low and high at :data:`BAND_PERCENTILES`; NaN for a bin without one."""
    values = np.asarray(values, np.float64).ravel()
    out = np.full((3, len(bins.members)), np.nan)
    for b, members in enumerate(bins.members):
        v = values[members]
        v = v[np.isfinite(v)]
        if v.size:
            out[:, b] = np.percentile(v, (50.0, *BAND_PERCENTILES))
    return out[0], out[1], out[2]


def draw_bins(ax, bins: DeviceBins, values: np.ndarray, style_i: dict, hollow: bool = False) -> None:
    """A trace's binned values on ``ax``: the bins' medians as a line with the trace's
    ``style_i`` (colour, marker; ``hollow`` markers), the 10-90 % band filled behind it;
    a bin without a finite value leaves a gap."""
    median, low, high = bin_stats(bins, values)
    color = style_i["color"]
    ax.fill_between(bins.x, low, high, color=color, alpha=0.2, lw=0)
    ax.plot(bins.x, median, lw=0.8, mfc="none" if hollow else color, mew=0.8, **style_i)


MAP_HEXAGONS_ACROSS = 30
"""Hexagons across a binned cell map panel (matplotlib's ``hexbin`` gridsize)."""
HEXAGONS_GID = "device-hexagons"


def draw_map_bins(ax, position: np.ndarray, values: np.ndarray | None, shown: np.ndarray,
                  cmap: str, norm, label: str | None):
    """A cell map panel's devices in hexagons (:data:`MAP_HEXAGONS_ACROSS` across the
    panel's limits, set before): where devices with a value (``shown`` [K] bool) stand,
    a hexagon coloured by the median of their ``values`` [K] under ``norm``; where only
    devices without one stand, a hollow hexagon (legend ``label``); both with the gid
    ``"device-hexagons"`` (:func:`map_caption`). ``position`` [K, 2] (m). Returns the
    coloured hexagons (for the colour bar), or None."""
    x, y = position[:, 0], position[:, 1]
    hexes = dict(gridsize=MAP_HEXAGONS_ACROSS, extent=(*ax.get_xlim(), *ax.get_ylim()), mincnt=1)
    if (~shown).any():
        empty = ax.hexbin(x[~shown], y[~shown], edgecolors="0.35", linewidths=0.4, label=label,
                          gid=HEXAGONS_GID, **hexes)
        empty.set_array(None)  # no colour: an outline only
        empty.set_facecolor("none")
    if not shown.any() or norm is None:
        return None
    return ax.hexbin(x[shown], y[shown], C=values[shown], reduce_C_function=np.median,
                     cmap=cmap, norm=norm, edgecolors="face", linewidths=0.2, zorder=3,
                     gid=HEXAGONS_GID, **hexes)


def map_caption(ax, devices: int) -> str:
    """The title line of a panel drawn with :func:`draw_map_bins`, "K devices in B
    hexagons of ~K/B (median)": B the hexagons holding any of its ``devices`` devices."""
    offsets = [c.get_offsets() for c in ax.collections if c.get_gid() == HEXAGONS_GID]
    cells = len(np.unique(np.round(np.concatenate(offsets or [np.zeros((0, 2))]), 9), axis=0))
    size = round(devices / cells) if cells else 0
    return f"{devices:,} devices in {cells:,} hexagons of ~{size:,} (median)"
