"""Federated-learning algorithms behind one protocol (``base.FederatedAlgorithm``).

``ALGORITHMS`` maps a name to its class, imported from :data:`learning.catalog.CATALOG`
(the one list of algorithms and their payloads); :func:`build` constructs one as
``cls(model, num_devices, **hyper)`` with the run's :class:`learning.runtime.Runtime`:
the proposed method takes it whole; a baseline takes its resolved ``backend`` and
``jit_compile`` (:func:`learning.runtime.resolve`: TensorFlow unless ``backend = "numba"``
is asked of FedAvg or FedProx on the MLP).
"""

from __future__ import annotations

import difflib

from learning.algorithms.base import FederatedAlgorithm
from learning.catalog import CATALOG
from learning.models.model import Model
from learning.runtime import PROPOSED_METHOD, Runtime, resolve
from native.parameters import load

ALGORITHMS: dict[str, type] = {name: load(entry.implementation) for name, entry in CATALOG.items()}


def build(name: str, model: Model, num_devices: int, runtime: Runtime | None = None,
          **hyper) -> FederatedAlgorithm:
    """Construct the algorithm ``name`` for ``model`` and ``num_devices`` devices.

    Unknown names and unknown hyper-parameters raise ``ValueError`` naming them, as does
    a ``runtime`` a baseline cannot run (Philox noise; the Numba backend but for FedAvg
    and FedProx on the MLP).
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
    resolved = resolve(runtime, algorithm=name, architecture=model.name)
    return cls(model, num_devices, jit_compile=resolved.jit_compile, backend=resolved.backend, **hyper)
