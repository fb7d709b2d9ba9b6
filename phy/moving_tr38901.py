"""A 3GPP TR 38.901 cell (UMi, UMa, RMa) whose devices move: every ray turns with its own Doppler.

With ``channel.model = "umi" | "uma" | "rma"`` and a moving ``[mobility]`` model, the
cell's large-scale draw (positions, LoS state, path loss, LSPs: :class:`phy.cells.SystemLevelCell`)
is kept, and its small-scale channel is Sionna's rays of one draw (TR 38.901 steps 5-11:
clusters, their 20 rays, the K-factor's LoS ray), each ray a plane wave that turns with
the device's displacement ``dp_k(t) = p_k(t) - p_k(0)``:

``H_knf(t) = sum_g exp(-j 2 pi f tau_kg) sum_{r in g} a_knr exp(j 2 pi r_kr . dp_k(t) / lambda)``

with ``a_knr`` the ray's coefficient at BS antenna n as Sionna forms it at rest (its power,
phases, antenna fields and array offsets; the cell's ``sqrt(path_gain)``), ``g`` the
ray's delay group (a weak cluster, one of the two strongest clusters' three sub-clusters,
or the LoS ray at delay 0), and ``r_kr`` the device-side direction of the ray: the
velocity times it over lambda is TR 38.901's eq. 7.5-22 Doppler. Sionna 1.2's own time
evolution takes the receiver's angles (the BS's in the uplink) and a LoS zenith of
``zod - pi`` outside [0, pi], so a receding device's Doppler has the wrong sign
(``tests/phy/test_sionna_tr38901_doppler.py``); :class:`DeviceSideDoppler` takes the
device's angles and folds the zenith, and gives this module the directions. At rest the
response is Sionna's (the cell's :meth:`~phy.cells.SystemLevelCell.antennas` of the same
draw, up to float rounding; tested).

The local-area model of :mod:`phy.moving_rays`: the rays' powers, delays and the path
gain are the drop's while the device walks (the large-scale parameters are not redrawn).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from numba import njit, prange
from sionna.phy.channel.tr38901.channel_coefficients import ChannelCoefficientsGenerator

from native.launch import LAUNCH
from native.sincos import cos_sin, needs_libm
from phy.channel import sionna_rng_seeded
from phy.geometry import horizontal_direction
from phy.moving_rays import TracedPathFading


class DeviceSideDoppler(ChannelCoefficientsGenerator):
    """Sionna's TR 38.901 coefficient generator with eq. 7.5-22's Doppler on the device's
    side of every ray (the arrival angles in the downlink, the departure ones in the
    uplink) and the LoS zenith folded into [0, pi] (module docstring). Calling it also
    keeps the call's draws (:attr:`drawn`: ``phi, topology, k_factor, rays, c_ds``)."""

    def __call__(self, num_time_samples, sampling_frequency, k_factor, rays, topology, c_ds=None, debug=False):
        out = super().__call__(num_time_samples, sampling_frequency, k_factor, rays, topology, c_ds, debug=True)
        self.drawn = (out[2], topology, k_factor, rays, c_ds)
        return out if debug else out[:2]

    def device_angles(self, topology, rays):
        """``(azimuth, zenith)`` of the rays on the device's side [batch, tx, rx, clusters, rays]."""
        return (rays.aod, rays.zod) if topology.moving_end == "tx" else (rays.aoa, rays.zoa)

    def device_los_angles(self, topology):
        """``(azimuth, zenith)`` of the LoS ray on the device's side [batch, tx, rx], the
        zenith folded into [0, pi]."""
        azimuth, zenith = ((topology.los_aod, topology.los_zod) if topology.moving_end == "tx"
                           else (topology.los_aoa, topology.los_zoa))
        zenith = tf.abs(zenith)
        return azimuth, tf.where(zenith > np.pi, 2.0 * np.pi - zenith, zenith)

    def _step_11_nlos(self, phi, topology, rays, t):
        self._device_angles = self.device_angles(topology, rays)
        return super()._step_11_nlos(phi, topology, rays, t)

    def _step_11_los(self, topology, t):
        self._device_angles = tuple(tf.expand_dims(tf.expand_dims(x, 3), 4)
                                    for x in self.device_los_angles(topology))
        return super()._step_11_los(topology, t)

    def _step_11_doppler_matrix(self, topology, aoa, zoa, t):
        return super()._step_11_doppler_matrix(topology, *self._device_angles, t)


