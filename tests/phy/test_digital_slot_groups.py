"""Digital OFDMA with more senders than subcarriers (``K_T > F``): the senders take turns
in slot groups (``phy.uplink.digital_ofdma.slot_groups``), each group planned on its own
in a slot that starts when the previous group's ends."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import j0

from phy.uplink.digital_ofdma import (
    DigitalOfdma,
    decoded_weights,
    plan,
    slot_groups,
    stochastic_quantize,
)
from phy.uplink.moving_link import SlotChannel
from tests.phy.test_scheme_streams import (
    SEED,
    UNEVEN,
    _air,
    _assert_same,
    _link,
    _moving_link,
    _sent,
    _streamed,
)


@pytest.mark.parametrize("num_senders, num_subcarriers", [(1, 4), (4, 4), (5, 4), (10, 4), (2049, 1024),
                                                          (100_000, 1024)])
def test_slot_groups_are_runs_of_consecutive_senders_of_at_most_f(num_senders, num_subcarriers):
    groups = slot_groups(num_senders, num_subcarriers)
    assert len(groups) == math.ceil(num_senders / num_subcarriers)
    assert groups[0][0] == 0 and groups[-1][1] == num_senders
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))  # consecutive, nothing left out
    sizes = [hi - lo for lo, hi in groups]
    assert max(sizes) <= num_subcarriers and max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_more_senders_than_subcarriers_take_turns_each_group_on_its_own(rng):
    """K = 10 senders on F = 4 subcarriers: groups of 3, 3 and 4, each planned as a phase of
    its own senders would be; the phase lasts the three slots; the estimate is the
    decoded senders' quantized updates, weighted as one phase's."""
    link, air = _link(rng, 10, 4, 50, gain=np.geomspace(1e-8, 1e-10, 10)), _air(4, 0.1, 1e-13)
    scheme = DigitalOfdma(bits_per_value=4, rate_margin_db=1.0)
    schedule, aged = scheme.phase_plan(link, air, 50)
    assert aged is None and schedule.owner.shape == (3, 4)
    h_hat, h = link.h_hat.numpy(), link.h.numpy()
    for g, (lo, hi) in enumerate(slot_groups(10, 4)):
        alone = plan(h_hat[lo:hi], h[lo:hi], 50, bits_per_value=4, allocation="equal", tx_power_w=0.1,
                     noise_power_w=1e-13, rate_margin_db=1.0)
        np.testing.assert_array_equal(schedule.owner[g], lo + alone.owner)
        for name in ("subcarriers", "rate", "capacity", "symbols", "transmits", "decoded"):
            np.testing.assert_array_equal(getattr(schedule, name)[lo:hi], getattr(alone, name), err_msg=name)
        assert schedule.group_symbols[g] == alone.num_symbols > 0
    assert schedule.num_symbols == int(schedule.group_symbols.sum())
    assert np.all(schedule.subcarriers >= 1) and np.all(schedule.outage == ~schedule.decoded)
    assert 0 < schedule.decoded.sum() < 10  # CSI error: some senders lost, some decoded

    result = _sent(scheme, link, air)
    q, _ = stochastic_quantize(link.updates, 4, SEED)
    weights = decoded_weights(link.weights.numpy(), schedule.decoded)
    np.testing.assert_allclose(result.estimate.numpy(), weights @ q, rtol=1e-6, atol=1e-7)
    assert result.num_symbols == schedule.num_symbols
    np.testing.assert_array_equal(result.tx_energy_j, 0.1 * np.where(schedule.transmits, schedule.symbols, 0.0)
                                  * air.symbol_duration_s)


@pytest.mark.parametrize("rate_adaptation", ["slot", "coherence_block"])
def test_a_later_group_sends_after_the_earlier_ones_from_the_same_estimate(rng, rate_adaptation):
    """Ten devices at 120 km/h on F = 4 subcarriers (groups of 3, 3, 4): a sender's aging
    correlation is J0(2 pi f_D (o_g + N_k T / 2)), ``o_g`` the slots of the groups before
    its own; each group's coherence blocks start at its own slot."""
    link = _moving_link(rng, 3000, num_subcarriers=4)
    air = SimpleNamespace(num_subcarriers=4, tx_power_w=0.1, noise_power_w=1e-11, symbol_duration_s=1e-4)
    scheme = DigitalOfdma(bits_per_value=8, rate_margin_db=1.0, rate_adaptation=rate_adaptation)
    schedule, (_, correlation) = scheme.phase_plan(link, air, 3000)
    offsets = np.concatenate([[0], np.cumsum(schedule.group_symbols)[:-1]]) * air.symbol_duration_s
    used = schedule.symbols if schedule.sent is None else np.where(schedule.sent > 0, schedule.sent, np.nan)
    for g, (lo, hi) in enumerate(slot_groups(10, 4)):
        lag_s = offsets[g] + 0.5 * used[lo:hi] * air.symbol_duration_s
        expected = np.where(schedule.transmits[lo:hi], j0(2 * np.pi * link.slot.doppler_hz[lo:hi] * lag_s), np.nan)
        np.testing.assert_allclose(correlation[lo:hi], expected, rtol=1e-12, equal_nan=True)
    assert offsets[2] > 0.0 and np.nanmin(correlation[6:]) < np.nanmax(correlation[:3])

    # the last group's blocks from its own slot: as a phase of its four senders alone whose
    # slot channel starts there (and not as one that starts with the phase)
    def alone(offset_s):
        slot = SlotChannel(link.slot.moving, link.slot.start_s + offset_s, link.slot.devices[6:],
                           link.slot.doppler_hz[6:])
        return scheme.phase_plan(SimpleNamespace(h_hat=link.h_hat[6:], h=link.h[6:], slot=slot), air, 3000)[0]

    later, at_start = alone(offsets[2]), alone(0.0)
    for name in ("symbols", "decoded", "transmits"):
        np.testing.assert_array_equal(getattr(schedule, name)[6:], getattr(later, name), err_msg=name)
    if rate_adaptation == "coherence_block":  # the rates follow the channel: its blocks are other ones
        assert not np.array_equal(later.symbols, at_start.symbols)


