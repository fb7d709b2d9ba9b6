"""How far the time-domain uplink's aggregate is from the exact weighted sum (issue 21).

The normalised error ``||Delta_hat - sum_k pi_k Delta_k||^2 / ||sum_k pi_k Delta_k||^2`` of
:func:`phy.aircomp.aggregate` on one phase of the quickstart's size (K = 100 devices in a
300 m disk, d = 118,282 values, F = 1024, C = 72, a 16-tap i.i.d. Rayleigh delay line per
device with path loss r^-4, optimal power control, P = 20 dBm, gamma = -74 dBm, perfect
CSI of the propagation channel), *without receiver noise* (so what remains is the power
control's distortion and what the offsets do), for updates that share a direction as
training updates do (``Delta_k = s_k (g + 0.5 e_k)``, g and e_k standard normal, s_k
log-normal), against the devices' timing offsets (U[0, max] samples, with and without
precoding for the delay) and their CFO (U[-max, max] subcarrier spacings). The mean over
``--draws`` channel and offset draws is printed per setting; the first row (no
offsets) is the frequency-domain path's error.

Usage::

    .venv/bin/python benchmarks/sync_aggregation_error.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tensorflow as tf

from phy import geometry
from phy.aircomp import aggregate
from phy.channel import IidRayleigh
from phy.ofdm_time import TimeDomainUplink
from phy.parameters import POWER_CONTROLS

SETTINGS = (
    [("timing", m, "none") for m in (0.0, 0.5, 2.0, 48.0, 200.0)]
    + [("timing", m, "timing") for m in (48.0, 100.0, 200.0, 400.0)]
    + [("cfo", m, "none") for m in (0.0001, 0.001, 0.003, 0.01, 0.05)]
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--values", type=int, default=118_282)
    parser.add_argument("--draws", type=int, default=4)
    args = parser.parse_args(argv)
    num_subcarriers, cp, taps = 1024, 72, 16
    bandwidth = num_subcarriers * 30e3
    noise_w = 10.0 ** (-74.0 / 10.0) / 1e3
    control = POWER_CONTROLS["optimal"].build({})
    rng = np.random.default_rng(1)
    deployment = geometry.uniform_disk(args.devices, 300.0, 10.0, rng)
    path_gain = tf.constant(geometry.path_gain(deployment.distances_m, 4.0), tf.float32)
    scale = np.exp(rng.normal(0.0, 0.5, (args.devices, 1))).astype(np.float32) * 1e-3
    common = rng.standard_normal((1, args.values), np.float32)
    own = rng.standard_normal((args.devices, args.values), np.float32)
    updates = tf.constant((common + 0.5 * own) * scale)
    sizes = rng.poisson(10.0, args.devices).astype(np.float64) + 1.0
    weights = tf.constant(sizes / sizes.sum(), tf.float32)
    exact = tf.linalg.matvec(updates, weights, transpose_a=True).numpy()
    channel = IidRayleigh(num_subcarriers, taps, 1.0 / bandwidth)
    geometry_ = {"bandwidth_hz": bandwidth, "num_subcarriers": num_subcarriers,
                 "cyclic_prefix_length": cp}
    print(f"K = {args.devices}, d = {args.values:,}, F = {num_subcarriers}, C = {cp}, "
          f"{taps} taps, P = 20 dBm; NMSE of the aggregate, mean of {args.draws} draws")
    print(f"{'offset':<8} {'max':>8} {'precompensate':>14} {'NMSE':>10} {'NMSE dB':>8}")
    for kind, maximum, precompensate in [("none", 0.0, "none"), *SETTINGS]:
        errors = []
        for draw in range(args.draws):
            a, tau = (t.numpy() for t in channel.cir(path_gain, tf.constant([draw, 7])))
            timing = rng.uniform(0, maximum, args.devices) if kind == "timing" else None
            cfo = rng.uniform(-maximum, maximum, args.devices) if kind == "cfo" else None
            uplink = TimeDomainUplink.from_paths(a, tau, **geometry_,
                                                 timing_offset_samples=timing, cfo_subcarriers=cfo)
            known = uplink if precompensate == "timing" else TimeDomainUplink.from_paths(
                a, tau, **geometry_)
            h = tf.constant(known.frequency_response())
            estimate = aggregate(updates, weights, h, h, power_control=control, tx_power_w=0.1,
                                 noise_power_w=0.0, gamma_w=noise_w,
                                 seed=tf.constant([draw, 1]), path_gain=path_gain,
                                 uplink=uplink).estimate.numpy()
            errors.append(np.sum((estimate - exact) ** 2) / np.sum(exact**2))
        nmse = float(np.mean(errors))
        print(f"{kind:<8} {maximum:8g} {precompensate:>14} {nmse:10.3e} {10 * np.log10(nmse):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
