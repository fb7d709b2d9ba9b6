"""Devices that move (issue 58): the digital slot's memory against its length, and the analog round's time.

:func:`phy.uplink.digital_ofdma.slot_capacity` evaluates each sender's channel once per
coherence block of its slot, a chunk of blocks at a time. This times it and takes its
peak of Python-allocated memory (``tracemalloc``, which sees NumPy's buffers) at the
quickstart's size (K = 100 senders, F = 1024 subcarriers, equal allocation, 8
sinusoids per process, 3.5 GHz) for slots of growing length at one speed: the peak must
not grow with the slot, the time grows with its number of blocks (slot / T_c).

With ``--rounds R`` it also times :meth:`cosim.engine.Engine.run_round` of
``scenarios/quickstart.toml`` (the analog scheme, the proposed method) without
``[mobility]`` and with ``mobility.model = "straight"`` at ``--speed-kmh``, interleaved
(static, moving, static, ...) after one warm-up round each, R rounds each: the issue asks
the moving round to take at most 1.5 times the static one.

Usage::

    .venv/bin/python benchmarks/mobility_slot.py                      # 3 km/h, slots 1, 4, 16 s
    .venv/bin/python benchmarks/mobility_slot.py --speed-kmh 30 --slots 0.5,2
    .venv/bin/python benchmarks/mobility_slot.py --slots '' --rounds 3   # the rounds only

The last line of stdout is one JSON object: per slot length its ``blocks``, ``seconds``
and ``peak_mib``; with ``--rounds`` the medians ``static_round_s``, ``moving_round_s`` and
their ratio.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from dataclasses import replace

import numpy as np

from phy.moving_channel import straight
from phy.uplink.digital_ofdma import plan, slot_capacity
from phy.uplink.moving_link import SlotChannel

SYMBOL_S = (1024 + 72) / 30.72e6
"""The quickstart's OFDM symbol with its prefix, (F + C) / B [s]."""


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed-kmh", type=float, default=3.0)
    parser.add_argument("--slots", type=lambda s: [float(v) for v in s.split(",") if v], default=[1.0, 4.0, 16.0])
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--subcarriers", type=int, default=1024)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(58)
    radius = np.sqrt(rng.uniform(10.0 ** 2, 300.0 ** 2, args.devices))
    angle = rng.uniform(0, 2 * np.pi, args.devices)
    positions = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)
    moving = straight(args.speed_kmh / 3.6, 0.0, 3.5e9, 8, positions_m=positions, radius_m=300.0,
                      inner_m=10.0, num_subcarriers=args.subcarriers, flat=False, path_loss_exponent=4.0,
                      rng=rng)
    moving.start_round(0)
    h, _ = moving.at(0.0)
    slot = SlotChannel(moving, 0.0, np.arange(args.devices), moving.doppler_hz)
    base = plan(h, h, 1000, bits_per_value=8, allocation="equal", tx_power_w=0.1, noise_power_w=10 ** -10.4)
    results = {}
    for seconds in args.slots:  # every sender's slot set to this length
        symbols = np.full(args.devices, np.ceil(seconds / SYMBOL_S))
        schedule = replace(base, symbols=symbols, num_symbols=int(symbols.max()))
        tracemalloc.start()
        started = time.perf_counter()
        lowest = slot_capacity(slot, schedule, tx_power_w=0.1, noise_power_w=10 ** -10.4, symbol_duration_s=SYMBOL_S,
                               rate_model="shannon", gap=1.0, target_bler=0.1, num_sinusoids=8)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        blocks = int(np.ceil(seconds / (0.423 / float(np.max(moving.doppler_hz)))))
        results[f"{seconds:g}"] = {"blocks": blocks, "seconds": round(elapsed, 3),
                                   "peak_mib": round(peak / 2 ** 20, 1),
                                   "lost": int(np.sum(schedule.rate > lowest))}
        print(f"slot {seconds:g} s: {blocks} coherence blocks, {elapsed:.2f} s, peak {peak / 2 ** 20:.1f} MiB, "
              f"{results[f'{seconds:g}']['lost']} of {args.devices} senders below their rate in some block")
    if args.rounds:
        results.update(round_times(args.speed_kmh, args.rounds))
    print(json.dumps(results))
    return results


def round_times(speed_kmh: float, rounds: int) -> dict:
    """The quickstart round without and with straight-line motion, interleaved (module docstring)."""
    from cosim.engine import Engine
    from cosim.scenario import load_scenario, shipped_scenario_path

    path = shipped_scenario_path("quickstart")
    engines = {"static": Engine(load_scenario(path)),
               "moving": Engine(load_scenario(path, ['mobility.model="straight"',
                                                     f"mobility.speed_mps={speed_kmh / 3.6}"]))}
    states = {name: engine.initial_state() for name, engine in engines.items()}
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for t in range(rounds + 1):
        for name, engine in engines.items():
            started = time.perf_counter()
            states[name], _ = engine.run_round(t, states[name])
            if t:  # round 0 warms up
                seconds[name].append(time.perf_counter() - started)
    static, moving = (float(np.median(seconds[name])) for name in ("static", "moving"))
    print(f"quickstart round: static {static:.2f} s, moving ({speed_kmh:g} km/h) {moving:.2f} s, "
          f"ratio {moving / static:.3f} (medians of {rounds}; {seconds})")
    return {"static_round_s": static, "moving_round_s": moving, "moving_over_static": moving / static}


if __name__ == "__main__":
    main()
