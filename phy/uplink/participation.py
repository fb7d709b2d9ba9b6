"""Who takes part in a round: scheduling, dropouts and stragglers (``[participation]``).

Each round the BS schedules a cohort, the scheduled devices train, and each of them
then sends or not in each uplink phase:

1. **Scheduling** (``participation.scheduling``), from the round's CSI as the devices
   report it (the wideband gain ``g_k = mean_f |h_hat_kf|^2``, the effective channel with a
   multi-antenna BS):

   * ``"uniform"``: ``K_S = max(1, round(fraction K))`` (halves up) devices drawn uniformly without
     replacement (Flower's and FedAvg's client sampling);
   * ``"best_channel"``: the ``K_S`` devices with the largest ``g_k`` this round (the
     greedy channel-aware selection of the over-the-air FL literature; ties by id);
   * ``"gain_threshold"``: every device with ``10 log10 g_k > gain_threshold_db`` (Zhu et
     al.'s truncated scheduling; the cohort may be empty).

2. **Stragglers** (``deadline_s``): a scheduled device's time per local step this round is
   ``step_time_min_s + X``, ``X ~ Exp(mean step_time_extra_mean_s)`` (the shifted
   exponential of the coded-computation literature, Lee et al. 2018), and its training
   takes ``training_phases * E`` steps (the proposed method trains in both its phases,
   the others in one). A device whose training would end after ``deadline_s`` straggles:
   with ``straggler_policy = "drop"`` it sends nothing this round; with ``"fewer_steps"``
   it takes the ``e_k = floor(deadline_s / (training_phases t_k))`` steps per phase it has
   time for and sends on time (FedNova's and FedProx's "partial work"; ``e_k = 0``: it
   sends nothing).

3. **Dropouts** (``dropout_probability``): every other scheduled device fails to send in
   each phase independently with that probability, after training (a link or battery
   failure the device notices). A device can so drop in the proposed method's phase 1
   and send in phase 2: its phase-2 update is formed from its own phase-1 precision, which
   the BS's aggregate lacks (the conflation is then over the phase's own senders).

The BS aggregates each phase over the devices that sent, with weights ``pi_k / share``:
``share = sum_k pi_k`` over the senders when it knows who dropped (``bs_knows_dropouts``),
over the whole cohort when it does not (then the estimate is biased by the factor
``sum_senders pi_k / sum_cohort pi_k``, traced as ``received_weight_<phase>``). A round
in which some phase reaches the BS from no device is discarded: the global state stays,
no device's state advances (``round_discarded``).

All draws come from the round's ``"participation"`` stream (:mod:`native.streams`) and are
made for every device whatever the keys, so a run replays and resumes bit for bit and
changing one key does not shift the others' draws (:func:`draw_cohort`, NumPy);
:func:`phase_link` forms what one phase sends (the senders' rows, weights and channels).
:class:`phy.uplink.Uplink` draws the cohort of every round and sends each phase through
:func:`phase_link`; the policy's keys (``config``) are the scenario's ``[participation]``
table, read by attribute (``fraction``, ``scheduling``, ``cohort_size(K)``, ...). The
scheduling policies are the functions ``schedule_<name>`` here, registered once with their
display names in :data:`phy.parameters.SCHEDULING`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from phy.parameters import SCHEDULING  # pydantic only

NOT_SCHEDULED, TRANSMITTED, DROPPED, STRAGGLED, FEWER_STEPS = 0.0, 1.0, 2.0, 3.0, 4.0
"""The codes of the per-device trace column ``participated``: not scheduled; sent in every
phase; scheduled and trained, failed to send in at least one phase; missed the deadline
and sent nothing; missed it with E steps and sent after fewer (``"fewer_steps"``; a
dropout in some phase counts as dropped)."""


@dataclass(frozen=True)
class RoundCohort:
    """One round's participation.

    Attributes
    ----------
    scheduled : np.ndarray, [K_S], int32
        The cohort's population ids, ascending (the devices that train).
    sent : np.ndarray, [P, K_S], bool
        Per uplink phase, which cohort rows reach the BS.
    status : np.ndarray, [K], float64
        The ``participated`` code of every device (:data:`NOT_SCHEDULED`, ...).
    steps : np.ndarray, [K_S], int32
        Local steps per training phase each cohort device takes (E, or fewer for a
        ``"fewer_steps"`` straggler; at least 1: a straggler that sends nothing still
        trains, unseen).
    """

    scheduled: np.ndarray
    sent: np.ndarray
    status: np.ndarray
    steps: np.ndarray

    @property
    def discarded(self) -> bool:
        """True when some phase reaches the BS from no device (the round is discarded)."""
        return self.scheduled.size == 0 or not bool(np.all(self.sent.any(axis=1)))


def schedule_uniform(config, gain: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``participation.scheduling = "uniform"``: the first ``config.cohort_size(K)`` devices
    of the round's random permutation ``order`` [K] (a uniform draw without replacement)."""
    return order[:config.cohort_size(gain.shape[0])]


