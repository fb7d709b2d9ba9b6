"""Devices that move (issue 58): the digital slot's memory against its length, and the round's time.

:func:`phy.uplink.slot_blocks.slot_holds` evaluates each sender's channel once per
coherence block of its slot, a chunk of blocks at a time, until every sender's outcome is
decided. This times it and takes its peak of Python-allocated memory (``tracemalloc``,
which sees NumPy's buffers) at the quickstart's size (K = 100 senders, F = 1024
subcarriers, equal allocation, 8 sinusoids per process, 3.5 GHz) for slots of growing
length at each speed, twice: with the rates at capacity (as the scheme picks them under
perfect CSI: most senders fail within the first blocks, and the evaluation stops at the
last one's failure) and with every rate a hundredth of capacity (every sender holds:
every block is evaluated, the worst case). The peak must not grow with the slot; the
worst case's time grows with its number of blocks (slot / T_c).

With ``--rounds R`` it also times :meth:`cosim.engine.Engine.run_round` of
``scenarios/quickstart.toml`` (the analog scheme, the proposed method) without
``[mobility]`` and with ``mobility.model = "straight"`` at ``--speed-kmh``, interleaved
(static, moving, static, ...) after one warm-up round each, R rounds each: the issue asks
the moving round to take at most 1.5 times the static one. ``--within-phase`` lists the
``mobility.channel_within_phase`` values of the moving rounds (one moving engine each,
all interleaved with the static one; default ``phase_middle``), and ``--set KEY=VALUE``
(repeatable) changes the quickstart for every engine (another scheme, another algorithm).

Usage::

    .venv/bin/python benchmarks/mobility_slot.py                      # 3 and 120 km/h, slots 1, 4, 16 s
    .venv/bin/python benchmarks/mobility_slot.py --speed-kmh 120 --slots 130   # a quickstart 8-bit slot
    .venv/bin/python benchmarks/mobility_slot.py --slots '' --rounds 3   # the rounds only
    .venv/bin/python benchmarks/mobility_slot.py --slots '' --rounds 5 --within-phase phase_middle,per_symbol \
        --set 'uplink.scheme="one_bit"' --set 'algorithm.name="signsgd"'   # signSGD's one-bit round

The last line of stdout is one JSON object: per speed and slot length (``"<v>kmh/<s>s"``)
its ``blocks``, ``seconds``, ``peak_mib`` and ``lost`` at capacity and ``holding_seconds``,
``holding_peak_mib`` at a hundredth; with ``--rounds`` (at the first speed) the medians
``static_round_s``, ``moving_round_s`` and their ratio ``moving_over_static`` (the first
``--within-phase`` value's), and per value ``within_phase.<value>.moving_round_s`` and
``.moving_over_static``.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from dataclasses import replace

import numpy as np

from phy.moving_channel import straight
from phy.uplink.digital_ofdma import plan
from phy.uplink.moving_link import SlotChannel
from phy.uplink.slot_blocks import BlockRate, slot_holds

SYMBOL_S = (1024 + 72) / 30.72e6
"""The quickstart's OFDM symbol with its prefix, (F + C) / B [s]."""


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed-kmh", type=lambda s: [float(v) for v in s.split(",") if v], default=[3.0, 120.0])
    parser.add_argument("--slots", type=lambda s: [float(v) for v in s.split(",") if v], default=[1.0, 4.0, 16.0])
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--subcarriers", type=int, default=1024)
    parser.add_argument("--within-phase", type=lambda s: [v for v in s.split(",") if v], default=["phase_middle"])
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.rounds and not args.within_phase:
        parser.error("--within-phase: give at least one of phase_middle, per_symbol (with --rounds)")
    results = {}
    for speed_kmh in args.speed_kmh:
        results.update(slot_times(speed_kmh, args.slots, args.devices, args.subcarriers))
    if args.rounds:
        results.update(round_times(args.speed_kmh[0], args.rounds, args.within_phase, args.overrides))
    print(json.dumps(results))
    return results


def _timed(slot, schedule, rate) -> tuple[np.ndarray, float, float]:
    """``(holds, seconds, peak MiB)`` of one :func:`slot_holds`."""
    tracemalloc.start()
    started = time.perf_counter()
    holds = slot_holds(slot, rate, schedule.rate, schedule.transmits, schedule.decoded, schedule.symbols, SYMBOL_S)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return holds, elapsed, peak / 2 ** 20


