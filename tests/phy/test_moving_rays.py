"""Moving devices in a ray-traced cell (:mod:`phy.moving_rays`) on the tiny scene of
``tiny_scene.py``: each path's Doppler is Sionna RT's own, the channel over a phase is
Sionna RT's time-evolved impulse response, the paths at rest are the cell's, the aging
correlation is the paths', and a place that keeps the directions traces the same paths
into entries of its own. Each place is traced once per module."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tiny_scene import write_scene

from phy.doppler import SPEED_OF_LIGHT_MPS
from phy.mobility import StraightMotion
from phy.moving_rays import TracedMovingChannel, TracedPathFading
from phy.parameters import RayTracedChannel
from phy.path_cache import TracedPaths
from phy.ray_traced import RayTracedCell
from phy.ray_tracing import RayTracedPlace, arrival_xy

CARRIER_HZ = 3.5e9
BS = (0.0, 0.0, 10.0)
DEVICES = np.array([[-30.0, 0.0], [0.0, -20.0], [12.0, 15.0]])  # in sight of the BS; device 0 also off the wall
VELOCITIES = np.array([[3.0, -4.0], [-10.0, 2.0], [0.5, 7.0]])  # [m/s]
F, SPACING_HZ = 64, 240e3


def _parameters(folder, **keys) -> RayTracedChannel:
    values = dict(scene=str(folder / "scene.xml"), bs_position_m=BS, carrier_frequency_hz=CARRIER_HZ,
                  samples_per_source=20_000, cache_dir=str(folder / "cache"), variation="static")
    return RayTracedChannel.check(**(values | keys))


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scene")
    write_scene(folder)
    return folder


@pytest.fixture(scope="module")
def place(scene_dir) -> RayTracedPlace:
    return RayTracedPlace(_parameters(scene_dir), 2, log=lambda line: None, arrivals=True)


@pytest.fixture(scope="module")
def cell(scene_dir, place) -> RayTracedCell:
    """Depth 3, LoS and specular reflections, a 2-element BS, with the directions of arrival."""
    return RayTracedCell(**dict(_parameters(scene_dir)), positions_m=DEVICES, subcarrier_spacing_hz=SPACING_HZ,
                         num_subcarriers=F, num_bs_antennas=2, place=place)


@pytest.fixture(scope="module")
def sionna_paths(place):
    """Sionna RT's paths of the devices moving at VELOCITIES, in the place's scene and
    with its solver's settings."""
    from phy.ray_tracing import _import_rt

    rt, mi = _import_rt()
    scene = place._loaded()
    names = [f"moving-{k}" for k in range(len(DEVICES))]
    for name, (x, y), (vx, vy) in zip(names, DEVICES, VELOCITIES, strict=True):
        scene.add(rt.Receiver(name, position=mi.Point3f(float(x), float(y), 1.5),
                              velocity=mi.Vector3f(float(vx), float(vy), 0.0)))
    try:
        yield rt.PathSolver()(scene, samples_per_src=20_000, max_num_paths_per_src=20_000, **place._solver_flags())
    finally:
        for name in names:
            scene.remove(name)


def _fading(cell: RayTracedCell) -> TracedPathFading:
    return TracedPathFading(cell.paths, cell.frequencies_hz, CARRIER_HZ)


def test_each_paths_doppler_is_sionna_rts_own(cell, sionna_paths):
    """``v . r / lambda`` from the stored directions equals :attr:`sionna.rt.Paths.doppler`
    of the same devices moving at ``v``, path by path (the reflections' too)."""
    theirs = np.asarray(sionna_paths.doppler.numpy(), np.float64)
    theirs = theirs[:, 0, :] if theirs.ndim == 3 else theirs[:, 0, 0, 0, :]
    ours = _fading(cell).doppler_hz(VELOCITIES)
    assert ours.shape[1] >= 2 and np.count_nonzero(ours) > len(DEVICES)  # reflections, not the LoS alone
    np.testing.assert_allclose(ours, theirs[:, :ours.shape[1]], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(arrival_xy(sionna_paths)[:, :ours.shape[1]].shape, cell.paths.arrival_xy.shape)


def test_the_channel_over_a_phase_is_sionnas_time_evolved_impulse_response(cell, sionna_paths):
    """Displaced by ``v t`` the response is ``sum_p a_p(t) exp(-j 2 pi f tau_p)`` with
    ``a_p(t)`` from :meth:`sionna.rt.Paths.cir` over 20 time steps of 0.5 ms (each path
    turning at its own Doppler); at t = 0 it is the cell's own response."""
    steps, step_s = 20, 5e-4
    a, tau = sionna_paths.cir(sampling_frequency=1.0 / step_s, num_time_steps=steps, normalize_delays=True,
                              out_type="numpy")
    a = np.asarray(a)[:, 0, 0, :, :, :]  # [K, N_r, P, T]
    tau = np.asarray(tau)[:, 0, :]
    frequencies = cell.frequencies_hz
    fading = _fading(cell)
    for n in (0, 7, steps - 1):
        valid = tau >= 0
        theirs = np.einsum("krp,kpf->krf", np.where(valid[:, None, :], a[..., n], 0),
                           np.exp(-2j * np.pi * np.where(valid, tau, 0)[:, :, None] * frequencies))
        ours = fading.at(VELOCITIES * n * step_s)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-4 * np.abs(theirs).max())
    rest = cell.antennas(None, tf.constant([1, 2], tf.int32), 2).numpy()
    np.testing.assert_allclose(fading.at(np.zeros((len(DEVICES), 2))), rest, rtol=0, atol=1e-6 * np.abs(rest).max())


