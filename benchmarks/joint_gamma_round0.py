"""Round 0's phase-rho error against the BS antennas, fixed gamma against joint gamma
(issue 42 item 7), paired by seed.

In round 0 every run of a seed starts from the same model with the same local-training
seeds, so the devices send the same rho updates whatever ``bs.num_antennas`` and
``power.gamma``: this trains round 0 once per seed (the scenario's own engine), keeps the
rho phase's updates and weights, and sends them through the run's own uplink block for
each N_r, combiner and gamma (``Uplink.round(0)`` draws the channel, the combiner and the
noise from the same streams a ``cosim run`` with those keys would: the NMSE is the trace's
``aggregate_nmse_rho`` of round 0). Prints one CSV row per (seed, N_r, combiner, gamma)
and a table of the means with the joint/fixed and N_r / N_r = 1 ratios, paired by seed.

Usage::

    .venv/bin/python benchmarks/joint_gamma_round0.py --seeds 1 2 3 --antennas 1 2 4 8 16 \\
        --out runs/joint_gamma_round0.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from pathlib import Path

import numpy as np


def measure(seed: int, antennas, combiners, scenario: str = "quickstart"):
    """Rows ``dict(seed, num_antennas, combiner, gamma, nmse_rho, gamma_w_rho,
    distortion_rho, noise_power_rho)`` of one seed's round 0."""
    from cosim.engine import Engine
    from cosim.scenario import load_scenario
    from phy.combiner import ReceiveCombiner

    engine = Engine(load_scenario(scenario, {"seed": seed, "rounds": 1}))
    uplink = engine.uplink
    caught = {}
    send = uplink.scheme.send

    def keep(link, air, *, phase, seed, keep_signals, per_device):
        caught.setdefault(phase, (link.updates, link.weights))
        return send(link, air, phase=phase, seed=seed, keep_signals=keep_signals, per_device=per_device)

    uplink.scheme.send = keep
    engine.run_round(0, engine.initial_state())
    uplink.scheme.send = send
    updates, weights = caught["rho"]
    rows = []
    for n in antennas:
        for combiner in (combiners if n > 1 else combiners[:1]):
            uplink.air = dataclasses.replace(uplink.air, num_antennas=n, combiner=ReceiveCombiner(combiner))
            link = uplink.round(0)  # the channel and the combiner, once for both gammas
            for joint in (False, True):
                uplink.scheme.joint_gamma = joint
                scalars = link.send("rho", updates, weights).columns().scalars
                rows.append({"seed": seed, "num_antennas": n,
                             "combiner": combiner if n > 1 else "-",
                             "gamma": "joint" if joint else "noise_power",
                             "nmse_rho": scalars["aggregate_nmse_rho"],
                             "gamma_w_rho": scalars.get("gamma_w_rho", uplink.scheme.gamma_w),
                             "distortion_rho": scalars["distortion_rho"],
                             "noise_power_rho": scalars["noise_power_rho"]})
                print(",".join(str(v) for v in rows[-1].values()), flush=True)
    return rows


def summarise(rows) -> None:
    """Means over the seeds and the paired ratios (joint / fixed at each N_r; each gamma's
    N_r / N_r = 1), with their min and max over the seeds."""
    table = {(int(r["seed"]), int(r["num_antennas"]), r["combiner"], r["gamma"]): float(r["nmse_rho"])
             for r in rows}
    seeds = sorted({key[0] for key in table})
    single = {s: {g: table[(s, 1, "-", g)] for g in ("noise_power", "joint")} for s in seeds}
    print("N_r | combiner | NMSE fixed | NMSE joint | joint / fixed | fixed: / N_r=1 | joint: / N_r=1")
    for n, combiner in sorted({(k[1], k[2]) for k in table}):
        fixed = np.array([table[(s, n, combiner, "noise_power")] for s in seeds])
        joint = np.array([table[(s, n, combiner, "joint")] for s in seeds])
        base_f = np.array([single[s]["noise_power"] for s in seeds])
        base_j = np.array([single[s]["joint"] for s in seeds])

        def spread(x):
            return f"{x.mean():.3f} [{x.min():.3f}, {x.max():.3f}]"

        print(f"{n} | {combiner} | {fixed.mean():.3f} | {joint.mean():.3f} | {spread(joint / fixed)}"
              f" | {spread(fixed / base_f)} | {spread(joint / base_j)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--antennas", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--combiners", nargs="+", default=["centroid"])
    parser.add_argument("--out", type=Path, default=None, help="CSV of every row (appended)")
    parser.add_argument("--summarise", type=Path, default=None,
                        help="only print the table of an existing CSV")
    args = parser.parse_args()
    if args.summarise is not None:
        with args.summarise.open() as f:
            summarise(list(csv.DictReader(f)))
        return
    rows = []
    for seed in args.seeds:
        new = measure(seed, args.antennas, args.combiners)
        rows += new
        if args.out is not None:
            exists = args.out.exists()
            with args.out.open("a", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(new[0]))
                if not exists:
                    writer.writeheader()
                writer.writerows(new)
    summarise([{k: str(v) for k, v in r.items()} for r in rows])


if __name__ == "__main__":
    main()
