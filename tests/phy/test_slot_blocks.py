"""A digital slot of moving devices over its coherence blocks (phy.uplink.slot_blocks):
the chunked rates against a one-block-at-a-time loop, the early stop against the full
evaluation, and the rate adapted per coherence block."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from phy.doppler import jakes_correlation
from phy.moving_channel import straight
from phy.uplink import slot_blocks
from phy.uplink.digital_ofdma import (
    DECODE_TOLERANCE,
    DigitalOfdma,
    mcs_bits_per_symbol,
    plan,
    shannon_bits_per_symbol,
)
from phy.uplink.moving_link import SlotChannel

CARRIER_HZ = 3.5e9
P_W, NOISE_W, SYMBOL_S = 0.1, 1e-11, 1e-4
POSITIONS = [[50.0, 0.0], [0.0, 60.0], [-70.0, 0.0], [0.0, -80.0], [30.0, 30.0]]


def _moving(speed_mps, num_subcarriers=32, seed=3):
    moving = straight(speed_mps, 0.0, CARRIER_HZ, 8, positions_m=POSITIONS, radius_m=100.0, inner_m=10.0,
                      num_subcarriers=num_subcarriers, flat=False, path_loss_exponent=4.0,
                      rng=np.random.default_rng(seed))
    moving.start_round(0)
    return moving


class _Counting(SlotChannel):
    """A SlotChannel that counts the blocks it evaluates."""

    def owned_at(self, offsets_s, rows, subcarriers):
        self.blocks.append(np.asarray(offsets_s).size)
        return super().owned_at(offsets_s, rows, subcarriers)


def _slot(moving, counting=False):
    cls = _Counting if counting else SlotChannel
    slot = cls(moving, 0.25, np.arange(len(POSITIONS)), moving.doppler_hz)
    object.__setattr__(slot, "blocks", [])
    return slot


def _reference_rates(slot, owner, offsets_s, rate_model):
    """The per-block loop the chunks replace: one [K, F] gain and one rate per block."""
    subcarriers = np.arange(owner.shape[0])
    rows = []
    for row in slot.owned_at(offsets_s, owner, subcarriers):
        gain = np.zeros((len(POSITIONS), subcarriers.size))
        gain[owner, subcarriers] = np.abs(row.astype(np.complex128)) ** 2
        if rate_model == "shannon":
            rows.append(shannon_bits_per_symbol(gain, owner, P_W, NOISE_W, 1.0))
        else:
            rows.append(mcs_bits_per_symbol(gain, owner, P_W, NOISE_W, 1.0, 0.1)[0])
    return np.array(rows)


def _reference_holds(slot, schedule, rate_model):
    """The full evaluation: each sender's smallest rate over every block of its slot; and
    each sender's first failing block (-1: none)."""
    block_s, num_blocks = slot_blocks.coherence_blocks(slot, schedule.transmits, schedule.symbols, SYMBOL_S)
    rates = _reference_rates(slot, schedule.owner, (np.arange(num_blocks) + 0.5) * block_s, rate_model)
    slot_s = np.where(schedule.transmits, schedule.symbols, 0.0) * SYMBOL_S
    inside = np.arange(num_blocks)[:, None] * block_s < slot_s[None, :]
    lowest = np.where(inside, rates, np.inf).min(axis=0)
    fails = inside & ~(schedule.rate[None, :] <= rates * (1.0 + DECODE_TOLERANCE))
    return schedule.rate <= lowest * (1.0 + DECODE_TOLERANCE), np.where(fails.any(0), fails.argmax(0), -1)


