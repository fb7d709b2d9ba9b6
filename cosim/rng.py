"""One owner of randomness: every random stream of a run derives from (seed, round, purpose).

The derivation and the registry of the purposes live in :mod:`native.streams`
(``phy.uplink`` draws its own streams from it); this module is the name ``cosim`` uses
for it.
"""

from __future__ import annotations

from native.streams import (
    CELL,
    EVAL,
    GEOMETRY,
    INIT,
    MOBILITY,
    PARTITION,
    STATIC_ROUND,
    local_purpose,
    numpy_rng,
    purpose_id,
    stream_seed,
)

__all__ = ["CELL", "EVAL", "GEOMETRY", "INIT", "MOBILITY", "PARTITION", "STATIC_ROUND", "local_purpose", "numpy_rng",
           "purpose_id", "stream_seed"]
