"""Paths traced anew as devices walk (:mod:`phy.retraced_rays`) on the tiny scene of
``tiny_scene.py``: an anchor's paths are traced once and read back from an entry of its
own position, a channel that never reaches an anchor is the local-area one bit for bit, at each
time a device uses the paths traced where it had walked the last multiple of R (its
path gain too), an anchor inside the building is skipped, a phase that passes an anchor
switches paths at that symbol, and a channel resumed at a round traces what the straight
one used. One place is traced per module."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_scene import write_scene

from phy.mobility import StraightMotion
from phy.moving_rays import TracedMovingChannel, TracedPathFading
from phy.parameters import RayTracedChannel
from phy.ray_tracing import RayTracedPlace
from phy.retraced_rays import RetracedMovingChannel

CARRIER_HZ = 3.5e9
F, SPACING_HZ = 16, 240e3
FREQUENCIES = (np.arange(F) - F // 2) * SPACING_HZ
# device 0 walks +x at 4 m/s from x = 12 into the building (x in [20, 30], y in [-5, 5]);
# device 1 walks -y at 10 m/s in the open; device 2 stands still
DEVICES = np.array([[12.0, 0.5], [-30.0, 10.0], [0.0, -20.0]])
SPEEDS = np.array([4.0, 10.0, 0.0])
HEADINGS = np.array([0.0, -np.pi / 2, 0.0])
EVERY_M = 3.0


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> RayTracedPlace:
    folder = tmp_path_factory.mktemp("scene")
    write_scene(folder)
    parameters = RayTracedChannel.check(scene=str(folder / "scene.xml"), bs_position_m=(0.0, 0.0, 10.0),
                                        carrier_frequency_hz=CARRIER_HZ, samples_per_source=20_000,
                                        cache_dir=str(folder / "cache"), variation="static")
    return RayTracedPlace(parameters, 2, log=lambda line: None, arrivals=True)


def _motion() -> StraightMotion:
    return StraightMotion(DEVICES, SPEEDS, HEADINGS, 1000.0, 1.0)


def _retraced(place, every_m: float = EVERY_M) -> RetracedMovingChannel:
    return RetracedMovingChannel(_motion(), place.paths(DEVICES), FREQUENCIES, CARRIER_HZ, F, 0.0,
                                 np.zeros(2), place, every_m)


def _fresh(place, xy) -> TracedPathFading:
    return TracedPathFading(place.paths(np.atleast_2d(xy)), FREQUENCIES, CARRIER_HZ)


def test_each_position_is_traced_once_and_read_back_whoever_it_is_asked_with(place):
    """What a resumed run relies on (:meth:`RayTracedPlace.paths_each`): a position's paths
    come from an entry of its own, so asked with other positions they are the same bit for
    bit and nothing is traced again; only the positions not seen yet are traced."""
    first = place.paths_each(DEVICES)
    traces = place.traces
    for k, xy in enumerate(DEVICES):
        again = place.paths_each(np.array([[1.0, 40.0], xy]))  # a new position beside it
        count = again.a.shape[2]
        np.testing.assert_array_equal(again.a[1], first.a[k, :, :count])
        np.testing.assert_array_equal(again.arrival_xy[1], first.arrival_xy[k, :count])
        assert not np.any(first.a[k, :, count:])
    assert place.traces == traces + 1  # the new position alone, once


def test_a_channel_that_reaches_no_anchor_is_the_local_area_one(place):
    """With R beyond any walk the channel, its gains, the pairs and the aging correlation
    are :class:`TracedMovingChannel`'s bit for bit, and nothing is traced again."""
    retraced = _retraced(place, every_m=1e6)
    local = TracedMovingChannel(_motion(), _fresh(place, DEVICES), F, 0.0, np.zeros(2))
    for channel in (retraced, local):
        channel.start_round(0)
    np.testing.assert_array_equal(retraced.at(0.5)[0], local.at(0.5)[0])
    np.testing.assert_array_equal(retraced.per_symbol(0.1, 1e-3, 3), local.per_symbol(0.1, 1e-3, 3))
    combiner = np.ones((2, F), np.complex64)
    pairs = (np.array([0.2, 0.4]), np.array([1, 0, 1]), np.array([3, 5, 7]), combiner)
    np.testing.assert_array_equal(retraced.owned_at(*pairs), local.owned_at(*pairs))
    np.testing.assert_array_equal(retraced.path_gain_at([0.0, 1.0]), local.path_gain_at([0.0, 1.0]))
    np.testing.assert_array_equal(retraced.aging_correlation(2e-3), local.aging_correlation(2e-3))
    assert retraced.traces == 0


def test_each_device_uses_the_paths_traced_at_its_last_anchor(place):
    """At 1.25 s device 1 (10 m/s) has walked 12.5 m: anchor 4, traced 12 m from its
    drop; its channel is that trace turned by the 0.5 m since, its path gain that trace's.
    Device 0 walked 5 m (anchor 1, 3 m on); device 2 stands at its drop."""
    channel = _retraced(place)
    channel.start_round(0)
    h, gain = channel.at(1.25)
    anchors = DEVICES + np.array([[3.0, 0.0], [0.0, -12.0], [0.0, 0.0]])
    now = DEVICES + np.array([[5.0, 0.0], [0.0, -12.5], [0.0, 0.0]])
    for k in range(3):
        fresh = _fresh(place, anchors[k])
        np.testing.assert_allclose(gain[k], fresh.path_gain[0], rtol=1e-6)
        np.testing.assert_allclose(h[k], fresh.at((now[k] - anchors[k])[None])[0], rtol=0,
                                   atol=1e-6 * np.abs(h[k]).max())
    assert gain[1] != place.paths(DEVICES).path_gain[1]  # the gain follows the place
    velocities = SPEEDS[:, None] * np.stack([np.cos(HEADINGS), np.sin(HEADINGS)], 1)
    aged = channel.aging_correlation(0.01, at_s=1.25)  # the paths of each device's anchor then
    wanted = [_fresh(place, anchors[k]).correlation(velocities[k:k + 1], 0.01)[0] for k in range(3)]
    np.testing.assert_allclose(aged, wanted, rtol=1e-9)
    assert aged[1] != channel.aging_correlation(0.01)[1]  # not the drop's paths
    np.testing.assert_array_equal(channel.path_gain_at([1.25])[0], gain)
    columns = channel.state_columns()
    assert columns["trace_anchor"].tolist() == [0.0, 0.0, 0.0]