@pytest.mark.parametrize("moving", [False, True])
def test_a_phase_of_more_senders_than_subcarriers_streams_bit_for_bit(rng, moving):
    if moving:
        link = _moving_link(rng, 3000, num_subcarriers=4)
        air = SimpleNamespace(num_subcarriers=4, tx_power_w=0.1, noise_power_w=1e-11, symbol_duration_s=1e-4)
    else:
        link, air = _link(rng, 10, 4, 3000, gain=np.geomspace(1e-8, 1e-10, 10)), _air(4, 0.1, 1e-13)
    scheme = DigitalOfdma(bits_per_value=8, rate_margin_db=1.0)
    sent = _sent(scheme, link, air)
    assert sent.num_symbols == scheme.phase_plan(link, air, 3000)[0].num_symbols
    _assert_same(_streamed(scheme, link, air, UNEVEN), sent)


def test_the_symbols_needed_are_the_sum_of_the_groups_slots_without_a_budget(rng):
    """``symbols_needed_<phase>``, the slot that would carry every sender with a rate
    without a budget: with slot groups the sum over the groups of each group's largest
    N_k (the phase's slot when no budget drops anyone), not the largest N_k of all."""
    link, air = _link(rng, 10, 4, 50, gain=np.geomspace(1e-8, 1e-10, 10)), _air(4, 0.1, 1e-13)
    free = DigitalOfdma(bits_per_value=4, rate_margin_db=1.0)
    schedule, _ = free.phase_plan(link, air, 50)
    result = _sent(free, link, air)
    groups = slot_groups(10, 4)
    largest = [schedule.symbols[lo:hi][np.isfinite(schedule.symbols[lo:hi])].max() for lo, hi in groups]
    assert result.columns.scalars["symbols_needed_delta"] == sum(largest) == result.num_symbols
    assert sum(largest) > max(largest)  # the largest N_k of all would be one group's slot

    budget = int(np.median(schedule.symbols))  # some senders over the budget in some group
    capped = DigitalOfdma(bits_per_value=4, rate_margin_db=1.0, slot_symbols=budget)
    capped_result = _sent(capped, link, air)
    assert capped_result.columns.scalars["symbols_needed_delta"] == sum(largest) > capped_result.num_symbols
