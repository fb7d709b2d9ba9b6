"""A round's uplink when the devices move: each phase's estimate, channel and clock.

With a :class:`phy.moving_channel.MovingChannel` (``[mobility]`` with a moving model) the
round link (:class:`phy.uplink.RoundLink`) no longer holds one channel for the round.
Its timeline (:mod:`phy.moving_channel`): the round starts at ``T_t``, the devices compute
for ``c`` seconds, and each phase p then starts at its offset ``tau_p`` (``c`` plus the
earlier phases' symbols times ``T_sym``):

* **Estimate at the phase's start.** ``h_hat_p = csi(h(tau_p))``, the scenario's CSI model
  applied to the channel then (the round's first phase: the round's ``h_hat``, from the
  ``"csi"`` stream, which also schedules the cohort; a later phase: the ``"csi/<phase>"``
  stream).
* **Reception.** A scheme that occupies a known number N of symbols (analog, one-bit,
  non-coherent: ``nominal_symbols``) precodes all of them with ``h_hat_p``. A scheme with
  ``channel_per_symbol`` (analog, one-bit, non-coherent) is received symbol by symbol:
  OFDM symbol n through ``h(t_n)``, ``t_n = tau_p + (n + 1/2) T_sym`` (``h`` [K, N, F],
  :meth:`phy.moving_channel.MovingChannel.per_symbol`). The others receive through the
  channel at the phase's middle, ``h(tau_p + N T_sym / 2)``: the channel is taken constant
  over the phase at its middle value (one evaluation per phase; docs/schemes.md gives the
  error of this against per-symbol channels: 2.7e-3 of the channel's power over the
  quickstart's 4.1 ms phases at 3 km/h, 0.25 at 30 km/h).
  A scheme with ``ages_per_block`` (digital OFDMA, whose slot is decided by the rates)
  gets the channel at the phase's start and a :class:`SlotChannel` to evaluate its
  senders' channels over their slots (:mod:`phy.uplink.digital_ofdma`).
* **Antennas.** With N_r > 1 the BS forms each phase's combiner ``m_p`` [N_r, F]
  (``bs.combiner``) from the channels ``h_kr(tau_p)`` at the phase's start, as the
  block-fading round forms it from the round's draw, and keeps it over the phase: the
  devices estimate their effective channel ``m_p^H h_k(tau_p)`` then, and the phase is
  received through ``m_p^H h_k(t)`` at the phase's middle, at each symbol, or over a
  digital slot's coherence blocks (:class:`SlotChannel`'s ``combiner``).
* **The time domain.** With ``ofdm.domain = "time"`` the phase's waveform meets the
  channel sample by sample (:func:`phase_uplink`, :mod:`phy.moving_time`: Doppler's
  inter-carrier interference included); the channel the schemes' chains are given is the
  one at the phase's middle.
* **Aging.** Per sender, ``aging_correlation_<phase>`` = ``J0(2 pi f_D,k Delta_k)``, Jakes'
  correlation between the channel at the estimate and at the phase's middle (a ray-traced
  cell's is its paths' own, :mod:`phy.moving_rays`; ``Delta_k``
  half the phase, also for a scheme with ``channel_per_symbol``, or half the device's own
  slot for a scheme with ``ages_per_block``).

No TensorFlow beyond the tensors handed to the schemes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from native.launch import ALIGNMENT_BYTES
from native.streams import CSI, phase_csi_purpose, stream_seed
from phy.combiner import effective_channel


@dataclass(frozen=True)
class SlotChannel:
    """The senders' channels during their slot: :meth:`owned_at` at offsets from the
    phase's start. ``devices`` [K_T] the senders' population ids, ``doppler_hz`` [K_T]."""

    moving: object
    start_s: float
    devices: np.ndarray
    doppler_hz: np.ndarray
    combiner: np.ndarray | None = None
    """The phase's combiner [N_r, F] with N_r > 1 BS antennas (None: one antenna)."""

    @property
    def num_sinusoids(self) -> int:
        """M of the Jakes processes (the cost of one evaluation per subcarrier)."""
        return int(self.moving.fading.shape[2])

    def owned_at(self, offsets_s, rows, subcarriers) -> np.ndarray:
        """``[T, P]`` complex64: sender ``rows`` [P]'s channel on ``subcarriers`` [P] at
        ``offsets_s`` [T] (ascending) seconds after the phase's start."""
        offsets = self.start_s + np.asarray(offsets_s, np.float64)
        return self.moving.owned_at(offsets, self.devices[rows], subcarriers, self.combiner)

    def correlation(self, lag_s) -> np.ndarray:
        """``[K_T]``: each sender's channel at the phase's start against itself ``lag_s``
        (one, or [K_T]) seconds later (:meth:`phy.moving_channel.MovingChannel.aging_correlation`)."""
        return self.moving.aging_correlation(lag_s, self.devices, at_s=self.start_s)


