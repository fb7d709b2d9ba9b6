"""Runtime choices of the local training: which backend runs the steps and which
generator draws the noise. None of them changes the method (the objective, its
hyper-parameters, the distribution of the noise). ``backend``, ``noise`` and
``jit_compile`` change the random numbers or the float rounding (XLA draws other
TensorFlow normals than TF's CPU kernels); ``device_loop`` and ``device_chunk`` keep
the maths and the noise and may move the last float bits of the TensorFlow backend.

The scenario's ``[runtime]`` table (``cosim/scenario/tables.py``) holds the same keys; this
module resolves them for an algorithm, a model and an estimator (:func:`resolve`), with
the rules written once. ``"auto"`` (or None) honours the keys that are set:

============  =========================================================================
key           ``"auto"`` / ``None`` resolves to
============  =========================================================================
backend       ``"tensorflow"`` when ``noise = "tensorflow"`` or ``jit_compile = true``
              is asked for, else ``"numba"`` where the model has Numba steps (the MLP,
              :data:`NUMBA_ARCHITECTURES`), else ``"tensorflow"``
noise         ``"tensorflow"`` when ``jit_compile = true``, or for the TensorFlow
              backend's local reparameterization on a model whose pre-activation noise
              only TensorFlow draws (the convnets); else ``"philox"`` (:mod:`native.sampling`)
jit_compile   on for the TensorFlow backend with TensorFlow noise and the local
              reparameterization (XLA fuses its elementwise passes), off otherwise
device_loop   on for the exact estimator on the TensorFlow backend (one device's
              samples stay in cache), off otherwise (it applies to that backend only)
============  =========================================================================

The baselines draw no noise and take ``backend`` and ``jit_compile`` only: ``"auto"``
is TensorFlow (off unless ``jit_compile = true``); FedAvg, FedProx and signSGD on the
MLP (:data:`NUMBA_BASELINES`) also run on ``backend = "numba"`` (their E gradient steps
device by device, :mod:`learning.local.fused_sgd`; signSGD's are FedAvg's, its sign and
error memory follow in TensorFlow), the other baselines refuse it, and all refuse Philox
noise (:func:`check_tensorflow_only`).

Standard library only (``cosim validate`` imports it without TensorFlow).
"""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "numba", "tensorflow")
NOISE_SOURCES = ("auto", "philox", "tensorflow")
ESTIMATORS = ("reparameterization", "local_reparameterization")
NUMBA_ARCHITECTURES = ("mlp",)
"""Architectures the Numba backend runs (both estimators), and whose TensorFlow LRT graph
can draw Philox noise: the plain ReLU MLP."""
PROPOSED_METHOD = "bayes_aircomp"
"""The algorithm whose ``"auto"`` may take the Numba backend and Philox noise."""
NUMBA_BASELINES = ("fedavg", "fedprox", "signsgd")
"""Baselines with Numba steps for the MLP (``runtime.backend = "numba"``, asked for
explicitly: their ``"auto"`` is TensorFlow): those whose local solver is FedAvg's plain
E gradient steps, with FedProx's proximal term or without (signSGD takes the sign of
FedAvg's update); the others run on TensorFlow only. By name, as :func:`resolve` is
asked with the algorithm's name and this module imports no algorithm."""
DEVICE_CHUNK = 100
"""Default of ``device_chunk``."""


@dataclass(frozen=True)
class Runtime:
    """How the local training runs (see the module docstring for ``"auto"`` and ``None``).

    Attributes
    ----------
    backend : str
        ``"auto"``, ``"numba"`` (the MLP's steps in Numba: the proposed method's, FedAvg's,
        FedProx's and signSGD's) or ``"tensorflow"`` (TF's graph and autodiff; the path a GPU would use).
    noise : str
        ``"auto"``, ``"philox"`` (Philox-4x32-10 and a ziggurat, :mod:`native.sampling`;
        the same numbers on both backends) or ``"tensorflow"``
        (``tf.random.stateless_normal``; TensorFlow backend only).
    jit_compile : bool or None
        Compile the TensorFlow backend's steps with XLA (TensorFlow noise only).
    device_loop : bool or None
        Run the TensorFlow backend's steps one device at a time (``tf.map_fn``) instead of
        as one [K, ...] batch.
    device_chunk : int or None
        Devices per call of the local training (None: all); every device's noise is keyed
        by its global index, so the chunking keeps the noise and bounds the memory.
    """

    backend: str = "auto"
    noise: str = "auto"
    jit_compile: bool | None = None
    device_loop: bool | None = None
    device_chunk: int | None = DEVICE_CHUNK

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