class RayGroupFading(TracedPathFading):
    """:class:`phy.moving_rays.TracedPathFading` of rays that share delays: the rays turn one
    by one, each group of them (:attr:`group_starts`, the same for every device) is summed,
    and the groups meet their delays (``[K, G, F]``, not ``[K, R, F]``).

    Parameters
    ----------
    a : [K, N_r, R], complex64
        The rays' coefficients at rest (with the path gain's amplitude).
    arrival_xy : [K, R, 2], float64
        Each ray's device-side direction (horizontal part).
    group_starts : [G], int
        The first ray of each group (ascending, from 0).
    tau_s : [K, G], float64
        Each group's delay.
    frequencies_hz : [F], float64
    carrier_frequency_hz : float
    path_gain : [K], float64
    """

    def __init__(self, a, arrival_xy, group_starts, tau_s, frequencies_hz, carrier_frequency_hz: float, path_gain):
        self.group_starts = np.asarray(group_starts, np.intp)
        self.tau_s = np.asarray(tau_s, np.float64)  # [K, G]
        self._set(np.asarray(a, np.complex64), arrival_xy, self.tau_s, frequencies_hz, carrier_frequency_hz,
                  path_gain)  # delay_phase [K, G, F]

    def turns(self, displacement_m: np.ndarray, rows=slice(None)) -> np.ndarray:
        """``[..., R]`` complex64: ``exp(j k r_r . dp)`` of the devices ``rows`` displaced by
        ``displacement_m`` [..., k, 2], in one Numba pass (NumPy's complex exponential
        took 1.7 s for a phase's 116 symbols x 100 devices x 381 rays)."""
        displacement = np.ascontiguousarray(displacement_m, np.float64)
        xy = np.ascontiguousarray(self.arrival_xy[rows])
        lead = displacement.shape[:-2]
        moved = displacement.reshape(-1, *displacement.shape[-2:])  # [T, k, 2]
        out = np.empty((moved.shape[0], xy.shape[0], xy.shape[1]), np.complex64)
        with LAUNCH:
            _turns(moved, xy, self.wavenumber, out)
        return out.reshape(*lead, *xy.shape[:2])

    def _grouped(self, rays: np.ndarray) -> np.ndarray:
        return np.add.reduceat(rays, self.group_starts, axis=-1)

    def at(self, displacement_m: np.ndarray, rows=slice(None)) -> np.ndarray:
        """``[..., k, N_r, F]`` complex64 (module docstring). With one leading axis (times)
        a view of a device-major array: each device's times meet its delays in one product,
        and the channel per symbol needs no transposed copy."""
        coefficients = self.a[rows] * self.turns(np.asarray(displacement_m, np.float64), rows)[..., None, :]
        grouped = self._grouped(coefficients)  # [..., k, N_r, G]
        if grouped.ndim != 4:
            return np.matmul(grouped, self.delay_phase[rows])
        times, devices, antennas, groups = grouped.shape
        per_device = np.ascontiguousarray(np.moveaxis(grouped, 0, 1)).reshape(devices, times * antennas, groups)
        h = np.matmul(per_device, self.delay_phase[rows])  # [k, T N_r, F]
        return np.moveaxis(h.reshape(devices, times, antennas, -1), 0, 1)

    def at_pairs(self, displacement_m: np.ndarray, devices: np.ndarray, subcarriers: np.ndarray,
                 weights: np.ndarray | None = None) -> np.ndarray:
        """As :meth:`phy.moving_rays.TracedPathFading.at_pairs`."""
        turns = self.turns(np.asarray(displacement_m, np.float64), devices)  # [T, P, R]
        a = self.a[devices]  # [P, N_r, R]
        per_antenna = a[:, 0, :] if weights is None else np.einsum("np,pnq->pq", weights, a)
        tap = self.delay_phase[devices, :, subcarriers]  # [P, G]
        return np.sum(self._grouped(turns * per_antenna[None]) * tap[None], axis=-1).astype(np.complex64)


@njit(parallel=True, nogil=True, cache=True)
def _turns(displacement, xy, wavenumber, out):
    # one (time, device) per job: its rays' phases k r . dp, their cosines and sines
    # without a call (native.sincos; libm's beyond its range)
    num_times, num_devices, num_rays = out.shape
    for job in prange(num_times * num_devices):
        t, k = job // num_devices, job % num_devices
        dx, dy = displacement[t, k, 0], displacement[t, k, 1]
        for r in range(num_rays):
            phase = wavenumber * (dx * xy[k, r, 0] + dy * xy[k, r, 1])
            c, s = cos_sin(phase)
            if needs_libm(phase):
                c, s = np.cos(phase), np.sin(phase)
            out[t, k, r] = np.complex64(complex(c, s))


