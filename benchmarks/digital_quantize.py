"""Digital OFDMA's quantize-and-sum of a chunk of senders: row by row against one block kernel.

The streamed digital phase (``phy/uplink/digital_ofdma.py::DigitalStream``) quantizes every
sender's update (``quantize_row``: n uniform draws, b bits) and adds it, weighted, to a
float64 sum. This harness times that for one chunk of C senders and n values, in one
process, the two ways interleaved (the row-by-row reference with the tensor copied to
NumPy, as the stream did before ``phy/quantized_sums.py``; and the stream's blocks of 64
rows through the Numba kernel on the tensor's memory), checks that the sums are equal bit
for bit, and prints the medians of process CPU time and wall time and their ratios.

    .venv/bin/python benchmarks/digital_quantize.py --chunk 500 --values 118282 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf

from phy.quantized_sums import add_quantized
from phy.uplink.digital_ofdma import QUANTIZED_ROWS_PER_LAUNCH, quantize_row


def row_by_row(updates: tf.Tensor, weights: np.ndarray, bits: int, seed: int) -> np.ndarray:
    x = updates.numpy()
    rng, total = np.random.default_rng(seed), np.zeros(x.shape[1])
    for weight, row in zip(weights, x, strict=True):
        q, _ = quantize_row(row, bits, rng)
        if weight != 0.0:
            total += weight * q
    return total


def blocks(updates: tf.Tensor, weights: np.ndarray, bits: int, seed: int) -> np.ndarray:
    x = np.asarray(updates)
    rng, total = np.random.default_rng(seed), np.zeros(x.shape[1])
    for start in range(0, x.shape[0], QUANTIZED_ROWS_PER_LAUNCH):
        block = x[start:start + QUANTIZED_ROWS_PER_LAUNCH]
        add_quantized(block, rng.random(block.shape), bits, weights[start:start + block.shape[0]], total)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=500, help="senders in the chunk (C)")
    parser.add_argument("--values", type=int, default=118_282, help="values per sender (n)")
    parser.add_argument("--bits", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    updates = tf.constant(rng.standard_normal((args.chunk, args.values), np.float32) * 1e-3)
    weights = rng.random(args.chunk)
    assert np.array_equal(row_by_row(updates, weights, args.bits, 5), blocks(updates, weights, args.bits, 5))
    times = {"row by row": [], "blocks": []}
    for _ in range(args.repeats):
        for name, function in (("row by row", row_by_row), ("blocks", blocks)):
            cpu, wall = time.process_time(), time.perf_counter()
            function(updates, weights, args.bits, 5)
            times[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    medians = {name: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t))
               for name, t in times.items()}
    print(f"C = {args.chunk}, n = {args.values:,}, b = {args.bits}; median of {args.repeats}; "
          f"load average {np.round(np.array(__import__('os').getloadavg()), 2).tolist()}")
    for name, (cpu, wall) in medians.items():
        print(f"  {name:11s} CPU {cpu:7.3f} s  wall {wall:7.3f} s  ({1e3 * wall / args.chunk:.3f} ms per sender)")
    (c0, w0), (c1, w1) = medians["row by row"], medians["blocks"]
    print(f"  ratio row by row / blocks: CPU {c0 / c1:.2f}x, wall {w0 / w1:.2f}x; the sums equal bit for bit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