def check_tensorflow_only(runtime: Runtime, algorithm: str) -> None:
    """``ValueError`` naming the key when a baseline is asked for Philox noise (it draws
    none), or for the Numba backend when it is not one of :data:`NUMBA_BASELINES`."""
    if runtime.backend == "numba" and algorithm not in NUMBA_BASELINES:
        raise ValueError(f"runtime.backend: algorithm.name = {algorithm!r} runs on TensorFlow "
                         f"only; use 'auto' or 'tensorflow' (got 'numba')")
    if runtime.noise == "philox":
        if algorithm in NUMBA_BASELINES:
            raise ValueError(f"runtime.noise: algorithm.name = {algorithm!r} draws no noise; use "
                             f"'auto' or 'tensorflow' (got 'philox')")
        raise ValueError(f"runtime.noise: algorithm.name = {algorithm!r} runs on TensorFlow "
                         f"only; use 'auto' or 'tensorflow' (got 'philox')")


def resolve(runtime: Runtime, *, algorithm: str = PROPOSED_METHOD, architecture: str,
            estimator: str = "reparameterization") -> ResolvedRuntime:
    """Decide ``runtime`` for an algorithm, a model architecture and an estimator;
    ``ValueError`` naming the ``runtime.`` key for a combination that cannot run.

    A baseline resolves to the TensorFlow backend (``"auto"`` too) with its
    ``jit_compile`` (off unless true), or, for :data:`NUMBA_BASELINES` on the MLP with
    ``backend = "numba"``, to the Numba backend without XLA; its noise reads
    ``"tensorflow"`` (it draws none) and ``device_loop`` and ``device_chunk`` do not apply.
    """
    if algorithm != PROPOSED_METHOD:
        check_tensorflow_only(runtime, algorithm)
        if runtime.backend != "numba":
            return ResolvedRuntime("tensorflow", "tensorflow", bool(runtime.jit_compile), False, None)
        if architecture not in NUMBA_ARCHITECTURES:
            raise ValueError(f"runtime.backend: model.architecture = {architecture!r} has no Numba "
                             f"steps (the MLP has); use 'tensorflow' or 'auto' (got 'numba')")
        if runtime.jit_compile:
            raise ValueError("runtime.jit_compile: XLA needs the TensorFlow backend (the Numba "
                             "steps run outside XLA; resolved: backend 'numba') (got true)")
        return ResolvedRuntime("numba", "tensorflow", False, False, None)
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    lrt = estimator == "local_reparameterization"
    numba_steps = philox_lrt = architecture in NUMBA_ARCHITECTURES
    backend = runtime.backend
    if backend == "auto":
        wants_tf = runtime.noise == "tensorflow" or runtime.jit_compile is True
        backend = "numba" if numba_steps and not wants_tf else "tensorflow"
    elif backend == "numba" and not numba_steps:
        raise ValueError(f"runtime.backend: model.architecture = {architecture!r} has no Numba "
                         f"steps (the MLP has); use 'tensorflow' or 'auto' (got 'numba')")
    noise = runtime.noise
    if noise == "auto":
        tf_lrt_only = backend == "tensorflow" and lrt and not philox_lrt
        noise = "tensorflow" if runtime.jit_compile is True or tf_lrt_only else "philox"
    elif noise == "tensorflow" and backend == "numba":
        raise ValueError("runtime.noise: the Numba backend draws Philox noise; 'tensorflow' "
                         "needs runtime.backend = 'tensorflow' or 'auto' (got 'tensorflow')")
    elif noise == "philox" and backend == "tensorflow" and lrt and not philox_lrt:
        raise ValueError(f"runtime.noise: the local-reparameterization graph of "
                         f"model.architecture = {architecture!r} draws its noise with "
                         f"TensorFlow; use 'tensorflow' or 'auto' (got 'philox')")
    jit = runtime.jit_compile
    if jit is None:
        jit = backend == "tensorflow" and noise == "tensorflow" and lrt
    elif jit and (backend != "tensorflow" or noise != "tensorflow"):
        raise ValueError(f"runtime.jit_compile: XLA needs the TensorFlow backend with "
                         f"TensorFlow noise (Philox noise and the Numba steps run outside XLA; "
                         f"resolved: backend {backend!r}, noise {noise!r}) (got true)")
    loop = runtime.device_loop
    if loop is None:
        loop = backend == "tensorflow" and not lrt
    elif loop and backend != "tensorflow":
        raise ValueError("runtime.device_loop: the Numba backend always runs device by device; "
                         "true needs runtime.backend = 'tensorflow' (got true)")
    chunk = None if runtime.device_chunk is None else int(runtime.device_chunk)
    return ResolvedRuntime(backend, noise, bool(jit), bool(loop), chunk)
