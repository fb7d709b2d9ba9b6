"""The TensorFlow backend of the local training: autodiff of the definitions, compiled.

Each local step is TensorFlow's gradient of :class:`learning.local.objective.LocalObjective`'s
phase objective and a plain gradient step, for all K devices in one ``tf.function`` call
(XLA with ``jit_compile``; one device at a time inside the graph with ``device_loop``).
This is the path every architecture has and the one a GPU would use; the conformance
suite holds the Numba backend to it.
"""

from __future__ import annotations

import tensorflow as tf

from learning.local.device_steps import continue_where
from learning.local.objective import LocalObjective


class TensorFlowSteps:
    """Both phases of the local training with TensorFlow (:class:`learning.local.trainer.LocalBackend`).

    Parameters
    ----------
    definition : LocalObjective
        The objectives (and the noise they draw).
    jit_compile : bool
        Compile each step with XLA (TensorFlow noise only).
    device_loop : bool
        Run each step one device at a time (``tf.map_fn``) instead of as one batch; the
        same numbers.
    """

    name = "tensorflow"

    def __init__(self, definition: LocalObjective, *, jit_compile: bool, device_loop: bool):
        self.definition = definition
        self.jit_compile = bool(jit_compile)
        self.device_loop = bool(device_loop)
        opts = {"jit_compile": self.jit_compile, "reduce_retracing": True}
        self._rho_step = tf.function(self._rho_step_impl, autograph=False, **opts)
        self._nu_step = tf.function(self._nu_step_impl, autograph=False, **opts)

    def _rho_update(self, delta_rho, mu_t, rho_t, x, y, mask, weights, seeds):
        with tf.GradientTape() as tape:
            tape.watch(delta_rho)
            loss = self.definition.rho_objective(delta_rho, mu_t, rho_t, x, y, mask, weights, seeds)
        grad = tape.gradient(loss, delta_rho)  # each row depends on its own device only
        rate = self.definition.config.phase1_learning_rate
        new, hits = self.definition.floor(delta_rho - rate * grad, rho_t)
        return new, loss, hits

    def _nu_update(self, z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = self.definition.nu_objective(
                z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds
            )
        return z - self.definition.config.learning_rate * tape.gradient(loss, z), loss

    def _per_device(self, update, per_device_args, signature=(tf.float32, tf.float32)):
        """Apply ``update`` to all devices: batched, or one device at a time in a graph loop.

        ``per_device_args`` carry the leading K axis; ``update(*args)`` returns a tuple
        of tensors with a leading K axis (new parameter [K, d], loss [K], ...) of the
        dtypes ``signature``.
        """
        if not self.device_loop:
            return update(*per_device_args)

        def one(args):
            return tuple(out[0] for out in update(*(a[None] for a in args)))

        return tf.map_fn(one, per_device_args, fn_output_signature=signature)

    def _rho_step_impl(self, delta_rho, mu_t, rho_t, x, y, mask, weights, seeds):
        new, loss, hits = self._per_device(
            lambda r, xx, yy, mm, ww, ss: self._rho_update(r, mu_t, rho_t, xx, yy, mm, ww, ss),
            (delta_rho, x, y, mask, weights, seeds),
            signature=(tf.float32, tf.float32, tf.int32),
        )
        return new, loss, tf.reduce_sum(hits)

    def _nu_step_impl(self, z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds):
        return self._per_device(
            lambda n, r, xx, yy, mm, ww, ss: self._nu_update(
                n, r, mu_t, rho_next, prior_rho, xx, yy, mm, ww, ss
            ),
            (z, ratio, x, y, mask, weights, seeds),
        )

    def rho_phase(self, mu_t, rho_t, x, y, mask, weights, seed, device_ids, device_steps=None):
        """See :meth:`learning.local.trainer.LocalBackend.rho_phase`."""
        definition = self.definition
        delta = tf.zeros([int(tf.shape(y)[0]), int(rho_t.shape[0])], tf.float32)
        losses, hits = [], tf.constant(0, tf.int32)
        for step in range(definition.config.local_steps):
            seeds = definition.step_seeds(seed, step, device_ids)
            new, loss, h = self._rho_step(delta, mu_t, rho_t, x, y, mask, weights, seeds)
            delta, loss = continue_where(device_steps, step, new, delta, loss, losses)
            losses.append(loss)
            hits += h
        return definition.precision_change(delta, rho_t), tf.stack(losses), hits

    def nu_phase(self, mu_t, rho_next, prior_rho, delta_rho_k, delta_rho_global, x, y, mask,
                 weights, seed, device_ids, device_steps=None):
        """See :meth:`learning.local.trainer.LocalBackend.nu_phase`."""
        definition = self.definition
        offset = definition.phase2_offset(delta_rho_k, delta_rho_global, rho_next)
        ratio = 1.0 / (1.0 + offset)  # rho_{t+1} / rho_k
        z = tf.zeros_like(offset)
        losses = []
        for step in range(definition.config.local_steps):
            seeds = definition.step_seeds(seed, step, device_ids)
            new, loss = self._nu_step(z, ratio, mu_t, rho_next, prior_rho, x, y, mask, weights, seeds)
            z, loss = continue_where(device_steps, step, new, z, loss, losses)
            losses.append(loss)
        return definition.phase2_update(offset, mu_t, z), tf.stack(losses)
