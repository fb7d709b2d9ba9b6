"""One owner of randomness: every random stream of a run derives from (seed, round, purpose).

The derivation lives in :mod:`native.streams` (``phy.uplink`` draws its own streams from
it); this module is the name ``cosim`` uses for it.
"""

from __future__ import annotations

from native.streams import STATIC_ROUND, numpy_rng, purpose_id, stream_seed

__all__ = ["STATIC_ROUND", "numpy_rng", "purpose_id", "stream_seed"]
