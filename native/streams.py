"""The derivation of every random stream of a run from (seed, round, purpose).

TensorFlow code takes stateless seeds (``tf.Tensor`` [2], tf.int32) and uses
``tf.random.stateless_*``; NumPy code takes a ``np.random.Generator``. Both are
made here, so the same scenario and seed replay bit-for-bit on the same machine
and a run resumed at round t draws exactly what an uninterrupted run draws. Both
halves derive their own streams from it (``phy.uplink`` the channel's, the CSI's,
the receiver noise's and the cohort's; ``cosim`` the rest, through ``cosim.rng``).
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

STATIC_ROUND = -1
"""Round index used for streams that do not change across rounds (geometry, data)."""


def purpose_id(purpose: str) -> int:
    """A stable 31-bit integer for a purpose string (CRC-32, not Python's salted ``hash``)."""
    return zlib.crc32(purpose.encode("utf-8")) & 0x7FFFFFFF


def _key(seed: int, round_index: int, purpose: str) -> list[int]:
    return [int(seed) & 0x7FFFFFFF, int(round_index) + 1, purpose_id(purpose)]


def stream_seed(seed: int, round_index: int, purpose: str) -> tf.Tensor:
    """Stateless TF seed for one stream.

    Input: run seed, round index (``STATIC_ROUND`` for static streams), purpose name.
    Output: ``tf.Tensor`` [2], tf.int32.
    """
    import tensorflow as tf  # here: NumPy's streams (numpy_rng) need no TensorFlow

    words = np.random.SeedSequence(_key(seed, round_index, purpose)).generate_state(2)
    return tf.constant((words & 0x7FFFFFFF).astype(np.int32), dtype=tf.int32)


def numpy_rng(seed: int, round_index: int, purpose: str) -> np.random.Generator:
    """NumPy generator for one stream (same derivation as :func:`stream_seed`)."""
    return np.random.default_rng(np.random.SeedSequence(_key(seed, round_index, purpose)))