@pytest.mark.parametrize("rate_model", ["shannon", "nr_mcs"])
def test_the_chunked_rates_are_the_per_block_rates_bit_for_bit(monkeypatch, rate_model):
    """Chunks of 3 blocks, one bincount each, against the one-block loop over 20 blocks at
    120 km/h (Shannon and NR MCS): equal bit for bit; so are the rates of a chunk of only
    some senders' subcarriers (the chunks of the undecided senders)."""
    monkeypatch.setattr(slot_blocks, "SLOT_CHUNK_VALUES", 3 * 32 * 8)
    slot = _slot(_moving(120 / 3.6))
    h, _ = slot.moving.at(0.25)
    schedule = plan(h, h, 500, bits_per_value=8, allocation="max_min", tx_power_w=P_W, noise_power_w=NOISE_W,
                    rate_model=rate_model)
    rate = DigitalOfdma(rate_model=rate_model).block_rate(schedule, SimpleNamespace(tx_power_w=P_W,
                                                                                     noise_power_w=NOISE_W))
    rate = replace(rate, tolerance=DECODE_TOLERANCE)
    block_s = 1.3e-3
    every = np.ones(len(POSITIONS), bool)
    chunks = list(slot_blocks.block_chunks(slot, rate, block_s, lambda first: every, len(POSITIONS), 20))
    assert [c[0].size for c in chunks] == [3] * 6 + [2]
    rates = np.concatenate([c[1] for c in chunks])
    reference = _reference_rates(slot, schedule.owner, (np.arange(20) + 0.5) * block_s, rate_model)
    assert np.all(reference > 0) or rate_model == "nr_mcs"
    np.testing.assert_array_equal(rates, reference)
    some = np.array([False, True, False, False, True])
    partial = np.concatenate([c[1] for c in slot_blocks.block_chunks(slot, rate, block_s, lambda first: some,
                                                                     len(POSITIONS), 20)])
    np.testing.assert_array_equal(partial[:, some], reference[:, some])


@pytest.mark.parametrize("rate_model", ["shannon", "nr_mcs"])
def test_the_early_stop_decides_as_the_full_evaluation(monkeypatch, rate_model):
    """Rates at capacity (no margin) over 1 s slots at 120 km/h, 920 blocks: every sender
    fails in some block, the evaluation stops in the chunk of the last first failure, and
    the outcome is the full evaluation's. With the rates of two senders a hundredth of
    capacity (they hold throughout) the evaluation runs to the longer one's slot's end and
    still agrees."""
    monkeypatch.setattr(slot_blocks, "SLOT_CHUNK_VALUES", 16 * 32 * 8)
    slot = _slot(_moving(120 / 3.6, seed=6), counting=True)  # a drop where every sender fails
    h, _ = slot.moving.at(0.25)
    base = plan(h, h, 500, bits_per_value=8, allocation="equal", tx_power_w=P_W, noise_power_w=NOISE_W,
                rate_model=rate_model)
    air = SimpleNamespace(tx_power_w=P_W, noise_power_w=NOISE_W, symbol_duration_s=SYMBOL_S)
    symbols = np.full(len(POSITIONS), 1.0 / SYMBOL_S)
    schedule = replace(base, symbols=symbols, num_symbols=int(symbols.max()))
    _, num_blocks = slot_blocks.coherence_blocks(slot, schedule.transmits, schedule.symbols, SYMBOL_S)
    assert num_blocks == 920 and schedule.decoded.all()
    reference, first_failure = _reference_holds(slot, schedule, rate_model)
    assert not reference.any()
    slot.blocks.clear()
    aged, (lost, _) = DigitalOfdma(rate_model=rate_model).aged(schedule, SimpleNamespace(slot=slot), air)
    assert lost.all() and not aged.decoded.any()
    evaluated = sum(slot.blocks)
    assert evaluated - slot.blocks[-1] <= first_failure.max() < evaluated < num_blocks  # stopped in its chunk
    short = replace(schedule, symbols=np.array([1.0, 1.0, 1.0, 0.1, 1.0]) / SYMBOL_S,
                    rate=np.where(np.arange(5) >= 3, schedule.rate / 100.0, schedule.rate))
    reference, _ = _reference_holds(slot, short, rate_model)
    assert reference[3:].all() and not reference[:3].any()
    slot.blocks.clear()
    aged, (lost, _) = DigitalOfdma(rate_model=rate_model).aged(short, SimpleNamespace(slot=slot), air)
    np.testing.assert_array_equal(aged.decoded, reference)
    np.testing.assert_array_equal(lost, ~reference)
    assert sum(slot.blocks) == num_blocks  # sender 4 holds to its slot's end, sender 3 to a tenth of it


class _Given:
    """A slot whose channels are given: ``gain(device, offset_s)`` on every owned subcarrier."""

    num_sinusoids = 1

    def __init__(self, gain, doppler):
        self.gain, self.doppler_hz, self.blocks = gain, np.asarray(doppler, float), []

    def owned_at(self, offsets_s, rows, subcarriers):
        self.blocks.append(len(offsets_s))
        return np.sqrt(np.array([[self.gain(int(k), t) for k in rows] for t in offsets_s])).astype(np.complex64)

    def correlation(self, lag_s):
        return jakes_correlation(self.doppler_hz, lag_s)