def test_an_anchor_inside_the_building_is_skipped(place):
    """Device 0 reaches x = 21 (anchor 3) inside the building at 2.25 s: no path there, so
    it keeps anchor 2's paths (x = 18) until it walks out of the trace's range of use."""
    assert not place.paths(np.array([[21.0, 0.5]])).has_path[0]
    channel = _retraced(place)
    channel.start_round(0)
    gain = channel.path_gain_at([2.0, 2.3], devices=[0])[:, 0]
    outside = _fresh(place, [[18.0, 0.5]]).path_gain[0]
    np.testing.assert_allclose(gain, [outside, outside], rtol=1e-6)
    channel.end_round(0, 2.3)
    channel.start_round(1)
    assert channel.state_columns()["trace_anchor"][0] == 2.0
    assert channel.state_columns()["traced_displacement_m"][0] == pytest.approx(4.0 * 2.3 - 6.0)


def test_a_phase_that_passes_an_anchor_switches_paths_at_that_symbol(place):
    """Symbols of 0.1 s from 0.21 s: device 0 passes 3 m at 0.75 s (device 1 passes
    anchors at 0.3, 0.6 and 0.9 s); each symbol equals :meth:`at` at its middle, the
    ones after an anchor through the new trace."""
    channel = _retraced(place)
    channel.start_round(0)
    symbols = channel.per_symbol(0.21, 0.1, 8)  # middles 0.26 .. 0.96 s
    scale = np.abs(symbols).max()
    for n in range(8):
        np.testing.assert_allclose(symbols[:, n], channel.at(0.21 + (n + 0.5) * 0.1)[0], rtol=0, atol=1e-6 * scale)
    before, after = _fresh(place, DEVICES[:1]), _fresh(place, DEVICES[:1] + np.array([3.0, 0.0]))
    np.testing.assert_allclose(symbols[0, 5], after.at(np.array([[0.04, 0.0]]))[0], rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(symbols[0, 4], before.at(np.array([[2.64, 0.0]]))[0], rtol=0, atol=1e-6 * scale)
    assert np.abs(symbols[0, 5] - before.at(np.array([[3.04, 0.0]]))[0]).max() > 1e-3 * scale  # not the old paths
    offsets = np.array([0.65, 0.85])  # the pairs across the anchor, through their own traces
    pairs = channel.owned_at(offsets, np.array([0]), np.array([3]), np.ones((2, F), np.complex64))
    np.testing.assert_allclose(pairs[:, 0], [channel.at(t)[0][0, :, 3].sum() for t in offsets], rtol=1e-5)


def test_a_channel_resumed_at_a_round_uses_the_straight_ones_paths(place):
    """Three rounds of 0.9 s straight, and a channel told the starts at round 2: the same
    anchors, channel and gains at round 2, bit for bit."""
    straight = _retraced(place)
    for t in range(2):
        straight.start_round(t)
        straight.at(0.4)
        straight.end_round(t, 0.9)
    straight.start_round(2)
    resumed = _retraced(place)
    resumed.resume([0.0, 0.9, 1.8])
    resumed.start_round(2)
    for offset in (0.0, 0.7):
        np.testing.assert_array_equal(resumed.at(offset)[0], straight.at(offset)[0])
        np.testing.assert_array_equal(resumed.at(offset)[1], straight.at(offset)[1])
    np.testing.assert_array_equal(resumed.state_columns()["trace_anchor"], straight.state_columns()["trace_anchor"])


def test_anchors_do_not_depend_on_the_rounds_start_times(place):
    """Anchor j is the drop walked j steps of R / v: a channel of three 0.9 s rounds and one
    whose first round (1 s) is evaluated 1.65 s past its end (as a digital slot's blocks
    may be) place every common anchor on the same bits, so the second traces nothing new
    and its channel at each time equals the first's."""
    first = _retraced(place)
    for t in range(3):
        first.start_round(t)
        first.at(0.85)
        first.end_round(t, 0.9)
    traces = place.traces
    second = _retraced(place)
    second.start_round(0)
    second_h = [second.at(offset)[0] for offset in (0.85, 1.75, 2.65)]  # the last two past the round's end
    second.end_round(0, 1.0)
    second.start_round(1)
    common = set(first._anchor_m) & set(second._anchor_m)
    assert len(common) > 2 * len(DEVICES)
    for pair in common:
        np.testing.assert_array_equal(second._anchor_m[pair], first._anchor_m[pair])
    assert place.traces == traces
    again = _retraced(place)
    for t, h in enumerate(second_h):  # the first channel's rounds at the same absolute times
        again.start_round(t)
        np.testing.assert_allclose(again.at(0.85)[0], h, rtol=0, atol=1e-6 * np.abs(h).max())
        again.end_round(t, 0.9)
