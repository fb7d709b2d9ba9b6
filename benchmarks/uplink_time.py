"""The time-domain uplink's cost, side by side with the frequency-domain path (issue 21).

Two parts, each interleaved (one call of every configuration per repetition, so the
machine's drift hits all alike), medians printed side by side:

1. **Per phase**, :func:`phy.aircomp.aggregate` at the paper's size (K = 100 devices,
   d = 466,698 values, F = 1024 subcarriers, so N = 456 OFDM symbols; optimal power
   control, P = 20 dBm, sigma_z^2 = gamma = -74 dBm), on one channel: a 16-tap i.i.d.
   Rayleigh delay line per device with path loss r^-4 (300 m disk), cyclic prefix 72:
   ``frequency`` (eq. ``ReceivedSignal`` on the taps' response), and the time-domain
   uplink ``time aligned`` (no offsets: every device is summed on the subcarriers),
   ``time in CP + CFO`` (timing offsets U[0, 40] samples, inside the prefix, and CFO
   U[-0.02, 0.02]: the CFO series, 5 IFFTs per OFDM symbol), ``time in CP + CFO per
   device`` (the same offsets, every device through its own IFFT: the direct map the
   series replaces), ``time beyond CP + CFO`` (offsets U[0, 120]: inter-symbol taps, two
   IFFTs per device).
2. **Per round**, :meth:`cosim.engine.Engine.run_round` of ``scenarios/paper_mnist.toml``
   with the local reparameterization (``lrt``) on the scenario's own data (MNIST; on
   synthetic data the paper's learning rate diverges within rounds and the rounds would
   time NaN arithmetic), in the frequency domain and in the time domain with the
   ``in CP + CFO`` offsets; the PHY seconds of each round are measured by the same
   stopwatches as ``round_time.py``, and rounds with non-finite updates are counted.

The last line of stdout is one JSON object: per-phase medians (``<config>_s``), the
rounds (``lrt_frequency_round_s``, ``lrt_time_round_s``, their PHY seconds,
``time_round_uplink_extra_s`` their difference) and ``time_uplink_per_lrt_round``: the
time-domain uplink of a round (both phases, the ``in CP + CFO`` configuration, from
part 1; with ``--skip-phy`` the time-domain round's PHY seconds) over the
frequency-domain LRT round (the issue's target: at most 0.5). ``--set KEY=VALUE``
overrides both rounds' scenario (e.g. the phase-1 reading).

Usage::

    .venv/bin/python benchmarks/uplink_time.py            # paper size
    .venv/bin/python benchmarks/uplink_time.py --tiny     # seconds: K = 4, d = 1000, F = 64
    .venv/bin/python benchmarks/uplink_time.py --skip-rounds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import tensorflow as tf

from phy import geometry
from phy.aircomp import aggregate
from phy.channel import IidRayleigh
from phy.ofdm_time import TimeDomainUplink
from phy.parameters import POWER_CONTROLS

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "time aligned": (0.0, 0.0),
    "time in CP + CFO": (40.0, 0.02),
    "time beyond CP + CFO": (120.0, 0.02),
}


def _dbm_to_w(dbm: float) -> float:
    return 10.0 ** (dbm / 10.0) / 1e3


def _phy_inputs(num_devices, num_values, num_subcarriers, cyclic_prefix, num_taps, seed):
    rng = np.random.default_rng(seed)
    deployment = geometry.uniform_disk(num_devices, 300.0, 10.0, rng)
    path_gain = tf.constant(geometry.path_gain(deployment.distances_m, 4.0), tf.float32)
    bandwidth = num_subcarriers * 30e3
    channel = IidRayleigh(num_subcarriers, num_taps, 1.0 / bandwidth)
    a, tau = (t.numpy() for t in channel.cir(path_gain, tf.constant([seed, 1], tf.int32)))
    geometry_ = {"bandwidth_hz": bandwidth, "num_subcarriers": num_subcarriers,
                 "cyclic_prefix_length": cyclic_prefix}
    h = tf.constant(TimeDomainUplink.from_paths(a, tau, **geometry_).frequency_response())
    uplinks = {}
    for name, (timing_max, cfo_max) in CONFIGS.items():
        uplinks[name] = TimeDomainUplink.from_paths(
            a, tau, **geometry_, timing_offset_samples=rng.uniform(0, timing_max, num_devices),
            cfo_subcarriers=rng.uniform(-cfo_max, cfo_max, num_devices))
    uplinks["time in CP + CFO per device"] = dataclasses.replace(  # the same offsets
        uplinks["time in CP + CFO"], max_series_terms=0)
    scale = np.exp(rng.normal(0.0, 0.5, (num_devices, 1))).astype(np.float32) * 1e-3
    updates = tf.constant(rng.standard_normal((num_devices, num_values), np.float32) * scale)
    sizes = rng.poisson(10.0, num_devices).astype(np.float64) + 1.0
    weights = tf.constant(sizes / sizes.sum(), tf.float32)
    return updates, weights, h, path_gain, uplinks


def _phy_part(args) -> dict:
    updates, weights, h, path_gain, uplinks = _phy_inputs(
        args.devices, args.values, args.subcarriers, args.cyclic_prefix, args.taps, args.seed)
    noise_w = _dbm_to_w(-74.0)
    common = {"power_control": POWER_CONTROLS["optimal"].build({}), "tx_power_w": _dbm_to_w(20.0),
              "noise_power_w": noise_w, "gamma_w": noise_w, "path_gain": path_gain}
    configs = {"frequency": None, **uplinks}
    samples = {name: [] for name in configs}
    for repetition in range(args.repeats + 1):
        for name, uplink in configs.items():
            start = time.perf_counter()
            result = aggregate(updates, weights, h, h, seed=tf.constant([1, repetition]),
                               uplink=uplink, **common)
            result.estimate.numpy()
            if repetition > 0:  # the first call of each traces and compiles
                samples[name].append(time.perf_counter() - start)
    isi = {name: int((~u.isi_free()).sum()) for name, u in uplinks.items()}
    print(f"\nper phase: K = {args.devices}, d = {args.values:,}, F = {args.subcarriers}, "
          f"C = {args.cyclic_prefix}, {args.taps}-tap channels, median of {args.repeats}")
    print(f"{'configuration':<24} {'s/phase':>8} {'min':>8} {'x frequency':>12}  devices with ISI")
    base = statistics.median(samples["frequency"])
    out = {}
    for name, values in samples.items():
        median = statistics.median(values)
        out[f"{name.replace(' ', '_').replace('+', 'and')}_s"] = median
        print(f"{name:<24} {median:8.3f} {min(values):8.3f} {median / base:12.2f}  "
              f"{isi.get(name, 0)}")
    return out


def _round_part(args) -> dict:
    import _project_round

    from cosim.scenario import load_scenario

    base = ['algorithm.estimator="local_reparameterization"', "eval.every=1000000"]
    if args.tiny:
        base += ['data.dataset="synthetic"', "data.synthetic_train_size=1000", "cell.num_devices=4", "model.hidden_units=[16, 16]", "ofdm.num_subcarriers=64",
                 "data.synthetic_shape=[6, 6, 1]", "data.synthetic_test_size=50",
                 "algorithm.mc_samples=2", "algorithm.local_steps=2"]
    time_domain = ['ofdm.domain="time"', f"channel.num_taps={args.taps}",
                   "sync.timing_offset_max_samples=40.0" if not args.tiny else
                   "sync.timing_offset_max_samples=2.0", "sync.cfo_max_subcarriers=0.02"]
    rounds = {}
    for name, extra in (("frequency", []), ("time", time_domain)):
        scenario = load_scenario(ROOT / "scenarios" / "paper_mnist.toml",
                                 overrides=base + extra + list(args.set))
        rounds[name] = _project_round.ProjectRounds(scenario, warmup=1)
    for _ in range(args.round_repeats):
        for runner in rounds.values():
            runner.step()
    out = {}
    data = "synthetic data" if args.tiny else "MNIST"
    print(f"\nLRT rounds (paper_mnist, {data}{', ' if args.set else ''}{' '.join(args.set)}), "
          f"median of {args.round_repeats}")
    print(f"{'uplink':<12} {'s/round':>8} {'PHY s':>8} {'non-finite rounds':>18}")
    for name, runner in rounds.items():
        seconds, phy = statistics.median(runner.samples), statistics.median(runner.phy)
        out[f"lrt_{name}_round_s"] = seconds
        out[f"lrt_{name}_round_phy_s"] = phy
        out[f"lrt_{name}_nonfinite_rounds"] = runner.nonfinite_rounds
        print(f"{name:<12} {seconds:8.3f} {phy:8.3f} {runner.nonfinite_rounds:18d}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--values", type=int, default=466_698)
    parser.add_argument("--subcarriers", type=int, default=1024)
    parser.add_argument("--cyclic-prefix", type=int, default=72)
    parser.add_argument("--taps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--round-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-rounds", action="store_true")
    parser.add_argument("--skip-phy", action="store_true",
                        help="only the rounds (the ratio then uses their PHY seconds)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="scenario override of both rounds (repeatable), e.g. "
                             "algorithm.covariance_parameter=\"precision\"")
    parser.add_argument("--tiny", action="store_true", help="K = 4, d = 1000, F = 64, C = 16")
    args = parser.parse_args(argv)
    if args.tiny:
        args.devices, args.values, args.subcarriers, args.cyclic_prefix = 4, 1000, 64, 16
        args.taps, args.repeats, args.round_repeats = 4, 2, 1
        CONFIGS.update({"time in CP + CFO": (2.0, 0.02), "time beyond CP + CFO": (20.0, 0.02)})
    load = os.getloadavg()
    out = {} if args.skip_phy else _phy_part(args)
    if not args.skip_rounds:
        out.update(_round_part(args))
        out["time_round_uplink_extra_s"] = (out["lrt_time_round_phy_s"]
                                            - out["lrt_frequency_round_phy_s"])
        print(f"time-domain PHY per round - frequency-domain PHY per round: "
              f"{out['time_round_uplink_extra_s']:.3f} s")
        uplink_round = (out["lrt_time_round_phy_s"] if args.skip_phy
                        else 2 * out["time_in_CP_and_CFO_s"])
        out["time_uplink_per_lrt_round"] = uplink_round / out["lrt_frequency_round_s"]
        what = "the time round's PHY" if args.skip_phy else "2 phases, in CP + CFO"
        print(f"\ntime-domain uplink per round ({what}) / LRT round: "
              f"{uplink_round:.3f} / {out['lrt_frequency_round_s']:.3f} = "
              f"{out['time_uplink_per_lrt_round']:.2f} (target <= 0.5)")
    out["load"] = [load[0], os.getloadavg()[0]]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
