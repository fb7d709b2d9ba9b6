"""A run's real peak memory against ``memory_estimate_bytes``, one dimension at a time
(issue 45).

Each point runs a small synthetic scenario for a few rounds in a fresh Python process
(``--child``), which records its ``VmHWM`` (peak resident set, ``/proc/self/status``)
once everything is imported and once the rounds are done. The run's peak growth is the difference, so
the interpreter, TensorFlow and Numba do not count (the estimate counts them as its
runtime term, ``RUNTIME_BYTES``: the table sets the estimate less that beside the
growth). What the estimate claims is compared with what was measured as *growth
between the points of one dimension*: the other parts of a run (the dataset, the
model, TensorFlow's workspace) are the same at every point of a dimension and cancel.

Dimensions (each on its own base scenario, sized so that its term is tens of MB):

* ``antennas``: ``bs.num_antennas`` N_r in 1, 16, 64 (frequency domain);
* ``domain``: ``ofdm.domain`` frequency against time (N_r = 1, K = 16);
* ``time_buffers``: the same with N_r = 64 antennas and K = 2, where the time domain's
  received grid per antenna sets the peak;
* ``participation``: ``participation.fraction`` 1, 0.5, 0.125;
* ``scheme``: ``uplink.scheme`` analog, digital_ofdma, one_bit, noncoherent_mv (with
  signSGD, which every scheme carries);
* ``massive``: the quickstart's MLP (d = 118,282, MNIST's shape, synthetic samples) at
  K = 10,000 and 100,000 for 3 rounds with the round's devices streamed
  (``runtime.devices_in_memory``), the proposed method on analog, signSGD on one-bit and
  FedAvg on digital OFDMA at 8 bits (its senders in slot groups of at most F), and
  signSGD on one-bit with ``runtime.backend = "numba"`` at K = 10,000 (point 6; its
  other points take the baselines' ``"auto"``, TensorFlow's steps), and SCAFFOLD on
  analog at K = 10,000 (point 7; its control variates c_k on disk,
  ``learning/device_table.py``, in a temporary directory, one version kept after each
  round as a run keeps them); here the
  figure is the whole process's peak (``peak_kib``), not the growth. One sample per
  device at K = 100,000 (a fixed total of 100,000 samples), ten at 10,000
  (``--dimension massive``; hours on two cores, ``--point`` picks points). ``--devices 1000
  --devices-in-memory 200`` runs the same points at another K (ten samples per device,
  120,000 training samples) with that many devices in memory (without it, every device:
  the one-call round); each point also records the peak once its world is built
  (``built_kib``) and the rounds' own peak (``rounds_kib``, with the peak reset after the
  world is built: loading a synthetic dataset has its own peak, above a small round's).

Usage::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/memory_peak.py            # every dimension
    PYTHONPATH=$PWD .venv/bin/python benchmarks/memory_peak.py --dimension antennas
    PYTHONPATH=$PWD .venv/bin/python benchmarks/memory_peak.py --dimension massive --point 2  # one point
    PYTHONPATH=$PWD .venv/bin/python benchmarks/memory_peak.py --json      # a JSON line per point

Prints, per point as it is measured, the measured peak growth in MiB, the estimate
less its runtime term in MiB, and both relative to the dimension's first point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "rounds": 2,
    "data.dataset": "synthetic",
    "data.partition": "iid",
    "data.size_distribution": "shifted_poisson",
    "data.mean_samples_per_device": 4,
    "data.synthetic_classes": 10,
    "data.synthetic_train_size": 2000,
    "data.synthetic_test_size": 100,
    "model.architecture": "mlp",
    "eval.every": 1000,
    "eval.predictive_samples": 2,
    "trace.per_device": False,
}
"""What every point shares: synthetic data, an MLP, no evaluation after round 0."""

MASSIVE_SCHEMES = ({}, {"uplink.scheme": "one_bit", "algorithm.name": "signsgd"},
                   {"uplink.scheme": "digital_ofdma", "algorithm.name": "fedavg"})
"""The massive dimension's schemes at each K: the proposed method on analog, signSGD on
one-bit, FedAvg on digital OFDMA (8 bits per value)."""

DIMENSIONS: dict[str, dict] = {
    # [K, N_r, F] channels: K = 64, F = 1024, a small model (d ~ 2,000, N = 2)
    "antennas": {
        "base": {"cell.num_devices": 64, "ofdm.num_subcarriers": 1024,
                 "data.synthetic_shape": [6, 6, 1], "model.hidden_units": [32]},
        "points": [*({"bs.num_antennas": n} for n in (1, 16, 32, 64)),
                   {"bs.num_antennas": 64, "cell.num_devices": 16}],
    },
    # the time-domain buffers: N = 64 symbols of F = 1024 (d ~ 65,000)
    "domain": {
        "base": {"cell.num_devices": 16, "ofdm.num_subcarriers": 1024,
                 "data.synthetic_shape": [16, 16, 1], "model.hidden_units": [256]},
        "points": [{"ofdm.domain": "frequency"}, {"ofdm.domain": "time"}],
    },
    # the time domain's received grid per antenna where it sets the peak: K = 2, N_r = 64
    # (mrc_strongest: no [F, N_r, N_r] projectors), N = 67, F = 1024
    "time_buffers": {
        "base": {"cell.num_devices": 2, "ofdm.num_subcarriers": 1024, "bs.num_antennas": 64,
                 "bs.combiner": "mrc_strongest", "data.synthetic_shape": [16, 16, 1],
                 "model.hidden_units": [256]},
        "points": [{"ofdm.domain": "frequency"}, {"ofdm.domain": "time"}],
    },
    # per-device vectors and the [K, N, F] grid of the cohort: K = 128, d ~ 100,000
    "participation": {
        "base": {"cell.num_devices": 128, "ofdm.num_subcarriers": 1024,
                 "data.synthetic_shape": [16, 16, 1], "model.hidden_units": [384]},
        "points": [{"participation.fraction": f} for f in (1.0, 0.5, 0.125)],
    },
    # each scheme's own symbols: K = 64, d ~ 100,000, signSGD (the sign schemes carry its votes)
    "scheme": {
        "base": {"algorithm.name": "signsgd", "cell.num_devices": 64, "ofdm.num_subcarriers": 1024,
                 "data.synthetic_shape": [16, 16, 1], "model.hidden_units": [384]},
        "points": [{"uplink.scheme": s} for s in ("analog", "digital_ofdma", "one_bit", "noncoherent_mv")],
    },
    "massive": {  # --point picks some: 0-2 at K = 10,000, 3-5 at 100,000, 6 signSGD on Numba at 10,000,
        # 7 SCAFFOLD (per-device tables on disk) at 10,000
        "timeout_s": 3600.0,  # a K = 100,000 point takes 15-30 minutes
        "base": {"rounds": 3, "data.synthetic_shape": [28, 28, 1], "data.synthetic_test_size": 1000,
                 "model.hidden_units": [128, 128], "ofdm.num_subcarriers": 1024,
                 "algorithm.estimator": "local_reparameterization", "algorithm.kl_scale": "num_devices",
                 "eval.every": 3},
        "points": [
            *({"cell.num_devices": 10_000, "data.mean_samples_per_device": 10,
               "data.synthetic_train_size": 120_000, "runtime.devices_in_memory": 500, **scheme}
              for scheme in MASSIVE_SCHEMES),
            *({"cell.num_devices": 100_000, "data.mean_samples_per_device": 1,
               "data.synthetic_train_size": 100_000, "runtime.devices_in_memory": 500, **scheme}
              for scheme in MASSIVE_SCHEMES),
            {"cell.num_devices": 10_000, "data.mean_samples_per_device": 10,
             "data.synthetic_train_size": 120_000, "runtime.devices_in_memory": 500,
             **MASSIVE_SCHEMES[1], "runtime.backend": "numba"},
            {"cell.num_devices": 10_000, "data.mean_samples_per_device": 10,
             "data.synthetic_train_size": 120_000, "runtime.devices_in_memory": 500,
             "algorithm.name": "scaffold"},
        ],
    },
}


def _status_kib(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> int | None:
    """Reset ``VmHWM`` to the resident set now (``5`` to ``/proc/self/clear_refs``, Linux
    4.0 on), so that what follows is a peak of its own: the resident set then (KiB), or
    None when the reset is refused (the peaks after it then include what came before)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return None
    return _status_kib("VmHWM")


