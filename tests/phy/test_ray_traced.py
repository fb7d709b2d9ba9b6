"""The ray-traced channel (``channel.model = "ray_traced"``) on a tiny scene the tests
write (a ground and one building, ``tiny_scene.py``): free space where the tracer sees
only the line of sight, the frequency response as the sum over the traced paths, the
time-domain taps against it, the cache of traced drops, devices only where a path
arrives, the scene seen from above, and the refusal without LLVM (the scenario's refusals and a run:
``tests/cosim/test_ray_traced_run.py``). Each place is traced once per module."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tiny_scene import BUILDING, write_scene

from phy.ofdm_time import TimeDomainUplink
from phy.parameters import BUILTIN_SCENES, RayTracedChannel
from phy.path_cache import CacheEntryDamaged, cache_key
from phy.ray_traced import RayTracedCell
from phy.ray_tracing import RayTracedPlace, scene_file, scene_footprints
from phy.scene_layouts import radio_map, scene_explicit

SPEED_OF_LIGHT = 299_792_458.0
CARRIER_HZ = 3.5e9
BS = (0.0, 0.0, 10.0)
DEVICES = np.array([[-30.0, 0.0], [0.0, -20.0], [12.0, 15.0]])  # all in sight of the BS
F, SPACING_HZ = 64, 240e3


def _parameters(folder: Path, **keys) -> RayTracedChannel:
    values = dict(scene=str(folder / "scene.xml"), bs_position_m=BS, carrier_frequency_hz=CARRIER_HZ,
                  samples_per_source=20_000, cache_dir=str(folder / "cache"))
    return RayTracedChannel.check(**(values | keys))


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("scene")
    write_scene(folder)
    return folder


@pytest.fixture(scope="module")
def cell(scene_dir) -> RayTracedCell:
    """Depth 3, LoS and specular reflections, a 2-element BS, traced once."""
    place = RayTracedPlace(_parameters(scene_dir), 2, log=lambda line: None)
    return RayTracedCell(**dict(_parameters(scene_dir)), positions_m=DEVICES, subcarrier_spacing_hz=SPACING_HZ,
                         num_subcarriers=F, num_bs_antennas=2, place=place)


def test_the_builtin_scenes_are_the_installed_ones():
    scenes = scene_file("munich").parents[1]
    assert sorted(p.name for p in scenes.iterdir() if (p / f"{p.name}.xml").is_file()) == sorted(BUILTIN_SCENES)


def test_a_line_of_sight_device_sees_free_space(scene_dir):
    place = RayTracedPlace(_parameters(scene_dir, interactions=["los"], max_depth=0), 1, log=lambda line: None)
    gain = place.paths(DEVICES).path_gain
    distance = np.hypot(np.hypot(DEVICES[:, 0], DEVICES[:, 1]), BS[2] - 1.5)
    friis = (SPEED_OF_LIGHT / CARRIER_HZ / (4 * np.pi * distance)) ** 2
    np.testing.assert_allclose(10 * np.log10(gain), 10 * np.log10(friis), atol=0.1)


def test_the_response_is_the_sum_over_the_paths(cell):
    a, tau = cell.paths.a.astype(np.complex128), cell.paths.tau_s.astype(np.float64)
    assert a.shape[2] > 1 and np.all(cell.paths.has_path)  # reflections too
    frequencies = (np.arange(F) - F // 2) * SPACING_HZ
    by_hand = np.einsum("knp,kpf->knf", a, np.exp(-2j * np.pi * tau[:, :, None] * frequencies))
    traced = cell.paths.a.copy()  # the traced paths, unchanged by a round
    cell.variation = "static"
    try:
        np.testing.assert_allclose(cell.antennas(None, tf.constant([1, 2]), 2).numpy(), by_hand,
                                   rtol=0, atol=1e-5 * np.abs(by_hand).max())
        np.testing.assert_array_equal(cell(None, tf.constant([1, 2])).numpy(),
                                      cell.antennas(None, tf.constant([1, 2]), 2).numpy()[:, 0])
    finally:
        cell.variation = "phase"
    np.testing.assert_array_equal(traced, cell.paths.a)


def test_a_round_redraws_the_phases_and_keeps_delays_and_powers(cell):
    a1, tau1 = cell.cir_antennas(None, tf.constant([5, 6]), 2)
    a2, _ = cell.cir_antennas(None, tf.constant([5, 7]), 2)
    again, _ = cell.cir_antennas(None, tf.constant([5, 6]), 2)
    np.testing.assert_array_equal(a1.numpy(), again.numpy())  # the round's seed only
    np.testing.assert_allclose(np.abs(a1.numpy()), np.abs(cell.paths.a), rtol=1e-5)
    np.testing.assert_array_equal(tau1.numpy(), cell.paths.tau_s)
    assert not np.allclose(a1.numpy(), a2.numpy())
    # one phase per path, the same at both antennas: the array's response is kept
    ratio = a1.numpy()[:, 1] / np.where(a1.numpy()[:, 0] == 0, 1, a1.numpy()[:, 0])
    traced = cell.paths.a[:, 1] / np.where(cell.paths.a[:, 0] == 0, 1, cell.paths.a[:, 0])
    np.testing.assert_allclose(ratio, traced, atol=1e-4)


def test_the_taps_and_the_response_agree_through_the_fft(cell):
    a, tau = cell.cir(None, tf.constant([3, 4]))
    uplink = TimeDomainUplink.from_paths(a.numpy(), tau.numpy(), bandwidth_hz=F * SPACING_HZ,
                                         num_subcarriers=F, cyclic_prefix_length=16)
    assert np.all(uplink.cut_power_fraction == 0)  # the delay spread fits the prefix
    response = cell(None, tf.constant([3, 4])).numpy()
    taps = np.zeros((DEVICES.shape[0], F), np.complex128)  # the taps on the cyclic grid
    for i, lag in enumerate(range(uplink.l_min, uplink.l_min + uplink.taps.shape[1])):
        taps[:, lag % F] += uplink.taps[:, i]
    by_fft = np.fft.fftshift(np.fft.fft(taps, axis=1), axes=1)  # subcarriers -F/2 ... F/2 - 1
    error = np.sum(np.abs(by_fft - response) ** 2, axis=1) / np.sum(np.abs(response) ** 2, axis=1)
    assert np.all(10 * np.log10(error) < -25), 10 * np.log10(error)  # the sinc cut at +-6 lags
    np.testing.assert_allclose(uplink.frequency_response(), by_fft, atol=1e-6 * np.abs(by_fft).max())


def test_the_cache_replays_bit_identically_and_a_changed_setting_misses(cell, scene_dir):
    place = RayTracedPlace(_parameters(scene_dir), 2, log=lambda line: None)
    replayed = RayTracedCell(**dict(_parameters(scene_dir)), positions_m=DEVICES, subcarrier_spacing_hz=SPACING_HZ,
                             num_subcarriers=F, num_bs_antennas=2, place=place)
    assert place.traces == 0 and place._scene is None  # neither traced nor loaded
    np.testing.assert_array_equal(replayed.paths.a, cell.paths.a)
    np.testing.assert_array_equal(replayed.paths.tau_s, cell.paths.tau_s)
    assert replayed.trace_attrs == cell.trace_attrs and "sha256:" in cell.trace_attrs["ray_traced_paths"]
    key = cache_key({"kind": "paths", **place._settings, "positions_m": DEVICES.tolist()})
    assert place.cache.load(key) is not None
    for changed in (dict(samples_per_source=20_001), dict(carrier_frequency_hz=3.6e9), dict(max_depth=2)):
        other = RayTracedPlace(_parameters(scene_dir, **changed), 2, log=lambda line: None)
        other_key = cache_key({"kind": "paths", **other._settings, "positions_m": DEVICES.tolist()})
        assert other_key != key and other.cache.load(other_key) is None, changed
    moved = cache_key({"kind": "paths", **place._settings, "positions_m": (DEVICES + np.array([0, 1e-9])).tolist()})
    assert moved != key


def test_a_damaged_entry_is_refused_in_one_line_naming_it(cell, scene_dir, tmp_path):
    place = RayTracedPlace(_parameters(scene_dir, cache_dir=str(tmp_path)), 2, log=lambda line: None)
    key = "0" * 64
    place.cache.store(key, cell.paths.arrays())
    entry = place.cache.path(key)
    data = bytearray(entry.read_bytes())
    data[data.index(cell.paths.a.tobytes()[:16]) + 5] ^= 0xFF  # one byte of the coefficients
    entry.write_bytes(bytes(data))
    with pytest.raises(CacheEntryDamaged) as refused:
        place.cache.load(key)
    assert str(entry) in str(refused.value) and "\n" not in str(refused.value)


def test_no_placed_device_lacks_a_path(scene_dir):
    place = RayTracedPlace(_parameters(scene_dir), 1, log=lambda line: None)
    deployment = radio_map(12, 40.0, 5.0, (-110.0, -40.0), np.random.default_rng(7), place)
    traced = place.paths(deployment.positions_m)
    assert place.traces == 2  # the radio map and one trace of the 12; the drop's paths from the cache
    assert np.all(traced.has_path) and deployment.num_devices == 12
    assert np.all((10 * np.log10(traced.path_gain) >= -110.0) & (10 * np.log10(traced.path_gain) <= -40.0))
    x, y = deployment.positions_m.T
    assert not np.any((x >= BUILDING[0]) & (x <= BUILDING[1]) & (y >= BUILDING[2]) & (y <= BUILDING[3]))
    assert np.all((deployment.distances_m >= 5.0) & (deployment.distances_m <= 40.0))
    with pytest.raises(ValueError, match=r"^cell\.path_gain_range_db: only \d+ of cell\.num_devices = 12"):
        radio_map(12, 40.0, 5.0, (-45.0, -40.0), np.random.default_rng(7), place)


def test_an_explicit_device_without_a_path_is_refused_naming_its_row(cell, scene_dir):
    place = RayTracedPlace(_parameters(scene_dir), 2, log=lambda line: None)
    placed = scene_explicit(3, 300.0, DEVICES.tolist(), place)  # traced before: from the cache
    np.testing.assert_array_equal(placed.positions_m, DEVICES)
    np.testing.assert_allclose(placed.distances_m, np.hypot(DEVICES[:, 0], DEVICES[:, 1]))
    assert place.traces == 0
    inside = [[-30.0, 0.0], [25.0, 0.0]]  # the second stands inside the building
    with pytest.raises(ValueError, match=r"^cell\.positions_m: 1 device\(s\) have no traced path to the BS "
                                         r"\(row 1 \[25\.0, 0\.0\]\)"):
        scene_explicit(2, 300.0, inside, place)


def _area(triangles: np.ndarray) -> np.ndarray:
    a, b, c = (triangles[:, i] for i in range(3))
    return 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))


def test_the_footprints_are_the_buildings_from_above_without_the_ground(scene_dir):
    """The tiny scene's building, seen from above: its roof (the walls edge-on, its
    floor and the 200 m ground at ground height left out); a built-in scene's footprints
    lie in its buildings' extent and leave out its object named ``floor``."""
    triangles = scene_footprints(str(scene_dir / "scene.xml"))
    x0, x1, y0, y1, _, _ = BUILDING
    assert triangles.shape[1:] == (3, 2) and len(triangles) == 2
    assert np.all((triangles[..., 0] >= x0) & (triangles[..., 0] <= x1))
    assert np.all((triangles[..., 1] >= y0) & (triangles[..., 1] <= y1))
    assert np.sum(_area(triangles)) == pytest.approx((x1 - x0) * (y1 - y0))
    canyon = scene_footprints("simple_street_canyon")  # buildings along a street, a 'floor' under them
    extent = np.ptp(canyon.reshape(-1, 2), axis=0)
    assert len(canyon) > 0 and np.all(extent < 130.0)
    assert np.sum(_area(canyon)) < 0.8 * np.prod(extent), "the floor covers the whole extent"
    with pytest.raises(ValueError, match=r"^channel\.scene = .*: no such file"):
        scene_footprints(str(scene_dir / "missing.xml"))


def test_without_llvm_the_import_says_what_to_install_in_one_line():
    """Dr.Jit pointed at a libLLVM that does not exist (a fresh interpreter: this one
    has Sionna RT loaded)."""
    import os
    import subprocess

    probe = ("from phy.ray_tracing import _import_rt\ntry:\n    _import_rt()\nexcept ValueError as e:\n"
             "    print('REFUSED', e)\n")
    env = {**os.environ, "DRJIT_LIBLLVM_PATH": "/nonexistent/libLLVM.so"}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    refused = [line for line in result.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1, result.stdout + result.stderr
    assert 'channel.model = "ray_traced"' in refused[0] and "apt-get install libllvm15" in refused[0]
