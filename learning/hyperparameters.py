"""Every algorithm's hyper-parameters, each declared and validated once.

One pydantic model per algorithm (the registry, :data:`learning.catalog.CATALOG`, names
it): its fields are the hyper-parameters with their defaults, their bounds and their
meaning. The same model validates them wherever they come from:

- the scenario's ``[algorithm]`` table (``cosim/scenario/tables.py`` builds that table's model
  from these: the common keys and the proposed method's in ``[algorithm]``, a
  baseline's own keys in its sub-table ``[algorithm.<name>]``);
- the algorithm's constructor (``FedProx(model, K, proximal_mu=...)`` calls
  :meth:`HyperParameters.check`).

Adding an algorithm's knobs is a model here and its ``parameters`` in the catalog line;
the scenario, its docs test and the constructor follow.

No TensorFlow (``cosim validate`` imports it without).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from learning.runtime import ESTIMATORS  # stdlib only
from native.parameters import Parameters, defaults, positive_or_keyword

__all__ = [
    "INITS",
    "LIBRARY_INIT_SPREAD",
    "LIBRARY_RHO_INIT",
    "AlgorithmParameters",
    "BayesAirCompParameters",
    "FedAvgParameters",
    "FedGmtParameters",
    "FedProxParameters",
    "FedSmooParameters",
    "HyperParameters",
    "ScaffoldParameters",
    "SignSgdParameters",
    "check_init",
    "defaults",
    "positive_or_keyword",
]

PHASE2_PRIORS = ("fresh", "previous")
NLL_REDUCTIONS = ("sum", "mean")
COVARIANCE_PARAMETERS = ("precision", "softplus_std", "log_std", "log_precision")
"""The readings of phase 1's parameter (:mod:`learning.local.covariance`, whose ``NAMES`` these are)."""


INITS = ("he", "bayesian_torch", "blitz", "blitz_0.2.3")
"""The initial posteriors (:data:`LIBRARY_RHO_INIT`; ``"he"``: He-normal means, zero biases,
every std ``init_std``)."""
LIBRARY_RHO_INIT = {"bayesian_torch": -3.0, "blitz": -7.0, "blitz_0.2.3": -6.0}
"""``posterior_rho_init`` of the libraries the paper names (bayesian-torch 0.5.0's
``LinearReparameterization``; Blitz 0.2.5-0.2.8's ``BayesianLinear``, and -6 in Blitz
0.2.3): both draw every mean, biases included, from N(0, 0.1^2) and every rho from
N(posterior_rho_init, 0.1^2), std = softplus(rho) (docs/choices.md cites the lines)."""
LIBRARY_INIT_SPREAD = 0.1
"""The std of both libraries' normal draws of the means and of rho."""
INIT_STD_DEFAULT = 0.048587


class HyperParameters(Parameters):
    """Base of the algorithms' models (:class:`native.parameters.Parameters`)."""

    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        """The keys this model adds to :class:`AlgorithmParameters`'."""
        return tuple(k for k in cls.model_fields if k not in AlgorithmParameters.model_fields)


class AlgorithmParameters(HyperParameters):
    """What every algorithm's local training reads (``[algorithm]``)."""

    learning_rate: float = Field(0.1, gt=0, description="eta, the local step size")
    local_steps: int = Field(3, ge=1, description="E, full-batch gradient steps per phase")


