"""The Numba backend of the local training: the MLP's steps with their gradients written out.

The same objectives as :class:`learning.local.objective.LocalObjective` on the same Philox
noise, run device by device in Numba: :mod:`learning.local.fused_local` (the exact estimator:
:mod:`native.sampling`'s weight sample, :mod:`learning.local.fused_mlp`'s layers) and
:mod:`learning.local.fused_lrt` (the local reparameterization). The conformance suite holds
both to TensorFlow's autodiff of the definitions. The updates it returns are
``tf.float32`` tensors over host arrays of its own pool (:mod:`native.host_arrays`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from learning.local import covariance
from learning.local.device_steps import keep_rows, repeat_stopped
from learning.local.fused_local import FusedSteps, phase2_ratio, phase2_update, precision_change
from learning.local.fused_lrt import FusedLRTSteps
from learning.local.objective import LocalObjective
from learning.runtime import NUMBA_ARCHITECTURES
from native.host_arrays import BufferPool, as_tensor
from native.launch import LAUNCH, read_only


class NumbaSteps:
    """Both phases of the local training in Numba (:class:`learning.local.trainer.LocalBackend`).

    Parameters
    ----------
    definition : LocalObjective
        The objectives; its model must be one of
        :data:`learning.runtime.NUMBA_ARCHITECTURES` (the MLP) and its noise ``"philox"``.
    """

    name = "numba"

    def __init__(self, definition: LocalObjective):
        model, config = definition.model, definition.config
        if model.name not in NUMBA_ARCHITECTURES or model.dense_layer_sizes is None:
            raise ValueError(f"the Numba backend runs the MLP only, not {model.name!r}")
        if definition.noise != "philox":
            raise ValueError(f"the Numba backend draws Philox noise, not {definition.noise!r}")
        self.definition = definition
        hyper = dict(
            kl_scale=config.kl_scale, learning_rate=config.learning_rate,
            min_precision=config.min_precision, nll_mean=config.nll_reduction == "mean",
            covariance_parameter=config.covariance_parameter,
            phase1_learning_rate=config.phase1_learning_rate,
        )
        if config.lrt:
            self.steps = FusedLRTSteps(model.dense_layer_sizes, config.mc_samples, **hyper)
        else:
            net = model.fused_network(config.mc_samples)
            self.steps = FusedSteps(net, num_params=model.num_params, **hyper)
        self.buffers = BufferPool(max_buffers=6)  # the phases' [K, d] arrays

    @property
    def writes_in_place(self) -> bool:
        """Whether both phases write their updates into a given ``out`` (the local
        reparameterization's steps, device by device)."""
        return isinstance(self.steps, FusedLRTSteps)

    def phase_output(self, num_devices: int) -> np.ndarray:
        """A pooled [num_devices, d] float32 array for :meth:`rho_phase`'s or
        :meth:`nu_phase`'s ``out`` (its rows written chunk by chunk)."""
        return self.buffers.take([int(num_devices), self.definition.model.num_params])

    def rho_phase(self, mu_t, rho_t, x, y, mask, weights, seed, device_ids, device_steps=None, out=None):
        """See :meth:`learning.local.trainer.LocalBackend.rho_phase`."""
        definition = self.definition
        shape = [int(tf.shape(y)[0]), int(rho_t.shape[0])]
        steps = None if device_steps is None else np.asarray(device_steps)
        if self.writes_in_place:  # device by device, all E steps
            delta, losses, hits = self.steps.rho_phase(
                mu_t, rho_t, x, y, mask, weights, definition.phase_seeds(seed, device_ids),
                out=self.buffers.take(shape) if out is None else out, device_steps=steps,
            )
            return (as_tensor(delta) if out is None else delta), tf.constant(losses), tf.constant(hits)
        delta, spare = self.buffers.take(shape, zero=True), self.buffers.take(shape)
        losses, hits = [], tf.constant(0, tf.int32)
        for step in range(definition.config.local_steps):
            seeds = definition.step_seeds(seed, step, device_ids)
            new, loss, h = self.steps.rho_step(delta, mu_t, rho_t, x, y, mask, weights, seeds, out=spare)
            keep_rows(steps, step, new, delta)  # a stopped device keeps its iterate
            delta, spare = new, delta
            losses.append(repeat_stopped(steps, step, loss, losses))
            hits += h
        reading = definition.reading
        if reading.code != covariance.PRECISION:
            sigma_t, anchor, _ = reading.phase_constants(rho_t, definition.config.min_precision)
            with LAUNCH:
                precision_change(reading.code, delta, sigma_t, anchor, read_only(rho_t), delta)
        return as_tensor(delta), tf.stack(losses), hits

    def nu_phase(self, mu_t, rho_next, prior_rho, delta_rho_k, delta_rho_global, x, y, mask,
                 weights, seed, device_ids, device_steps=None, out=None):
        """See :meth:`learning.local.trainer.LocalBackend.nu_phase` (eq. ``nu_def``:
        :func:`learning.local.fused_local.phase2_ratio`, :func:`~learning.local.fused_local.phase2_update`)."""
        definition = self.definition
        mu_np, rho_next_np, delta_rho_np = (read_only(v) for v in (mu_t, rho_next, delta_rho_global))
        delta_rho_k = read_only(delta_rho_k)  # no copy of a tensor's memory
        shape = delta_rho_k.shape
        if self.writes_in_place:  # device by device, all E steps
            written, losses = self.steps.nu_phase(
                delta_rho_k, delta_rho_np, mu_np, rho_next_np, prior_rho, x, y, mask, weights,
                definition.phase_seeds(seed, device_ids), out=self.buffers.take(shape) if out is None else out,
                device_steps=None if device_steps is None else np.asarray(device_steps),
            )
            return (as_tensor(written) if out is None else written), tf.constant(losses)
        ratio, z = self.buffers.take(shape), self.buffers.take(shape, zero=True)
        spare = self.buffers.take(shape)
        with LAUNCH:
            phase2_ratio(delta_rho_k, delta_rho_np, rho_next_np, ratio)
        losses = []
        for step in range(definition.config.local_steps):
            seeds = definition.step_seeds(seed, step, device_ids)
            new, loss = self.steps.nu_step(
                z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds, out=spare
            )
            keep_rows(device_steps, step, new, z)  # a stopped device keeps its iterate
            z, spare = new, z
            losses.append(repeat_stopped(device_steps, step, loss, losses))
        del spare
        with LAUNCH:
            phase2_update(delta_rho_k, delta_rho_np, rho_next_np, mu_np, z, ratio)
        return as_tensor(ratio), tf.stack(losses)
