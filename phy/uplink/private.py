"""``[privacy]`` as a wrapper around a scheme that accounts for it (:class:`Private`), and
its per-round part (:class:`PrivateRound`, made by the wrapper's round hook
:meth:`Private.start_round` for each :class:`phy.uplink.RoundLink`).

The wrapper is a scheme like any other (:mod:`phy.uplink.scheme`): the block and the
round link call its round hooks and name no privacy. :meth:`Private.check_air` refuses,
when the block is built, an air the mechanism does not describe (the time domain; the
devices' own noise with more than one BS antenna). The mechanism is the analog scheme's
(:mod:`phy.privacy`: the receiver noise against each sender's sensitivity on the shared
subcarriers): it reads that scheme's power control and gamma, and the round link's
channel, estimate and path gains (a new drop's with ``channel.redrop_every_rounds``).
Each phase, before the wrapped scheme sends, :meth:`PrivateRound.before_phase` clips the
updates to the clip norm (if any), sets the public ``delta_bar`` of the clip norm, the
artificial noise (or the transmit scaling) of the phase's floor, charges the devices' own
noise to the round's :class:`phy.uplink.ledger.RoundLedger`, and names the phase's
mechanism in its columns; after the round's phases :meth:`PrivateRound.columns` charges
the phases of a discarded round and joins the round's phases into one mechanism.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from native import streams
from native.columns import Columns
from native.streams import numpy_rng, stream_seed
from phy.aircomp_parts import mean_power
from phy.privacy import (
    PhaseMechanism,
    UplinkPrivacy,
    artificial_noise_power_w,
    device_noise_tx_power_w,
    joint_noise_multiplier,
    phase_mechanism,
    public_delta_bar,
    transmit_scaling,
)
from phy.uplink import participation as cohorts
from phy.uplink.scheme import SchemeRound


@dataclass(frozen=True, eq=False)
class Private:
    """A scheme that ``accounts_privacy`` (the analog one) under ``privacy``
    (:class:`phy.privacy.UplinkPrivacy`): it sends as the wrapped ``scheme`` does, on the
    phase link :meth:`PrivateRound.before_phase` prepared. A wrapped scheme that does not
    ``accounts_privacy`` is refused here.

    Attributes
    ----------
    scheme
        The wrapped scheme; its ``power_control`` and ``gamma_w`` enter the mechanism.
    privacy : phy.privacy.UplinkPrivacy
        What is traced and enforced: the noise floors, the clip norm, the noise's source,
        the eavesdropper, subsampling.
    """

    scheme: Any
    privacy: UplinkPrivacy

    accounts_privacy = True

    def __post_init__(self):
        if not getattr(self.scheme, "accounts_privacy", False):
            raise ValueError("privacy is derived for the analog scheme in the frequency domain, "
                             f"got {type(self.scheme).__name__}")

    @property
    def carries(self) -> str:
        return self.scheme.carries

    @property
    def channel_per_symbol(self) -> bool:
        """The wrapped scheme's (:mod:`phy.uplink.moving_link`)."""
        return getattr(self.scheme, "channel_per_symbol", False)

    def nominal_symbols(self, grid) -> int:
        """The wrapped scheme's."""
        return self.scheme.nominal_symbols(grid)

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool):
        """The wrapped scheme's send of ``link`` (already prepared by the round's
        :meth:`PrivateRound.before_phase`)."""
        return self.scheme.send(link, air, phase=phase, seed=seed, keep_signals=keep_signals,
                                per_device=per_device)

    def check_air(self, air) -> None:
        """Refuse (ValueError) an ``air`` (:class:`phy.uplink.settings.AirInterface`) the
        mechanism is not derived for: the time domain, and the devices' own noise with
        more than one BS antenna (the block's round hook, when it is built)."""
        if air.domain != "frequency":
            raise ValueError("privacy is derived for the analog scheme in the frequency domain, "
                             f"got {type(self.scheme).__name__} in the {air.domain!r} domain")
        if self.privacy.noise_source == "devices" and air.num_antennas > 1:
            raise ValueError("the devices' artificial noise is derived for a single-antenna BS, "
                             f"got {air.num_antennas} antennas")

    def start_round(self, round_link) -> PrivateRound:
        """The privacy part of ``round_link`` (a :class:`phy.uplink.RoundLink`; the
        scheme's round hook)."""
        return PrivateRound(self, round_link)


