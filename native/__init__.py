"""Native pieces that both ``phy/`` and ``learning/`` use: the lock around parallel
Numba launches (:mod:`native.launch`), 64-byte aligned host arrays that TensorFlow adopts
without a copy (:mod:`native.host_arrays`), and the counter-based Philox-4x32-10 /
ziggurat normal generator with its fused weight sampler (:mod:`native.sampling`).

``native`` imports neither ``phy``, ``learning`` nor ``cosim``.
"""