class BayesAirCompParameters(AlgorithmParameters):
    """The proposed method (paper Tables I-II; its keys sit directly in ``[algorithm]``)."""

    mc_samples: int = Field(5, ge=1, description="M, Monte-Carlo samples per step (eq. task_loss)")
    kl_scale: Annotated[str | float, positive_or_keyword("num_devices")] = Field(
        "num_devices", description="lambda in lambda_k = lambda pi_k / d (eq. localLoss); 'num_devices' = K")
    estimator: Literal[ESTIMATORS] = "reparameterization"
    init_std: float = Field(INIT_STD_DEFAULT, gt=0, description="initial posterior std (softplus(-3)) of init = 'he'")
    init: Literal[INITS] = "he"
    covariance_learning_rate: Annotated[str | float, positive_or_keyword("learning_rate")] = Field(
        "learning_rate",
        description="phase 1's step size (beyond the paper); 'learning_rate': eta, as the paper")
    min_precision: float = Field(1.0, gt=0, description="floor on every precision entry")
    phase2_prior: Literal[PHASE2_PRIORS] = "fresh"
    nll_reduction: Literal[NLL_REDUCTIONS] = "sum"
    covariance_parameter: Literal[COVARIANCE_PARAMETERS] = "precision"


    @model_validator(mode="after")
    def _check_init(self) -> BayesAirCompParameters:
        check_init(self.init, self.init_std)
        return self


def check_init(init: str, init_std: float) -> None:
    """ValueError unless ``init_std`` is left at its default under a library ``init`` (whose
    stds are the library's draws, :data:`LIBRARY_RHO_INIT`)."""
    if init != "he" and init_std != INIT_STD_DEFAULT:
        raise ValueError(
            f'init_std: is the std of init = "he" only; init = "{init}" draws its stds as the '
            f"library does (softplus of N({LIBRARY_RHO_INIT[init]:g}, {LIBRARY_INIT_SPREAD:g}^2)), "
            f'so leave init_std at {INIT_STD_DEFAULT} or use init = "he" (got {init_std:g})')


class FedAvgParameters(AlgorithmParameters):
    """FedAvg (McMahan et al., AISTATS 2017): nothing of its own."""


class FedProxParameters(AlgorithmParameters):
    """FedProx (Li et al., MLSys 2020): proximal term mu/2 ||w - w_t||^2."""

    proximal_mu: float = Field(0.01, ge=0, description="mu, the proximal weight")


class ScaffoldParameters(AlgorithmParameters):
    """SCAFFOLD (Karimireddy et al., ICML 2020)."""

    global_learning_rate: float = Field(1.0, gt=0, description="eta_g, the server step (1.0 there)")


class FedSmooParameters(AlgorithmParameters):
    """FedSMOO (Sun et al., ICML 2023); defaults from the authors' FL-Simulator
    (``--rho 0.1``, ``--lamb 0.1``, gradient clip 10)."""

    sam_rho: float = Field(0.1, ge=0, description="SAM radius rho")
    dynamic_alpha: float = Field(0.1, ge=0, description="alpha = 1/beta, the dynamic regulariser's weight")
    max_grad_norm: float | None = Field(10.0, gt=0, description="per-device gradient-norm clip")


class FedGmtParameters(AlgorithmParameters):
    """FedGMT-v2 (Li et al. 2025): EMA of the global trajectory as a KL teacher, dual regulariser."""

    ema_decay: float = Field(0.95, ge=0, lt=1, description="EMA decay of the teacher")
    sharpness_gamma: float = Field(1.0, ge=0, description="weight of the teacher's KL")
    temperature: float = Field(3.0, gt=0, description="distillation temperature")
    dynamic_alpha: float = Field(0.1, ge=0, description="alpha = 1/beta, the ADMM dual's weight")


class SignSgdParameters(AlgorithmParameters):
    """signSGD with majority vote (Bernstein et al., ICML 2018 / ICLR 2019) as a delta on
    FedAvg: the devices send sgn(Delta_k), the server steps by the vote."""

    # 0.003: the largest of 0.0003 / 0.001 / 0.003 / 0.01 whose accuracy rose at each
    # evaluation on the quickstart over analog (30 rounds, seed 1; docs/algorithms.md).
    server_learning_rate: float = Field(0.003, gt=0, description="eta_s, the server's step per unit of the vote")
    server_momentum: float = Field(0.0, ge=0, lt=1, description="beta of v <- beta v + vote (0: none)")
    error_feedback: bool = Field(False, description="each device keeps what its scaled sign did not carry "
                                                    "(Karimireddy et al. 2019) and adds it to its next delta")