def _joint(mechanisms) -> float:
    """:func:`phy.privacy.joint_noise_multiplier` of ``mechanisms`` (``inf`` for none)."""
    mechanisms = list(mechanisms)
    return joint_noise_multiplier(mechanisms)[0] if mechanisms else float("inf")


def clip_rows(updates, clip_norm: float):
    """Every row of ``updates`` [K, n] tf.float32 scaled to L2 norm at most ``clip_norm``
    (``Delta_k min(1, C / ||Delta_k||)``, the norm in float64; float32 rounding may leave
    it ~1e-7 relative above C), and how many rows were scaled."""
    norms = tf.norm(tf.cast(updates, tf.float64), axis=1)
    scale = tf.where(norms > clip_norm, clip_norm / tf.maximum(norms, 1e-300), tf.ones_like(norms))
    clipped = int(tf.reduce_sum(tf.cast(norms > clip_norm, tf.int32)))
    if not clipped:
        return updates, 0
    return updates * tf.cast(scale, tf.float32)[:, None], clipped


class PrivateRound(SchemeRound):
    """One round's mechanisms (made by :meth:`Private.start_round`): the BS's (and an
    eavesdropper's) view of every phase sent, from the round link's channel model and
    path gains (``link.channel``, ``link.path_gain``: its drop's), its channel ``link.h``
    and estimate ``link.h_hat``, and the block's seed, grids and air. The senders' own
    artificial noise is charged to the round's ledger."""

    def __init__(self, wrapper: Private, link):
        self.link, self.block = link, link.block
        self.scheme, self.privacy = wrapper.scheme, wrapper.privacy
        self._mechanisms: dict[str, PhaseMechanism] = {}
        self._eavesdropper_mechanisms: dict[str, PhaseMechanism] = {}
        self._population_mechanisms: dict[str, PhaseMechanism] = {}
        self._eavesdropper_population: dict[str, PhaseMechanism] = {}
        self._observed_gain = None
        self._eavesdropper_gain = None
        self._transmit = None

    def before_phase(self, phase: str, link, ledger):
        """``link`` (the phase's :class:`phy.uplink.participation.PhaseLink`) clipped,
        with the public ``delta_bar`` and the artificial noise or transmit scaling of the
        phase's floor, and the phase's privacy columns (:meth:`_private`); the devices' own
        noise charged to ``ledger`` (:class:`phy.uplink.ledger.RoundLedger`)."""
        return self._private(phase, link, ledger)

    def columns(self) -> Columns:
        """The round's privacy columns (after its phases): those of the phases some
        device sent in a round the BS then discarded (:meth:`_charge_discarded`) and
        ``privacy_joint_noise_multiplier`` (:meth:`_joint_columns`)."""
        columns = Columns()
        if self.link.discarded and self.link.cohort.scheduled.size:
            charged = self._charge_discarded()
            columns.scalars.update(charged.scalars)
            columns.per_device.update(charged.per_device)
        columns.scalars.update(self._joint_columns())
        return columns

    @property
    def observed_gain(self) -> np.ndarray:
        """``[K, F]`` float64: the BS's power gain ``|h_kf|^2`` of every device, summed
        over its antennas before the combiner (N_r > 1: the round's antenna channel drawn
        again from its stateless seed with the round's channel model and path gains, the
        same draw), as :mod:`phy.privacy` takes it."""
        if self._observed_gain is None:
            block, link = self.block, self.link
            if link.air.num_antennas > 1:
                h = link.channel.antennas(link.path_gain, stream_seed(block.seed, link.t, streams.CHANNEL),
                                          link.air.num_antennas).numpy()
                self._observed_gain = np.sum(np.abs(h.astype(np.complex128)) ** 2, axis=1)
            else:
                self._observed_gain = np.abs(np.asarray(self.link.h, np.complex128)) ** 2
        return self._observed_gain

    @property
    def eavesdropper_gain(self) -> np.ndarray:
        """``[K, F]`` float64: the eavesdropper's power gain ``|h_e,kf|^2`` of every device
        this round (:meth:`phy.privacy.Eavesdropper.channel_gain`, from the round's
        ``"eavesdropper"`` stream)."""
        if self._eavesdropper_gain is None:
            block = self.block
            self._eavesdropper_gain = self.privacy.eavesdropper.channel_gain(
                self.link.air.num_subcarriers, numpy_rng(block.seed, self.link.t, streams.EAVESDROPPER))
        return self._eavesdropper_gain

    @property
    def transmit(self) -> tuple[np.ndarray, np.ndarray]:
        """``(|h_hat_kf|^2, mask)`` [K, F] each of the round: the devices' estimated gains
        (float32, as the power control reads them) and the control's transmit mask at the
        round link's path gains (:meth:`phy.power.PowerControl.transmit_mask`), computed
        once per round."""
        if self._transmit is None:
            estimated = tf.square(tf.abs(self.link.h_hat))
            mask = self.scheme.power_control.transmit_mask(estimated, self.link.path_gain[:, None]).numpy()
            self._transmit = (estimated.numpy(), mask)
        return self._transmit

    def _population(self, link) -> tuple[np.ndarray, np.ndarray]:
        """The phase's weights pi_k / share [K] float64 of every device as the BS would
        have weighted it had it sent (the senders' own; a device that did not send at the
        senders' share, which only overstates its weight), and who sent [K] bool."""
        block = self.block
        if link.devices is None:
            return np.asarray(link.weights, np.float64), np.ones(block.num_devices, bool)
        senders, num_devices = link.devices
        weights = np.asarray(block.population_weights, np.float64) / float(link.received[2])
        weights[senders] = np.asarray(link.weights, np.float64)
        sent = np.zeros(num_devices, bool)
        sent[senders] = True
        return weights, sent

    def _mechanism(self, phase: str, weights, delta_bar: float | None, eavesdropper: bool = False
                   ) -> PhaseMechanism:
        """The phase's mechanism at the receiver noise alone for *every* device of the
        population as if it sent (``weights`` [K]; restrict it to the senders with
        :meth:`PhaseMechanism.restricted`): each device's sensitivity from the observer's
        gains, its transmit scaling (eq. ``PowerAlloc_1`` at ``delta_bar``, under the
        control's transmit mask, as :func:`phy.aircomp.aggregate` forms it) and the phase's
        N, P, sigma_z^2 (:func:`phy.privacy.phase_mechanism`); ``delta_bar`` None: not
        known (a discarded round's phase under reported norms), so the clip bound is not
        used. With ``eavesdropper`` the eavesdropper's gains and noise instead of the BS's.
        The estimates and mask are the round's (:attr:`transmit`)."""
        block = self.block
        gain, noise_w = self.observed_gain, block.air.noise_power_w
        if eavesdropper:
            gain, noise_w = self.eavesdropper_gain, self.privacy.eavesdropper.noise_power_w
        clip_norm = self.privacy.clip_norm_of(phase) if delta_bar is not None else None
        delta_bar = delta_bar if delta_bar is not None and delta_bar > 0.0 else 1.0  # nothing is sent at 0
        estimated, mask = self.transmit
        scaling = transmit_scaling(weights, estimated, self.scheme.gamma_w, delta_bar, mask)
        return phase_mechanism(
            channel_gain=gain, tx_scaling=scaling, sent=np.ones(scaling.shape[0], bool),
            num_symbols=block.grids[phase].num_symbols, tx_power_w=block.air.tx_power_w,
            noise_power_w=noise_w, budgeted=self.scheme.power_control.budgeted, clip_norm=clip_norm)

    def _private(self, phase: str, link, ledger, on_air: bool = True):
        """``link`` with its updates clipped to the clip norm (if any), the public
        ``delta_bar`` of the clip norm (``privacy.delta_bar = "clip_norm"``) and the
        artificial noise (or transmit scaling) of the phase's floor (if any), and the
        phase's columns of its mechanism (kept for :meth:`columns`). The noise is set
        against the senders' worst device, or under Poisson subsampling against the
        population's (every device as if it had been sampled). ``on_air`` False: the phase
        of a discarded round, whose updates the simulator did not form (``link.updates``
        has no values): its mechanism from what does not need them, nothing charged to
        ``ledger`` (None then)."""
        block, privacy = self.block, self.privacy
        columns = Columns()
        num_values = block.grids[phase].num_values
        clip_norm = privacy.clip_norm_of(phase)
        delta_bar = 1.0  # the budget bound does not see delta_bar; the clip bound does
        if clip_norm is not None and on_air:
            updates, clipped = clip_rows(link.updates, clip_norm)
            link = dataclasses.replace(link, updates=updates)
            columns.scalars[f"privacy_clipped_devices_{phase}"] = float(clipped)
            delta_bar = float(mean_power(tf.cast(link.weights, tf.float32), updates,
                                         int(updates.shape[1])))
        elif clip_norm is not None:
            delta_bar = None  # the reported norms of updates not formed: no clip bound
        if privacy.public_delta_bar(phase):
            delta_bar = public_delta_bar(clip_norm, np.asarray(link.weights, np.float64), num_values)
            link = dataclasses.replace(link, delta_bar=delta_bar)
        columns.scalars[f"privacy_delta_bar_public_{phase}"] = float(privacy.public_delta_bar(phase))
        weights, sent = self._population(link)
        population = self._mechanism(phase, weights, delta_bar)
        bare = population.restricted(sent)
        decider = population if privacy.subsampled else bare
        noise_w = artificial_noise_power_w(decider, privacy.noise_floor.get(phase), block.air.noise_power_w)
        scale = 1.0
        if self.scheme.power_control.scales_for_privacy:
            # the floor met by sending less: every sensitivity scales with s (phy.power.PrivacyScaling)
            if noise_w > 0.0:
                scale = decider.worst_noise_multiplier / float(privacy.noise_floor[phase])
                link = dataclasses.replace(link, signal_scale=scale)
            columns.scalars[f"privacy_signal_scale_{phase}"] = scale
            noise_w = 0.0
        elif noise_w > 0.0:
            link = dataclasses.replace(link, artificial_noise_power_w=noise_w)
        std = float(np.sqrt((block.air.noise_power_w + noise_w) / 2.0))
        population = population.scaled(scale) if noise_w == 0.0 else population.with_noise_std(std)
        mechanism = population.restricted(sent)
        if privacy.noise_source == "devices" and not self.scheme.power_control.scales_for_privacy and on_air:
            self._device_noise(phase, link, noise_w, ledger, columns)
        if block.trace.per_device:
            columns.per_device[f"device_noise_multiplier_{phase}"] = np.where(
                sent, mechanism.noise_multiplier, np.nan)
        self._mechanisms[phase] = mechanism
        self._population_mechanisms[phase] = population
        columns.scalars[f"privacy_noise_multiplier_{phase}"] = mechanism.worst_noise_multiplier
        columns.scalars[f"privacy_worst_device_{phase}"] = float(mechanism.worst_device)
        if privacy.subsampled:
            columns.scalars[f"privacy_population_noise_multiplier_{phase}"] = \
                population.worst_noise_multiplier
        columns.scalars[f"artificial_noise_power_w_{phase}"] = float(noise_w)
        if privacy.eavesdropper is not None:
            self._eavesdropper(phase, weights, sent, delta_bar, scale, columns)
        return link, columns

    def _eavesdropper(self, phase: str, weights, sent, delta_bar: float | None, scale: float,
                      columns: Columns) -> None:
        """The phase's mechanism at the eavesdropper (its gains, its noise; the artificial
        noise, planned for the BS, not counted; a privacy scaling s applies to what the
        devices send, so to it too): ``eavesdropper_noise_multiplier_<phase>``,
        ``eavesdropper_worst_device_<phase>``."""
        population = self._mechanism(phase, weights, delta_bar, eavesdropper=True).scaled(scale)
        mechanism = population.restricted(sent)
        self._eavesdropper_mechanisms[phase] = mechanism
        self._eavesdropper_population[phase] = population
        columns.scalars[f"eavesdropper_noise_multiplier_{phase}"] = mechanism.worst_noise_multiplier
        columns.scalars[f"eavesdropper_worst_device_{phase}"] = float(mechanism.worst_device)

    def _charge_discarded(self) -> Columns:
        """The privacy columns of the phases some device sent in a round the BS then
        discarded (:attr:`phy.uplink.RoundLink.discarded`): the signals went over the air, so their mechanism
        is charged like any phase's (:meth:`_private` without the updates, which the round
        did not form: the power budget's bound, and the clip bound where ``delta_bar`` is
        public; the artificial noise of the phase's floor is added as in any phase)."""
        block, cohort = self.block, self.link.cohort
        columns = Columns()
        for index, phase in enumerate(block.grids):
            if phase in self._mechanisms or not cohort.sent[index].any():
                continue
            link = cohorts.phase_link(
                cohort, index, None, tf.zeros([cohort.scheduled.size, 0], tf.float32), self.link.h,
                self.link.h_hat, self.link.uplink, path_gain=self.link.path_gain,
                population_weights=block.population_weights,
                bs_knows_dropouts=block.participation.bs_knows_dropouts)
            _, phase_columns = self._private(phase, link, None, on_air=False)
            columns.scalars.update(phase_columns.scalars)
            columns.per_device.update(phase_columns.per_device)
        return columns

    def _device_noise(self, phase: str, link, noise_w: float, ledger, columns: Columns) -> None:
        """The senders' own artificial noise (``privacy.noise_source = "devices"``): each
        sender's transmit power of its share (:func:`phy.privacy.device_noise_tx_power_w`,
        on top of its signal's budget), its energy charged to ``ledger`` (the round's
        ``tx_energy_j``), and the columns ``artificial_noise_tx_power_max_w_<phase>`` (the
        largest over the senders), ``artificial_noise_over_budget_<phase>`` (the senders whose
        noise alone is above P) and per device ``artificial_noise_tx_power_w_<phase>``.
        At the BS the noise is the designated source's (one Gaussian of
        ``sigma_z^2 + sigma_a^2`` per subcarrier, drawn by the scheme)."""
        block = self.block
        rows = slice(None) if link.devices is None else link.devices[0]
        power_w = device_noise_tx_power_w(self.observed_gain[rows], noise_w)
        ledger.charge_energy(rows, power_w * block.grids[phase].num_symbols * block.air.symbol_duration_s)
        columns.scalars[f"artificial_noise_tx_power_max_w_{phase}"] = float(np.max(power_w, initial=0.0))
        columns.scalars[f"artificial_noise_over_budget_{phase}"] = float(np.sum(power_w > block.air.tx_power_w))
        if block.trace.per_device:
            columns.per_device[f"artificial_noise_tx_power_w_{phase}"] = link.per_device(power_w)

    def _joint_columns(self) -> dict[str, float]:
        """``privacy_joint_noise_multiplier``: the round's phases as one Gaussian mechanism
        (:func:`phy.privacy.joint_noise_multiplier`; ``inf`` when nothing was sent), over
        the senders, or under Poisson subsampling over the population as if sampled; with
        an eavesdropper ``eavesdropper_joint_noise_multiplier``, of its own phases and,
        when the downlink carries the model in the clear, the BS's too (it learns at least
        what the BS does)."""
        privacy = self.privacy
        bs = self._population_mechanisms if privacy.subsampled else self._mechanisms
        out = {"privacy_joint_noise_multiplier": _joint(bs.values())}
        if privacy.eavesdropper is not None:
            own = (self._eavesdropper_population if privacy.subsampled
                   else self._eavesdropper_mechanisms)
            seen = [*own.values(), *(bs.values() if privacy.downlink_in_clear else ())]
            out["eavesdropper_joint_noise_multiplier"] = _joint(seen)
        return out
