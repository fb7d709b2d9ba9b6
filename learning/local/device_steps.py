"""Devices that stop their local training early: stragglers that send after fewer steps.

With ``participation.straggler_policy = "fewer_steps"`` a device takes ``steps[k]`` of the
E local steps (each in 1..E). Every local solver runs its E steps for all devices at once
and keeps, per device, the iterate of its last step taken (:func:`continue_where`;
:func:`keep_rows` for the Numba backend's in-place buffers); a stopped device's later
objectives repeat its last one. The per-step backends (TensorFlow, the Numba exact
path) compute a stopped device's remaining steps and discard them, so their
``local_precision_floor_hits`` count those steps' floored entries too; the fused LRT
kernels stop the device and count only the steps it took.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def continue_where(steps, index: int, new, old, loss, losses):
    """Step ``index``'s iterate and loss for devices still stepping (``index < steps``),
    the previous ones for those that stopped (``steps`` [K] int32; None: every device
    takes every step). ``new``, ``old`` [K, ...]; ``loss`` [K]; ``losses`` the earlier
    steps' [K] losses."""
    if steps is None:
        return new, loss
    active = index < steps
    shape = tf.concat([tf.shape(active), tf.ones([tf.rank(new) - 1], tf.int32)], 0)
    return tf.where(tf.reshape(active, shape), new, old), repeat_stopped(steps, index, loss, losses)


def keep_rows(steps, index: int, new: np.ndarray, old: np.ndarray) -> None:
    """:func:`continue_where` for NumPy buffers [K, d]: ``new``'s rows of the devices that
    stopped before step ``index`` become ``old``'s (in place; nothing when ``steps`` is
    None)."""
    if steps is None:
        return
    stopped = np.flatnonzero(np.asarray(steps) <= index)
    if stopped.size:
        new[stopped] = old[stopped]


def repeat_stopped(steps, index: int, loss, losses):
    """The loss [K] of step ``index`` with the stopped devices' last one (``losses``: the
    earlier steps' losses; nothing changes when ``steps`` is None or at step 0)."""
    if steps is None or not losses:
        return loss
    return tf.where(index < tf.convert_to_tensor(steps), loss, losses[-1])