def test_the_moving_channel_turns_paths_by_displacement_and_keeps_the_traced_gain(cell):
    """Through :class:`TracedMovingChannel`: positions centred on the BS and reported in
    scene coordinates, the traced path gain at any time, the channel of the pairs a
    digital slot asks for equal to the whole evaluation's entries, per symbol equal to
    ``at`` at each symbol's time, and the aging correlation the paths' own."""
    heading = np.arctan2(VELOCITIES[:, 1], VELOCITIES[:, 0])
    motion = StraightMotion(DEVICES - np.asarray(BS[:2]), np.hypot(*VELOCITIES.T), heading, 1000.0, 1.0)
    moving = TracedMovingChannel(motion, _fading(cell), F, 0.0, np.asarray(BS[:2]))
    moving.start_round(0)
    h, gain = moving.at(0.03)
    np.testing.assert_array_equal(gain, cell.path_gain)
    np.testing.assert_allclose(h, _fading(cell).at(VELOCITIES * 0.03), rtol=0, atol=1e-6 * np.abs(h).max())
    symbols = moving.per_symbol(0.01, 1e-3, 4)
    assert symbols.shape == (3, 4, 2, F)
    np.testing.assert_allclose(symbols[:, 2], moving.at(0.0125)[0], rtol=0, atol=1e-6 * np.abs(h).max())
    combiner = np.ones((2, F), np.complex64)
    pairs = moving.owned_at([0.0125], np.array([2, 0]), np.array([5, 9]), combiner)
    whole = moving.at(0.0125)[0].sum(axis=1)
    np.testing.assert_allclose(pairs[0], [whole[2, 5], whole[0, 9]], rtol=1e-5)
    lag = 4e-3
    shift = _fading(cell).doppler_hz(VELOCITIES)
    power = np.mean(np.abs(cell.paths.a.astype(np.complex128)) ** 2, axis=1)
    wanted = np.real(np.sum(power * np.exp(2j * np.pi * shift * lag), axis=1)) / power.sum(axis=1)
    np.testing.assert_allclose(moving.aging_correlation(lag), wanted, rtol=1e-12)
    assert np.all(moving.aging_correlation(0.0) == 1.0)
    columns = moving.state_columns()
    np.testing.assert_allclose(np.stack([columns["position_x_m"], columns["position_y_m"]], 1), DEVICES)
    np.testing.assert_array_equal(columns["traced_displacement_m"], 0.0)
    np.testing.assert_allclose(columns["doppler_hz"], np.hypot(*VELOCITIES.T) * CARRIER_HZ / SPEED_OF_LIGHT_MPS)


def test_a_place_that_keeps_directions_traces_the_same_paths_into_entries_of_its_own(scene_dir, cell):
    """Without ``arrivals`` the place writes the entries it always wrote (no directions, another
    key), with the same coefficients and delays."""
    still = RayTracedPlace(_parameters(scene_dir), 2, log=lambda line: None)
    paths = still.paths(DEVICES)
    assert paths.arrival_xy is None and still.entry != cell.trace_attrs["ray_traced_paths"]
    np.testing.assert_array_equal(paths.a, cell.paths.a)
    np.testing.assert_array_equal(paths.tau_s, cell.paths.tau_s)
    assert np.all(np.abs(np.hypot(*np.moveaxis(cell.paths.arrival_xy, -1, 0))) <= 1.0 + 1e-6)


def test_selected_and_joined_paths_keep_their_directions():
    """:meth:`TracedPaths.select` and :meth:`TracedPaths.concatenate` carry each path's
    direction with it; a direction array of the wrong shape is refused."""
    a = np.array([[[1, 2, 0]], [[3, 0, 0]]], np.complex64)
    tau = np.array([[0, 1e-7, 0], [0, 0, 0]], np.float32)
    arrival = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    paths = TracedPaths(a, tau, arrival)
    picked = paths.select([1])
    assert picked.a.shape == (1, 1, 1) and picked.arrival_xy.tolist() == [[[6.0, 7.0]]]
    joined = TracedPaths.concatenate([picked, paths.select([0])])
    np.testing.assert_array_equal(joined.arrival_xy, [[[6, 7], [0, 0]], [[0, 1], [2, 3]]])
    assert TracedPaths.of(joined.arrays()).arrival_xy.tolist() == joined.arrival_xy.tolist()
    with pytest.raises(ValueError, match="arrival_xy must be"):
        TracedPaths(a, tau, arrival[:, :2])
