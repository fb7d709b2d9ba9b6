"""``uplink.scheme = "digital_ofdma"``: the digital baseline of over-the-air FL.

Orthogonal access as the analog scheme is compared against in Zhu, Wang, Huang,
"Broadband analog aggregation for low-latency federated edge learning", IEEE TWC 2020
(their OFDMA baseline): the senders share the F subcarriers, each sends its own
quantized update at the rate its channel allows, and the BS decodes each device on its
own and sums. Per phase, for the ``K_T`` senders of :class:`~phy.uplink.participation.PhaseLink`:

1. **Quantization** (:func:`stochastic_quantize`): device k sends ``s_k = max_i |x_ki|``
   (a 32-bit float) and each value on the grid of ``L = 2^b`` levels
   ``-s_k + j Delta_k``, ``Delta_k = 2 s_k / (L - 1)``, rounded up with probability
   ``(x - g_lo) / Delta_k`` and down otherwise, so ``E[q] = x`` (unbiased; b = 1 is the
   stochastic sign scaled by s_k). Its payload is ``B_k = n b + 32`` bits.
2. **Subcarriers** (:func:`allocate`): ``"equal"`` interleaves them, subcarrier f to
   sender ``f mod K_T`` (F_k = floor(F / K_T) or one more); ``"max_min"`` is Rhee and
   Cioffi's greedy (VTC 2000): each sender in turn takes its best free subcarrier, then
   the sender of the lowest rate so far takes its best free one until none is left
   (from the reported ``h_hat``). With more senders than subcarriers (``K_T > F``) they
   take turns (:func:`slot_groups`): ``G = ceil(K_T / F)`` groups of consecutive senders,
   their sizes within one of each other, each sharing the F subcarriers in a slot of its
   own, one slot after the other; steps 2 to 4 hold within each group.
3. **Rate** (:func:`plan`): device k spreads P over its F_k subcarriers in every OFDM
   symbol, so subcarrier f has ``SNR_kf = (P / F_k) |h_kf|^2 / sigma_z^2`` and carries
   ``r_kf = log2(1 + SNR_hat_kf / (Gamma M))`` bits per symbol, from the device's CSI
   ``h_hat`` (Gamma = ``snr_gap_db``, the code's gap to capacity; M = ``rate_margin_db``,
   a back-off against CSI error). ``R_k = sum_f r_kf`` bits per OFDM symbol, and the
   device needs ``N_k = ceil(B_k / R_k)`` symbols. With ``rate_model = "nr_mcs"``: one
   5G NR MCS per device from its effective SNR (:func:`mcs_bits_per_symbol`,
   :func:`nr_mcs_table`), ``R_k = F_k Q_m R``.
4. **Outage**: a device whose ``N_k`` exceeds the slot budget (``slot_symbols``), or
   whose rate is 0, does not transmit; one that transmits is decoded when its codeword's
   rate fits the true channel, ``R_k <= sum_f log2(1 + SNR_kf / Gamma)`` (the codeword
   spans its subcarriers: the mutual-information rule of a code over parallel
   channels; with ``"nr_mcs"``: the true effective SNR reaches the chosen MCS's
   threshold), else it is lost. Both are in outage: dropped this phase.
5. **Estimate**: the exact weighted sum of the decoded quantized updates, their BS
   weights renormalised over the decoded devices to the senders' total
   (``w'_k = w_k sum_T w / sum_D w``, as the BS does for a device it knows dropped);
   0 when no device is decoded (the server then applies no change).

The phase occupies the symbols of its slowest transmitting device (``max N_k``, at most
the budget); with G slot groups, the sum over the groups of each group's slowest
(group g's slot starts when group g - 1's ends; every group's rates come from the CSI
estimated at the phase's start, so a later group's CSI is older when devices move:
:meth:`DigitalOfdma.phase_plan`); device k's energy is ``P N_k`` times the symbol duration (0 when it does not
transmit). The quantizer's draws come from the phase's stateless seed, so a resumed run
replays them. A phase may also take the senders' updates in chunks
(:meth:`DigitalOfdma.open_stream`, :class:`DigitalStream`) with the same result bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
import tensorflow as tf

from native.columns import Columns
from phy.parameters import DigitalOfdmaScheme
from phy.quantized_sums import add_quantized
from phy.stream_rows import RowOrder
from phy.uplink.scheme import SchemeResult
from phy.uplink.slot_blocks import BlockRate, adapted_slot, slot_holds

SCALE_BITS = 32
"""Side information per device and phase: the scale s_k as a 32-bit float."""

QUANTIZED_ROWS_PER_LAUNCH = 64
"""Senders quantized and added per kernel launch (:func:`phy.quantized_sums.add_quantized`):
their draws, 8 n bytes each, are held at once."""

DECODE_TOLERANCE = 1e-9
"""Relative slack of the decoding test ``R_k <= C_k`` (float64 rounding: with perfect
CSI the two sums are equal)."""


def _generator(seed) -> np.random.Generator:
    """A NumPy generator from a stateless seed ([2] int32, tf or NumPy)."""
    words = np.asarray(seed.numpy() if isinstance(seed, tf.Tensor) else seed, np.int64)
    return np.random.default_rng(np.random.SeedSequence([int(w) & 0x7FFFFFFF for w in words.ravel()]))


def quantize_row(x: np.ndarray, bits_per_value: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One device's stochastic, unbiased quantization.

    Input: ``x`` [n] float (its update), ``bits_per_value`` b, the generator its
    ``n`` uniform draws come from. Output: ``(q [n] float64, s)``: every ``q`` on the
    grid ``-s + j 2 s / (2^b - 1)``, ``j = 0 .. 2^b - 1``, ``E[q] = x``, and the scale
    ``s = max |x|`` (float64 of the float32 value). An all-zero update gives zeros; a
    non-finite one propagates (the round's ``nonfinite_update_entries`` counts it).
    """
    x = np.asarray(x, np.float64)
    u = rng.random(x.shape[0])
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    if scale == 0.0:
        return np.zeros_like(x), scale
    if not math.isfinite(scale):
        return x.copy(), scale
    step = 2.0 * scale / (2.0 ** bits_per_value - 1.0)
    position = x + scale  # in place from here: the same float64 operations, a third faster
    position /= step
    np.minimum(position, 2.0 ** bits_per_value - 1.0, out=position)  # the grid's index, fractional
    low = np.floor(position)
    position -= low  # the probability of rounding up
    low += u < position
    low *= step
    low -= scale
    return low, scale