def ray_fading(cell, seed) -> RayGroupFading:
    """The rays of one small-scale draw of ``cell`` (a :class:`phy.cells.SystemLevelCell`) at
    the stateless ``seed`` [2], as a :class:`RayGroupFading` (module docstring)."""
    channel = cell._channel
    sionna_sampler = channel._cir_sampler
    scenario = cell._scenario  # built as Sionna's SystemLevelChannel builds its own (the same wavelength)
    sampler = DeviceSideDoppler(scenario.carrier_frequency, scenario.ut_array, scenario.bs_array,
                                subclustering=True, precision=channel.precision)
    channel._cir_sampler = sampler
    try:
        with sionna_rng_seeded(tf.convert_to_tensor(seed, tf.int32)):
            channel(1, 1.0)
    finally:
        channel._cir_sampler = sionna_sampler
    phi, topology, k_factor, rays, c_ds = sampler.drawn
    at_rest = tf.zeros([1], sampler.rdtype)
    # [1, K, 1, C, R, N_r, 1, 1] -> [K, C, R, N_r]; the rays at rest, Sionna's powers
    nlos = tf.squeeze(sampler._step_11_nlos(phi, topology, rays, at_rest), axis=[0, 2, 6, 7]).numpy()
    los_ray = tf.reshape(sampler._step_11_los(topology, at_rest), [cell.num_devices, -1]).numpy()  # [K, N_r]
    k = np.reshape(k_factor.numpy(), [-1]).astype(np.float64)
    los = np.reshape(topology.los.numpy(), [-1])
    nlos_scale = np.where(los, np.sqrt(1.0 / (k + 1.0)), 1.0)
    los_scale = np.where(los, np.sqrt(k / (k + 1.0)), 0.0)
    azimuth, zenith = (np.squeeze(x.numpy(), axis=(0, 2)) for x in sampler.device_angles(topology, rays))  # [K, C, R]
    los_azimuth, los_zenith = (np.reshape(x.numpy(), [-1]) for x in sampler.device_los_angles(topology))
    powers = np.squeeze(rays.powers.numpy(), axis=(0, 2))  # [K, C]
    delays = np.squeeze(rays.delays.numpy(), axis=(0, 2)).astype(np.float64)  # [K, C]
    c_ds = np.reshape(c_ds.numpy(), [-1]).astype(np.float64)  # [K]
    offsets = np.asarray(sampler._sub_cl_delay_offsets, np.float64)
    sub_clusters = [np.asarray(x, np.intp) for x in (sampler._sub_cl_1_ind, sampler._sub_cl_2_ind,
                                                     sampler._sub_cl_3_ind)]
    num_devices, num_clusters, num_rays = azimuth.shape
    order = np.argsort(-powers, axis=1, kind="stable")  # the two strongest first, as Sionna's
    ray_index, group_delay, starts, placed = [], [], [], 0
    for rank in range(num_clusters):
        cluster = order[:, rank]
        parts = sub_clusters if rank < 2 else [np.arange(num_rays)]
        for part, members in enumerate(parts):
            starts.append(placed)
            placed += len(members)
            ray_index.append(cluster[:, None] * num_rays + members[None, :])  # [K, members]
            base = delays[np.arange(num_devices), cluster]
            group_delay.append(base + (offsets[part] * c_ds if rank < 2 else 0.0))
    flat = np.concatenate(ray_index, axis=1)  # [K, C R]: the rays in group order
    rows = np.arange(num_devices)[:, None]
    a_rays = nlos.reshape(num_devices, num_clusters * num_rays, -1)[rows, flat] * nlos_scale[:, None, None]
    a = np.concatenate([a_rays, (los_ray * los_scale[:, None])[:, None, :]], axis=1)  # [K, R', N_r]
    xy = np.concatenate([horizontal_direction(azimuth, zenith).reshape(num_devices, -1, 2)[rows, flat],
                         horizontal_direction(los_azimuth, los_zenith)[:, None, :]], axis=1)
    tau = np.stack([*group_delay, np.zeros(num_devices)], axis=1)  # [K, G], the LoS ray's group at 0
    amplitude = np.sqrt(cell.path_gain)[:, None, None]
    fading = RayGroupFading(np.transpose(a, (0, 2, 1)) * amplitude, xy, np.array([*starts, flat.shape[1]]), tau,
                            cell._frequencies.numpy(), cell.carrier_frequency_hz, cell.path_gain)
    fading.sionna = (sampler, *sampler.drawn)  # the draw, so the evolution can be held to Sionna's (tests)
    return fading
