"""Phase 1's cost under each covariance reading (LRT path, paper-MNIST MLP), side by side.

    python benchmarks/phase1_readings.py --devices 20 precision softplus_std log_std

Prints seconds per ``FusedLRTSteps.rho_phase`` call (min of ``--repeats`` after a
warm-up) and per device, one line per reading, in one process.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from learning.local import covariance
from learning.local.fused_lrt import FusedLRTSteps
from learning.models.model import MLP


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("readings", nargs="*", default=list(covariance.NAMES), choices=covariance.NAMES)
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--rows", type=int, default=10, help="samples per device")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.devices < 1 or args.rows < 1 or args.repeats < 1:
        parser.error(f"--devices, --rows and --repeats must be >= 1, got {args.devices}, {args.rows}, {args.repeats}")
    model = MLP(input_shape=(784,), num_classes=10, hidden_units=(256,) * 5)
    rng = np.random.default_rng(0)
    k, n = args.devices, args.rows
    x = rng.uniform(0, 1, (k, n, 784)).astype(np.float32)
    y = rng.integers(0, 10, (k, n)).astype(np.int32)
    mask = np.ones((k, n), np.float32)
    weights = np.full(k, 1 / k, np.float32)
    mu = np.asarray(model.init_mean(tf.constant([1, 2])))
    rho = np.full(model.num_params, 423.6, np.float32)
    seeds = rng.integers(0, 2**31, (3, k, 2)).astype(np.int32)
    out = np.empty((k, model.num_params), np.float32)
    for name in args.readings:
        steps = FusedLRTSteps(model.dense_layer_sizes, 5, kl_scale=100.0, learning_rate=0.1, min_precision=1.0,
                              nll_mean=False, covariance_parameter=name)
        steps.rho_phase(mu, rho, x, y, mask, weights, seeds, out)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            steps.rho_phase(mu, rho, x, y, mask, weights, seeds, out)
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"{name:14s} rho_phase K={k}: {best:.3f} s, {1000 * best / k:.1f} ms per device", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
