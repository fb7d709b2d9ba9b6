"""Per-device figures of many devices: above the threshold `power_per_device` and
`csi_nmse` draw B bins by distance (median and 10-90 % band), not a mark per device,
and `cell_map` draws hexagons, not a dot per device; at or below it they draw a mark
(and a bar) per device as before."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection, PolyCollection

from cosim.plots.device_bins import (
    DEVICE_BINS,
    HEXAGONS_GID,
    MAX_DEVICE_MARKS,
    bin_stats,
    binned,
    device_bins,
)
from cosim.plots.phy import cell_map_figure, csi_figure, power_figure
from cosim.trace import TraceWriter, read_trace

K = 300
"""Devices of the test trace: above the threshold the tests pass (100), below the default."""
SCENARIO = 'name = "w"\nseed = 1\nrounds = 3\n\n[cell]\nradius_m = 100.0\n\n[power]\ntx_power_dbm = 20.0\n'


def _wide_trace(path, k: int = K, rounds: int = 3):
    """A trace of ``k`` devices at distinct distances 1..100 m (shuffled), each sending in
    every other round, with per-device transmit power, attenuated fraction and CSI NMSE."""
    rng = np.random.default_rng(5)
    distance = rng.permutation(np.linspace(1.0, 100.0, k))
    devices = {"distance_m": distance, "position_m": np.stack([distance, np.zeros(k)], 1),
               "path_gain": distance ** -4.0, "num_samples": np.full(k, 10)}
    with TraceWriter.create(path, SCENARIO, seed=1, name="w", devices=devices) as writer:
        for t in range(rounds):
            writer.append_round({"uplink_symbols": 22.0, "downlink_symbols": 300.0,
                                 "cumulative_channel_uses": 322.0 * (t + 1), "test_accuracy": 0.5,
                                 "ece": 0.05})
            sent = (np.arange(k) + t) % 2 == 0
            for phase in ("rho", "nu"):
                power = 0.1 * (distance / 100.0) ** 2 * (1.0 + 0.1 * t)
                writer.append_per_device(f"tx_power_w_{phase}", np.where(sent, power, np.nan))
                writer.append_per_device(f"clipped_fraction_{phase}",
                                         np.where(sent, np.where(distance > 70.0, 0.2, 0.0), np.nan))
            writer.append_per_device("csi_nmse", 0.1 + 0.001 * distance)
            writer.append_per_device("local_distortion_rho", np.where(distance > 50.0, distance, 0.0))
            writer.commit()
    return read_trace(path)


def _marks(ax) -> tuple[int, int]:
    """(points drawn with a marker, bar segments) on ``ax``."""
    points = sum(len(line.get_xdata()) for line in ax.get_lines() if line.get_marker() not in ("", "None", None))
    bars = sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection))
    return points, bars


def test_device_bins_split_the_devices_by_x_into_equal_counts():
    rng = np.random.default_rng(0)
    x = rng.permutation(1003).astype(float)
    x[7] = np.nan  # left out
    bins = device_bins(x)
    assert len(bins.members) == DEVICE_BINS == 50
    assert {m.size for m in bins.members} == {20, 21}  # 1,002 devices with a finite x
    joined = np.concatenate(bins.members)
    assert sorted(joined) == sorted(set(range(1003)) - {7})
    assert np.all(np.diff(x[joined]) > 0)  # in increasing x
    np.testing.assert_array_equal(bins.x, [np.median(x[m]) for m in bins.members])
    assert bins.devices == 1002
    assert bins.caption == "1,002 devices in 50 bins of ~20"
    assert len(device_bins(np.arange(7.0)).members) == 7  # fewer devices than bins: one each
    assert device_bins(np.array([np.nan])).caption == "0 devices in 0 bins of ~0"


def test_bin_stats_are_the_median_and_10_90_percentiles_of_finite_values():
    x = np.arange(100.0)
    values = x.copy()
    values[:10] = np.nan  # the first bin (devices 0-9) has no value
    values[10] = np.inf
    bins = device_bins(x, bins=10)
    median, low, high = bin_stats(bins, values)
    assert np.isnan([median[0], low[0], high[0]]).all()
    np.testing.assert_allclose(median[1], np.median(np.arange(11.0, 20.0)))
    np.testing.assert_allclose([low[9], median[9], high[9]],
                               np.percentile(np.arange(90.0, 100.0), [10, 50, 90]))


def test_the_threshold_is_more_than_max_marks_and_is_checked():
    assert MAX_DEVICE_MARKS == 2_000
    assert not binned(2_000) and binned(2_001)
    assert binned(101, 100) and not binned(100, 100)
    for bad in (0, -1, 2.5, True, "100"):
        with pytest.raises(ValueError, match=rf"max_device_marks must be an integer >= 1, got {bad!r}"):
            binned(10, bad)


def test_power_figure_above_the_threshold_draws_bins_not_devices(tmp_path):
    trace = _wide_trace(tmp_path / "w.h5")
    fig = power_figure([trace], ["wide"], max_device_marks=100)
    panels = [ax for ax in fig.axes if ax.get_ylabel()]
    assert len(panels) == 4  # two phases x (power, attenuated share)
    for ax in panels:
        assert _marks(ax) == (DEVICE_BINS, 0)  # 50 medians, no per-device bar
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == 1
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "wide: median of 300 devices in 50 bins of ~6" in " ".join(legend).replace("\n", " ")
    assert not any("range over rounds" in text for text in legend)
    # the bins' medians of the devices' mean power over rounds, in dBm
    distance = trace.devices["distance_m"]
    mean_dbm = 10 * np.log10(np.nanmean(trace.per_device["tx_power_w_rho"], axis=0) / 1e-3)
    bins = device_bins(distance)
    power = next(ax for ax in panels if ax.get_ylabel().startswith("transmit power (dBm), phase $\\rho$"))
    median = next(line for line in power.get_lines() if len(line.get_xdata()) == DEVICE_BINS)
    np.testing.assert_allclose(median.get_xdata(), bins.x)
    np.testing.assert_allclose(median.get_ydata(), [np.median(mean_dbm[m]) for m in bins.members])


def test_power_figure_at_or_below_the_threshold_draws_every_device(tmp_path):
    trace = _wide_trace(tmp_path / "w.h5")
    for fig in (power_figure([trace], ["wide"]), power_figure([trace], ["wide"], max_device_marks=K)):
        for ax in (ax for ax in fig.axes if ax.get_ylabel()):
            assert _marks(ax) == (K, K)  # a mark and a range bar per device
            assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend == ["wide", "budget P = 20 dBm", "range over rounds"]


def test_csi_figure_bins_its_per_device_panel_only_above_the_threshold(tmp_path):
    trace = _wide_trace(tmp_path / "w.h5")
    per_round, per_device = csi_figure([trace], ["wide"], max_device_marks=100).axes
    assert _marks(per_device) == (DEVICE_BINS, 0)
    assert [t.get_text() for t in per_device.get_legend().get_texts()] == [
        "wide: median of 300 devices in 50 bins of ~6", "band: 10-90 % of a bin's devices"]
    assert _marks(per_round) == (3, 0)  # the median over devices per round, as before
    _, per_device = csi_figure([trace], ["wide"]).axes
    assert _marks(per_device) == (K, 0)
    assert per_device.get_legend() is None


def test_cell_map_above_the_threshold_draws_hexagons_not_devices(tmp_path):
    trace = _wide_trace(tmp_path / "w.h5")
    fig = cell_map_figure([trace], ["wide"], max_device_marks=100)
    gains, distortion = (ax for ax in fig.axes if ax.get_xlim()[0] < 0)  # the two map panels
    for ax in (gains, distortion):
        assert not [c for c in ax.collections if isinstance(c, PathCollection)]  # no dots
        hexagons = [c for c in ax.collections if c.get_gid() == HEXAGONS_GID]
        assert 0 < sum(len(c.get_offsets()) for c in hexagons) < K
    # the devices stand on a line (y = 0): every hexagon of the gains row is coloured,
    # by the median path gain (dB) of its devices
    (coloured,) = [c for c in gains.collections if c.get_gid() == HEXAGONS_GID]
    gain_db = 10 * np.log10(trace.devices["path_gain"])
    assert gain_db.min() <= coloured.get_array().min() <= coloured.get_array().max() <= gain_db.max()
    cells = len(coloured.get_offsets())
    assert gains.get_title() == f"wide\n{K} devices in {cells} hexagons of ~{round(K / cells)} (median)"
    # never attenuated (distortion 0 within 50 m): hollow hexagons, named in the legend
    hollow, _ = [c for c in distortion.collections if c.get_gid() == HEXAGONS_GID]
    assert hollow.get_array() is None and len(hollow.get_facecolor()) in (0, 1)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["never attenuated"]
    below = cell_map_figure([trace], ["wide"])  # K below the default threshold: a dot each
    gains = next(ax for ax in below.axes if ax.get_xlim()[0] < 0)
    assert not [c for c in gains.collections if c.get_gid() == HEXAGONS_GID]
    assert sum(len(c.get_offsets()) for c in gains.collections if isinstance(c, PathCollection)) == K
    assert gains.get_title() == "wide"
