"""The evaluator of a run: the global model on the test set every ``eval.every`` rounds.

:meth:`Evaluator.columns` gives a round's ``test_accuracy``, ``test_nll``, ``ece`` (the
algorithm's ``predict_probs``: the S-sample posterior predictive for the proposed
method), ``posterior_mean_accuracy``, ``posterior_mean_nll``, ``posterior_mean_ece``
(the algorithm's ``predict_mean_probs``; NaN for an algorithm without a posterior),
the reliability series and ``model_finite`` (NaN columns in rounds without evaluation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from cosim import rng as rngs
from cosim.trace import EVAL_COLUMNS, POSTERIOR_MEAN_COLUMNS, RELIABILITY_SERIES
from learning.metrics import evaluate_probs
from native.columns import Columns


@dataclass(frozen=True)
class Evaluator:
    """The test set and when to use it.

    ``x_test`` [N, ...] tf.float32, ``y_test`` [N] (the first ``data.test_subset``),
    ``every`` and ``rounds`` (evaluated when ``(t + 1) % every == 0`` and after the last
    round), ``predictive_samples`` S, ``ece_bins`` B, the run ``seed`` (the round's
    ``"eval"`` stream).
    """

    x_test: Any
    y_test: np.ndarray
    every: int
    rounds: int
    predictive_samples: int
    ece_bins: int
    seed: int

    @classmethod
    def from_scenario(cls, scenario, dataset) -> Evaluator:
        """The scenario's ``[eval]`` on its dataset's test split."""
        x_test, y_test = dataset.x_test, dataset.y_test
        if scenario.data.test_subset is not None:
            x_test, y_test = x_test[:scenario.data.test_subset], y_test[:scenario.data.test_subset]
        ev = scenario.eval
        return cls(tf.constant(x_test, tf.float32), np.asarray(y_test), ev.every, scenario.rounds,
                   ev.predictive_samples, ev.ece_bins, scenario.seed)

    def due(self, t: int) -> bool:
        """True when round ``t`` is evaluated."""
        return (t + 1) % self.every == 0 or t + 1 == self.rounds

    def columns(self, algorithm, state, t: int) -> Columns:
        """Round ``t``'s evaluation of ``state``: the columns above. ``model_finite`` is 0
        when the state is not finite or its predictive probabilities are not (then the
        evaluation columns are NaN)."""
        finite = algorithm.is_finite(state)
        probs = mean_probs = None
        if finite and self.due(t):
            probs = np.asarray(algorithm.predict_probs(
                state, self.x_test, self.predictive_samples, rngs.stream_seed(self.seed, t, rngs.EVAL)))
            # finite weights whose logits overflow: the model has diverged all the same
            finite = bool(np.all(np.isfinite(probs)))
        if finite and probs is not None:
            mean_probs = algorithm.predict_mean_probs(state, self.x_test)
            if mean_probs is not None:
                mean_probs = np.asarray(mean_probs)
                finite = bool(np.all(np.isfinite(mean_probs)))
        out = Columns(scalars=dict.fromkeys(POSTERIOR_MEAN_COLUMNS, math.nan))
        scalars = out.scalars
        if finite and probs is not None:
            ev = evaluate_probs(probs, self.y_test, num_bins=self.ece_bins)
            scalars.update(test_accuracy=ev.accuracy, test_nll=ev.nll, ece=ev.ece)
            out.reliability = {name: np.asarray(getattr(ev, name), np.float64) for name in RELIABILITY_SERIES}
            if mean_probs is not None:
                mean = evaluate_probs(mean_probs, self.y_test, num_bins=self.ece_bins)
                scalars.update(posterior_mean_accuracy=mean.accuracy, posterior_mean_nll=mean.nll,
                               posterior_mean_ece=mean.ece)
        else:
            scalars.update(dict.fromkeys(EVAL_COLUMNS, math.nan))
            out.reliability = dict.fromkeys(RELIABILITY_SERIES, np.full(self.ece_bins, np.nan))
        scalars["model_finite"] = float(finite)
        return out
