"""Local training of the proposed method behind one seam: a definition and a backend.

The objectives of both phases are defined once, in :mod:`learning.local.objective` (eqs.
``localLoss``, ``task_loss``, ``KL_div``, ``update_phase1``, ``nu_def``). A *backend*
minimises them for K devices, one phase per call (:class:`LocalBackend`):

* ``"tensorflow"`` (:class:`learning.local.backend_tensorflow.TensorFlowSteps`): TensorFlow's
  autodiff of the definitions, compiled; every architecture; the path a GPU would use.
* ``"numba"`` (:class:`learning.local.backend_numba.NumbaSteps`): the MLP's steps with their
  gradients written out, device by device.

:class:`LocalTrainer` picks the backend and the noise from a
:class:`learning.runtime.Runtime` (the scenario's ``[runtime]`` table); the
conformance suite (``tests/learning/test_conformance.py``) holds every backend to the
TensorFlow backend on the same noise.
"""

from __future__ import annotations

from typing import Protocol

import tensorflow as tf

from learning.local.backend_numba import NumbaSteps
from learning.local.backend_tensorflow import TensorFlowSteps
from learning.local.objective import LocalConfig, LocalObjective
from learning.models.model import Model
from learning.runtime import Runtime, resolve

__all__ = ["LocalBackend", "LocalConfig", "LocalTrainer"]


class LocalBackend(Protocol):
    """What a backend of the local training provides: both phases for K devices.

    Every tensor is float32 unless said; K devices, d weights, B padded samples, E local
    steps. The data are ``x`` [K, B, ...], ``y`` [K, B] int32, ``mask`` [K, B],
    ``weights`` pi_k [K]; ``seed`` [2] int32 is the phase's stateless seed and
    ``device_ids`` [K] int32 the devices' global indices (device k's noise depends on
    them only).
    """

    name: str
    definition: LocalObjective

    def rho_phase(self, mu_t, rho_t, x, y, mask, weights, seed, device_ids, device_steps=None):
        """Phase 1 (eq. ``update_phase1``) from the global ``mu_t``, ``rho_t`` [d]; with
        ``device_steps`` [K] (each in 1..E) device k stops after that many steps and its
        later objectives repeat its last one.

        Output: ``Delta_rho_k = rho_k - rho_t`` [K, d] (eq. ``rho_normal``), the
        objective before each step [E, K], the number of floored entries (int32).
        """
        ...

    def nu_phase(self, mu_t, rho_next, prior_rho, delta_rho_k, delta_rho_global, x, y, mask,
                 weights, seed, device_ids, device_steps=None):
        """Phase 2 (eq. ``nu_def`` and the nu steps) from ``mu_t``, ``rho_next`` =
        rho_{t+1}, the KL prior's ``prior_rho`` [d], the devices' phase-1 updates
        ``delta_rho_k`` [K, d] and the applied ``delta_rho_global`` = rho_{t+1} - rho_t [d].

        Output: ``Delta_nu_k = nu_k - mu_t`` [K, d], the objective before each step [E, K].
        """
        ...


class LocalTrainer:
    """The local training: the definitions (:attr:`definition`) and a backend (:attr:`backend`).

    Parameters
    ----------
    model : Model
        The architecture.
    config : LocalConfig
        The method's hyper-parameters.
    runtime : Runtime
        Backend, noise, XLA, device loop (default: all ``"auto"``).
    """

    def __init__(self, model: Model, config: LocalConfig, runtime: Runtime | None = None):
        self.model = model
        self.config = config
        self.runtime = resolve(runtime or Runtime(), architecture=model.name,
                               estimator=config.estimator)
        self.definition = LocalObjective(model, config, noise=self.runtime.noise)
        self.backend: LocalBackend
        if self.runtime.backend == "numba":
            self.backend = NumbaSteps(self.definition)
        else:
            self.backend = TensorFlowSteps(self.definition, jit_compile=self.runtime.jit_compile,
                                           device_loop=self.runtime.device_loop)

    @staticmethod
    def _ids(y, device_ids):
        if device_ids is None:
            return tf.range(tf.shape(y)[0])
        return tf.convert_to_tensor(device_ids, tf.int32)

    def phase_output(self, num_devices: int):
        """A [num_devices, d] float32 array the backend writes a phase's updates into, chunk
        by chunk (the ``out`` of :meth:`rho_phase` and :meth:`nu_phase`), or None when its
        backend returns arrays of its own (TensorFlow's; the Numba exact estimator's)."""
        if not getattr(self.backend, "writes_in_place", False):
            return None
        return self.backend.phase_output(num_devices)

    def rho_phase(self, mu_t, rho_t, x, y, mask, weights, seed, device_ids=None, device_steps=None,
                  out=None):
        """Phase 1: E steps on the covariance parameter (:mod:`learning.local.covariance`; its
        increment ``delta`` from 0), mean fixed at mu_t (eq. ``update_phase1``).

        Input: global ``mu_t``, ``rho_t`` [d]; data [K, B, ...], [K, B], [K, B]; pi_k [K];
        ``seed`` [2]; optional ``device_ids`` [K] int32 (default ``0..K-1``); optional
        ``device_steps`` [K] int32, each in 1..E: device k stops after that many steps (a
        straggler that sends early; its later objectives repeat its last one).
        Output: the transmitted update ``Delta_rho_k = rho_k - rho_t`` [K, d] (eq.
        ``rho_normal``, formed from the final ``delta`` without cancellation), objective
        before each step [E, K], floor hits (int32). With ``out`` (rows of
        :meth:`phase_output`'s array) the update is written there and ``out`` returned.
        """
        if out is None:
            return self.backend.rho_phase(mu_t, rho_t, x, y, mask, weights, seed,
                                          self._ids(y, device_ids), device_steps)
        return self.backend.rho_phase(mu_t, rho_t, x, y, mask, weights, seed, self._ids(y, device_ids),
                                      device_steps, out=out)

    def nu_phase(
        self, mu_t, rho_t, rho_next, delta_rho_k, x, y, mask, weights, seed,
        device_ids=None, delta_rho_global=None, device_steps=None, out=None,
    ):
        """Phase 2: E steps on nu_k from ``rho_k / rho_{t+1} mu_t`` (eq. ``nu_def``).

        Input: global ``mu_t``, ``rho_t``, ``rho_next`` = rho_{t+1} [d]; the devices'
        phase-1 updates ``delta_rho_k`` [K, d]; data, pi_k, ``seed``, ``device_ids`` and
        ``device_steps`` as in :meth:`rho_phase`; ``delta_rho_global`` [d] = rho_{t+1} - rho_t as applied by
        the server (the aggregated estimate where not floored; default: the difference
        ``rho_next - rho_t``, which float32 rounds at large rho).
        Output: the update ``Delta_nu_k = nu_k - mu_t`` [K, d], objective before each
        step [E, K]. The KL's prior is N(mu_t, Sigma_{t+1}) (``phase2_prior = "fresh"``)
        or N(mu_t, Sigma_t) (``"previous"``). ``out`` as in :meth:`rho_phase`.
        """
        prior_rho = self.definition.phase2_prior_precision(rho_t, rho_next)
        if delta_rho_global is None:
            delta_rho_global = rho_next - rho_t
        args = (mu_t, rho_next, prior_rho, delta_rho_k, delta_rho_global, x, y, mask, weights, seed,
                self._ids(y, device_ids), device_steps)
        return self.backend.nu_phase(*args) if out is None else self.backend.nu_phase(*args, out=out)
