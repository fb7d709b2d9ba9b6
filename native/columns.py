"""What a block of the round adds to its trace record (standard library and NumPy only).

The uplink (:mod:`phy.uplink`), the algorithm's metrics and the evaluator each return a
:class:`Columns`; :class:`cosim.round.RoundRecord` merges them (a name written twice is
an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Columns:
    """Named values for one round's trace record.

    Attributes
    ----------
    scalars : dict[str, float]
        ``/rounds/<name>`` values (Python floats).
    per_device : dict[str, np.ndarray]
        ``[K]`` arrays for ``/rounds/per_device/<name>``.
    reliability : dict[str, np.ndarray]
        ``[B]`` arrays for ``/rounds/reliability/<name>``.
    signals : dict[str, np.ndarray]
        Raw arrays for ``/signals`` (only in the rounds whose signals are kept).
    """

    scalars: dict[str, float] = field(default_factory=dict)
    per_device: dict[str, np.ndarray] = field(default_factory=dict)
    reliability: dict[str, np.ndarray] = field(default_factory=dict)
    signals: dict[str, np.ndarray] = field(default_factory=dict)