def slot_times(speed_kmh: float, slots, devices: int, subcarriers: int) -> dict:
    """Per slot length: :func:`slot_holds` at capacity and at a hundredth (module docstring)."""
    rng = np.random.default_rng(58)
    radius = np.sqrt(rng.uniform(10.0 ** 2, 300.0 ** 2, devices))
    angle = rng.uniform(0, 2 * np.pi, devices)
    positions = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)
    moving = straight(speed_kmh / 3.6, 0.0, 3.5e9, 8, positions_m=positions, radius_m=300.0,
                      inner_m=10.0, num_subcarriers=subcarriers, flat=False, path_loss_exponent=4.0,
                      rng=rng)
    moving.start_round(0)
    h, _ = moving.at(0.0)
    slot = SlotChannel(moving, 0.0, np.arange(devices), moving.doppler_hz)
    base = plan(h, h, 1000, bits_per_value=8, allocation="equal", tx_power_w=0.1, noise_power_w=10 ** -10.4)
    rate = BlockRate(base.owner, 0.1, 10 ** -10.4, 1.0, tolerance=1e-9)
    results = {}
    for seconds in slots:  # every sender's slot set to this length
        symbols = np.full(devices, np.ceil(seconds / SYMBOL_S))
        schedule = replace(base, symbols=symbols, num_symbols=int(symbols.max()))
        holds, elapsed, peak = _timed(slot, schedule, rate)
        held, held_s, held_peak = _timed(slot, replace(schedule, rate=schedule.rate / 100.0), rate)
        blocks = int(np.ceil(seconds / (0.423 / float(np.max(moving.doppler_hz)))))
        results[f"{speed_kmh:g}kmh/{seconds:g}s"] = {
            "blocks": blocks, "seconds": round(elapsed, 3), "peak_mib": round(peak, 1), "lost": int(np.sum(~holds)),
            "holding_seconds": round(held_s, 3), "holding_peak_mib": round(held_peak, 1)}
        print(f"{speed_kmh:g} km/h, slot {seconds:g} s: {blocks} coherence blocks; at capacity {elapsed:.2f} s, "
              f"peak {peak:.1f} MiB, {int(np.sum(~holds))} of {devices} senders below their rate in some block; "
              f"at a hundredth {held_s:.2f} s, peak {held_peak:.1f} MiB, {int(np.sum(~held))} lost")
    return results


def round_times(speed_kmh: float, rounds: int, within_phase=("phase_middle",), overrides=()) -> dict:
    """The quickstart round (with ``overrides``) without and with straight-line motion, one
    moving engine per ``within_phase`` value, interleaved (module docstring)."""
    from cosim.engine import Engine
    from cosim.scenario import load_scenario, shipped_scenario_path

    path = shipped_scenario_path("quickstart")
    moving = [*overrides, 'mobility.model="straight"', f"mobility.speed_mps={speed_kmh / 3.6}"]
    engines = {"static": Engine(load_scenario(path, list(overrides)))}
    for value in within_phase:
        engines[value] = Engine(load_scenario(path, [*moving, f'mobility.channel_within_phase="{value}"']))
    states = {name: engine.initial_state() for name, engine in engines.items()}
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for t in range(rounds + 1):
        for name, engine in engines.items():
            started = time.perf_counter()
            states[name], _ = engine.run_round(t, states[name])
            if t:  # round 0 warms up
                seconds[name].append(time.perf_counter() - started)
    static = float(np.median(seconds["static"]))
    per_value = {}
    for value in within_phase:
        moving_s = float(np.median(seconds[value]))
        per_value[value] = {"moving_round_s": moving_s, "moving_over_static": moving_s / static}
        print(f"quickstart round{' ' + ' '.join(overrides) if overrides else ''}: static {static:.2f} s, "
              f"moving ({speed_kmh:g} km/h, {value}) {moving_s:.2f} s, ratio {moving_s / static:.3f} "
              f"(medians of {rounds}; static {seconds['static']}, moving {seconds[value]})")
    first = per_value[within_phase[0]]
    return {"static_round_s": static, **first, "within_phase": per_value}


if __name__ == "__main__":
    main()
