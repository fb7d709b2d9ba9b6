"""Federated-learning algorithms behind one protocol (``base.FederatedAlgorithm``).

``ALGORITHMS`` maps a name to its class, imported from :data:`learning.catalog.CATALOG`
(the one list of algorithms and their payloads); :func:`build` constructs one as
``cls(model, num_devices, **hyper)`` with the run's :class:`learning.runtime.Runtime`:
the proposed method takes it whole; the baselines run on TensorFlow only and take its
``jit_compile`` (off unless set).
"""

from __future__ import annotations

import difflib

from learning.algorithms.base import FederatedAlgorithm
from learning.catalog import CATALOG
from learning.models.model import Model
from learning.runtime import PROPOSED_METHOD, Runtime, check_tensorflow_only
from native.parameters import load

ALGORITHMS: dict[str, type] = {name: load(entry.implementation) for name, entry in CATALOG.items()}


def build(name: str, model: Model, num_devices: int, runtime: Runtime | None = None,
          **hyper) -> FederatedAlgorithm:
    """Construct the algorithm ``name`` for ``model`` and ``num_devices`` devices.

    Unknown names and unknown hyper-parameters raise ``ValueError`` naming them, as does
    a ``runtime`` a baseline cannot run (the Numba backend, Philox noise).
    """
    if name not in CATALOG:  # as it is now: an entry registered after import is built
        close = difflib.get_close_matches(name, list(CATALOG), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown algorithm {name!r}{hint}; known: {sorted(CATALOG)}")
    cls = ALGORITHMS[name] if name in ALGORITHMS else load(CATALOG[name].implementation)
    accepted = set(CATALOG[name].parameters.model_fields)  # learning.hyperparameters
    unknown = sorted(set(hyper) - accepted)
    if unknown:
        raise ValueError(
            f"unknown hyper-parameter(s) {unknown} for algorithm {name!r}; "
            f"accepted: {sorted(accepted)}"
        )
    runtime = runtime or Runtime()
    if name == PROPOSED_METHOD:
        return cls(model, num_devices, runtime=runtime, **hyper)
    check_tensorflow_only(runtime, name)
    return cls(model, num_devices, jit_compile=bool(runtime.jit_compile), **hyper)
