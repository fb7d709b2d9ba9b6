"""The epsilon the channel gives alone, projected without training (issue 43).

``privacy_for_free`` asks what privacy the receiver noise alone gives at the paper's MNIST
settings (K = 100, F = 1024, -74 dBm noise, the KKT control, 200 rounds, delta = 1e-5, no
target, no artificial noise). The accountant answers without a run
(:func:`cosim.privacy.project`: the worst device at the cell's closest distance, its
strongest subcarrier at the mean largest of F Rayleigh gains, its signal bounded by the
power budget). The study file's axes are coarse and its radius does not enter the
projection; this script walks the power budget every 5 dB for three closest distances
(``cell.min_distance_m``, which sets the worst device's path gain), prints the table and
draws it.

Usage::

    .venv/bin/python benchmarks/privacy_for_free.py \\
        --figure docs/figures/privacy_for_free_projected_epsilon.png
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from cosim.privacy import project
from cosim.scenario import load_scenario, scenario_num_params

POWERS_DBM = np.arange(-90.0, 20.1, 5.0)
MIN_DISTANCES_M = (10.0, 30.0, 100.0)


def projected(tx_power_dbm: float, min_distance_m: float, rounds: int) -> tuple[float, float]:
    """(epsilon after ``rounds`` rounds, the worst phase's noise multiplier) of paper_mnist."""
    scenario = load_scenario("paper_mnist", [
        "privacy.delta=1e-5", f"power.tx_power_dbm={tx_power_dbm}",
        f"cell.min_distance_m={min_distance_m}", f"rounds={rounds}"])
    result = project(scenario, scenario_num_params(scenario))
    return float(result.epsilon), min(result.noise_multipliers.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    curves = {}
    print(f"{'P (dBm)':>8} " + " ".join(f"{f'eps, {d:g} m':>14} {'z':>9}" for d in MIN_DISTANCES_M))
    for power in POWERS_DBM:
        row = [projected(power, distance, args.rounds) for distance in MIN_DISTANCES_M]
        for distance, (epsilon, _) in zip(MIN_DISTANCES_M, row, strict=True):
            curves.setdefault(distance, []).append(epsilon)
        print(f"{power:8.0f} " + " ".join(f"{e:14.4g} {z:9.3g}" for e, z in row))
    if args.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for distance, values in curves.items():
            ax.semilogy(POWERS_DBM, values, marker="o", markersize=3,
                        label=f"closest device at {distance:g} m")
        ax.axvline(20.0, color="grey", linestyle=":", linewidth=1)
        ax.text(19.0, ax.get_ylim()[0] * 3, "the paper's P", rotation=90, ha="right",
                va="bottom", fontsize=8, color="grey")
        ax.set_xlabel("transmit power budget P (dBm)")
        ax.set_ylabel(f"projected epsilon after {args.rounds} rounds")
        ax.set_title("The receiver noise alone (paper_mnist, delta = 1e-5, no target)",
                     fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=150)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
