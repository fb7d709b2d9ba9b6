"""phy/moving_tr38901.py: a 3GPP cell's rays of one draw, each turning with its own Doppler."""

import copy

import numpy as np
import pytest
import tensorflow as tf

from phy.cells import SystemLevelCell
from phy.doppler import SPEED_OF_LIGHT_MPS
from phy.moving_tr38901 import ray_fading

CARRIER_HZ, SPACING_HZ, F = 3.5e9, 30e3, 64


def _cell(model="umi", positions=None, antennas=1, force_los=None):
    if positions is None:
        rng = np.random.default_rng(0)
        radius, angle = rng.uniform(30.0, 200.0, 12), rng.uniform(0.0, 2.0 * np.pi, 12)
        positions = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return SystemLevelCell(model, positions, carrier_frequency_hz=CARRIER_HZ, subcarrier_spacing_hz=SPACING_HZ,
                           num_subcarriers=F, seed=tf.constant([1, 2]), num_bs_antennas=antennas,
                           force_los=force_los)


@pytest.mark.parametrize(("model", "antennas"), [("umi", 1), ("umi", 2), ("rma", 1)])
def test_at_rest_the_rays_give_sionnas_channel_of_the_same_draw(model, antennas):
    """Grouped by delay, the rays at rest sum to the cell's own frequency response at the
    same seed (Sionna's sub-clusters, the K-factor's LoS ray), to float32 rounding."""
    cell = _cell(model, antennas=antennas)
    seed = tf.constant([5, 6], tf.int32)
    want = cell.antennas(None, seed, antennas).numpy()  # [K, N_r, F]
    got = ray_fading(cell, seed).at(np.zeros((cell.num_devices, 2)))
    scale = np.abs(want).max(axis=(1, 2), keepdims=True)
    assert got.shape == want.shape and np.all(np.abs(got - want) <= 2e-6 * scale)


def test_the_rays_turn_as_sionnas_own_evolution_with_the_device_side_doppler():
    """At velocities v and a time t, each device's response is Sionna's TR 38.901 channel of
    the same draw evaluated at t with v (the device-side Doppler), displacement v t."""
    cell = _cell()
    fading = ray_fading(cell, tf.constant([7, 8], tf.int32))
    sampler, phi, topology, k_factor, rays, c_ds = fading.sionna
    rng = np.random.default_rng(3)
    velocity = np.concatenate([rng.uniform(-30.0, 30.0, (cell.num_devices, 2)), np.zeros((cell.num_devices, 1))], 1)
    moved = copy.copy(topology)
    moved.velocities = tf.constant(velocity[None], tf.float32)
    t = 2e-3
    h, delays = sampler._step_11(phi, moved, k_factor, rays, tf.constant([t], tf.float32), c_ds)
    h = tf.reshape(h, [cell.num_devices, -1]).numpy() * np.sqrt(cell.path_gain)[:, None]  # [K, paths]
    delays = tf.reshape(delays, [cell.num_devices, -1]).numpy().astype(np.float64)
    frequencies = cell._frequencies.numpy().astype(np.float64)
    want = np.einsum("kp,kpf->kf", h, np.exp(-2j * np.pi * delays[:, :, None] * frequencies))
    got = fading.at(velocity[:, :2] * t)[:, 0]
    scale = np.abs(want).max(axis=1, keepdims=True)
    assert np.all(np.abs(got - want) <= 2e-5 * scale)
    assert np.max(np.abs(got - fading.at(np.zeros((cell.num_devices, 2)))[:, 0]) / scale) > 0.05  # it turned


def test_a_receding_device_sees_a_negative_doppler_and_an_approaching_one_a_positive():
    """Devices on the x axis moving along it, away from and towards the BS: the rays'
    power-weighted Doppler has the physical sign, for each LoS device (its LoS ray at
    -+f_D carries most of its power: beyond 0.78 f_D here) and on average over the devices
    without LoS (the clusters spread around the BS's direction); each ray's within +-f_D.
    Sionna's own uplink evolution gives the receding devices a positive one
    (tests/phy/test_sionna_tr38901_doppler.py)."""
    positions = np.stack([np.linspace(40.0, 180.0, 8), np.zeros(8)], axis=1)
    for force_los, bound in ((True, 0.6), (False, 0.2)):
        fading = ray_fading(_cell(positions=positions, force_los=force_los), tf.constant([9, 1], tf.int32))
        f_d = 10.0 * CARRIER_HZ / SPEED_OF_LIGHT_MPS
        for sign in (+1.0, -1.0):
            shift = fading.doppler_hz(np.tile([sign * 10.0, 0.0], (8, 1)))
            mean = np.sum(fading.power * shift, axis=1) / np.sum(fading.power, axis=1) / f_d
            assert (np.all(-sign * mean > bound) if force_los else -sign * np.mean(mean) > bound), (force_los, mean)
            assert np.all(np.abs(shift) <= f_d * (1 + 1e-9))
