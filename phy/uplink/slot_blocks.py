"""A digital slot of moving devices over its coherence blocks (issue 58).

Digital OFDMA (:mod:`phy.uplink.digital_ofdma`) decides each sender's slot from rates,
so with devices that move the channel over the slot is evaluated per coherence block:
in block b, of length ``T_b``, the channel is taken constant at its value at the block's
middle ``(b + 1/2) T_b`` (the devices there too), each subcarrier's owner's process only
(:meth:`phy.uplink.moving_link.SlotChannel.owned_at`). Two uses:

* :func:`slot_holds` (a rate fixed at the slot's start): whether each sender's rate
  fits the channel in every block of its slot. A sender's outcome is decided at its first
  failing block, so the blocks are evaluated only while some sender is undecided (not
  failed and its slot not over): the cost is the blocks up to the last decision, not the
  slot's.
* :func:`adapted_slot` (``uplink.rate_adaptation = "coherence_block"``): the sender
  learns each block's channel with one pilot OFDM symbol at the block's start and sends
  the block's remaining symbols at the rate that channel carries; its slot ends when its
  bits are delivered.

The blocks are evaluated a chunk at a time (:data:`SLOT_CHUNK_VALUES`), only the
subcarriers of the senders still undecided: memory does not grow with the slot. The
rates of a chunk are one ``np.bincount`` over the flattened ``[b, F]`` array (bin
``owner_f + K b``), which sums each sender's terms in the same order as the one-block
rate (:func:`phy.uplink.digital_ofdma.shannon_bits_per_symbol`), so they are its values
bit for bit.

No TensorFlow: NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from phy.doppler import coherence_time_s

SLOT_CHUNK_VALUES = 1 << 19
"""The coherence blocks of a slot are evaluated a chunk at a time, each of at most this
many sinusoid terms (blocks x evaluated subcarriers x M, 32 bytes of temporaries each: 16
MiB) and this many quarter device positions (blocks x 4 K: a position's advance takes
about four terms' bytes): the memory does not grow with the slot."""


@dataclass(frozen=True)
class BlockRate:
    """How a block's channel becomes each sender's bits per OFDM symbol: the rate rule of
    :func:`phy.uplink.digital_ofdma.plan` over a chunk of blocks.

    Attributes
    ----------
    owner : [F] int64
        The sender of every subcarrier.
    tx_power_w, noise_power_w : float
        P, sigma_z^2 (W): subcarrier f has ``SNR = (P / F_k) |h_f|^2 / sigma_z^2``.
    divisor : float
        Shannon: the linear ``Gamma M`` (``sum_f log2(1 + SNR_f / divisor)``); NR MCS: the
        margin M the effective SNR is divided by.
    mcs : (efficiency [M], threshold [M]) or None
        :func:`phy.uplink.digital_ofdma.nr_mcs_table`'s; None for Shannon.
    tolerance : float
        The relative slack of an MCS's threshold test.
    """

    owner: np.ndarray
    tx_power_w: float
    noise_power_w: float
    divisor: float
    mcs: tuple[np.ndarray, np.ndarray] | None = None
    tolerance: float = 0.0

    def __call__(self, h: np.ndarray, pairs: np.ndarray, num_senders: int) -> np.ndarray:
        """``[b, K]`` float64 bits per OFDM symbol from ``h`` [b, P] complex, the channel of
        subcarriers ``pairs`` [P] (ascending; every subcarrier of the senders that matter,
        the others' rows are partial sums and meaningless)."""
        num_blocks = h.shape[0]
        owner = self.owner[pairs]
        count = np.bincount(self.owner, minlength=num_senders).astype(np.float64)
        gain = np.abs(h.astype(np.complex128)) ** 2
        snr = (self.tx_power_w / count[owner]) * gain / self.noise_power_w
        bins = (owner[None, :] + num_senders * np.arange(num_blocks)[:, None]).ravel()
        if self.mcs is None:
            return np.bincount(bins, weights=np.log2(1.0 + snr / self.divisor).ravel(),
                               minlength=num_blocks * num_senders).reshape(num_blocks, num_senders)
        bits = np.bincount(bins, weights=np.log2(1.0 + snr).ravel(), minlength=num_blocks * num_senders)
        effective = (2.0 ** (bits.reshape(num_blocks, num_senders) / count) - 1.0) / self.divisor
        efficiency, threshold = self.mcs
        usable = np.searchsorted(threshold, effective * (1.0 + self.tolerance), side="right") - 1
        return np.where(usable >= 0, count * efficiency[np.maximum(usable, 0)], 0.0)


def block_chunks(slot, rate: BlockRate, block_s: float, undecided: Callable[[int], np.ndarray],
                 num_senders: int, num_blocks: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(index [b] int64, rates [b, K])`` for consecutive chunks of coherence blocks from
    block 0, each block's channel at its middle ``(index + 1/2) block_s`` after the phase's
    start. Before each chunk ``undecided(first)`` ([K] bool) names the senders whose rates
    are still needed from block ``first`` on: only their subcarriers are evaluated (rows of
    the others are meaningless), the chunk's size is bounded by :data:`SLOT_CHUNK_VALUES`,
    and it stops when none is undecided or at ``num_blocks``."""
    first = 0
    while num_blocks is None or first < num_blocks:
        rows = undecided(first)
        if not rows.any():
            return
        pairs = np.flatnonzero(rows[rate.owner])
        stop = first + max(1, SLOT_CHUNK_VALUES // max(pairs.size * slot.num_sinusoids, 4 * num_senders))
        index = np.arange(first, stop if num_blocks is None else min(stop, num_blocks))
        h = slot.owned_at((index + 0.5) * block_s, rate.owner[pairs], pairs)  # [b, P]
        yield index, rate(h, pairs, num_senders)
        first = int(index[-1]) + 1


def coherence_blocks(slot, transmits: np.ndarray, symbols: np.ndarray,
                     symbol_duration_s: float) -> tuple[float, int]:
    """``(T_b, B)``: the block length [s], the fastest transmitting sender's coherence time
    ``0.423 / f_D`` (:func:`phy.doppler.coherence_time_s`), and the blocks that cover the
    longest slot (0 when nobody moves or transmits). ``transmits`` [K] bool, ``symbols`` [K]."""
    moving = transmits & (slot.doppler_hz > 0.0)
    if not moving.any():
        return math.inf, 0
    block_s = float(np.min(coherence_time_s(slot.doppler_hz[moving])))
    longest_s = float(np.max(symbols[transmits])) * symbol_duration_s
    return block_s, max(1, math.ceil(longest_s / block_s))


def slot_holds(slot, rate: BlockRate, chosen: np.ndarray, transmits: np.ndarray, decoded: np.ndarray,
               symbols: np.ndarray, symbol_duration_s: float) -> np.ndarray:
    """``[K]`` bool: whether each sender decoded at the slot's start keeps its rate
    ``chosen`` [K] in every coherence block of its slot, ``R_k <= r_kb (1 + tol)`` for every
    block b with ``b T_b < N_k T_sym`` (True for a sender not decoded at the start, and for
    all when nobody moves). ``rate`` has the code's gap and no margin; ``transmits``,
    ``decoded`` [K] bool and ``symbols`` [K] (N_k) are the plan's.

    The blocks are those of :func:`coherence_blocks`; they are evaluated only up to the
    last sender's decision (its first failing block, or its slot's end), so a slot whose
    senders all fail early costs a few blocks. The outcome is the full evaluation's:
    comparing with each block's rate is comparing with their minimum (``x -> x (1 + tol)``
    is monotone in floating point).
    """
    block_s, num_blocks = coherence_blocks(slot, transmits, symbols, symbol_duration_s)
    holds = np.ones(chosen.shape[0], bool)
    if num_blocks == 0:
        return holds
    slot_s = np.where(transmits, symbols, 0.0) * symbol_duration_s
    for index, rates in block_chunks(slot, rate, block_s, lambda first: decoded & holds & (first * block_s < slot_s),
                                     chosen.shape[0], num_blocks):
        inside = index[:, None] * block_s < slot_s[None, :]  # [b, K]
        fits = chosen[None, :] <= rates * (1.0 + rate.tolerance)
        np.logical_and(holds, ~np.any(inside & ~fits, axis=0), out=holds)  # in place: read by the chunks
    return holds


@dataclass(frozen=True)
class AdaptedSlot:
    """The outcome of :func:`adapted_slot` over the K senders.

    Attributes
    ----------
    symbols : [K] float64
        N_k, the symbols until the sender's bits are delivered, pilots included (inf: not
        delivered within the budget, or a block carried nothing).
    sent : [K] float64
        The symbols it occupied: N_k when delivered, else up to the budget or to the pilot
        of the block that carried nothing (0 when it does not start).
    decoded : [K] bool
        Its bits delivered within the budget.
    block_symbols : float
        S, symbols per block (inf: nobody moves, one block).
    """

    symbols: np.ndarray
    sent: np.ndarray
    decoded: np.ndarray
    block_symbols: float


def block_symbols(slot, starts: np.ndarray, symbol_duration_s: float) -> float:
    """S = max(2, floor(T_b / T_sym)) symbols per block (a pilot and at least one data
    symbol), T_b the fastest starting sender's coherence time; inf when none moves."""
    if slot is None or not (starts & (slot.doppler_hz > 0.0)).any():
        return math.inf
    block_s = float(np.min(coherence_time_s(slot.doppler_hz[starts & (slot.doppler_hz > 0.0)])))
    return float(max(2, math.floor(block_s / symbol_duration_s)))


