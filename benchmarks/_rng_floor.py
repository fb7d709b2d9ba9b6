"""The random-number floor of the exact estimator: drawing K*M*d*E*2 standard normals.

The exact ``reparameterization`` estimator needs a fresh weight sample per device,
MC sample, local step and phase, i.e. ``K * M * d * E * 2`` standard normals per
round; no implementation of that estimator can be faster than drawing them. This
module times TensorFlow's normal generators on this machine and reports the
fastest:

* ``tf.random.stateless_normal`` with ``alg="philox"``, ``"threefry"`` and
  ``"auto_select"``, in a ``tf.function`` (TF's own multi-threaded CPU kernels);
* a ``tf.random.Generator`` (philox, and threefry where the CPU kernel exists);
* the same stateless ops compiled with XLA (``jit_compile=True``).

The draws are chunked (``chunk`` normals per call, default 2**25 = 128 MiB) so that
memory stays bounded; every chunk is a separate call with a fresh seed and the
output is discarded. Candidates are first ranked on a fraction of the total (one
pass each), then the fastest is timed on the full count.

For comparison, :func:`fused_seconds` times the project's own generator
(:mod:`learning.sampling`, which the exact estimator uses by default) on the same
count, the way a round calls it: one ``Layout.fill`` of ``mean + std * eps`` for all
parameter tensors per device and local step. It is *not* the floor the issue
defines (TF's fastest generator); it is what the round's sampling costs now.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import tensorflow as tf

DEFAULT_CHUNK = 2**25


def _stateless(alg: str, chunk: int, jit: bool) -> Callable[[tf.Tensor], tf.Tensor]:
    @tf.function(jit_compile=jit)
    def draw(seed):
        return tf.random.stateless_normal([chunk], seed, alg=alg)

    return draw


def _generator(alg: str, chunk: int, jit: bool) -> Callable[[tf.Tensor], tf.Tensor]:
    gen = tf.random.Generator.from_seed(1, alg=alg)

    @tf.function(jit_compile=jit)
    def draw(seed):
        del seed
        return gen.normal([chunk])

    return draw


def candidates(chunk: int = DEFAULT_CHUNK) -> dict[str, Callable[[tf.Tensor], tf.Tensor]]:
    """Every generator to try, by name; each draws ``chunk`` normals from a seed [2] int32."""
    return {
        "stateless_normal/philox": _stateless("philox", chunk, False),
        "stateless_normal/threefry": _stateless("threefry", chunk, False),
        "stateless_normal/auto_select": _stateless("auto_select", chunk, False),
        "Generator/philox": _generator("philox", chunk, False),
        "Generator/threefry": _generator("threefry", chunk, False),
        "stateless_normal/philox+XLA": _stateless("philox", chunk, True),
        "stateless_normal/threefry+XLA": _stateless("threefry", chunk, True),
    }


def _time_draws(draw, total: int, chunk: int) -> float:
    calls = max(1, -(-total // chunk))
    start = time.perf_counter()
    for i in range(calls):
        out = draw(tf.constant([i, 7], tf.int32))
    out.numpy()  # CPU eager is synchronous; this just keeps the last result alive
    return time.perf_counter() - start


def rank_generators(
    total: int, chunk: int = DEFAULT_CHUNK, fraction: float = 0.05
) -> dict[str, float | None]:
    """Normals per second of every candidate on ``fraction * total`` draws (None: unsupported)."""
    sample = max(chunk, int(total * fraction))
    rates: dict[str, float | None] = {}
    for name, draw in candidates(chunk).items():
        try:
            draw(tf.constant([0, 1], tf.int32))  # trace / compile, and probe support
        except (tf.errors.OpError, ValueError, TypeError):
            rates[name] = None
            continue
        seconds = _time_draws(draw, sample, chunk)
        rates[name] = max(1, -(-sample // chunk)) * chunk / seconds
    return rates


def floor_seconds(
    total: int, repeats: int = 3, chunk: int = DEFAULT_CHUNK, fraction: float = 0.05
) -> dict:
    """Median seconds to draw ``total`` normals with the fastest generator.

    Returns a dict: ``seconds`` (median), ``samples`` (every repetition), ``generator``
    (name of the fastest), ``rates`` (normals/s of every candidate on the ranking
    pass), ``total`` and ``chunk``.
    """
    chunk = int(min(chunk, total))
    rates = rank_generators(total, chunk, fraction)
    best = max((n for n, r in rates.items() if r), key=lambda n: rates[n])
    draw = candidates(chunk)[best]
    draw(tf.constant([0, 1], tf.int32))
    samples = [_time_draws(draw, total, chunk) for _ in range(repeats)]
    return {
        "seconds": statistics.median(samples),
        "samples": samples,
        "generator": best,
        "rates": rates,
        "total": int(total),
        "chunk": chunk,
    }


def fused_seconds(sizes, num_mc: int, calls: int, repeats: int = 3) -> dict:
    """Median seconds of ``calls`` fused fills (``learning.sampling.Layout``) of ``num_mc``
    samples of tensors of ``sizes`` elements, i.e. ``calls * num_mc * sum(sizes)`` normals."""
    import numpy as np

    from learning.sampling import Layout

    layout = Layout(sizes, num_mc)
    d = int(sum(sizes))
    mean, std = np.zeros(d, np.float32), np.full(d, 0.05, np.float32)
    layout.fill(mean, std, (0, 1))  # compile (or load the cache)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(calls):
            layout.fill(mean, std, (i, 7))
        samples.append(time.perf_counter() - start)
    return {"seconds": statistics.median(samples), "samples": samples,
            "total": calls * num_mc * d}