def stochastic_quantize(updates, bits_per_value: int, seed) -> tuple[np.ndarray, np.ndarray]:
    """Every sender's :func:`quantize_row`, the rows drawn in order from ``seed``.

    Input: ``updates`` [K, n] (tf or NumPy), b, the stateless seed [2] int32.
    Output: ``(q [K, n] float64, scale [K] float64)``; what :class:`DigitalOfdma` sends.
    """
    x = np.asarray(updates.numpy() if isinstance(updates, tf.Tensor) else updates)
    rng = _generator(seed)
    rows = [quantize_row(row, bits_per_value, rng) for row in x]
    return np.stack([q for q, _ in rows]) if rows else np.zeros(x.shape), np.array([s for _, s in rows])


def allocate(gain_hat: np.ndarray, allocation: str, tx_power_w: float, noise_power_w: float,
             gap: float = 1.0) -> np.ndarray:
    """The owner of every subcarrier.

    Input: ``gain_hat`` [K, F] float (the reported ``|h_hat_kf|^2``, K <= F),
    ``allocation`` ``"equal"`` or ``"max_min"``, P, sigma_z^2 and the linear gap of the
    rate (:func:`shannon_bits_per_symbol`). Output: [F] int64, the sender each subcarrier goes to;
    every sender gets at least one subcarrier.
    """
    num_devices, num_subcarriers = gain_hat.shape
    if not 0 < num_devices <= num_subcarriers:
        raise ValueError(f"needs 1 to F = {num_subcarriers} senders, got {num_devices}")
    if allocation == "equal":
        return np.arange(num_subcarriers) % num_devices
    if allocation != "max_min":
        raise ValueError(f"allocation must be 'equal' or 'max_min', got {allocation!r}")
    owner = np.full(num_subcarriers, -1, np.int64)
    preference = np.argsort(-gain_hat, axis=1, kind="stable")  # each device's best first
    cursor = np.zeros(num_devices, np.int64)
    chosen: list[list[int]] = [[] for _ in range(num_devices)]
    rate = np.zeros(num_devices)

    def take(k: int) -> None:
        while owner[preference[k, cursor[k]]] >= 0:
            cursor[k] += 1
        f = int(preference[k, cursor[k]])
        owner[f] = k
        chosen[k].append(f)
        snr = (tx_power_w / len(chosen[k])) * gain_hat[k, chosen[k]] / noise_power_w
        rate[k] = np.sum(np.log2(1.0 + snr / gap))

    for k in range(num_devices):
        take(k)
    for _ in range(num_subcarriers - num_devices):
        take(int(np.argmin(rate)))
    return owner


