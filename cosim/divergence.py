"""When a run has diverged: the checks made after every round.

A round has diverged when any of these holds (:meth:`DivergenceWatch.check`):

* the global model holds NaN or Inf, or predicts NaN or Inf in an evaluated round
  (``model_finite`` = 0: finite weights whose logits overflow);
* a device's update holds NaN or Inf (``nonfinite_update_entries`` > 0): the air
  interface can turn non-finite updates into a finite estimate (a zero-power row,
  the KKT control's clipping), so a finite model alone does not prove a sane round;
* a local training loss (``train_loss_<phase>``) or any other round metric is NaN
  or Inf. NaN by design, and so not checked: the evaluation columns in rounds without
  evaluation (a round is evaluated when its ``test_accuracy`` is finite; then a NaN
  ``test_nll`` or ``ece`` counts), the posterior-mean columns (NaN for algorithms
  without a posterior; the engine turns a non-finite posterior-mean prediction into
  ``model_finite`` = 0), ``train_loss`` of an algorithm that reports none,
  and the run's ``cumulative_*`` totals (NaN in the rows of traces written before
  they existed); ``+inf`` by design, and so not a divergence: the privacy epsilons of
  a round whose noise gives no privacy and the noise multipliers of a phase nobody sent
  (:func:`infinite_by_design`);
* the round's ``train_loss`` exceeds :data:`LOSS_EXPLOSION_FACTOR` times the
  ``train_loss`` of round 0 (the first local training, from the initial model). A
  loss a thousand times that of an untrained model is not a noisy round; the
  reference is round 0 and not the best round so far because single-class devices
  drive their local loss close to zero, and a later round 100 times above that
  minimum is ordinary.

The run writes the diverged round (so the trace shows it), then stops with exit
status 3 (``cosim.exit_codes.EXIT_DIVERGED``) and a message naming the round, what went
non-finite and the scenario keys most likely at fault; ``cosim run
--continue-on-divergence`` prints the message once and goes on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from cosim.trace import EVAL_COLUMNS, POSTERIOR_MEAN_COLUMNS
from learning.catalog import CATALOG  # no TensorFlow

LOSS_EXPLOSION_FACTOR = 1e3
"""A round whose ``train_loss`` exceeds this times round 0's has diverged."""

class SimulationDiverged(RuntimeError):
    """A round diverged (:class:`DivergenceWatch`); the trace holds every round up to
    and including it.

    Attributes
    ----------
    round : int
        The diverged round (0-based).
    reasons : list[str]
        What was found, one phrase each (``"training loss NaN (train_loss_rho)"``).
    """

    def __init__(self, round_index: int, reasons: list[str], advice: str = ""):
        self.round = int(round_index)
        self.reasons = list(reasons)
        text = f"round {self.round} diverged: " + "; ".join(self.reasons)
        super().__init__(text + (f". {advice}" if advice else ""))


PRIVACY_EPSILON_COLUMNS = frozenset({"privacy_epsilon", "privacy_epsilon_round",
                                     "eavesdropper_epsilon", "eavesdropper_epsilon_round"})
"""Epsilons that are ``+inf`` by design where a round's noise gives no privacy (the
accountant's answer for a non-private event, :func:`cosim.privacy.epsilon_of`)."""


def infinite_by_design(key: str) -> bool:
    """Whether ``+inf`` in the column ``key`` is an answer about the channel, not the
    training, so never a divergence (NaN still is one): the privacy epsilons
    (:data:`PRIVACY_EPSILON_COLUMNS`) and every ``*noise_multiplier*`` column (``inf``
    where no device sent, :attr:`phy.privacy.PhaseMechanism.worst_noise_multiplier`)."""
    return key in PRIVACY_EPSILON_COLUMNS or "noise_multiplier" in key


