"""The process-wide lock around parallel Numba launches.

Numba runs one parallel region at a time per process well; TensorFlow may call a
kernel from several of its threads at once (``tf.numpy_function`` in the PHY's graph,
the local training's steps). Every parallel Numba launch of ``phy/`` and ``learning/``
holds :data:`LAUNCH_LOCK`.
"""

from __future__ import annotations

import threading

__all__ = ["LAUNCH_LOCK"]

LAUNCH_LOCK = threading.Lock()
"""Held around every parallel Numba launch: one at a time per process."""
