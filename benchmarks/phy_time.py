"""Seconds per phase of the AirComp PHY step, ``phy.aircomp.aggregate`` (issues 2 and 6).

Builds the paper's PHY inputs (K = 100 devices uniform over a 300 m disk with a 10 m
exclusion, i.i.d. Rayleigh channel with path loss r^-4, F = 1024 subcarriers, one
phase of d = 466,698 values, so N = 456 OFDM symbols; P = 20 dBm, sigma_z^2 =
gamma = -74 dBm; perfect CSI, or Gaussian CSI error with ``--csi-nmse-db``), then
times ``aggregate`` for each power control after a warm-up call (which traces and
compiles), median of ``--repeats`` calls, the result fetched to the host each time.
The controls run interleaved (one call of each per repetition), so a change of the
machine's load affects all of them alike and their ratios stay comparable.

Prints one row per control (median and min seconds per phase, the fraction of
(device, symbol) rows whose power budget is active) and, as its last line, the same
figures as one JSON object: ``{"<control>_s": ..., "peak_rss_gib": ..., "load": ...}``.

Usage::

    .venv/bin/python benchmarks/phy_time.py                # paper size
    .venv/bin/python benchmarks/phy_time.py --tiny         # seconds; K = 4, F = 64
    .venv/bin/python benchmarks/phy_time.py --controls optimal --repeats 9
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tensorflow as tf

from phy import geometry
from phy.aircomp import aggregate
from phy.channel import IidRayleigh
from phy.parameters import POWER_CONTROLS

CONTROLS = {
    "optimal": {},
    "truncated_inversion": {"tci_gain_threshold": 0.1},
    "full_inversion": {},
    "ideal": {},
}


def _dbm_to_w(dbm: float) -> float:
    return 10.0 ** (dbm / 10.0) / 1e3


def _peak_rss_gib() -> float:
    """VmHWM of this process (GiB)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _mallopt() -> None:
    """glibc: M_MMAP_MAX = 0 and M_TRIM_THRESHOLD = 2^30 (what MALLOC_MMAP_MAX_=0 and
    MALLOC_TRIM_THRESHOLD_ would set before start), applied at run time."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_max = -1, -4
    if not (libc.mallopt(m_mmap_max, 0) and libc.mallopt(m_trim_threshold, 2**30)):
        raise RuntimeError("mallopt failed")


def _inputs(num_devices, num_values, num_subcarriers, csi_nmse_db, seed):
    rng = np.random.default_rng(seed)
    deployment = geometry.uniform_disk(num_devices, 300.0, 10.0, rng)
    path_gain = tf.constant(geometry.path_gain(deployment.distances_m, 4.0), tf.float32)
    h = IidRayleigh(num_subcarriers)(path_gain, tf.constant([seed, 1], tf.int32))
    h_hat = h
    if csi_nmse_db is not None:
        std = np.sqrt(10.0 ** (csi_nmse_db / 10.0) / 2.0) * np.sqrt(path_gain.numpy())[:, None]
        shape = (num_devices, num_subcarriers)
        err = std * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
        h_hat = h + tf.constant(err, tf.complex64)
    # updates of one common scale with a per-device spread, weights ~ dataset sizes
    scale = np.exp(rng.normal(0.0, 0.5, (num_devices, 1))).astype(np.float32) * 1e-3
    updates = tf.constant(rng.standard_normal((num_devices, num_values), np.float32) * scale)
    sizes = rng.poisson(10.0, num_devices).astype(np.float64) + 1.0
    weights = tf.constant(sizes / sizes.sum(), tf.float32)
    return updates, weights, h, h_hat, path_gain


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--values", type=int, default=466_698)
    parser.add_argument("--subcarriers", type=int, default=1024)
    parser.add_argument("--controls", default=",".join(CONTROLS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tx-power-dbm", type=float, default=20.0)
    parser.add_argument("--noise-power-dbm", type=float, default=-74.0)
    parser.add_argument("--csi-nmse-db", type=float, default=None,
                        help="Gaussian CSI error (default: perfect CSI)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mallopt", action="store_true",
                        help="experiment: glibc mallopt at start (no mmap for large blocks, "
                             "no trimming), so freed [K, N, F] buffers are reused without "
                             "page faults")
    parser.add_argument("--tiny", action="store_true", help="K = 4, d = 1000, F = 64")
    args = parser.parse_args(argv)
    if args.tiny:
        args.devices, args.values, args.subcarriers, args.repeats = 4, 1000, 64, 2
    if args.mallopt:
        _mallopt()
    controls = [name for name in args.controls.split(",") if name]
    for name in controls:
        if name not in CONTROLS:
            raise ValueError(f"--controls must name some of {sorted(CONTROLS)}, got {name!r}")
    load_start = os.getloadavg()
    updates, weights, h, h_hat, path_gain = _inputs(
        args.devices, args.values, args.subcarriers, args.csi_nmse_db, args.seed
    )
    noise_w = _dbm_to_w(args.noise_power_dbm)
    common = {
        "tx_power_w": _dbm_to_w(args.tx_power_dbm), "noise_power_w": noise_w, "gamma_w": noise_w,
        "path_gain": path_gain,
    }
    built = {name: POWER_CONTROLS[name].build(CONTROLS[name]) for name in controls}

    def call(name, repetition):
        seed = tf.constant([args.seed, repetition], tf.int32)
        started = time.perf_counter()
        result = aggregate(updates, weights, h, h_hat, power_control=built[name], seed=seed,
                           **common)
        result.estimate.numpy()
        result.tx_power_max_w.numpy()
        return time.perf_counter() - started, result

    seconds = {name: [] for name in controls}
    first = {}
    for name in controls:  # warm-up: trace + compile
        first[name], result = call(name, 0)
        if name == "optimal":
            # fraction of (device, symbol) rows whose budget binds (power at P)
            tx = result.tx_power_max_w.numpy()
            devices_at_budget = float(np.mean(tx >= common["tx_power_w"] * (1 - 1e-5)))
    for repetition in range(1, args.repeats + 1):
        for name in controls:
            seconds[name].append(call(name, repetition)[0])
    load_end = os.getloadavg()

    k, d, f = args.devices, args.values, args.subcarriers
    n = -(-d // f)
    print(f"AirComp PHY, one phase: K = {k}, d = {d}, F = {f}, N = {n} "
          f"([K, N, F] = {k * n * f / 1e6:.1f}M entries), {args.repeats} repeats")
    print(f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; "
          f"{os.cpu_count()} CPUs; TF {tf.__version__}")
    print(f"{'control':<22}{'median s':>10}{'min s':>10}{'first s':>10}")
    for name in controls:
        print(f"{name:<22}{statistics.median(seconds[name]):>10.3f}"
              f"{min(seconds[name]):>10.3f}{first[name]:>10.3f}")
    if "optimal" in controls:
        print(f"devices with some symbol at the budget (optimal): {devices_at_budget:.2f}")
    peak = _peak_rss_gib()
    print(f"peak RSS {peak:.2f} GiB")
    summary = {f"{name}_s": round(statistics.median(seconds[name]), 4) for name in controls}
    summary.update({f"{name}_min_s": round(min(seconds[name]), 4) for name in controls})
    summary.update({"mallopt": args.mallopt, "peak_rss_gib": round(peak, 3), "load_start": round(load_start[0], 2),
                    "load_end": round(load_end[0], 2), "K": k, "d": d, "F": f, "N": n})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