def test_a_device_whose_channel_fades_mid_slot_is_decoded_with_the_rate_adapted_per_block():
    """Two devices, gain 1 on their subcarriers at the start; device 1's falls to 0.1 half-way
    through its fixed-rate slot. With one rate per slot device 1 is lost to aging; with
    the rate adapted per coherence block (S = 21 symbols: a pilot and 20 data symbols) both
    are decoded: device 0 after N = b* S + 1 + ceil((B - 20 b* R) / R) symbols (R its
    constant rate), device 1 later, on the faded rate; each sender's energy is P N T_sym.
    With a budget below device 1's N it sends the whole budget and is in outage."""
    num_values, f_d = 500, 200.0  # T_c = 2.115 ms: 21 symbols of 0.1 ms
    h = np.ones((2, 8), np.complex64)
    schedule = plan(h, h, num_values, bits_per_value=8, allocation="equal", tx_power_w=1.0, noise_power_w=1e-2)
    slot_s = schedule.symbols.max() * SYMBOL_S
    slot = _Given(lambda k, t: 1.0 if k == 0 or t < slot_s / 2 else 0.1, [f_d, f_d])
    air = SimpleNamespace(tx_power_w=1.0, noise_power_w=1e-2, symbol_duration_s=SYMBOL_S)
    fixed, (lost, _) = DigitalOfdma().aged(schedule, SimpleNamespace(slot=slot), air)
    np.testing.assert_array_equal(fixed.decoded, [True, False])
    np.testing.assert_array_equal(lost, [False, True])

    link = SimpleNamespace(slot=slot, h=SimpleNamespace(numpy=lambda: h))
    adapted = DigitalOfdma(rate_adaptation="coherence_block").adapted(schedule, link, air)
    assert adapted.decoded.all()
    rate, bits, s = schedule.rate[0], float(schedule.bits[0]), 21
    last = int(np.argmax((np.arange(1, 100) * (s - 1) * rate) >= bits))  # b*: the block that completes
    expected = last * s + 1 + np.ceil((bits - last * (s - 1) * rate) / rate)
    assert adapted.symbols[0] == expected and adapted.symbols[1] > expected
    np.testing.assert_array_equal(adapted.sent, adapted.symbols)
    assert adapted.num_symbols == adapted.symbols[1]

    budget = int(adapted.symbols[1]) - 1
    tight = DigitalOfdma(rate_adaptation="coherence_block", slot_symbols=budget).adapted(schedule, link, air)
    np.testing.assert_array_equal(tight.decoded, [True, False])
    assert tight.sent[1] == budget and np.isinf(tight.symbols[1]) and tight.num_symbols == budget


def test_the_adapted_evaluation_stops_when_every_sender_is_done(monkeypatch):
    """Chunks of 2 blocks while both senders send, 4 once device 0 (the slower) is alone:
    the blocks evaluated are those up to its last block, within one chunk."""
    monkeypatch.setattr(slot_blocks, "SLOT_CHUNK_VALUES", 4 * 8)
    h = np.ones((2, 8), np.complex64)
    schedule = plan(h, h, 500, bits_per_value=8, allocation="equal", tx_power_w=1.0, noise_power_w=1e-2)
    slot = _Given(lambda k, t: 1.0 if k == 1 else 0.3, [200.0, 200.0])
    link = SimpleNamespace(slot=slot, h=SimpleNamespace(numpy=lambda: h))
    air = SimpleNamespace(tx_power_w=1.0, noise_power_w=1e-2, symbol_duration_s=SYMBOL_S)
    adapted = DigitalOfdma(rate_adaptation="coherence_block").adapted(schedule, link, air)
    assert adapted.decoded.all() and adapted.symbols[0] > adapted.symbols[1]
    last_block = int((adapted.symbols[0] - 1) // 21)
    assert last_block + 1 <= sum(slot.blocks) < last_block + 1 + 4


def test_a_bad_rate_adaptation_names_the_key_and_the_value():
    with pytest.raises(ValueError, match=r"rate_adaptation.*per_symbol"):
        DigitalOfdma(rate_adaptation="per_symbol")
