"""FedAvg's local training, TensorFlow against Numba, at the quickstart's MLP (issue 61).

Usage::

    PYTHONPATH=$PWD nice -n 19 .venv/bin/python benchmarks/fedavg_step.py                 # K = 100, 1,000
    PYTHONPATH=$PWD .venv/bin/python benchmarks/fedavg_step.py --devices 10 --repeats 2   # a smoke run

The job is ``vs_flower.py``'s: ``scenarios/quickstart.toml`` with ``algorithm.name =
"fedavg"`` and ``cell.num_devices = K`` (MNIST, the MLP 784-128-128-10, d = 118,282,
Poisson(10) single-class devices, E = 3 full-batch steps, eta = 0.05). For each K the
world is built once (its device data and w_0), then FedAvg is built twice from it,
``runtime.backend = "tensorflow"`` (:class:`learning.algorithms.fedavg.LocalSGD`: all K
devices batched, one TensorFlow call per step) and ``"numba"``
(:class:`~learning.algorithms.fedavg.NumbaSGD`: device by device,
``learning/local/fused_sgd.py``), and each one's ``local_update`` (all K devices' E
steps and the updates ``w_k - w_0`` [K, d]) is called once untimed (tracing, the
kernels' first call), then ``--repeats`` times alternately (TF, Numba, TF, ...; this
machine's speed drifts within minutes). Printed: the median seconds per call of each,
per device, their ratio, and how far the Numba updates and ``train_loss`` are from
TensorFlow's at this size (``max|numba - tf| / max|tf|``); for each device whose updates
differ by more than 1e-5 of the largest (a hidden unit's pre-activation within float32
rounding of 0 in some step, where the summation order picks the ReLU's side), how far
each side is from the same steps in float64 (:func:`float64_updates`); last, one JSON
line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own helpers
from _provenance import git_commit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # as `cosim` does

ROOT = Path(__file__).resolve().parents[1]


def _positive_ints(text: str) -> list[int]:
    values = [int(part) for part in text.split(",")]
    if not values or min(values) < 1:
        raise ValueError
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="100,1000", help="comma-separated K values (default 100,1000)")
    parser.add_argument("--repeats", default="5", help="timed calls of each backend per K (default 5)")
    args = parser.parse_args(argv)
    try:
        args.devices = _positive_ints(args.devices)
    except ValueError:
        parser.error(f"--devices {args.devices!r}: must be comma-separated integers >= 1")
    try:
        args.repeats = _positive_ints(args.repeats)[0]
    except ValueError:
        parser.error(f"--repeats {args.repeats!r}: must be an integer >= 1")
    return args


def float64_updates(w0, x, y, n: int, layer_sizes, learning_rate: float, steps: int):
    """One device's E full-batch steps of the MLP in float64 NumPy (the first ``n`` rows
    of ``x`` [B, in], ``y`` [B]): its update ``w_k - w_0`` [d], the reference for the
    devices where the two backends differ."""
    import numpy as np

    w, x, y = w0.astype(np.float64), x[:n].astype(np.float64), y[:n]
    for _ in range(steps):
        hs, params, at = [x], [], 0
        for i, (n_in, n_out) in enumerate(layer_sizes):
            kernel, bias = w[at : at + n_in * n_out].reshape(n_in, n_out), w[at + n_in * n_out : at + n_in * n_out + n_out]
            params.append((at, kernel))
            at += n_in * n_out + n_out
            z = hs[-1] @ kernel + bias
            hs.append(np.maximum(z, 0) if i < len(layer_sizes) - 1 else z)
        p = np.exp(hs[-1] - hs[-1].max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(n), y] -= 1
        delta = p / n
        for i in range(len(layer_sizes) - 1, -1, -1):
            (at, kernel), (n_in, n_out) = params[i], layer_sizes[i]
            grad_kernel, grad_bias = hs[i].T @ delta, delta.sum(0)
            delta = (delta @ kernel.T) * (hs[i] > 0)
            w[at : at + n_in * n_out] -= learning_rate * grad_kernel.ravel()
            w[at + n_in * n_out : at + n_in * n_out + n_out] -= learning_rate * grad_bias
    return w - w0


def measure(devices: int, repeats: int) -> dict:
    """The two backends' ``local_update`` seconds for K = ``devices`` (medians) and the
    Numba result's distance to TensorFlow's."""
    import numpy as np
    import tensorflow as tf

    from cosim.scenario import load_scenario
    from cosim.world import build_world
    from learning.algorithms import build
    from learning.runtime import Runtime

    scenario = load_scenario(None, {"algorithm.name": "fedavg", "cell.num_devices": devices})
    world = build_world(scenario)
    data, hyper = world.device_data, scenario.hyper_parameters()
    algorithms = {backend: build("fedavg", world.model, devices, runtime=Runtime(backend=backend), **hyper)
                  for backend in ("tensorflow", "numba")}
    state, seed = world.initial_state(), tf.constant([0, 0])
    results = {backend: algo.local_update(0, state, None, data, seed) for backend, algo in algorithms.items()}
    want, got = (np.asarray(results[b][0]) for b in ("tensorflow", "numba"))
    loss_want, loss_got = (float(results[b][2]["train_loss"]) for b in ("tensorflow", "numba"))
    update_error = float(np.abs(got - want).max() / np.abs(want).max())
    # devices off the conformance bound (1e-5 of the largest update): which side is off float64
    off = np.flatnonzero(np.abs(got - want).max(1) > 1e-5 * np.abs(want).max())
    sizes = np.asarray(tf.reduce_sum(data.mask, -1)).astype(int)
    x = np.asarray(data.x).reshape(devices, data.x.shape[1], -1)
    reference = {int(k): float64_updates(np.asarray(state.w), x[k], np.asarray(data.y)[k], sizes[k],
                                         world.model.layer_sizes, hyper["learning_rate"], hyper["local_steps"])
                 for k in off}
    off_devices = [{"device": k, "tensorflow_vs_float64": float(np.abs(want[k] - ref).max()),
                    "numba_vs_float64": float(np.abs(got[k] - ref).max())} for k, ref in reference.items()]
    del results, want, got
    seconds: dict[str, list[float]] = {backend: [] for backend in algorithms}
    for _ in range(repeats):
        for backend, algo in algorithms.items():
            begun = time.perf_counter()
            out = algo.local_update(0, state, None, data, seed)
            np.asarray(out[2]["train_loss"])  # the call's results exist
            seconds[backend].append(time.perf_counter() - begun)
            del out
    medians = {backend: statistics.median(values) for backend, values in seconds.items()}
    return {"devices": devices, "num_params": int(world.model.num_params), "mean_samples": float(sizes.mean()),
            "padded_rows": int(data.mask.shape[1]), "tensorflow_s": medians["tensorflow"],
            "numba_s": medians["numba"], "speedup": medians["tensorflow"] / medians["numba"],
            "seconds": seconds, "update_error": update_error,
            "train_loss_error": abs(loss_got - loss_want) / abs(loss_want), "off_devices": off_devices}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    load = os.getloadavg()
    rows = [measure(devices, args.repeats) for devices in args.devices]
    print("| K | d | mean samples (padded to) | TF s/call | Numba s/call | TF ms/device | Numba ms/device "
          "| TF / Numba | updates max err / max | train_loss rel err |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        k = r["devices"]
        print(f"| {k:,} | {r['num_params']:,} | {r['mean_samples']:.1f} ({r['padded_rows']}) "
              f"| {r['tensorflow_s']:.3f} | {r['numba_s']:.3f} | {1e3 * r['tensorflow_s'] / k:.2f} "
              f"| {1e3 * r['numba_s'] / k:.2f} | {r['speedup']:.1f}x | {r['update_error']:.1e} "
              f"| {r['train_loss_error']:.1e} |")
    for r in rows:
        for o in r["off_devices"]:
            print(f"K = {r['devices']:,}: device {o['device']} beyond 1e-5 of the largest update; max|update - "
                  f"float64| TF {o['tensorflow_vs_float64']:.1e}, Numba {o['numba_vs_float64']:.1e}")
    print(json.dumps({"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
                      "commit": git_commit(), "load_before": load, "load_after": os.getloadavg(),
                      "repeats": args.repeats, "rows": rows}))


if __name__ == "__main__":
    main()
