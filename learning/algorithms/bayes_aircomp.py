"""The proposed method: Bayesian FL with over-the-air posterior aggregation (Algorithm 1).

Two uplink phases per round, each of d real values per device:

* ``"rho"`` (phase 1): every device trains its precision rho_k from the global rho_t
  with the mean fixed at mu_t (eq. ``update_phase1``) and sends
  ``Delta_rho_k = rho_k - rho_t`` (eq. ``rho_normal``); the BS sets
  ``rho_{t+1} = rho_t + estimate`` (eq. ``rho_update``), floored at ``min_precision``.
* ``"nu"`` (phase 2): every device trains nu_k from ``rho_k / rho_{t+1} mu_t``
  (eq. ``nu_def``) and sends ``Delta_nu_k = nu_k - mu_t``; the BS sets
  ``mu_{t+1} = mu_t + estimate``.

With an error-free sum ``estimate = sum_k pi_k Delta_k`` the round equals the exact
Gaussian conflation (eqs. ``Sigma``, ``mu_sigma``) of the local posteriors
N(rho_{t+1}/rho_k nu_k, diag(rho_k)^-1) (tested). The BS broadcasts mu and rho: 2 d
values per round. The local training is :class:`learning.local.trainer.LocalTrainer`; it iterates
on the updates themselves (float32 cannot hold a ~1e-5 step on a precision of ~400), and
phase 2 needs the applied global update ``rho_{t+1} - rho_t`` (the estimate, or the floor
where it clamps) exactly, which the carry hands over from the server step.

The global state is float64 (:class:`BayesState`): an aggregated change of the precision
far below float32's spacing at rho ~ 400 (3e-5) accumulates over rounds instead of
rounding away; the devices train on its float32 values.

The parameter phase 1's steps act on is ``covariance_parameter``
(:mod:`learning.local.covariance`: ``"precision"``, ``"softplus_std"``, ``"log_std"``,
``"log_precision"``); whatever it is, a device sends the change of its precision, so the
BS's update (eq. ``precisionUpdate``) and the conflation identity do not depend on it.

Hyper-parameters (Table II defaults for MNIST): ``learning_rate`` 0.1,
``local_steps`` E = 3, ``mc_samples`` M = 5, ``kl_scale`` lambda (None -> K),
``estimator``, ``init_std`` (initial posterior std, rho_0 = init_std^-2; default
0.048587 = bayesian-torch's default softplus(-3), the library the paper used), ``init``
(``"he"``: He-normal means with ``init_std``; ``"bayesian_torch"``, ``"blitz"``,
``"blitz_0.2.3"``: the libraries' own initial means and stds, :meth:`BayesAirComp.init`),
``covariance_learning_rate`` (beyond the paper: phase 1's own step size; the default
``"learning_rate"`` steps with eta, as the paper),
``min_precision`` (1.0), ``phase2_prior`` (``"fresh"``), ``nll_reduction`` (``"sum"``),
``covariance_parameter`` (``"precision"``). How the local steps run (backend, noise,
XLA, devices per call) is ``runtime`` (:class:`learning.runtime.Runtime`).

Note on ``nll_reduction``: the paper's summed NLL makes the step ~|D_k| times larger than
with a mean; with eta = 0.1 a small MLP on ten-sample non-i.i.d. devices can collapse
to one class (seen on Gaussian blobs), so the tests use eta = 0.02 with the sum, or the
mean with eta = 0.1.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from learning.algorithms.base import (
    DeviceData,
    PhaseSpec,
    catalog_downlink_values,
    catalog_phases,
    round_columns,
)
from learning.hyperparameters import (
    LIBRARY_INIT_SPREAD,
    LIBRARY_RHO_INIT,
    BayesAirCompParameters,
    defaults,
)
from learning.local.trainer import LocalConfig, LocalTrainer
from learning.models.model import Model
from learning.runtime import Runtime
from native.host_arrays import as_tensor
from native.streams import LIBRARY_INIT_MEAN, LIBRARY_INIT_RHO

DEFAULTS = defaults(BayesAirCompParameters)


@dataclass(frozen=True)
class BayesState:
    """Global posterior N(mu, diag(rho)^-1): ``mu``, ``rho`` [d] tf.float64.

    The server holds its running sums in float64 so that an aggregated change far below
    float32's spacing (3e-5 at rho ~ 424, where a round's change of the precision can be
    1e-8) accumulates instead of rounding away; the devices train on the float32 values
    (:attr:`mu32`, :attr:`rho32`).
    """

    mu: tf.Tensor
    rho: tf.Tensor

    @property
    def mu32(self) -> tf.Tensor:
        """``mu`` as the devices see it, [d] tf.float32."""
        return tf.cast(self.mu, tf.float32)

    @property
    def rho32(self) -> tf.Tensor:
        """``rho`` as the devices see it, [d] tf.float32."""
        return tf.cast(self.rho, tf.float32)


@dataclass(frozen=True)
class BayesCarry:
    """Phase 1 -> phase 2 within a round.

    Attributes
    ----------
    delta_rho_k : tf.Tensor, [K, d], tf.float32
        The devices' phase-1 updates ``rho_k - rho_t``.
    rho_prev : tf.Tensor, [d], tf.float32
        The round's ``rho_t``.
    delta_rho : tf.Tensor or None, [d], tf.float32
        The applied global update ``rho_{t+1} - rho_t`` (set by the phase-0 server step).
    """

    delta_rho_k: tf.Tensor
    rho_prev: tf.Tensor
    delta_rho: tf.Tensor | None = None

    @property
    def rho_k(self) -> tf.Tensor:
        """The devices' local precisions ``rho_t + Delta_rho_k`` [K, d] (rounded to float32)."""
        return self.rho_prev + self.delta_rho_k


