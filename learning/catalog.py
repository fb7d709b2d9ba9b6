"""The federated-learning algorithms by name and what each one sends, written once.

Every algorithm's uplink is one or more phases of ``d`` real values per device (d the
model's weights), aggregated over the air one after the other, and its downlink a
multiple of ``d`` per round (paper Section VI: FedAvg, FedProx and FedGMT-v2 send d
values each way; SCAFFOLD, FedSMOO and the proposed method 2d). The algorithms' own
``phases()`` / ``downlink_values()`` (:mod:`learning.algorithms`) and the scenario's
derived quantities (``cosim/scenario/derived.py``: channel uses, memory) both read this table;
:data:`learning.algorithms.ALGORITHMS` imports each ``implementation``.

Each line also names the algorithm's hyper-parameter model
(:mod:`learning.hyperparameters`), which the scenario's ``[algorithm]`` table and the
algorithm's constructor both validate with, and where its own keys sit in a scenario:
``[algorithm]`` itself (the proposed method) or the sub-table ``[algorithm.<name>]``.

Each line also carries the algorithm's display name (``label``), which figures and
reports show (``cosim/display_names.py`` reads it here).

Adding an algorithm: its module under ``learning/algorithms/``, its hyper-parameter
model, and one line here (with its label).

No TensorFlow (``cosim validate`` imports it without).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from learning.hyperparameters import (
    AlgorithmParameters,
    BayesAirCompParameters,
    FedAvgParameters,
    FedGmtParameters,
    FedProxParameters,
    FedSmooParameters,
    ScaffoldParameters,
    SignSgdParameters,
)


@dataclass(frozen=True)
class Entry:
    """One algorithm: ``uplink`` phase names (d values each, in order), ``downlink``
    values per round as a multiple of d, ``implementation`` as ``"module:Class"``, its
    hyper-parameter model, whether its own keys sit in a sub-table
    ``[algorithm.<name>]`` (``own_table``) or in ``[algorithm]``, and in how many of its
    phases a device trains (``training_phases``: E local steps each; a straggler's
    compute time counts them), and what its updates are (``sends``): ``"values"`` (its
    server update needs the weighted sum: a scheme that carries only signs,
    ``uplink.scheme`` with ``carries = "signs"``, is refused) or ``"signs"`` (sgn of
    something, the server update takes the sign of the estimate: any scheme)."""

    uplink: tuple[str, ...]
    downlink: int
    implementation: str
    parameters: type[AlgorithmParameters]
    own_table: bool = True
    training_phases: int = 1
    sends: str = "values"
    divergence_keys: tuple[tuple[str, str], ...] = ()
    """Its own keys most likely behind a divergence besides ``algorithm.learning_rate``,
    each with what it does (``cosim.divergence.advice`` names them with their values)."""
    device_state: int = 0
    """Per-device [K, d] tables its state holds across rounds for every device
    (SCAFFOLD's c_k; FedSMOO's mu_k and h_k; FedGMT's h_k), which the memory estimate
    counts for all K whatever the cohort when the round holds every device; a round that
    streams its devices keeps them on disk (:mod:`learning.device_table`) and holds a
    chunk's rows."""
    device_state_switches: tuple[str, ...] = ()
    """Boolean hyper-parameters each of which, when true, adds one such table (signSGD's
    ``error_feedback``: the memories e_k)."""
    label: str = ""
    """Its display name in figures and reports ("Proposed", "FedGMT-v2"; read by
    ``cosim/display_names.py``, as the PHY registries' labels; empty: the name itself)."""
    step_vectors: int | Callable[[dict], int] = 3
    """Float32 d-vectors a device's local step holds (the memory estimate's c): a number,
    or a function of the hyper-parameters."""
    monte_carlo: bool = False
    """Whether its local step draws ``mc_samples`` weight samples with an ``estimator`` and
    its evaluation ``predictive_samples`` (a posterior's): the cost estimate scales with
    both and is tabled per estimator."""
    numba_step_vectors: Callable[[dict], int | None] | None = None
    """Float32 d-vectors its local step holds on the Numba steps where they are fewer than
    :attr:`step_vectors` (a function of the hyper-parameters, None where the same; read
    when ``runtime.backend`` resolves to ``"numba"``, :func:`learning.runtime.resolve`)."""
    step_vector_keys: tuple[str, ...] = ()
    """Hyper-parameters ``step_vectors`` may depend on (``cosim validate`` names those
    that do under the scenario's values)."""

    streams_devices: bool = False
    """Whether a round may train and send its devices in chunks (``runtime.devices_in_memory``,
    ``cosim/streamed_round.py``): its local step is each device's own, from the global
    state and the device's streams and rows of its per-device tables, and a later phase's
    carry can be formed again per chunk (a multi-phase algorithm's ``chunk_carry``). Its
    per-device tables (:meth:`device_tables`) are then on disk, read and written a chunk's
    rows at a time (:mod:`learning.device_table`)."""

    def local_step_vectors(self, hyper_parameters: dict) -> int:
        """:attr:`step_vectors` under ``hyper_parameters``."""
        vectors = self.step_vectors
        return int(vectors(hyper_parameters) if callable(vectors) else vectors)

    def local_step_vectors_on(self, backend: str, hyper_parameters: dict) -> int:
        """:meth:`local_step_vectors` on ``backend`` (``"numba"`` or ``"tensorflow"``, as
        resolved): :attr:`numba_step_vectors` where it gives a number."""
        vectors = self.local_step_vectors(hyper_parameters)
        fewer = None if backend != "numba" or self.numba_step_vectors is None else (
            self.numba_step_vectors(hyper_parameters))
        return vectors if fewer is None else min(vectors, int(fewer))

    def device_tables(self, hyper_parameters: dict) -> int:
        """The per-device [K, d] tables of its state under ``hyper_parameters``."""
        return self.device_state + sum(bool(hyper_parameters.get(key)) for key in self.device_state_switches)

    def phase_values(self, num_params: int) -> dict[str, int]:
        """``{phase name: values each device sends}`` for ``num_params`` = d."""
        return {name: int(num_params) for name in self.uplink}

    def downlink_values(self, num_params: int) -> int:
        """Real values the BS broadcasts per round for ``num_params`` = d."""
        return self.downlink * int(num_params)


def _bayes_step_vectors(hyper: dict) -> int:
    """The proposed method's local step: 4 d-vectors, and 2 per Monte-Carlo sample with the
    exact reparameterization estimator (the local one draws no weight sample)."""
    return 4 + 2 * int(hyper["mc_samples"]) if hyper["estimator"] == "reparameterization" else 4


NUMBA_LRT_STEP_VECTORS = 3
"""The proposed method's local reparameterization on the Numba steps (the MLP's
``runtime.backend = "auto"``): they write the phase-0 updates (kept as phase 1's carry)
and the phase-1 updates in place into pooled [K, d] arrays, where the TensorFlow path
holds 4 d-vectors per device. Measured (``benchmarks/README.md``, "The memory estimate
against measured peaks", 2026-12-02): a one-call round's own peak of 2.64 d-vectors per
device at K = 1,000 (with its uplink phase) and about 2.3 at K = 10,000; 3 is the
whole number above."""


def _bayes_numba_step_vectors(hyper: dict) -> int | None:
    """:data:`NUMBA_LRT_STEP_VECTORS` with the local reparameterization; None (as on
    TensorFlow) with the exact estimator, never measured apart."""
    return NUMBA_LRT_STEP_VECTORS if hyper["estimator"] == "local_reparameterization" else None


CATALOG = {
    "bayes_aircomp": Entry(("rho", "nu"), 2, "learning.algorithms.bayes_aircomp:BayesAirComp",
                           BayesAirCompParameters, own_table=False, training_phases=2,
                           divergence_keys=(("nll_reduction", '"mean" divides the step on the means by |D_k|'),
                                            ("init_std", "the posterior's initial std"),
                                            ("covariance_learning_rate", "phase 1's own step")),
                           label="Proposed", step_vectors=_bayes_step_vectors,
                           numba_step_vectors=_bayes_numba_step_vectors, monte_carlo=True,
                           step_vector_keys=("mc_samples",), streams_devices=True),
    "fedavg": Entry(("delta",), 1, "learning.algorithms.fedavg:FedAvg", FedAvgParameters,
                    label="FedAvg", streams_devices=True),
    "fedprox": Entry(("delta",), 1, "learning.algorithms.fedprox:FedProx", FedProxParameters,
                     label="FedProx", streams_devices=True),
    "scaffold": Entry(("delta", "control"), 2, "learning.algorithms.scaffold:Scaffold",
                      ScaffoldParameters, device_state=1, label="SCAFFOLD", step_vectors=4,
                      streams_devices=True),
    "fedsmoo": Entry(("delta", "perturbation"), 2, "learning.algorithms.fedsmoo:FedSmoo",
                     FedSmooParameters, device_state=2, label="FedSMOO", step_vectors=4,
                     streams_devices=True),
    "fedgmt": Entry(("delta",), 1, "learning.algorithms.fedgmt:FedGmt", FedGmtParameters,
                    device_state=1, label="FedGMT-v2", streams_devices=True),
    "signsgd": Entry(("delta",), 1, "learning.algorithms.signsgd:SignSgd", SignSgdParameters,
                     sends="signs", divergence_keys=(("server_learning_rate", "the server's step on the vote"),),
                     device_state_switches=("error_feedback",),
                     label="signSGD (majority vote)", streams_devices=True),
}
NAMES = tuple(CATALOG)
"""The algorithm names, in the order the docs list them."""
