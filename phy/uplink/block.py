"""The uplink of a run as one block: built once, then one :class:`RoundLink` per round.

:class:`Uplink` holds the static parts (the channel model, the CSI model, the scheme with
its own settings, the air interface with its timing/CFO model and receive combiner, the
devices' path gains and cohort policy, the grouping rule of every phase: the frozen groups
of :mod:`phy.uplink.settings`) and the run's integer seed, from which it
draws its own streams (:mod:`native.streams`: ``"channel"``, ``"sync"``, ``"csi"``,
``"participation"``, ``"noise/<phase>"`` of each round; with moving devices
``"csi/<phase>"`` for each phase after the first, and no ``"channel"``). It knows nothing of a scenario
file or of the learning side: phases are names with a number of values, updates are
``[K, n]`` tensors, weights ``[K]``.

Per round::

    link = uplink.round(t)                 # channel, CSI, offsets, combiner, cohort, the scheme's round
    result = link.send("rho", updates, weights)   # one phase over the air
    result.estimate, result.received, result.columns()
    link.columns()                         # the round's own columns (after the phases)

:meth:`RoundLink.send` hands each phase to the block's scheme (:mod:`phy.uplink.scheme`:
the analog chain of the paper, :class:`phy.uplink.analog.Analog`, or a sibling) with the
block's :class:`phy.uplink.settings.AirInterface`, after the scheme's round hook
(:class:`phy.uplink.scheme.SchemeRound`; the privacy wrapper's clips and adds noise there);
the round's symbols and energy go to its :class:`phy.uplink.ledger.RoundLedger`. What a
phase and a round add to the trace is named by :meth:`PhaseResult.columns` and
:meth:`RoundLink.columns` (:class:`native.columns.Columns`: ``/rounds`` scalars,
``/rounds/per_device`` ``[K]`` arrays and raw ``/signals``). The block does not change
across rounds: a round's channel model and path gains (a new drop's) travel with its
:class:`RoundLink`.
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
from phy.aggregate_error import aggregate_error, normalised_error
from phy.combiner import CombinedUplink, effective_channel
from phy.downlink import multicast_symbols
from phy.grid import GroupingRule
from phy.ofdm_time import TimeDomainUplink
from phy.uplink import moving_link
from phy.uplink import participation as cohorts
from phy.uplink.ledger import RoundLedger
from phy.uplink.participation import RoundCohort
from phy.uplink.phase_stream import PhaseStream
from phy.uplink.scheme import Scheme, check_air, start_round
from phy.uplink.settings import (
    BLOCK_FADING,
    DEFAULT_TRACE,
    NO_DOWNLINK,
    AirInterface,
    ChannelOverTime,
    Cohort,
    DownlinkLoad,
    TraceOptions,
)


@dataclass(frozen=True)
class PhaseResult:
    """One phase over the air.

    Attributes
    ----------
    estimate : [n], tf.float32
        The BS's estimate of the senders' weighted sum (what the server update applies).
    received : tuple or None
        ``(rows [K_T] tf.int32, devices [K_T] tf.int32, share)`` of a partial round (the
        senders' cohort rows, population ids and the BS's weight share), None when every
        device sent.
    """

    estimate: tf.Tensor
    received: tuple[Any, Any, float] | None
    _columns: Columns

    def columns(self) -> Columns:
        """The phase's columns: ``delta_bar_<phase>``, ``distortion_<phase>``,
        ``noise_power_<phase>``, ``aggregate_error_<phase>``, ``aggregate_nmse_<phase>``,
        ``power_over_budget_<phase>`` (a control that is ``budgeted``),
        ``received_weight_<phase>`` (a partial round); per device ``local_distortion_``,
        ``tx_power_w_``, ``tx_power_max_w_``, ``clipped_fraction_<phase>`` (with
        ``per_device``); the signals ``y_<phase>``, ``estimate_<phase>`` (when kept); first
        those of the scheme's round hook (the privacy wrapper's
        ``privacy_noise_multiplier_<phase>``, ... :mod:`phy.uplink.private`)."""
        return self._columns


class Uplink:
    """The air interface of a run (channel, CSI, sync, combiner, scheme, cohort).

    Parameters
    ----------
    channel
        A channel model of :data:`phy.parameters.CHANNEL_MODELS` (built), called as
        ``channel(path_gain, seed)`` / ``.cir`` / ``.antennas`` / ``.cir_antennas``.
    csi
        A CSI model of :data:`phy.parameters.CSI_MODELS` (built).
    air : phy.uplink.settings.AirInterface
        F, P, sigma_z^2, the symbol duration, the domain and waveform, N_r, the combiner
        and the sync (what a scheme's ``send`` reads).
    cohort : phy.uplink.settings.Cohort
        The devices' path gains, the phases, the data shares, the participation policy,
        E and the training phases.
    scheme : phy.uplink.scheme.Scheme
        How a phase goes over the air, with its own settings (the analog scheme,
        :class:`phy.uplink.analog.Analog`, holds the power control and gamma) and its
        optional round hooks (:mod:`phy.uplink.scheme`: ``check_air``, called here, and
        ``start_round``, called by :meth:`round`). Under ``[privacy]`` the analog scheme
        wrapped in :class:`phy.uplink.private.Private`, whose hooks refuse what its
        mechanism does not describe, trace each phase's Gaussian mechanism as the BS sees
        it and add the artificial noise of its floor.
    seed : int
        The run seed the round streams derive from.
    downlink : phy.uplink.settings.DownlinkLoad
        What the BS multicasts each round (default: nothing).
    trace : phy.uplink.settings.TraceOptions
        ``per_device`` columns and the rounds whose signals are kept.
    over_time : phy.uplink.settings.ChannelOverTime
        Moving devices (``moving``) and new drops every N rounds (``drops``); by default
        neither: block fading from ``channel`` for the whole run.

    The block keeps ``channel``, ``air``, ``cohort``, ``downlink``, ``trace``, ``scheme``,
    ``moving`` and ``drops``, and what it derives: ``path_gain`` [K] tf.float32 (the
    cohort's; with ``drops`` drop 0's), ``grids`` (a :class:`phy.grid.GroupingRule` per
    phase), ``phase_index``, ``num_devices``, ``participation`` (None when every device
    takes part) and ``population_weights``. None of it changes across rounds: round t's
    channel model and path gains (its drop's) are its :class:`RoundLink`'s.
    """

    def __init__(self, *, channel, csi, air: AirInterface, cohort: Cohort, scheme: Scheme, seed: int,
                 downlink: DownlinkLoad = NO_DOWNLINK, trace: TraceOptions = DEFAULT_TRACE,
                 over_time: ChannelOverTime = BLOCK_FADING):
        self.channel, self.csi, self.air, self.cohort, self.scheme = channel, csi, air, cohort, scheme
        self.seed = int(seed)
        self.downlink, self.trace = downlink, trace
        self.path_gain = tf.constant(np.asarray(cohort.path_gain, np.float64), tf.float32)
        self.grids = {name: GroupingRule(n, air.num_subcarriers) for name, n in cohort.phases}
        self.phase_index = {name: i for i, (name, _) in enumerate(cohort.phases)}
        self.num_devices = int(self.path_gain.shape[0])
        participation = cohort.participation
        self.participation = None if participation is None or cohorts.full(participation) else participation
        self.population_weights = (None if cohort.population_weights is None
                                   else np.asarray(cohort.population_weights, np.float64))
        check_air(scheme, air)  # the scheme refuses an air it does not describe
        self.moving, self.drops = over_time.moving, over_time.drops

    def round(self, t: int) -> RoundLink:
        """Round ``t``'s link: the channel and, in the time domain, the waveform uplink and
        the offsets (:meth:`draw_channel`), the devices' estimates from the ``"csi"`` stream
        and the cohort (:meth:`draw_cohort`); with ``drops``, from the channel model and
        path gains of round t's drop (the link's ``channel`` and ``path_gain``)."""
        channel, path_gain = self.channel, self.path_gain
        if self.drops is not None:
            channel = self.drops.at(t)[0]
            path_gain = tf.constant(np.asarray(channel.path_gain, np.float64), tf.float32)
        if self.moving is not None:  # the channel at the first phase's start (phy.uplink.moving_link)
            h, h_hat, gain, combiner = moving_link.round_channel(self.moving, self.csi, self.seed, t, self.air)
            offsets = None if self.air.domain != "time" else self.air.sync(
                self.num_devices, stream_seed(self.seed, t, streams.SYNC))  # each phase's waveform's (timing, CFO)
            link = RoundLink(self, t, (channel, gain), (h, h_hat), None, offsets, self.draw_cohort(t, h_hat))
            link.combiner = combiner  # the first phase's (N_r > 1), phy.uplink.moving_link
            return link
        h, uplink, offsets = self.draw_channel(t, channel, path_gain)
        h_hat = self.csi(h, path_gain, stream_seed(self.seed, t, streams.CSI))
        return RoundLink(self, t, (channel, path_gain), (h, h_hat), uplink, offsets, self.draw_cohort(t, h_hat))

    def draw_channel(self, t: int, channel=None, path_gain=None):
        """The round's channel ``h`` [K, F] from the channel model ``channel`` at the path
        gains ``path_gain`` [K] tf.float32 (a drop's; by default the block's own, drop 0's)
        and, in the time
        domain, its :class:`phy.ofdm_time.TimeDomainUplink` and the devices' (timing
        offset [samples], CFO [subcarrier spacings]) [K] each (else None and None).

        In the time domain the channel is the one the waveform meets: the discrete-time
        taps of the model's paths (``cir``) delayed by the devices' timing offsets, and
        ``h`` what a device knows of (and estimates) its channel: the taps' response
        without the offsets, or with them when the sync precodes the timing
        (:mod:`phy.sync`); the offsets come from the round's "sync" stream. With N_r > 1
        antennas the channel model draws ``[K, N_r, F]`` (in the time domain a delay line
        per device and antenna, the offsets shared), the combiner ``m`` [N_r, F] is
        computed from the responses the devices' knowledge is based on, and ``h`` is the
        effective channel ``m_f^H h_kf``; the time-domain uplink is then a
        :class:`phy.combiner.CombinedUplink`.
        """
        channel = self.channel if channel is None else channel
        path_gain = self.path_gain if path_gain is None else path_gain
        if self.air.num_antennas > 1:
            return self.draw_antennas(t, self.air.num_antennas, channel, path_gain)
        channel_seed = stream_seed(self.seed, t, streams.CHANNEL)
        if self.air.domain == "frequency":
            return channel(path_gain, channel_seed), None, None
        a, tau = channel.cir(path_gain, channel_seed)
        timing, cfo = self.air.sync(self.num_devices, stream_seed(self.seed, t, streams.SYNC))
        uplink = TimeDomainUplink.from_paths(a.numpy(), tau.numpy(), **self.air.waveform,
                                             timing_offset_samples=timing, cfo_subcarriers=cfo)
        known = uplink if self.air.sync.precodes_timing else TimeDomainUplink.from_paths(
            a.numpy(), tau.numpy(), **self.air.waveform)
        return tf.constant(known.frequency_response()), uplink, (timing, cfo)

    def draw_antennas(self, t: int, num_antennas: int, channel=None, path_gain=None):
        """:meth:`draw_channel` through the multi-antenna draw (``num_antennas`` = 1 gives
        the single-antenna channel exactly, with a one-antenna combined uplink)."""
        channel = self.channel if channel is None else channel
        path_gain = self.path_gain if path_gain is None else path_gain
        channel_seed = stream_seed(self.seed, t, streams.CHANNEL)
        if self.air.domain == "frequency":
            h = channel.antennas(path_gain, channel_seed, num_antennas).numpy()
            return tf.constant(effective_channel(h, self.air.combiner(h))), None, None
        a, tau = channel.cir_antennas(path_gain, channel_seed, num_antennas)
        a, tau = a.numpy(), tau.numpy()
        timing, cfo = self.air.sync(self.num_devices, stream_seed(self.seed, t, streams.SYNC))
        uplinks = [TimeDomainUplink.from_paths(a[:, r], tau, **self.air.waveform, timing_offset_samples=timing,
                                               cfo_subcarriers=cfo) for r in range(num_antennas)]
        known = uplinks if self.air.sync.precodes_timing else [
            TimeDomainUplink.from_paths(a[:, r], tau, **self.air.waveform) for r in range(num_antennas)]
        responses = np.stack([u.frequency_response() for u in known], axis=1)  # [K, N_r, F]
        combiner = self.air.combiner(responses)
        return tf.constant(effective_channel(responses, combiner)), CombinedUplink(uplinks, combiner), (timing, cfo)

    def draw_cohort(self, t: int, h_hat) -> RoundCohort | None:
        """The round's :class:`phy.uplink.participation.RoundCohort` from the
        "participation" stream and the devices' reported wideband gains; None when every
        device trains and sends (no policy, or its defaults: nothing is drawn)."""
        if self.participation is None:
            return None
        gain = np.mean(np.abs(np.asarray(h_hat)) ** 2, axis=-1)
        return cohorts.draw_cohort(
            self.participation, gain, len(self.grids), self.cohort.local_steps, self.cohort.training_phases,
            numpy_rng(self.seed, t, streams.PARTICIPATION))


ROWS_PER_PASS = 1024
"""Devices whose [F] channel columns are formed at once in :func:`channel_columns`."""


def channel_columns(h, h_hat) -> tuple[np.ndarray, np.ndarray]:
    """Per device the mean channel gain ``mean_f |h|^2`` and the CSI error
    ``mean_f |h_hat - h|^2 / gain`` ([K] float32 each), a bounded block of devices at a time
    (each row's mean is its own, so the blocks change no bit)."""
    gains, errors = [], []
    for lo in range(0, int(h.shape[0]), ROWS_PER_PASS):
        rows, rows_hat = h[lo:lo + ROWS_PER_PASS], h_hat[lo:lo + ROWS_PER_PASS]
        gain = tf.reduce_mean(tf.abs(rows) ** 2, axis=-1)
        err = tf.reduce_mean(tf.abs(rows_hat - rows) ** 2, axis=-1)
        gains.append(gain.numpy())
        errors.append((err / tf.maximum(gain, 1e-30)).numpy())
    if not gains:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    return np.concatenate(gains), np.concatenate(errors)


class RoundLink:
    """One round's uplink (made by :meth:`Uplink.round` from ``channels`` = (the round's
    channel model, its path gains) and ``estimates`` = (h, h_hat)).

    Attributes: ``t``, ``air`` (the block's :class:`phy.uplink.settings.AirInterface`),
    ``channel`` (the round's channel model: the block's, or with new drops its drop's),
    ``path_gain`` [K] tf.float32 (the gains it was drawn at, or with moving devices
    theirs at the first phase's start), ``h``, ``h_hat`` [K, F] tf.complex64 (the
    effective channel with N_r > 1; with moving devices the channel and estimate at the
    first phase's start), ``uplink`` (the time-domain uplink or None), ``offsets``
    ((timing, CFO) [K] or None), ``cohort`` (:class:`~phy.uplink.participation.RoundCohort`
    or None: every device), ``combiner`` (moving devices with N_r > 1: the first phase's
    combiner [N_r, F], else None), ``moving`` and ``offset_s`` (moving devices: the next phase's
    start, seconds after the round's), ``ledger`` (the round's
    :class:`phy.uplink.ledger.RoundLedger`) and ``scheme_round`` (the scheme's
    :class:`phy.uplink.scheme.SchemeRound`, made last: it may read all of the above).
    """

    def __init__(self, block: Uplink, t: int, channels, estimates, uplink, offsets, cohort):
        self.block, self.t, self.air, self.moving = block, t, block.air, block.moving
        self.channel, self.path_gain = channels
        self.offset_s = 0.0 if block.moving is None else block.moving.compute_seconds_per_round
        self.aging: dict[str, np.ndarray] = {}
        self.phases_done = 0
        self.h, self.h_hat = estimates
        self.combiner = None
        self.uplink, self.offsets, self.cohort = uplink, offsets, cohort
        self.keep_signals = block.trace.keep_signals(t)
        self.ledger = RoundLedger(block.num_devices)
        self.scheme_round = start_round(block.scheme, self)

    @property
    def discarded(self) -> bool:
        """True when some phase of this round reaches the BS from no device: nothing is sent."""
        return self.cohort is not None and self.cohort.discarded

    def send(self, phase: str, updates, weights) -> PhaseResult:
        """Phase ``phase`` over the air: the senders' rows of ``updates`` [K_S, n] (the
        cohort's rows; all K without a cohort) with the data ``weights`` [K_S] through the
        block's scheme (:mod:`phy.uplink.scheme`; noise from the round's
        ``"noise/<phase>"`` stream), and the estimate's error against the error-free
        weighted sum (:func:`phy.aggregate_error.aggregate_error`). The scheme's round hook
        (:meth:`phy.uplink.scheme.SchemeRound.before_phase`) sees the phase's link first:
        it may replace it (the privacy wrapper clips and adds the artificial noise of the
        phase's floor), charge the round's ledger and add columns."""
        block, h, h_hat, gain, slot, uplink = self.block, self.h, self.h_hat, self.path_gain, None, self.uplink
        if block.moving is not None:  # each phase's estimate, channel and waveform (phy.uplink.moving_link)
            h, h_hat, gain, slot = moving_link.phase_channels(self, phase, first=self.phases_done == 0)
            uplink = moving_link.phase_uplink(self)
        link = cohorts.phase_link(
            self.cohort, block.phase_index[phase], weights, updates, h, h_hat, uplink,
            path_gain=gain, population_weights=block.population_weights,
            bs_knows_dropouts=block.participation is not None and block.participation.bs_knows_dropouts)
        if slot is not None:
            senders = slot.devices if link.devices is None else link.devices[0]
            link = dataclasses.replace(link, slot=dataclasses.replace(
                slot, devices=senders, doppler_hz=slot.doppler_hz[senders]))
        wanted = link.updates  # the error is against the sum the hook did not change (unclipped)
        link, columns = self.scheme_round.before_phase(phase, link, self.ledger)
        result = block.scheme.send(link, block.air, phase=phase, seed=self._noise_seed(phase),
                                   keep_signals=self.keep_signals, per_device=block.trace.per_device)
        error = aggregate_error(wanted, link.reference_weights, result.estimate)
        return self._phase_result(phase, link, result, columns, error)

    def open_stream(self, phase: str, weights) -> PhaseStream:
        """Phase ``phase`` with the senders' updates added in chunks
        (:class:`phy.uplink.phase_stream.PhaseStream`): every device of the population
        sends, with the data ``weights`` [K]. What the stream cannot do (a cohort, moving
        devices, kept signals, a scheme round that changes the link, a scheme without
        ``open_stream``) is refused there."""
        return PhaseStream(self, phase, weights)

    def _noise_seed(self, phase: str):
        return stream_seed(self.block.seed, self.t, streams.noise_purpose(phase))

    def _phase_result(self, phase: str, link, result, columns: Columns, error) -> PhaseResult:
        """The phase's :class:`PhaseResult` from the scheme's result: the ledger charged,
        the uplink's own columns (the error against the error-free sum ``error`` =
        ``(||s_hat - s||^2, ||s||^2)``, a partial round's received weight) before the
        scheme's, per-device columns spread over the population."""
        block = self.block
        error, power_sum = error
        self.ledger.charge_symbols(result.num_symbols)
        rows = slice(None) if link.devices is None else link.devices[0]
        self.ledger.charge_energy(rows, np.asarray(result.tx_energy_j, np.float64))
        scalars = columns.scalars
        if link.received is not None:
            scalars[f"received_weight_{phase}"] = link.received_weight
        shared = {f"aggregate_error_{phase}", f"aggregate_nmse_{phase}", *scalars}
        if clash := shared & set(result.columns.scalars):  # a name written twice is an error, as in RoundRecord.add
            raise ValueError(f"the scheme {type(block.scheme).__name__} writes {sorted(clash)}, "
                             "which the uplink writes itself; rename its columns")
        scalars.update(result.columns.scalars)
        scalars[f"aggregate_error_{phase}"] = error
        scalars[f"aggregate_nmse_{phase}"] = normalised_error(error, power_sum)
        for column, values in result.columns.per_device.items():
            columns.per_device[column] = link.per_device(values)
        if block.moving is not None:
            columns.per_device.update(moving_link.phase_columns(self, phase, link, result))
        columns.signals.update(result.columns.signals)
        return PhaseResult(result.estimate, link.received, columns)

    def columns(self) -> Columns:
        """The round's own columns: ``uplink_symbols`` (the phases sent, also those of a
        discarded round that some device sent in), ``uplink_seconds`` (those symbols with
        their cyclic prefix), ``uplink_energy_j`` (the senders' transmit energy, the
        phases the BS received; per device ``tx_energy_j``, 0 for a device that sent
        nothing), ``downlink_symbols`` (the global model
        multicast to the devices that train at the worst one's rate), per device
        ``mean_channel_gain``, ``csi_nmse`` and in the time domain
        ``timing_offset_samples``, ``cfo_subcarriers``, ``cut_path_power_fraction``; with
        a cohort ``devices_scheduled``, ``round_discarded``, ``devices_sent_<phase>``,
        ``participated`` (and ``local_steps`` with a deadline); with moving devices
        ``round_start_s``, ``round_seconds`` and per device ``position_x_m``,
        ``position_y_m``, ``speed_mps``, ``doppler_hz`` (:mod:`phy.uplink.moving_link`); with ``drops``
        ``drop_index`` and per device ``position_x_m``, ``position_y_m``, ``path_gain``; those
        of the scheme's round (:meth:`phy.uplink.scheme.SchemeRound.columns`: the privacy
        wrapper's ``privacy_joint_noise_multiplier``, ...); the signals ``H``, ``H_hat``
        (when kept). Call it after the round's phases."""
        block, cohort, h, h_hat = self.block, self.cohort, self.h, self.h_hat
        columns = Columns()
        scalars, per_device = columns.scalars, columns.per_device
        per_device["mean_channel_gain"], per_device["csi_nmse"] = channel_columns(h, h_hat)
        if self.offsets is not None:  # the time domain (moving devices: each phase's waveform's)
            per_device["timing_offset_samples"] = self.offsets[0]
            per_device["cfo_subcarriers"] = self.offsets[1]
            per_device["cut_path_power_fraction"] = (
                self.uplink.cut_power_fraction if self.uplink is not None
                else moving_link.cut_power_fraction(self.moving, self.air, self.offsets[0]))
        uplink_symbols = self.ledger.symbols
        if cohort is not None:
            per_device["participated"] = cohort.status
            if block.participation.deadline_s is not None:
                steps = np.full(block.num_devices, np.nan)
                steps[cohort.scheduled] = cohort.steps
                per_device["local_steps"] = steps
            scalars["devices_scheduled"] = float(cohort.scheduled.size)
            scalars["round_discarded"] = float(cohort.discarded)
            for index, (phase, grid) in enumerate(block.grids.items()):
                sent = int(cohort.sent[index].sum())
                scalars[f"devices_sent_{phase}"] = float(sent)
                if cohort.discarded and sent:  # sent, then discarded by the BS
                    uplink_symbols += block.scheme.nominal_symbols(grid)
        scalars["uplink_symbols"] = float(uplink_symbols)
        scalars["uplink_seconds"] = uplink_symbols * block.air.symbol_duration_s
        scalars["uplink_energy_j"] = float(self.ledger.energy_j.sum())
        per_device["tx_energy_j"] = self.ledger.energy_j.copy()
        scalars["downlink_symbols"] = float(self._downlink_symbols())
        if block.drops is not None:  # the round's drop (phy.redrop)
            drop_scalars, drop_columns = block.drops.columns(self.t)
            scalars.update(drop_scalars)
            per_device.update(drop_columns)
        if block.moving is not None:
            moving_scalars, moving_columns = moving_link.round_columns(self, uplink_symbols, scalars["downlink_symbols"])
            scalars.update(moving_scalars)
            per_device.update(moving_columns)
        own = self.scheme_round.columns()
        scalars.update(own.scalars)
        per_device.update(own.per_device)
        if self.keep_signals:
            columns.signals["H"] = h.numpy()
            columns.signals["H_hat"] = h_hat.numpy()
        return columns

    def _downlink_symbols(self) -> int:
        """OFDM symbols to multicast the global model to the devices that train (all
        without a cohort) at the worst one's rate (:func:`phy.downlink.multicast_symbols`)."""
        load = self.block.downlink
        values, bits, power_w = load.values, load.bits_per_value, load.bs_tx_power_w
        listeners = self.h if self.cohort is None else tf.gather(self.h, self.cohort.scheduled)
        if not int(listeners.shape[0]):
            return 0
        return multicast_symbols(values, bits, listeners, power_w, self.block.air.noise_power_w)