def child(overrides: dict) -> dict:
    """Run ``overrides`` (on the default scenario) for its rounds in this process; the
    peak resident set (KiB) after the imports (``baseline_kib``), once the world is built
    (the dataset, the channel, the model: ``built_kib``), the resident set then
    (``held_kib``, where the peak is reset: :func:`_reset_peak`), the peak of the rounds
    after each (``rounds_kib``, from that reset), the whole process's (``peak_kib``) and
    the estimate (bytes)."""
    import shutil
    import tempfile

    import numpy as np  # noqa: F401  (everything a run imports, before the baseline)
    import tensorflow as tf  # noqa: F401

    from cosim.engine import Engine
    from cosim.scenario import load_scenario
    from cosim.scenario.derived import memory_estimate_bytes

    scratch = Path(tempfile.mkdtemp(prefix="memory-peak-"))  # the device tables' directory, if any
    scenario = load_scenario(None, {**overrides, "trace.path": str(scratch / "point.h5")})
    baseline_kib = _status_kib("VmHWM")
    engine = Engine(scenario)
    state = engine.initial_state()
    built_kib, rounds_kib = _status_kib("VmHWM"), []
    held_kib = _reset_peak()
    tables = getattr(engine.algorithm, "table_store", None)
    try:
        for t in range(scenario.rounds):
            state, _ = engine.run_round(t, state)
            rounds_kib.append(_status_kib("VmHWM"))
            if tables is not None:  # as a run with a checkpoint every round keeps them
                tables.keep(state)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"baseline_kib": baseline_kib, "built_kib": built_kib, "held_kib": held_kib,
            "rounds_kib": rounds_kib, "peak_kib": max(built_kib, _status_kib("VmHWM")),
            "num_params": engine.num_params,
            "estimate_bytes": memory_estimate_bytes(scenario, engine.num_params, engine.world.devices_in_memory)}


