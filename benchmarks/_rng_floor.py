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

For comparison, :class:`FloorDraws` also times the project's own generator
(:mod:`native.sampling`, which the exact estimator uses by default) on the same
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


class FloorDraws:
    """The floor and our fused sampler on the same count, timed one repetition at a time.

    Building it ranks TF's generators (:func:`rank_generators`) and compiles the
    fastest and the fused fill; every :meth:`step` times one full draw of ``total``
    normals with each, and :meth:`result` sums them up: the floor's ``seconds``
    (median), ``samples``, ``generator`` (the fastest), ``rates`` (normals/s of every
    candidate on the ranking pass), ``total`` and ``chunk``, and the fused sampler's
    ``seconds``, ``samples`` and ``total`` under ``"fused"``.

    Parameters
    ----------
    total : int
        K * M * d * E * 2.
    sizes, num_mc, calls :
        The fused fill's tensor sizes, M and fills per round (K * E * 2).
    """

    def __init__(self, total: int, sizes, num_mc: int, calls: int, chunk: int = DEFAULT_CHUNK,
                 fraction: float = 0.05):
        import numpy as np

        from native.sampling import Layout

        self.total = int(total)
        self.chunk = int(min(chunk, total))
        self.rates = rank_generators(self.total, self.chunk, fraction)
        self.generator = max((n for n, r in self.rates.items() if r), key=lambda n: self.rates[n])
        self.draw = candidates(self.chunk)[self.generator]
        self.draw(tf.constant([0, 1], tf.int32))
        self.layout = Layout(sizes, num_mc)
        d = int(sum(sizes))
        self.mean, self.std = np.zeros(d, np.float32), np.full(d, 0.05, np.float32)
        self.layout.fill(self.mean, self.std, (0, 1))  # compile (or load the cache)
        self.calls, self.fused_total = int(calls), int(calls) * int(num_mc) * d
        self.samples: list[float] = []
        self.fused_samples: list[float] = []

    def step(self) -> float:
        """Time one floor draw and one fused draw; returns the floor's seconds."""
        self.samples.append(_time_draws(self.draw, self.total, self.chunk))
        start = time.perf_counter()
        for i in range(self.calls):
            self.layout.fill(self.mean, self.std, (i, 7))
        self.fused_samples.append(time.perf_counter() - start)
        return self.samples[-1]

    def result(self) -> dict:
        return {
            "seconds": statistics.median(self.samples), "samples": self.samples,
            "generator": self.generator, "rates": self.rates, "total": self.total,
            "chunk": self.chunk,
            "fused": {"seconds": statistics.median(self.fused_samples),
                      "samples": self.fused_samples, "total": self.fused_total},
        }