class DivergenceWatch:
    """Checks each round's scalars for divergence (see the module docstring).

    Parameters
    ----------
    reference_loss : float, optional
        Round 0's ``train_loss`` (from the trace, for a resumed run); when None the
        first round checked with ``round == 0`` sets it.
    factor : float
        :data:`LOSS_EXPLOSION_FACTOR`.
    """

    def __init__(self, reference_loss: float | None = None, factor: float = LOSS_EXPLOSION_FACTOR):
        if not factor > 1.0:
            raise ValueError(f"factor must be > 1, got {factor!r}")
        self.factor = float(factor)
        self.reference_loss = None
        if reference_loss is not None and math.isfinite(reference_loss) and reference_loss > 0.0:
            self.reference_loss = float(reference_loss)

    def check(self, round_index: int, scalars: Mapping[str, float]) -> list[str]:
        """What diverged in round ``round_index`` (one phrase per finding; [] when sane)."""
        reasons = []
        if scalars.get("model_finite", 1.0) == 0.0:
            reasons.append("the global model holds or predicts NaN/Inf")
        bad_updates = scalars.get("nonfinite_update_entries", 0.0)
        if math.isfinite(bad_updates) and bad_updates > 0:  # NaN or inf: a metric named below
            reasons.append(f"{int(bad_updates)} non-finite entries in the devices' updates")
        reports_loss = any(key.startswith("train_loss_") for key in scalars)
        evaluated = math.isfinite(scalars.get("test_accuracy", math.nan))
        bad_losses, bad_metrics = [], []
        for key, value in scalars.items():
            by_design = (
                (key in EVAL_COLUMNS and not evaluated)
                or key in POSTERIOR_MEAN_COLUMNS
                or (key == "train_loss" and not reports_loss)
                or key.startswith("cumulative_")
            )
            if (math.isfinite(value) or (by_design and math.isnan(value))
                    or (value == math.inf and infinite_by_design(key))):
                continue
            (bad_losses if key.startswith("train_loss") else bad_metrics).append(f"{key}={value}")
        if bad_losses:
            reasons.append("training loss non-finite (" + ", ".join(bad_losses) + ")")
        if bad_metrics:
            reasons.append("non-finite metrics (" + ", ".join(sorted(bad_metrics)) + ")")
        loss = scalars.get("train_loss", math.nan)
        if round_index == 0 and self.reference_loss is None and math.isfinite(loss) and loss > 0.0:
            self.reference_loss = float(loss)
        elif (
            self.reference_loss is not None
            and math.isfinite(loss)
            and abs(loss) > self.factor * abs(self.reference_loss)
        ):
            reasons.append(
                f"training loss {loss:.4g} is more than {self.factor:g} times round 0's "
                f"({self.reference_loss:.4g})"
            )
        return reasons


def advice(algorithm) -> str:
    """The scenario keys most likely behind a divergence, with their values (``algorithm``:
    the scenario's ``[algorithm]`` table): ``algorithm.learning_rate``, then the
    algorithm's own ``divergence_keys`` of its catalog entry (:data:`learning.catalog.CATALOG`;
    a key whose value is ``"learning_rate"`` follows the step already named and is left out)."""
    knobs = [f"algorithm.learning_rate (now {algorithm.learning_rate:g}; a smaller step is the usual cure)"]
    entry = CATALOG[algorithm.name]
    own = entry.own_table and entry.divergence_keys
    table, prefix = ((getattr(algorithm, algorithm.name), f"algorithm.{algorithm.name}") if own
                     else (algorithm, "algorithm"))
    for key, what in entry.divergence_keys:
        value = getattr(table, key)
        if value == "learning_rate":
            continue
        shown = f'"{value}"' if isinstance(value, str) else f"{value:g}"
        knobs.append(f"{prefix}.{key} (now {shown}; {what})")
    return "Likely knobs: " + ", ".join(knobs)


def replay_divergence(columns: Mapping[str, Sequence[float]], completed_rounds: int
                      ) -> SimulationDiverged | None:
    """The first of a trace's committed rounds that diverged, as a fresh
    :class:`DivergenceWatch` judges them in order (round 0's loss its reference), or None.

    Input: ``columns``, the trace's round columns by name (``/rounds``; those of more
    than one dimension are left out, as the watch checks scalars), each at least
    ``completed_rounds`` long. Output: :class:`SimulationDiverged` (its ``round`` and
    ``reasons``), or None when every round up to ``completed_rounds`` is sane.
    """
    scalars = {key: values for key, values in columns.items() if np.ndim(values) == 1}
    watch = DivergenceWatch()
    for t in range(completed_rounds):
        reasons = watch.check(t, {key: float(values[t]) for key, values in scalars.items()})
        if reasons:
            return SimulationDiverged(t, reasons)
    return None