def measure(overrides: dict, *, timeout_s: float = 600.0) -> dict:
    """:func:`child` in a fresh process (this file with ``--child``): its JSON, with
    ``growth_bytes`` = VmHWM after the rounds - VmHWM after the imports."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    process = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(overrides)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    if process.returncode != 0:
        raise RuntimeError(f"{overrides}: exit {process.returncode}\n{err.decode()[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["growth_bytes"] = (result["peak_kib"] - result["baseline_kib"]) * 1024
    return result


def measure_point(name: str, point: dict) -> dict:
    """:func:`measure` of ``point`` on dimension ``name``'s base: the overrides and the figures."""
    overrides = {**BASE, **DIMENSIONS[name]["base"], **point}
    return {"dimension": name, "point": point,
            **measure(overrides, timeout_s=DIMENSIONS[name].get("timeout_s", 600.0))}


HEADER = ("| dimension | point | d | measured growth MiB | estimate less the runtime MiB | measured - first MiB "
          "| estimate - first MiB |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |")


def table_row(row: dict, first: dict) -> str:
    """One Markdown row: the measured growth and the estimate less its runtime term, and
    both against the dimension's first point ``first`` (MiB)."""
    from cosim.scenario.derived import RUNTIME_BYTES

    point = ", ".join(f"{k} = {json.dumps(v)}" for k, v in row["point"].items())
    return (f"| {row['dimension']} | {point} | {row['num_params']:,} | {row['growth_bytes'] / 2**20:,.1f} "
            f"| {(row['estimate_bytes'] - RUNTIME_BYTES) / 2**20:,.1f} "
            f"| {(row['growth_bytes'] - first['growth_bytes']) / 2**20:+,.1f} "
            f"| {(row['estimate_bytes'] - first['estimate_bytes']) / 2**20:+,.1f} |")


def massive_points(devices: int, in_memory: int | None) -> list[dict]:
    """The ``massive`` dimension's points (:data:`MASSIVE_SCHEMES`) at ``devices`` = K with
    ten samples per device and 120,000 training samples (the K = 10,000 points' data), ``in_memory`` devices in memory (None: every device,
    the one-call round)."""
    chunk = devices if in_memory is None else in_memory
    return [{"cell.num_devices": devices, "data.mean_samples_per_device": 10,
             "data.synthetic_train_size": 120_000, "runtime.devices_in_memory": chunk, **scheme}
            for scheme in MASSIVE_SCHEMES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dimension", action="append", choices=sorted(DIMENSIONS),
                        help="measure only this dimension (repeatable; default: all)")
    parser.add_argument("--point", action="append", type=int,
                        help="measure only the dimensions' point of this index (repeatable; default: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    parser.add_argument("--devices", type=int, help="massive only: these K instead of 10,000 and "
                        "100,000 (ten samples per device, 120,000 training samples)")
    parser.add_argument("--devices-in-memory", type=int, help="massive with --devices: devices in "
                        "memory (default: every device, the one-call round)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.devices is not None:
        DIMENSIONS["massive"]["points"] = massive_points(args.devices, args.devices_in_memory)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    if not args.json:
        print(HEADER, flush=True)
    for name in args.dimension or list(DIMENSIONS):
        first = None
        for index, point in enumerate(DIMENSIONS[name]["points"]):  # each line as soon as it is measured
            if args.point and index not in args.point:
                continue
            row = measure_point(name, point)
            first = first or row
            print(json.dumps(row) if args.json else table_row(row, first), flush=True)


if __name__ == "__main__":
    main()