NR_MCS_TABLE = ("sionna.sys", "bler_tables/PUSCH_table1.json")
"""The BLER curves Sionna ships for the PUSCH with MCS table 1 (TS 38.214 Table
5.1.3.1-1, up to 64-QAM), AWGN, per code block size."""

NR_MCS_CODE_BLOCK_BITS = "2000"
"""The longest code block the table gives: the payloads here are far longer (segmented
into many code blocks), and longer blocks have steeper curves."""


@functools.lru_cache(maxsize=16)
def nr_mcs_table(target_bler: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The usable NR MCSs at a target block error rate.

    Output: ``(mcs_index [M] int64, spectral_efficiency [M] float64 (bits per resource
    element, Q_m R of TS 38.214 Table 5.1.3.1-1, from Sionna's ``decode_mcs_index``),
    snr_threshold [M] float64 (linear))``, ascending in both: for each MCS of Sionna's
    PUSCH table 1 (indices 3 to 27), the SNR at which its BLER curve for
    :data:`NR_MCS_CODE_BLOCK_BITS`-bit code blocks first reaches ``target_bler``, linear
    between the table's SNR points (1.8 dB apart); an MCS that never reaches it within the
    table (up to 20 dB), or that needs more SNR than one of higher efficiency, is left out.
    """
    from sionna.phy.nr.utils import decode_mcs_index

    package, name = NR_MCS_TABLE
    table = json.loads(resources.files(package).joinpath(name).read_text())
    curves = table["category"]["0"]["index"]["1"]["MCS"]
    index, threshold_db = [], []
    for mcs in sorted(curves, key=int):
        snr_db = np.asarray(curves[mcs]["SNR_db"], np.float64)
        bler = np.asarray(curves[mcs]["CBS"][NR_MCS_CODE_BLOCK_BITS]["BLER"], np.float64)
        reached = np.flatnonzero(bler <= target_bler)
        if not reached.size:
            continue
        i = int(reached[0])
        if i == 0:
            at = snr_db[0]
        else:  # linear in BLER between the last point above the target and the first at or below it
            at = snr_db[i - 1] + (snr_db[i] - snr_db[i - 1]) * (bler[i - 1] - target_bler) / (bler[i - 1] - bler[i])
        index.append(int(mcs))
        threshold_db.append(float(at))
    order, rate = decode_mcs_index(np.asarray(index, np.int32), table_index=1, is_pusch=True,
                                   transform_precoding=False)
    efficiency = order.numpy().astype(np.float64) * rate.numpy().astype(np.float64)
    index, threshold_db = np.asarray(index, np.int64), np.asarray(threshold_db)
    keep = [i for i in range(index.size)  # efficient: no MCS of higher efficiency needs less SNR
            if not np.any((efficiency > efficiency[i]) & (threshold_db <= threshold_db[i]))]
    keep = sorted(keep, key=lambda i: (efficiency[i], threshold_db[i]))
    return index[keep], efficiency[keep], 10.0 ** (threshold_db[keep] / 10.0)


def owned_snr(gain: np.ndarray, owner: np.ndarray, tx_power_w: float,
              noise_power_w: float) -> tuple[np.ndarray, np.ndarray]:
    """``(F_k [K] float64, SNR [F])``: each sender's subcarriers and each subcarrier's SNR
    ``(P / F_k) gain_kf / sigma_z^2`` for its owner (the power split over the owned ones)."""
    count = np.bincount(owner, minlength=gain.shape[0]).astype(np.float64)
    return count, (tx_power_w / count[owner]) * gain[owner, np.arange(owner.shape[0])] / noise_power_w


def mcs_bits_per_symbol(gain: np.ndarray, owner: np.ndarray, tx_power_w: float, noise_power_w: float,
                        margin: float, target_bler: float) -> tuple[np.ndarray, np.ndarray]:
    """``([K] bits per OFDM symbol, [K] MCS index (-1: none))`` with one NR MCS per device, as
    NR sends a transport block: the most efficient MCS of :func:`nr_mcs_table` whose
    threshold is at most the device's effective SNR over its F_k subcarriers divided by
    ``margin``, ``2^(mean_f log2(1 + SNR_kf)) - 1`` (the capacity-equivalent SNR, mutual
    information with Gaussian inputs), times F_k subcarriers."""
    num_devices = gain.shape[0]
    count, snr = owned_snr(gain, owner, tx_power_w, noise_power_w)
    mean_bits = np.bincount(owner, weights=np.log2(1.0 + snr), minlength=num_devices) / count
    effective = (2.0 ** mean_bits - 1.0) / margin
    index, efficiency, threshold = nr_mcs_table(float(target_bler))
    usable = np.searchsorted(threshold, effective * (1.0 + DECODE_TOLERANCE), side="right") - 1
    rate = np.where(usable >= 0, count * efficiency[np.maximum(usable, 0)], 0.0)
    return rate, np.where(usable >= 0, index[np.maximum(usable, 0)], -1)


def shannon_bits_per_symbol(gain: np.ndarray, owner: np.ndarray, tx_power_w: float,
                            noise_power_w: float, gap: float) -> np.ndarray:
    """``[K]`` bits per OFDM symbol, ``sum_{f owned by k} log2(1 + (P / F_k) gain_kf /
    (sigma_z^2 gap))`` (float64), from ``gain`` [K, F] and ``owner`` [F] (the uplink's;
    the downlink's multicast rate is :func:`phy.downlink.bits_per_symbol`)."""
    num_devices = gain.shape[0]
    _, snr = owned_snr(gain, owner, tx_power_w, noise_power_w)
    return np.bincount(owner, weights=np.log2(1.0 + snr / gap), minlength=num_devices)


@dataclass(frozen=True)
class Plan:
    """One phase's transmissions (:func:`plan`), over the K_T senders.

    Attributes
    ----------
    owner : [F] int64, or [G, F] with G > 1 slot groups
        The sender of every subcarrier (in each group's slot: the sender's index among
        all K_T).
    subcarriers : [K_T] int64
        F_k.
    rate : [K_T] float64
        R_k, the bits per OFDM symbol chosen from the CSI estimate.
    capacity : [K_T] float64
        C_k, the rate the true channel carries with the code's gap.
    bits : [K_T] int64
        B_k = n b + 32.
    symbols : [K_T] float64
        N_k = ceil(B_k / R_k) (inf at rate 0).
    transmits : [K_T] bool
        N_k within the budget (and R_k > 0).
    decoded : [K_T] bool
        Transmits and R_k <= C_k.
    num_symbols : int
        The slot: max N_k over the devices that transmit (0: none); with G slot groups,
        the sum of the groups' slots.
    sent : [K_T] float64 or None
        The symbols each sender occupies, when that is not N_k for the senders that
        transmit (with the rate adapted per coherence block: also a sender lost at the
        budget or at a block that carries nothing); None: N_k.
    group_symbols : [G] int64 or None
        Each slot group's slot (:func:`slot_groups`), None with one group.
    """

    owner: np.ndarray
    subcarriers: np.ndarray
    rate: np.ndarray
    capacity: np.ndarray
    bits: np.ndarray
    symbols: np.ndarray
    transmits: np.ndarray
    decoded: np.ndarray
    num_symbols: int
    sent: np.ndarray | None = None
    group_symbols: np.ndarray | None = None

    @property
    def outage(self) -> np.ndarray:
        """[K_T] bool: not decoded (the budget, a zero rate, or a rate the channel does not carry)."""
        return ~self.decoded


def plan(h_hat, h, num_values: int, *, bits_per_value: int, allocation: str, tx_power_w: float,
         noise_power_w: float, rate_model: str = "shannon", snr_gap_db: float = 0.0,
         target_bler: float = 0.1, rate_margin_db: float = 0.0, slot_symbols: int | None = None) -> Plan:
    """Who sends what and who is decoded in one phase (module docstring, steps 2 to 4).

    Input: ``h_hat``, ``h`` [K_T, F] complex (the senders' CSI and true channel), n, the
    scheme's keys, P and sigma_z^2 (W). Output: :class:`Plan`. With ``rate_model =
    "nr_mcs"`` the rates are :func:`mcs_bits_per_symbol` (the gap is not used; the
    ``"max_min"`` allocation still ranks the devices by their Shannon rates).
    """
    gain_hat = np.abs(np.asarray(h_hat, np.complex128)) ** 2
    gain = np.abs(np.asarray(h, np.complex128)) ** 2
    margin = 10.0 ** (rate_margin_db / 10.0)
    gap = 10.0 ** (snr_gap_db / 10.0) if rate_model == "shannon" else 1.0
    owner = allocate(gain_hat, allocation, tx_power_w, noise_power_w, gap * margin)
    if rate_model == "shannon":
        rate = shannon_bits_per_symbol(gain_hat, owner, tx_power_w, noise_power_w, gap * margin)
        capacity = shannon_bits_per_symbol(gain, owner, tx_power_w, noise_power_w, gap)
    elif rate_model == "nr_mcs":
        rate, _ = mcs_bits_per_symbol(gain_hat, owner, tx_power_w, noise_power_w, margin, target_bler)
        capacity, _ = mcs_bits_per_symbol(gain, owner, tx_power_w, noise_power_w, 1.0, target_bler)
    else:
        raise ValueError(f"rate_model must be 'shannon' or 'nr_mcs', got {rate_model!r}")
    num_devices = gain.shape[0]
    bits = np.full(num_devices, int(num_values) * int(bits_per_value) + SCALE_BITS, np.int64)
    with np.errstate(divide="ignore"):
        symbols = np.where(rate > 0.0, np.ceil(bits / np.where(rate > 0.0, rate, 1.0)), np.inf)
    transmits = np.isfinite(symbols)
    if slot_symbols is not None:
        transmits &= symbols <= slot_symbols
    decoded = transmits & (rate <= capacity * (1.0 + DECODE_TOLERANCE))
    num_symbols = int(symbols[transmits].max()) if transmits.any() else 0
    return Plan(owner, np.bincount(owner, minlength=num_devices).astype(np.int64), rate, capacity, bits,
                symbols, transmits, decoded, num_symbols)


def slot_groups(num_senders: int, num_subcarriers: int) -> list[tuple[int, int]]:
    """The senders' slot groups: ``[(lo, hi), ...]``, ``G = ceil(K_T / F)`` runs of
    consecutive senders (rows ``lo:hi``) whose sizes differ by at most one, so each group
    has at most F senders and every sender a subcarrier in its group's slot. One group
    ``[(0, K_T)]`` when ``K_T <= F`` (and for no sender)."""
    count = max(1, -(-int(num_senders) // int(num_subcarriers)))
    bounds = [(g * int(num_senders)) // count for g in range(count + 1)]
    return list(itertools.pairwise(bounds))


@dataclass(frozen=True)
class GroupLink:
    """The part of a phase's link one slot group plans from: its senders' ``h_hat``,
    ``h`` [K_g, F] and ``slot`` (their :class:`phy.uplink.moving_link.SlotChannel` from the
    group's slot start, or None)."""

    h_hat: object
    h: object
    slot: object

    @classmethod
    def of(cls, link, lo: int, hi: int, offset_s: float) -> GroupLink:
        """Rows ``lo:hi`` of ``link``, their slot starting ``offset_s`` [s] after the phase's."""
        slot = getattr(link, "slot", None)
        if slot is not None:
            slot = dataclasses.replace(slot, start_s=slot.start_s + offset_s, devices=slot.devices[lo:hi],
                                       doppler_hz=slot.doppler_hz[lo:hi])
        return cls(link.h_hat[lo:hi], link.h[lo:hi], slot)


def joined_plans(groups: list[tuple[int, int]], plans: list[Plan], num_subcarriers: int) -> Plan:
    """The phase's :class:`Plan` from its slot groups' (rows ``lo:hi`` each): the per-sender
    arrays in sender order, ``owner`` [G, F] in the senders' own indices, the slot the sum
    of the groups' and ``group_symbols`` [G]."""
    owner = np.stack([lo + p.owner for (lo, _), p in zip(groups, plans)]).reshape(len(plans), num_subcarriers)
    sent = None
    if any(p.sent is not None for p in plans):
        sent = np.concatenate([np.where(p.transmits, p.symbols, 0.0) if p.sent is None else p.sent for p in plans])
    group_symbols = np.array([p.num_symbols for p in plans], np.int64)
    return Plan(owner, *(np.concatenate([getattr(p, name) for p in plans])
                         for name in ("subcarriers", "rate", "capacity", "bits", "symbols", "transmits", "decoded")),
                num_symbols=int(group_symbols.sum()), sent=sent, group_symbols=group_symbols)


def decoded_weights(weights: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """The BS's weights over the decoded devices, renormalised to the senders' total
    (``w_k sum w / sum_decoded w``; 0 for the others; all 0 when none is decoded)."""
    weights = np.asarray(weights, np.float64)
    kept = np.where(decoded, weights, 0.0)
    total = kept.sum()
    return kept * (weights.sum() / total) if total > 0.0 else kept


class DigitalOfdma:
    """Orthogonal digital transmission of stochastically quantized updates (module
    docstring). Keys: :class:`phy.parameters.DigitalOfdmaScheme`.

    Columns per phase: ``outage_devices_<phase>``, ``bits_sent_<phase>``,
    ``symbols_needed_<phase>``, ``decoded_weight_<phase>``; per sender (with
    ``trace.per_device``) ``bits_per_symbol_<phase>``, ``symbols_<phase>``,
    ``subcarriers_<phase>``, ``outage_<phase>``; the signal ``estimate_<phase>`` (when
    kept, by :meth:`send` only: a stream keeps no signal).
    """

    carries = DigitalOfdmaScheme.carries
    accounts_privacy = getattr(DigitalOfdmaScheme, "accounts_privacy", False)
    ages_per_block = True  # its slot follows from the rates: the channel over it per coherence block

    def __init__(self, bits_per_value: int = 8, allocation: str = "equal", rate_model: str = "shannon",
                 snr_gap_db: float = 0.0, target_bler: float = 0.1, rate_margin_db: float = 0.0,
                 slot_symbols: int | None = None, rate_adaptation: str = "slot"):
        DigitalOfdmaScheme.check(bits_per_value=bits_per_value, allocation=allocation, rate_model=rate_model,
                                 snr_gap_db=snr_gap_db, target_bler=target_bler,
                                 rate_margin_db=rate_margin_db, slot_symbols=slot_symbols,
                                 rate_adaptation=rate_adaptation)
        self.rate_adaptation = rate_adaptation
        self.bits_per_value, self.allocation, self.rate_model = int(bits_per_value), allocation, rate_model
        self.snr_gap_db, self.target_bler = float(snr_gap_db), float(target_bler)
        self.rate_margin_db = float(rate_margin_db)
        self.slot_symbols = None if slot_symbols is None else int(slot_symbols)

    def nominal_symbols(self, grid) -> int:
        """The slot budget; 0 without one (the rates need the senders' channels, which a
        phase the BS discards does not get)."""
        return self.slot_symbols or 0

    def plan(self, link, air, num_values: int) -> Plan:
        """:func:`plan` for the senders of ``link`` over ``air`` (:class:`phy.uplink.settings.AirInterface`)."""
        return plan(link.h_hat.numpy(), link.h.numpy(), num_values, bits_per_value=self.bits_per_value,
                    allocation=self.allocation, tx_power_w=air.tx_power_w,
                    noise_power_w=air.noise_power_w, rate_model=self.rate_model,
                    snr_gap_db=self.snr_gap_db, target_bler=self.target_bler,
                    rate_margin_db=self.rate_margin_db,
                    slot_symbols=None if self.rate_adaptation == "coherence_block" else self.slot_symbols)

    def block_rate(self, schedule: Plan, air, margin_db: float = 0.0) -> BlockRate:
        """The rate rule over coherence blocks (:class:`phy.uplink.slot_blocks.BlockRate`):
        the scheme's rate model with the code's gap and a back-off of ``margin_db``."""
        margin = 10.0 ** (margin_db / 10.0)
        if self.rate_model == "shannon":
            return BlockRate(schedule.owner, air.tx_power_w, air.noise_power_w,
                             10.0 ** (self.snr_gap_db / 10.0) * margin)
        _, efficiency, threshold = nr_mcs_table(self.target_bler)
        return BlockRate(schedule.owner, air.tx_power_w, air.noise_power_w, margin, (efficiency, threshold),
                         DECODE_TOLERANCE)

    def aged(self, schedule: Plan, link, air,
             offset_s: float = 0.0) -> tuple[Plan, tuple[np.ndarray, np.ndarray]]:
        """``schedule`` with the senders whose channel falls below their rate in some
        coherence block of their slot no longer decoded (:func:`phy.uplink.slot_blocks.slot_holds`),
        and ``(aging_outage [K_T] bool, aging_correlation [K_T])``: the devices lost that way,
        and Jakes' correlation between the channel at the phase's start (the estimate's) and
        at the middle of the sender's slot, ``J0(2 pi f_D (o + N_k T_sym / 2))``, the slot
        starting ``o = offset_s`` after the phase (NaN for one that does not transmit)."""
        rate = dataclasses.replace(self.block_rate(schedule, air), tolerance=DECODE_TOLERANCE)
        holds = slot_holds(link.slot, rate, schedule.rate, schedule.transmits, schedule.decoded,
                           schedule.symbols, air.symbol_duration_s)
        decoded = schedule.decoded & holds
        return dataclasses.replace(schedule, decoded=decoded), (schedule.decoded & ~holds,
                                                                self.correlation(link, schedule, air, offset_s))

    @staticmethod
    def correlation(link, schedule: Plan, air, offset_s: float = 0.0) -> np.ndarray:
        """``[K_T]`` ``J0(2 pi f_D (o + N_k T_sym / 2))`` over the symbols each sender
        occupies, its slot starting ``o = offset_s`` after the estimate (NaN for one that
        does not transmit; a ray-traced cell's paths' own correlation,
        :meth:`phy.uplink.moving_link.SlotChannel.correlation`)."""
        used = schedule.symbols if schedule.sent is None else np.where(schedule.sent > 0, schedule.sent, np.nan)
        half_slot_s = 0.5 * np.where(schedule.transmits, used, np.nan) * air.symbol_duration_s
        return link.slot.correlation(offset_s + half_slot_s)

    def adapted(self, schedule: Plan, link, air) -> Plan:
        """``schedule`` (planned without the budget) with the rate adapted per coherence
        block (:func:`phy.uplink.slot_blocks.adapted_slot`): its symbols, the symbols each
        sender occupies, who is decoded and the slot."""
        rate = self.block_rate(schedule, air, self.rate_margin_db)
        still = rate(link.h.numpy()[schedule.owner, np.arange(schedule.owner.shape[0])][None],
                     np.arange(schedule.owner.shape[0]), schedule.rate.shape[0])[0]
        outcome = adapted_slot(getattr(link, "slot", None), rate, still, schedule.bits.astype(np.float64),
                               schedule.transmits, air.symbol_duration_s, self.slot_symbols)
        finite = outcome.sent[outcome.sent > 0]
        return dataclasses.replace(schedule, symbols=outcome.symbols, decoded=outcome.decoded, sent=outcome.sent,
                                   num_symbols=int(finite.max()) if finite.size else 0)

    def phase_plan(self, link, air, num_values: int) -> tuple[Plan, tuple[np.ndarray, np.ndarray] | None]:
        """The phase's :class:`Plan` for the senders of ``link`` (from their channels and
        ``slot`` only, not their updates) and, with moving devices, ``(aging_outage [K_T]
        bool, aging_correlation [K_T])`` (:meth:`aged`; None without a ``slot``).

        With more senders than subcarriers, each slot group (:func:`slot_groups`) is
        planned on its own, its slot starting when the previous group's ends: with moving
        devices, its coherence blocks are evaluated from there (the rates still from the
        CSI of the phase's start; the decoding test at the slot's start reads the channel
        of the phase's start).
        """
        groups = slot_groups(int(link.h.shape[0]), int(link.h.shape[-1]))
        if len(groups) == 1:
            return self._group_plan(link, air, num_values, 0.0)
        plans, aged, offset_s = [], [], 0.0
        for lo, hi in groups:
            schedule, aging = self._group_plan(GroupLink.of(link, lo, hi, offset_s), air, num_values, offset_s)
            plans.append(schedule)
            aged.append(aging)
            offset_s += schedule.num_symbols * air.symbol_duration_s
        joined = joined_plans(groups, plans, int(link.h.shape[-1]))
        if aged[0] is None:
            return joined, None
        return joined, tuple(np.concatenate([a[i] for a in aged]) for i in range(2))

    def _group_plan(self, link, air, num_values: int,
                    offset_s: float) -> tuple[Plan, tuple[np.ndarray, np.ndarray] | None]:
        """:meth:`phase_plan` for at most F senders, their slot ``offset_s`` after the phase's start."""
        schedule = self.plan(link, air, num_values)
        slot = getattr(link, "slot", None)
        if self.rate_adaptation == "coherence_block":
            schedule = self.adapted(schedule, link, air)
            if slot is not None:  # nobody is lost to aging: the rate follows the channel
                return schedule, (np.zeros(schedule.rate.shape[0], bool),
                                  self.correlation(link, schedule, air, offset_s))
            return schedule, None
        if slot is not None:  # moving devices: the rate must hold in every coherence block
            return self.aged(schedule, link, air, offset_s)
        return schedule, None

    def open_stream(self, link, air, *, phase: str, seed, per_device: bool) -> DigitalStream:
        """The phase of ``link`` (its ``updates`` None) with the senders' rows added in
        chunks (:class:`DigitalStream`); its result is :meth:`send`'s bit for bit."""
        return DigitalStream(self, link, air, phase=phase, seed=seed, per_device=per_device)

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool) -> SchemeResult:
        stream = self.open_stream(link, air, phase=phase, seed=seed, per_device=per_device)
        stream.add(0, int(link.updates.shape[0]), link.updates)
        result = stream.finish()
        if keep_signals:
            result.columns.signals[f"estimate_{phase}"] = result.estimate.numpy()
        return result


def needed_symbols(schedule: Plan) -> float:
    """The slot that would carry every sender with a positive rate without a budget: the
    largest finite N_k (a sender at rate 0 is in outage; 0 when none has a rate), with G
    slot groups the sum over the groups of each group's (:func:`slot_groups`)."""
    num_senders = schedule.symbols.shape[0]
    groups = slot_groups(num_senders, schedule.owner.shape[-1]) if schedule.owner.ndim == 2 else [(0, num_senders)]
    total = 0.0
    for lo, hi in groups:
        symbols = schedule.symbols[lo:hi]
        finite = symbols[np.isfinite(symbols)]
        total += float(finite.max()) if finite.size else 0.0
    return total


def phase_columns(schedule: Plan, aged, link_weights: np.ndarray, *, phase: str, per_device: bool) -> Columns:
    """The scheme's columns of one phase (:class:`DigitalOfdma`) from its ``schedule``,
    the aging of moving devices (``aged``, :meth:`DigitalOfdma.phase_plan`) and the BS's
    weights [K_T] (float64); no signal."""
    columns = Columns()
    scalars = columns.scalars
    scalars[f"outage_devices_{phase}"] = float(np.sum(schedule.outage))
    scalars[f"bits_sent_{phase}"] = float(np.sum(schedule.bits[schedule.transmits]))
    scalars[f"symbols_needed_{phase}"] = needed_symbols(schedule)
    scalars[f"decoded_weight_{phase}"] = (float(link_weights[schedule.decoded].sum() / link_weights.sum())
                                          if link_weights.sum() > 0.0 else 0.0)
    if aged is not None:
        scalars[f"aging_outage_devices_{phase}"] = float(np.sum(aged[0]))
        if per_device:
            columns.per_device[f"aging_correlation_{phase}"] = aged[1]
    if per_device:
        columns.per_device.update({
            f"bits_per_symbol_{phase}": schedule.rate,
            f"symbols_{phase}": schedule.symbols,
            f"subcarriers_{phase}": schedule.subcarriers.astype(np.float64),
            f"outage_{phase}": schedule.outage.astype(np.float64)})
    return columns


class DigitalStream:
    """One phase of :class:`DigitalOfdma` with the senders' updates added in chunks.

    ``add(lo, hi, updates)`` takes rows ``lo:hi`` ([hi - lo, n], NumPy or tf) in order
    (:class:`phy.stream_rows.RowOrder`); ``finish()`` returns the
    :class:`phy.uplink.scheme.SchemeResult` of :meth:`DigitalOfdma.send` without signals.
    The schedule depends on the channels only and is made at the first chunk (it needs
    n); each row is quantized as it comes (:func:`phy.quantized_sums.add_quantized`, which
    is :func:`quantize_row` row by row), its draws taken from the one generator of the
    phase's seed in device order, and added to the float64 sum in the same order as one
    call over all rows: any chunking gives the same bits. Holds O(n + K_T F) beyond the
    chunk.
    """

    def __init__(self, scheme: DigitalOfdma, link, air, *, phase: str, seed, per_device: bool):
        self.scheme, self.link, self.air, self.phase, self.per_device = scheme, link, air, phase, per_device
        self.link_weights = np.asarray(link.weights, np.float64)
        self.rows = RowOrder(self.link_weights.shape[0], f"digital_ofdma phase {phase!r}")
        self.rng = _generator(seed)
        self.schedule: Plan | None = None

    def _start(self, num_values: int) -> None:
        self.schedule, self.aged = self.scheme.phase_plan(self.link, self.air, num_values)
        self.weights = decoded_weights(self.link_weights, self.schedule.decoded)
        self.total = np.zeros(num_values, np.float64)

    def add(self, lo: int, hi: int, updates) -> None:
        """Quantize and sum rows ``lo:hi`` of the senders' updates."""
        x = np.asarray(self.rows.take(lo, hi, updates))  # a tensor's memory as it is: only read
        if self.schedule is None:
            self._start(x.shape[1])
        for start in range(0, x.shape[0], QUANTIZED_ROWS_PER_LAUNCH):
            block = x[start:start + QUANTIZED_ROWS_PER_LAUNCH]
            draws = self.rng.random(block.shape)  # every sender's draws, in order
            first = int(lo) + start
            add_quantized(block, draws, self.scheme.bits_per_value, self.weights[first:first + block.shape[0]],
                          self.total)

    def finish(self) -> SchemeResult:
        """The phase's estimate [n], slot, energies [K_T] and columns (no signal)."""
        self.rows.check_done()
        if self.schedule is None:  # no sender: plan refuses it as send does
            self._start(0)
        schedule, air = self.schedule, self.air
        columns = phase_columns(schedule, self.aged, self.link_weights, phase=self.phase,
                                per_device=self.per_device)
        used = np.where(schedule.transmits, schedule.symbols, 0.0) if schedule.sent is None else schedule.sent
        energy = air.tx_power_w * used * air.symbol_duration_s
        return SchemeResult(tf.constant(self.total.astype(np.float32)), schedule.num_symbols, energy, columns)
