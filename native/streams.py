"""The derivation of every random stream of a run from (seed, round, purpose).

TensorFlow code takes stateless seeds (``tf.Tensor`` [2], tf.int32) and uses
``tf.random.stateless_*``; NumPy code takes a ``np.random.Generator``. Both are
made here, so the same scenario and seed replay bit-for-bit on the same machine
and a run resumed at round t draws exactly what an uninterrupted run draws. Both
halves derive their own streams from it (``phy.uplink`` the channel's, the CSI's,
the receiver noise's and the cohort's; ``cosim`` the rest, through ``cosim.rng``).

It is also the registry of the streams: every purpose a run derives a stream from is
named here once (the constants below, :data:`PURPOSES` and :data:`PHASE_FAMILIES`), and
so is every fixed sub-stream that code folds into a purpose's seed
(:data:`SUB_STREAMS`). ``native`` is the one layer that ``phy``, ``learning`` and
``cosim`` all import (``tests/test_imports.py``), so the names live beside the
derivation. A stream's bits follow from its purpose string: the strings are the ones
the call sites spelled before the registry existed, and changing one moves every trace
(``docs/architecture.md``, "What must stay bit-identical"). ``tests/native/test_stream_registry.py``
reads the packages' sources and fails on a purpose or sub-stream written as a literal
outside this module, and on two names that collide.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

STATIC_ROUND = -1
"""Round index used for streams that do not change across rounds (geometry, data)."""

# The registry: one constant per purpose (the string is the stream's identity).
CELL = "cell"
"""Static: a 3GPP cell's large-scale state, LoS, path loss and shadow fading (``cosim.world``)."""
GEOMETRY = "geometry"
"""Static: the device positions (``cosim.world``)."""
PARTITION = "partition"
"""Static: the split of the training data over the devices (``cosim.world``)."""
INIT = "init"
"""Static: the algorithm's initial state (``cosim.world``; :data:`LIBRARY_INIT_MEAN`)."""
CHANNEL = "channel"
"""Per round: the small-scale fading of every device (``phy.uplink.block``)."""
CSI = "csi"
"""Per round: the CSI error of the estimate (``phy.uplink.block``; :data:`CSI_AGING`)."""
SYNC = "sync"
"""Per round: timing offsets and CFOs of the time-domain uplink (``phy.uplink.block``)."""
PARTICIPATION = "participation"
"""Per round: scheduling, dropouts and step times of the cohort (``phy.uplink.block``)."""
EAVESDROPPER = "eavesdropper"
"""Per round: the eavesdropper's channel gains of ``[privacy]`` (``phy.uplink.block``)."""
EVAL = "eval"
"""Per round: the predictive samples of the evaluation (``cosim.evaluation``)."""
MOBILITY = "mobility"
"""Static: the moving devices' speeds, headings and Jakes processes (``cosim.world``)."""

PURPOSES = (CELL, GEOMETRY, PARTITION, INIT, CHANNEL, CSI, SYNC, PARTICIPATION, EAVESDROPPER, EVAL,
            MOBILITY)
"""Every whole purpose string."""

LOCAL = "local/"
"""Per round and phase: the devices' local training noise (``cosim.round``; :func:`local_purpose`)."""
NOISE = "noise/"
"""Per round and phase: the uplink's receiver noise and a scheme's own draws
(``phy.uplink.block``; :func:`noise_purpose`, :data:`IMAGINARY_NOISE`)."""

PHASE_CSI = "csi/"
"""Per round and phase after the first, in motion: the CSI error of the estimate made at the
phase's start (``phy.uplink.moving_link``; :func:`phase_csi_purpose`)."""

PHASE_FAMILIES = (LOCAL, NOISE, PHASE_CSI)
"""The purposes named by a prefix and the phase's name (``local/rho``, ``noise/nu``, ``csi/nu``)."""


def local_purpose(phase: str) -> str:
    """The purpose of phase ``phase``'s local training noise: ``"local/<phase>"``."""
    return f"{LOCAL}{phase}"


def noise_purpose(phase: str) -> str:
    """The purpose of phase ``phase``'s uplink noise: ``"noise/<phase>"``."""
    return f"{NOISE}{phase}"


def phase_csi_purpose(phase: str) -> str:
    """The purpose of phase ``phase``'s CSI error in motion: ``"csi/<phase>"``."""
    return f"{PHASE_CSI}{phase}"


# Fixed sub-streams: ``stateless_fold_in(seed, index)`` of a purpose's seed.
IMAGINARY_NOISE = 1
"""Of a ``noise/<phase>`` seed: the imaginary part of the receiver noise (``phy.aircomp_parts``,
``phy.aircomp_reference``; the real part takes the seed itself)."""
CSI_AGING = 1
"""Of the ``csi`` seed: the fresh draw ``w`` of the outdated-CSI model (``phy.csi``)."""
LIBRARY_INIT_MEAN = 1
"""Of the ``init`` seed: a library initialisation's means (``learning.algorithms.bayes_aircomp``)."""
LIBRARY_INIT_RHO = 2
"""Of the ``init`` seed: a library initialisation's std parameters (``learning.algorithms.bayes_aircomp``)."""

SUB_STREAMS = {
    "IMAGINARY_NOISE": (NOISE, IMAGINARY_NOISE),
    "CSI_AGING": (CSI, CSI_AGING),
    "LIBRARY_INIT_MEAN": (INIT, LIBRARY_INIT_MEAN),
    "LIBRARY_INIT_RHO": (INIT, LIBRARY_INIT_RHO),
}
"""Name -> (the purpose whose seed it folds, the index): two of one purpose never share an index."""


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