def adapted_slot(slot, rate: BlockRate, still_rate: np.ndarray, bits: np.ndarray, starts: np.ndarray,
                 symbol_duration_s: float, budget: int | None) -> AdaptedSlot:
    """Rate adaptation per coherence block (module docstring; docs/schemes.md).

    Input: ``slot`` (a :class:`phy.uplink.moving_link.SlotChannel`, or None: nobody moves),
    ``rate`` (with the gap and the margin), ``still_rate`` [K] the rates of the channel at
    the slot's start (used when nobody moves: one block), ``bits`` [K] B_k, ``starts`` [K]
    bool (the senders that transmit: a nonzero rate at the start), the budget (symbols or
    None). Block b is S symbols (:func:`block_symbols`): a pilot, then ``S - 1`` data
    symbols at ``r_kb``, the rate of the channel at the block's middle ``(b + 1/2) S T_sym``;
    the sender stops in the first block ``b*`` where its delivered bits reach B_k, after
    ``N_k = b* S + 1 + ceil((B_k - D_k) / r_kb*)`` symbols (D_k its bits before the block).
    A block that carries nothing (rate 0) ends its transmission after the pilot, in outage.
    """
    size = bits.shape[0]
    s = block_symbols(slot, starts, symbol_duration_s)
    symbols, sent = np.full(size, np.inf), np.zeros(size)
    if math.isinf(s):  # one block: a pilot, then the data at the start's rate
        with np.errstate(divide="ignore"):
            symbols = np.where(starts & (still_rate > 0.0),
                               1.0 + np.ceil(bits / np.where(still_rate > 0.0, still_rate, 1.0)), np.inf)
        sent = np.where(starts, np.where(np.isfinite(symbols), symbols, 1.0), 0.0)
    else:
        delivered, active = np.zeros(size), starts.copy()
        num_blocks = None if budget is None else math.ceil(budget / s)
        for index, rates in block_chunks(slot, rate, s * symbol_duration_s, lambda first: active, size, num_blocks):
            data = (s - 1.0) * rates
            total = delivered[None, :] + np.cumsum(data, axis=0)  # [b, K] bits after each block
            event = (total >= bits[None, :]) | ~(rates > 0.0)
            hit = active & event.any(axis=0)
            for k in np.flatnonzero(hit):
                j = int(np.argmax(event[:, k]))
                start = float(index[j]) * s
                if rates[j, k] > 0.0:
                    before = delivered[k] if j == 0 else total[j - 1, k]
                    symbols[k] = start + 1.0 + math.ceil((bits[k] - before) / rates[j, k])
                    sent[k] = symbols[k]
                else:
                    sent[k] = start + 1.0
            delivered = np.where(active & ~hit, total[-1], delivered)
            np.logical_and(active, ~hit, out=active)  # in place: read by the chunks
        if budget is not None:
            sent = np.where(active, float(budget), sent)  # still sending when the budget ends
    if budget is not None:
        over = symbols > budget
        symbols, sent = np.where(over, np.inf, symbols), np.where(over, np.minimum(sent, budget), sent)
    return AdaptedSlot(symbols, sent, np.isfinite(symbols) & starts, s)