@dataclass(frozen=True)
class SymbolChannel:
    """A phase's channel per OFDM symbol, evaluated a slice of devices at a time:
    ``channel[lo:hi]`` is rows lo:hi of :meth:`phy.moving_channel.MovingChannel.per_symbol`
    ([hi - lo, N, F] complex64, combined through ``combiner`` with N_r > 1), the values of
    the whole evaluation; ``shape`` (K, N, F). A phase whose devices stream holds this
    instead of the [K, N, F] channel (8 K N F bytes), so its memory follows the chunk."""

    moving: object
    start_s: float
    symbol_s: float
    num_symbols: int
    combiner: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self.moving.doppler_hz.shape[0]), int(self.num_symbols), int(self.moving.num_subcarriers))

    @property
    def ndim(self) -> int:
        return 3

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError(f"a SymbolChannel takes a slice of devices, got {rows!r}")
        h = self.moving.per_symbol(self.start_s, self.symbol_s, self.num_symbols, rows)
        return combined(h, self.combiner)


def combined(h: np.ndarray, combiner: np.ndarray | None) -> np.ndarray:
    """:func:`phy.combiner.effective_channel` of ``h`` [..., N_r, F] (any leading axes:
    a channel per OFDM symbol is [K, N, N_r, F]) through ``combiner`` [N_r, F], complex64;
    ``h`` itself with one antenna (``combiner`` None)."""
    if combiner is None:
        return h
    h = np.asarray(h)
    flat = effective_channel(h.reshape(-1, *h.shape[-2:]), combiner)
    return flat.reshape(*h.shape[:-2], h.shape[-1])


def phase_combiner(air, h: np.ndarray) -> np.ndarray | None:
    """The combiner the BS forms from the channels ``h`` [K, N_r, F] at a phase's start
    (``air.combiner``, :class:`phy.combiner.ReceiveCombiner`); None with one antenna."""
    return air.combiner(h) if h.ndim == 3 else None


def round_channel(moving, csi, seed: int, t: int, air=None):
    """Round t's channel ``h`` [K, F], estimate ``h_hat`` (the CSI model ``csi`` from the
    run ``seed``'s ``"csi"`` stream), path gain [K] at its first phase's start (after the
    devices' computation) and the first phase's combiner (None with one antenna; formed by
    ``air``'s, :func:`phase_combiner`), the clock of ``moving`` moved to the round's start."""
    moving.start_round(t)
    h, gain = moving.at(moving.compute_seconds_per_round)
    combiner = phase_combiner(air, h)
    gain_t = tf.constant(gain, tf.float32)
    h_t = tf.constant(combined(h, combiner))
    return h_t, csi(h_t, gain_t, stream_seed(seed, t, CSI)), gain_t, combiner


