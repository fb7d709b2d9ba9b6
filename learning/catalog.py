"""The federated-learning algorithms by name and what each one sends, written once.

Every algorithm's uplink is one or more phases of ``d`` real values per device (d the
model's weights), aggregated over the air one after the other, and its downlink a
multiple of ``d`` per round (paper Section VI: FedAvg, FedProx and FedGMT-v2 send d
values each way; SCAFFOLD, FedSMOO and the proposed method 2d). The algorithms' own
``phases()`` / ``downlink_values()`` (:mod:`learning.algorithms`) and the scenario's
derived quantities (``cosim/scenario.py``: channel uses, memory) both read this table;
:data:`learning.algorithms.ALGORITHMS` imports each ``implementation``.

Adding an algorithm: its module under ``learning/algorithms/`` and one line here (its
hyper-parameters, if it has its own, are a sub-table model in ``cosim/scenario.py``).

Standard library only (``cosim validate`` imports it without TensorFlow).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One algorithm: ``uplink`` phase names (d values each, in order), ``downlink``
    values per round as a multiple of d, ``implementation`` as ``"module:Class"``."""

    uplink: tuple[str, ...]
    downlink: int
    implementation: str

    def phase_values(self, num_params: int) -> dict[str, int]:
        """``{phase name: values each device sends}`` for ``num_params`` = d."""
        return {name: int(num_params) for name in self.uplink}


CATALOG = {
    "bayes_aircomp": Entry(("rho", "nu"), 2, "learning.algorithms.bayes_aircomp:BayesAirComp"),
    "fedavg": Entry(("delta",), 1, "learning.algorithms.fedavg:FedAvg"),
    "fedprox": Entry(("delta",), 1, "learning.algorithms.fedprox:FedProx"),
    "scaffold": Entry(("delta", "control"), 2, "learning.algorithms.scaffold:Scaffold"),
    "fedsmoo": Entry(("delta", "perturbation"), 2, "learning.algorithms.fedsmoo:FedSmoo"),
    "fedgmt": Entry(("delta",), 1, "learning.algorithms.fedgmt:FedGmt"),
}
NAMES = tuple(CATALOG)
"""The algorithm names, in the order the docs list them."""
