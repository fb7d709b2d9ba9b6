"""How far a drop's traced paths hold as its devices walk: the measurement behind
``channel.retrace_every_m``.

Devices of a ray-traced scenario's drop (its ``[cell]`` layout and ``[channel]`` place,
the layout's draw from ``--layout-seed``) each walk straight at a random heading; every
``--step-m`` metres up to ``--steps`` steps the scene is traced at the device's position
(one solver call for every position), and at each distance this prints, over the devices:

* the share of positions with no path (inside a building, or shadowed beyond
  ``channel.max_depth``: the motion knows no buildings);
* the path gain's change from the drop [dB], median and 90th percentile, over the devices
  with a path at both points;
* the frequency-shape correlation ``|<H_local, H_traced>| / (|H_local| |H_traced|)`` over
  the scenario's subcarriers, ``H_local`` the drop's paths turned by the displacement (the
  local-area model of ``phy/moving_rays.py``), median and 10th percentile.

Usage: ``python benchmarks/traced_walk.py [--scenario munich_quickstart] [--devices 40]
[--step-m 2] [--steps 20] [--layout-seed 7] [--cache-dir DIR]``. Prints the tracing time
and one JSON object (``by_distance_m``).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from cosim.scenario import load_scenario
from phy.moving_rays import TracedPathFading
from phy.parameters import CELL_LAYOUTS
from phy.ray_tracing import RayTracedPlace


def _shape_correlation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[K]``: ``|sum_f a_f conj(b_f)| / (|a| |b|)`` per row of ``a``, ``b`` [K, F]."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.abs(np.sum(np.conj(a) * b, axis=1)) / np.where(norms > 0, norms, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="munich_quickstart")
    parser.add_argument("--devices", type=int, default=40)
    parser.add_argument("--step-m", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layout-seed", type=int, default=7)
    parser.add_argument("--cache-dir", default=None, help="the traced paths' cache (default: the scenario's)")
    args = parser.parse_args()

    overrides = [f"cell.num_devices={args.devices}"]
    if args.cache_dir is not None:
        overrides.append(f'channel.cache_dir="{args.cache_dir}"')
    scenario = load_scenario(args.scenario, overrides=overrides)
    parameters = scenario.channel.variant_parameters()
    place = RayTracedPlace(parameters, 1, arrivals=True)
    rng = np.random.default_rng(args.layout_seed)
    deployment = CELL_LAYOUTS[scenario.cell.layout].build(scenario.cell.variant_values(), rng=rng, place=place)
    drop = np.asarray(deployment.positions_m, np.float64)
    heading = rng.uniform(0.0, 2.0 * np.pi, drop.shape[0])
    direction = np.stack([np.cos(heading), np.sin(heading)], 1)
    distances = args.step_m * np.arange(1, args.steps + 1)
    walk = drop[:, None, :] + distances[None, :, None] * direction[:, None, :]  # [K, S, 2]
    started = time.perf_counter()
    traced = place.paths(walk.reshape(-1, 2))
    seconds = time.perf_counter() - started
    spacing = scenario.ofdm.subcarrier_spacing_hz
    frequencies = (np.arange(scenario.ofdm.num_subcarriers) - scenario.ofdm.num_subcarriers // 2) * spacing
    carrier = float(parameters.carrier_frequency_hz)
    local, fresh = TracedPathFading(place.paths(drop), frequencies, carrier), TracedPathFading(traced, frequencies, carrier)
    results = {}
    for step, distance in enumerate(distances):
        rows = np.arange(drop.shape[0]) * args.steps + step
        found = traced.has_path[rows]
        turned = local.at(distance * direction)[:, 0, :]
        there = fresh.at(np.zeros((rows.size, 2)), rows)[:, 0, :]
        with np.errstate(divide="ignore"):
            change_db = np.abs(10.0 * np.log10(fresh.path_gain[rows][found] / local.path_gain[found]))
        correlation = _shape_correlation(turned, there)[found]
        results[f"{distance:g}"] = {
            "no_path_fraction": round(float(1.0 - found.mean()), 4),
            "gain_change_db_median": round(float(np.median(change_db)), 3),
            "gain_change_db_p90": round(float(np.percentile(change_db, 90)), 3),
            "shape_correlation_median": round(float(np.median(correlation)), 3),
            "shape_correlation_p10": round(float(np.percentile(correlation, 10)), 3)}
    print(f"traced {walk.shape[0] * walk.shape[1]} positions in {seconds:.1f} s")
    print(json.dumps({"scenario": args.scenario, "devices": drop.shape[0], "step_m": args.step_m,
                      "trace_seconds": round(seconds, 1), "by_distance_m": results}))


if __name__ == "__main__":
    main()