def schedule_best_channel(config, gain: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``"best_channel"``: the ``config.cohort_size(K)`` devices of the largest wideband
    gain ``gain`` [K] (ties to the lower index)."""
    ranked = np.lexsort((np.arange(gain.shape[0]), -gain))
    return ranked[:config.cohort_size(gain.shape[0])]


def schedule_gain_threshold(config, gain: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``"gain_threshold"``: every device whose gain is above
    ``config.gain_threshold_db`` (dB)."""
    with np.errstate(divide="ignore"):
        return np.flatnonzero(10.0 * np.log10(gain) > config.gain_threshold_db)


def draw_cohort(config, gain: np.ndarray, num_phases: int, local_steps: int, training_phases: int,
                rng: np.random.Generator) -> RoundCohort:
    """The round's cohort and who sends in each phase.

    Parameters
    ----------
    config : cosim.scenario.tables.ParticipationConfig
        ``[participation]``.
    gain : np.ndarray, [K], float
        The wideband gains ``mean_f |h_hat_kf|^2`` the BS schedules on.
    num_phases : int
        P, the algorithm's uplink phases.
    local_steps : int
        E, the local steps per training phase.
    training_phases : int
        The phases in which a device trains (:data:`learning.catalog.CATALOG`).
    rng : np.random.Generator
        The round's ``"participation"`` stream.

    Output: :class:`RoundCohort`.
    """
    gain = np.asarray(gain, np.float64)
    num_devices = gain.shape[0]
    order = rng.permutation(num_devices)
    extra = rng.exponential(1.0, num_devices) * config.step_time_extra_mean_s
    failures = rng.random((num_phases, num_devices)) < config.dropout_probability

    chosen = SCHEDULING[config.scheduling].target()(config, gain, order)
    scheduled = np.sort(chosen).astype(np.int32)

    steps = np.full(num_devices, local_steps, np.int64)
    silent = np.zeros(num_devices, bool)  # stragglers that send nothing
    if config.deadline_s is not None:
        step_s = config.step_time_min_s + extra
        late = training_phases * local_steps * step_s > config.deadline_s
        if config.straggler_policy == "drop":
            silent = late
        else:  # "fewer_steps": the steps per phase there is time for
            fit = np.floor(config.deadline_s / (training_phases * step_s)).astype(np.int64)
            steps = np.where(late, np.minimum(fit, local_steps), local_steps)
            silent = steps < 1
    sends = ~failures & ~silent[None, :]  # [P, K]

    status = np.full(num_devices, NOT_SCHEDULED)
    status[scheduled] = TRANSMITTED
    status[scheduled[(steps < local_steps)[scheduled]]] = FEWER_STEPS
    dropped = ~sends.all(axis=0)
    status[scheduled[dropped[scheduled]]] = DROPPED
    status[scheduled[silent[scheduled]]] = STRAGGLED
    return RoundCohort(scheduled, sends[:, scheduled], status,
                       np.maximum(steps[scheduled], 1).astype(np.int32))


def full(config) -> bool:
    """True when ``[participation]`` is at its defaults: every device trains and sends."""
    return (config.fraction == 1.0 and config.scheduling == "uniform"
            and config.dropout_probability == 0.0 and config.deadline_s is None)


@dataclass(frozen=True)
class PhaseLink:
    """One phase's uplink: the rows that send and what the BS scales them by.

    ``updates`` [K_T, n], ``weights`` [K_T] (the BS's, ``pi_k / share``),
    ``reference_weights`` [K_T] (renormalised over the senders: the error-free sum the
    estimate is measured against), the senders' ``h`` [K_T, F] (or [K_T, N, F], a channel
    per OFDM symbol: :mod:`phy.uplink.moving_link`), ``h_hat`` [K_T, F], ``path_gain``
    [K_T] and time-domain ``uplink``; ``received`` for the algorithm's server update, as
    ``(rows [K_T] tf.int32 (the senders' cohort rows), devices [K_T] tf.int32 (their
    population ids), share)`` (None without a cohort), ``received_weight`` (the senders' share of the cohort's data weight)
    and ``devices`` ((senders [K_T], K) to spread per-device values over the population;
    None: the rows are the population); ``artificial_noise_power_w``, noise per subcarrier
    (W) added on top of the receiver's (``[privacy]``'s target, :mod:`phy.privacy`; 0:
    none); ``signal_scale``, s in (0, 1]: the common transmit scaling of a control that
    meets the target by sending less power (:class:`phy.power.PrivacyScaling`: the
    scheme runs it at ``s^2 gamma`` and ``s^2 P``; 1: none); ``delta_bar``, the
    ``delta_bar`` the BS forms from a clip norm (:func:`phy.privacy.public_delta_bar`) in
    place of the senders' reported norms (None: the reported one, eq. ``rho_avg``); ``slot``,
    the senders' channels over time when they move (:class:`phy.uplink.moving_link.SlotChannel`,
    for a scheme that ``ages_per_block``; None: block fading).
    """

    updates: Any
    weights: Any
    reference_weights: Any
    h: Any
    h_hat: Any
    path_gain: Any
    uplink: Any
    received: tuple[Any, Any, float] | None
    received_weight: float
    devices: tuple[np.ndarray, int] | None
    artificial_noise_power_w: float = 0.0
    signal_scale: float = 1.0
    delta_bar: float | None = None
    slot: Any = None

    def per_device(self, values) -> np.ndarray:
        """``values`` [K_T] over the population [K] (NaN for the devices that did not send)."""
        values = np.asarray(values)
        if self.devices is None:
            return values
        senders, num_devices = self.devices
        full = np.full(num_devices, np.nan, np.result_type(values.dtype, np.float32))
        full[senders] = values
        return full


def phase_link(cohort: RoundCohort | None, index: int, weights, updates, h, h_hat, uplink, *,
               path_gain, population_weights: np.ndarray, bs_knows_dropouts: bool) -> PhaseLink:
    """What phase ``index`` of a round sends over the air: the whole population's rows
    without a cohort (``cohort`` None), else the cohort rows that send.

    Input: the round's data ``weights`` pi_k [K_S] (the cohort's, renormalised), its
    ``updates`` [K_S, n], the channel ``h`` and CSI ``h_hat`` [K, F] of the whole
    population, its time-domain ``uplink`` (or None), ``path_gain`` [K] and the devices'
    own shares ``population_weights`` pi_k [K] (float64). Output: :class:`PhaseLink`.
    """
    if cohort is None:
        return PhaseLink(updates, weights, weights, h, h_hat, path_gain, uplink,
                         None, 1.0, None)
    rows = np.flatnonzero(cohort.sent[index]).astype(np.int32)
    senders = cohort.scheduled[rows]
    pi = population_weights
    sent_share, cohort_share = pi[senders].sum(), pi[cohort.scheduled].sum()
    share = sent_share if bs_knows_dropouts else cohort_share
    index_t = tf.constant(senders)
    every_row = rows.size == int(updates.shape[0])
    return PhaseLink(
        updates=updates if every_row else tf.gather(updates, tf.constant(rows)),
        weights=tf.constant(pi[senders] / share, tf.float32),
        reference_weights=tf.constant(pi[senders] / sent_share, tf.float32),
        h=tf.gather(h, index_t), h_hat=tf.gather(h_hat, index_t),
        path_gain=tf.gather(path_gain, index_t),
        uplink=None if uplink is None else uplink.subset(senders),
        received=(tf.constant(rows), index_t, float(share)),
        received_weight=float(sent_share / cohort_share),
        devices=(senders, population_weights.shape[0]),
    )