def phase_channels(round_link, phase: str, first: bool, lazy: bool = False):
    """``(h, h_hat, path_gain, slot)`` of phase ``phase`` for every device (module docstring),
    ``slot`` a :class:`SlotChannel` of all devices (rows picked by the caller) or None.
    With ``lazy`` a channel per OFDM symbol is a :class:`SymbolChannel` (a streamed phase
    evaluates it a chunk at a time), else the [K, N, F] tensor.
    The round link's ``moving``, ``air`` and clock; of its block the CSI model, the seed,
    the scheme and the phase's grid."""
    block, air = round_link.block, round_link.air
    moving, start = round_link.moving, round_link.offset_s
    if first:
        h_start, h_hat, gain = round_link.h, round_link.h_hat, round_link.path_gain
        combiner = round_link.combiner
    else:
        h, g = moving.at(start)
        combiner = phase_combiner(air, h)
        h_start, gain = tf.constant(combined(h, combiner)), tf.constant(g, tf.float32)
        h_hat = block.csi(h_start, gain, stream_seed(block.seed, round_link.t, phase_csi_purpose(phase)))
    if getattr(block.scheme, "ages_per_block", False):
        slot = SlotChannel(moving, start, np.arange(block.num_devices), moving.doppler_hz, combiner)
        return h_start, h_hat, gain, slot
    num_symbols = block.scheme.nominal_symbols(block.grids[phase])
    half_s = 0.5 * num_symbols * air.symbol_duration_s
    round_link.aging[phase] = moving.aging_correlation(half_s, at_s=start)
    if getattr(block.scheme, "channel_per_symbol", False) and moving.channel_per_symbol:
        if lazy:
            return SymbolChannel(moving, start, air.symbol_duration_s, num_symbols, combiner), h_hat, gain, None
        h_symbols = moving.per_symbol(start, air.symbol_duration_s, num_symbols)
        if combiner is not None:
            return tf.constant(combined(h_symbols, combiner)), h_hat, gain, None
        return _as_tensor(h_symbols), h_hat, gain, None
    h_mid, _ = moving.at(start + half_s)
    return tf.constant(combined(h_mid, combiner)), h_hat, gain, None


def phase_uplink(round_link):
    """The time-domain uplink of the phase that starts now (``round_link.offset_s``): a
    :class:`phy.moving_time.MovingTimeDomainUplink` through the channel as it moves sample
    by sample, with ``ofdm.domain = "time"``; None in the frequency domain."""
    air = round_link.air
    if air.domain != "time":
        return None
    from phy.moving_time import MovingTimeDomainUplink

    timing, cfo = (None, None) if round_link.offsets is None else round_link.offsets  # the round's [sync] draw
    return MovingTimeDomainUplink(round_link.moving, round_link.offset_s, air.symbol_duration_s,
                                  int(air.cyclic_prefix_length), cfo_subcarriers=cfo, timing_offset_samples=timing)


def cut_power_fraction(moving, air, timing_offset_samples) -> np.ndarray:
    """[K]: each device's share of path power that its timing offset cuts from the moving
    time-domain uplink (:func:`phy.moving_time.cut_power_fraction`)."""
    from phy.moving_time import cut_power_fraction as cut

    return cut(moving.paths, timing_offset_samples, air.num_subcarriers, int(air.cyclic_prefix_length))


def _as_tensor(array: np.ndarray) -> tf.Tensor:
    """``array`` as a tensor: its own memory through DLPack when it is aligned
    (:func:`native.launch.aligned_empty`; 95 MB at the quickstart, which
    ``tf.convert_to_tensor`` copied, 0.04-0.3 s), else a copy. The array is not written
    after."""
    if array.flags.c_contiguous and array.ctypes.data % ALIGNMENT_BYTES == 0:
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.convert_to_tensor(array)


def phase_columns(round_link, phase: str, link, result) -> dict[str, np.ndarray]:
    """Per device ``aging_correlation_<phase>`` (over the population, NaN for a device that
    did not send) and the clock moved past the phase's symbols."""
    round_link.offset_s += result.num_symbols * round_link.air.symbol_duration_s
    round_link.phases_done += 1
    correlation = round_link.aging.get(phase)
    if correlation is None:  # a scheme that ages per block reports its senders' own
        return {}
    rows = slice(None) if link.devices is None else link.devices[0]
    return {f"aging_correlation_{phase}": link.per_device(np.asarray(correlation)[rows])}


def round_columns(round_link, uplink_symbols: float, downlink_symbols: float) -> tuple[dict, dict]:
    """``(scalars, per_device)`` of a moving round: ``round_start_s``, ``round_seconds``
    (computation, the phases' and the downlink's symbols) and per device the positions,
    speed and Doppler at the round's start; the clock's next round set."""
    moving = round_link.moving
    start = moving.start_round(round_link.t)
    per_device = moving.state_columns()
    seconds = moving.compute_seconds_per_round + (uplink_symbols + downlink_symbols) * round_link.air.symbol_duration_s
    moving.end_round(round_link.t, seconds)
    return {"round_start_s": start, "round_seconds": seconds}, per_device
