"""Runtime choices of the local training: which backend runs the steps and which
generator draws the noise. None of them changes the method (the objective, its
hyper-parameters, the distribution of the noise); ``backend`` and ``noise`` change the
float rounding and the random numbers, ``jit_compile``, ``device_loop`` and
``device_chunk`` change neither.

The scenario's ``[runtime]`` table (``cosim/scenario.py``) holds the same keys; this
module resolves them for a model and an estimator (:func:`resolve`), with the rules
written once:

============  =========================================================================
key           ``"auto"`` / ``None`` resolves to
============  =========================================================================
backend       ``"numba"`` where the model has Numba steps (the MLP), else
              ``"tensorflow"``
noise         ``"philox"`` (:mod:`native.sampling`), except the TensorFlow backend's
              local reparameterization on a model whose pre-activation noise only
              TensorFlow draws (the convnets): ``"tensorflow"``, which XLA compiles
jit_compile   on for the TensorFlow backend with TensorFlow noise and the local
              reparameterization (XLA fuses its elementwise passes), off otherwise
device_loop   on for the exact estimator on the TensorFlow backend (one device's
              samples stay in cache), off for the local reparameterization
============  =========================================================================

Standard library only (``cosim validate`` imports it without TensorFlow).
"""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "numba", "tensorflow")
NOISE_SOURCES = ("auto", "philox", "tensorflow")
ESTIMATORS = ("reparameterization", "local_reparameterization")


@dataclass(frozen=True)
class Runtime:
    """How the local training runs (see the module docstring for ``"auto"`` and ``None``).

    Attributes
    ----------
    backend : str
        ``"auto"``, ``"numba"`` (the MLP's steps in Numba) or ``"tensorflow"`` (TF's
        graph and autodiff; the path a GPU would use).
    noise : str
        ``"auto"``, ``"philox"`` (Philox-4x32-10 and a ziggurat, :mod:`native.sampling`;
        the same numbers on both backends) or ``"tensorflow"``
        (``tf.random.stateless_normal``; TensorFlow backend only).
    jit_compile : bool or None
        Compile the TensorFlow backend's steps with XLA (not with Philox noise, which
        runs outside XLA).
    device_loop : bool or None
        Run the TensorFlow backend's steps one device at a time (``tf.map_fn``) instead of
        as one [K, ...] batch; same numbers.
    device_chunk : int or None
        Devices per call of the local training (None: all); every device's noise is keyed
        by its global index, so the chunking changes no number and bounds the memory.
    """

    backend: str = "auto"
    noise: str = "auto"
    jit_compile: bool | None = None
    device_loop: bool | None = None
    device_chunk: int | None = 100

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"runtime.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.noise not in NOISE_SOURCES:
            raise ValueError(f"runtime.noise must be one of {NOISE_SOURCES}, got {self.noise!r}")
        if self.device_chunk is not None and int(self.device_chunk) < 1:
            raise ValueError(f"runtime.device_chunk must be >= 1 or None, got {self.device_chunk!r}")


@dataclass(frozen=True)
class ResolvedRuntime:
    """:class:`Runtime` with every ``"auto"`` and ``None`` decided (:func:`resolve`)."""

    backend: str
    noise: str
    jit_compile: bool
    device_loop: bool
    device_chunk: int | None


def resolve(runtime: Runtime, *, estimator: str, has_numba_steps: bool,
            has_philox_lrt: bool) -> ResolvedRuntime:
    """Decide ``runtime`` for a model and an estimator; ``ValueError`` naming the
    ``runtime.`` key for a combination that cannot run.

    Input: ``estimator`` (``"reparameterization"`` or ``"local_reparameterization"``);
    ``has_numba_steps``: the model has Numba steps for this estimator (the MLP);
    ``has_philox_lrt``: its TensorFlow LRT graph can draw Philox noise (the MLP).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    lrt = estimator == "local_reparameterization"
    backend = runtime.backend
    if backend == "auto":
        backend = "numba" if has_numba_steps else "tensorflow"
    elif backend == "numba" and not has_numba_steps:
        raise ValueError("runtime.backend: this model has no Numba steps (the MLP has); use "
                         "'tensorflow' or 'auto' (got 'numba')")
    noise = runtime.noise
    if noise == "auto":
        noise = "tensorflow" if backend == "tensorflow" and lrt and not has_philox_lrt else "philox"
    elif noise == "tensorflow" and backend == "numba":
        raise ValueError("runtime.noise: the Numba backend draws Philox noise; 'tensorflow' "
                         "needs runtime.backend = 'tensorflow' (got 'tensorflow')")
    elif noise == "philox" and backend == "tensorflow" and lrt and not has_philox_lrt:
        raise ValueError("runtime.noise: this model's local-reparameterization graph draws "
                         "its noise with TensorFlow; use 'tensorflow' or 'auto' (got 'philox')")
    jit = runtime.jit_compile
    if jit is None:
        jit = backend == "tensorflow" and noise == "tensorflow" and lrt
    elif jit and (backend != "tensorflow" or noise != "tensorflow"):
        raise ValueError(f"runtime.jit_compile: XLA needs the TensorFlow backend with "
                         f"TensorFlow noise (Philox noise and the Numba steps run outside XLA; "
                         f"resolved: backend {backend!r}, noise {noise!r}) (got true)")
    loop = (not lrt) if runtime.device_loop is None else bool(runtime.device_loop)
    chunk = None if runtime.device_chunk is None else int(runtime.device_chunk)
    return ResolvedRuntime(backend, noise, bool(jit), loop, chunk)