class BayesAirComp:
    """The proposed two-phase Bayesian FL algorithm (FederatedAlgorithm protocol)."""

    name = "bayes_aircomp"

    def __init__(
        self,
        model: Model,
        num_devices: int,
        *,
        learning_rate: float = DEFAULTS["learning_rate"],
        local_steps: int = DEFAULTS["local_steps"],
        mc_samples: int = DEFAULTS["mc_samples"],
        kl_scale: float | None = None,
        estimator: str = DEFAULTS["estimator"],
        init_std: float = DEFAULTS["init_std"],
        min_precision: float = DEFAULTS["min_precision"],
        phase2_prior: str = DEFAULTS["phase2_prior"],
        nll_reduction: str = DEFAULTS["nll_reduction"],
        covariance_parameter: str = DEFAULTS["covariance_parameter"],
        init: str = DEFAULTS["init"],
        covariance_learning_rate: float | str = DEFAULTS["covariance_learning_rate"],
        runtime: Runtime | None = None,
    ):
        if int(num_devices) < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices!r}")
        BayesAirCompParameters.check(
            learning_rate=learning_rate, local_steps=local_steps, mc_samples=mc_samples,
            kl_scale="num_devices" if kl_scale is None else kl_scale, estimator=estimator,
            init_std=init_std, min_precision=min_precision, phase2_prior=phase2_prior,
            nll_reduction=nll_reduction, covariance_parameter=covariance_parameter, init=init,
            covariance_learning_rate=covariance_learning_rate)
        self.model = model
        self.num_devices = int(num_devices)
        self.init_std = float(init_std)
        self.init_name = init
        self.config = LocalConfig(
            kl_scale=float(self.num_devices if kl_scale is None else kl_scale),
            learning_rate=float(learning_rate),
            local_steps=int(local_steps),
            mc_samples=int(mc_samples),
            estimator=estimator,
            min_precision=float(min_precision),
            phase2_prior=phase2_prior,
            nll_reduction=nll_reduction,
            covariance_parameter=covariance_parameter,
            covariance_learning_rate=(None if covariance_learning_rate == "learning_rate"
                                      else float(covariance_learning_rate)),
        )
        self.trainer = LocalTrainer(model, self.config, runtime)
        self._predict = tf.function(self._predict_impl, reduce_retracing=True, autograph=False)
        self._predict_mean = tf.function(self._predict_mean_impl, reduce_retracing=True,
                                         autograph=False)

    def phases(self) -> tuple[PhaseSpec, ...]:
        return catalog_phases(self.name, self.model.num_params)

    def downlink_values(self) -> int:
        return catalog_downlink_values(self.name, self.model.num_params)

    def init(self, seed: tf.Tensor) -> BayesState:
        """The initial posterior (``init``): ``"he"``: the model's He-normal means and zero
        biases, every std ``init_std``; a library (``"bayesian_torch"``, ``"blitz"``,
        ``"blitz_0.2.3"``): every mean, biases included, N(0, 0.1^2) and every std
        softplus(r), r ~ N(posterior_rho_init, 0.1^2), as that library's Bayesian layers
        initialise (:data:`learning.hyperparameters.LIBRARY_RHO_INIT`). The precision is
        std^-2 (computed in float64), floored at ``min_precision``.
        """
        if self.init_name == "he":
            mu = tf.cast(self.model.init_mean(seed), tf.float64)
            rho = tf.fill(tf.shape(mu), tf.constant(self.init_std**-2, tf.float32))
            rho = tf.cast(tf.maximum(rho, self.config.min_precision), tf.float64)
            return BayesState(mu, rho)
        seed = tf.convert_to_tensor(seed, tf.int32)
        d = [self.model.num_params]
        fold = tf.random.experimental.stateless_fold_in
        mu = LIBRARY_INIT_SPREAD * tf.random.stateless_normal(d, fold(seed, LIBRARY_INIT_MEAN), dtype=tf.float64)
        r = LIBRARY_RHO_INIT[self.init_name] + LIBRARY_INIT_SPREAD * tf.random.stateless_normal(
            d, fold(seed, LIBRARY_INIT_RHO), dtype=tf.float64)
        std = tf.math.softplus(r)
        rho = tf.maximum(1.0 / tf.square(std), tf.constant(self.config.min_precision, tf.float64))
        # the devices see float32 values: keep the state on float32's grid as "he" does
        mu = tf.cast(tf.cast(mu, tf.float32), tf.float64)
        rho = tf.cast(tf.cast(rho, tf.float32), tf.float64)
        return BayesState(mu, rho)

    def _chunks(self, num_devices: int) -> list[tuple[int, int]]:
        size = self.trainer.runtime.device_chunk or num_devices
        return [(lo, min(lo + size, num_devices)) for lo in range(0, num_devices, size)]

    def local_update(self, phase: int, state: BayesState, carry, data: DeviceData, seed):
        if phase not in (0, 1):
            raise ValueError(f"phase must be 0 or 1, got {phase!r}")
        if phase == 1 and not isinstance(carry, BayesCarry):
            raise ValueError(f"phase 1 needs the carry of phase 0, got {carry!r}")
        updates, losses, hits = [], [], 0
        mu, rho = state.mu32, state.rho32
        # lambda_k = kl_scale pi_k / d with the device's own share pi_k (a cohort's weights
        # are renormalised over it); a device's noise stream is keyed by its population id
        own = data.weights if data.devices is None else data.weights * data.population_share
        # one [K, d] array whose rows each chunk writes, where the backend can (no concat:
        # at K = 10,000 a fresh 4.4 GiB array per phase cost the kernel seconds of page zeroing)
        full = self.trainer.phase_output(data.num_devices)
        for lo, hi in self._chunks(data.num_devices):
            args = (data.x[lo:hi], data.y[lo:hi], data.mask[lo:hi], own[lo:hi])
            ids = data.device_ids[lo:hi]
            steps = None if data.local_steps is None else data.local_steps[lo:hi]
            out = None if full is None else full[lo:hi]
            if phase == 0:
                delta, loss, chunk_hits = self.trainer.rho_phase(
                    mu, rho, *args, seed, device_ids=ids, device_steps=steps, out=out
                )
                hits += chunk_hits
            else:
                delta, loss = self.trainer.nu_phase(
                    mu, carry.rho_prev, rho, carry.delta_rho_k[lo:hi], *args, seed,
                    device_ids=ids, delta_rho_global=carry.delta_rho, device_steps=steps, out=out,
                )
            updates.append(delta)
            losses.append(loss[-1])
        if full is not None:
            update = as_tensor(full)
        else:
            update = updates[0] if len(updates) == 1 else tf.concat(updates, axis=0)
        metrics = {"train_loss": tf.reduce_sum(data.weights * tf.concat(losses, axis=0))}
        if phase == 0:
            metrics["local_precision_floor_hits"] = hits
            return update, BayesCarry(update, rho), metrics
        return update, carry, metrics

    def chunk_carry(self, chunk: BayesCarry, round_carry: BayesCarry) -> BayesCarry:
        """A chunk's phase-1 carry when the round streams its devices: the chunk's own
        ``delta_rho_k`` (its phase-0 updates, trained again from the same streams) with the
        round's applied ``delta_rho`` (set by the phase-0 server step)."""
        return dataclasses.replace(chunk, delta_rho=round_carry.delta_rho)

    def round_carry_for_chunks(self, carry: BayesCarry) -> BayesCarry:
        """What a streamed round keeps of phase 1's carry for :meth:`chunk_carry`: the applied
        ``delta_rho`` and ``rho_prev``, without the last chunk's ``delta_rho_k`` ([chunk, d],
        which would keep that chunk's pooled buffer from phase 2's chunks)."""
        return dataclasses.replace(carry, delta_rho_k=None)

    def server_update(self, phase: int, state: BayesState, carry, estimate: tf.Tensor,
                      received=None):
        """Phase 0: ``rho += estimate`` floored at ``min_precision``; phase 1: ``mu +=
        estimate`` (``received`` is not needed: the conflation's weights are the
        estimate's)."""
        del received
        estimate64 = tf.cast(estimate, tf.float64)
        if phase == 0:
            rho = state.rho + estimate64
            floor = tf.constant(self.config.min_precision, tf.float64)
            clamped = rho < floor
            hits = tf.reduce_sum(tf.cast(clamped, tf.int32))
            new = BayesState(state.mu, tf.maximum(rho, floor))
            if isinstance(carry, BayesCarry):
                applied = tf.where(clamped, tf.cast(floor - state.rho, tf.float32), estimate)
                carry = dataclasses.replace(carry, delta_rho=applied)
            return new, carry, {"precision_floor_hits": hits}
        if phase == 1:
            return BayesState(state.mu + estimate64, state.rho), carry, {}
        raise ValueError(f"phase must be 0 or 1, got {phase!r}")

    def metrics(self, previous: BayesState, state: BayesState,
                phases: dict[str, dict[str, float]]) -> dict[str, float]:
        """The phases' metrics (``train_loss_<phase>``, ``precision_floor_hits_rho``,
        ``local_precision_floor_hits_rho``), ``train_loss``, ``precision_floor_hits``
        (:func:`~learning.algorithms.base.round_columns`) and :meth:`round_metrics`."""
        columns = round_columns(phases)
        for key, value in self.round_metrics(previous, state).items():
            value = np.asarray(value)
            if value.ndim != 0:
                raise ValueError(f"{type(self).__name__}.round_metrics()[{key!r}] must be a scalar, "
                                 f"got shape {value.shape}")
            if str(key) in columns:
                raise ValueError(f"{type(self).__name__}.round_metrics returned {key!r}, a column "
                                 "round_columns already writes; rename the metric")
            columns[str(key)] = float(value)
        return columns

    def round_metrics(self, previous: BayesState, state: BayesState) -> dict[str, float]:
        """Whether the posterior moved this round (trace columns).

        ``precision_rel_change``: mean over entries of ``|rho_{t+1} - rho_t| / rho_t``
        (the float64 server values); ``precision_changed_fraction``: the share of entries
        whose float32 precision, the one the devices train and predict with, changed;
        ``posterior_std_p05`` / ``_p50`` / ``_p95``: quantiles of ``rho_{t+1}^-1/2``.
        """
        before, after = previous.rho.numpy(), state.rho.numpy()
        std = 1.0 / np.sqrt(after)
        p05, p50, p95 = np.percentile(std, [5.0, 50.0, 95.0])
        return {
            "precision_rel_change": float(np.mean(np.abs(after - before) / before)),
            "precision_changed_fraction": float(
                np.mean(before.astype(np.float32) != after.astype(np.float32))
            ),
            "posterior_std_p05": float(p05),
            "posterior_std_p50": float(p50),
            "posterior_std_p95": float(p95),
        }

    def _predict_impl(self, mu, rho, x, num_samples, seed):
        d = tf.shape(mu)[0]
        eps = tf.random.stateless_normal([num_samples, d], seed)
        w = (mu + tf.math.rsqrt(rho) * eps)[None]  # [1, S, d]
        probs = tf.nn.softmax(self.model.logits(w, x[None]))  # [1, S, N, C]
        return tf.reduce_mean(probs[0], axis=0)

    def predict_probs(self, state: BayesState, x, num_samples: int, seed, chunk: int = 1000):
        """Posterior predictive ``1/S sum_s softmax(f(x; w_s))``, ``w_s ~ N(mu, diag(rho)^-1)``.

        Input: ``x`` [N, ...]; the same S weight samples serve every chunk of ``chunk`` rows.
        Output: [N, C] tf.float32.
        """
        if int(num_samples) < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples!r}")
        x = tf.convert_to_tensor(x, tf.float32)
        parts = [
            self._predict(state.mu32, state.rho32, x[i : i + chunk], int(num_samples), seed)
            for i in range(0, int(x.shape[0]), chunk)
        ]
        return tf.concat(parts, axis=0)

    def _predict_mean_impl(self, mu, x):
        return tf.nn.softmax(self.model.logits(mu[None, None], x[None]))[0, 0]  # [N, C]

    def predict_mean_probs(self, state: BayesState, x, chunk: int = 1000):
        """The posterior mean's prediction ``softmax(f(x; mu))`` (no weight sampling): the
        other way to predict with the posterior (the paper does not say which it uses).

        Input: ``x`` [N, ...]. Output: [N, C] tf.float32 (the float32 ``mu`` the devices
        see, in chunks of ``chunk`` rows).
        """
        x = tf.convert_to_tensor(x, tf.float32)
        mu = state.mu32
        parts = [self._predict_mean(mu, x[i : i + chunk]) for i in range(0, int(x.shape[0]), chunk)]
        return tf.concat(parts, axis=0)

    def state_to_arrays(self, state: BayesState) -> dict[str, np.ndarray]:
        return {"mu": state.mu.numpy(), "rho": state.rho.numpy()}

    def state_from_arrays(self, arrays: dict[str, np.ndarray]) -> BayesState:
        return BayesState(
            tf.constant(arrays["mu"], tf.float64), tf.constant(arrays["rho"], tf.float64)
        )

    def is_finite(self, state: BayesState) -> bool:
        return bool(
            tf.reduce_all(tf.math.is_finite(state.mu)) and tf.reduce_all(tf.math.is_finite(state.rho))
        )
