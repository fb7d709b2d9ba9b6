"""Round 0's over-the-air error against the BS antennas, per combiner, paired by seed
(issue 31).

Reads the reports (``table.parquet``) of ``antennas_quickstart`` (N_r = 1-16, `centroid`
and `mrc_strongest`) and ``antennas_maxmin_quickstart`` (N_r = 2-16, `maxmin`). In round
0 every run starts from the same model with the same local-training seeds, so the devices
send the same updates and only the channel and the combiner differ: the change of
``aggregate_nmse_rho`` against the same seed's N_r = 1 run isolates what the antennas buy,
which the spread between seeds (their cells differ) hides. Prints, per combiner and N_r,
the mean round-0 NMSE with its 95 % half-width over seeds, the paired change in percent
with its 95 % half-width, and whether it falls at every step in every seed; draws both
as a figure.

Usage::

    cosim study run antennas_quickstart --out studies/antennas
    cosim study run antennas_maxmin_quickstart --out studies/antennas_maxmin
    cosim study report studies/antennas; cosim study report studies/antennas_maxmin
    .venv/bin/python benchmarks/antennas_round0.py studies/antennas studies/antennas_maxmin \\
        --figure docs/figures/antennas_round0_nmse_by_combiner.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

COMBINERS = {"centroid": "o", "maxmin": "s", "mrc_strongest": "^"}


def _half_width(values: np.ndarray) -> float:
    """The 95 % Student-t half-width of the mean of ``values`` (0 for a constant)."""
    values = np.asarray(values, dtype=float)
    if values.size < 2 or values.std() == 0:
        return 0.0
    return float(stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size))


def round0_table(closed_form: Path, maxmin: Path) -> pd.DataFrame:
    """Round 0's ``aggregate_nmse_rho``: columns seed, combiner, num_antennas, nmse (the
    N_r = 1 runs, which have no combiner, listed under every combiner)."""
    first = pd.read_parquet(closed_form / "table.parquet")
    second = pd.read_parquet(maxmin / "table.parquet")
    second["bs.combiner"] = "maxmin"
    rows = pd.concat([first, second], ignore_index=True)
    rows = rows[rows["round"] == 0].rename(columns={"bs.combiner": "combiner",
                                                   "bs.num_antennas": "num_antennas",
                                                   "aggregate_nmse_rho": "nmse"})
    single = rows[rows["num_antennas"] == 1].drop_duplicates("seed")
    pieces = [rows[rows["num_antennas"] > 1]]
    pieces += [single.assign(combiner=name) for name in COMBINERS]
    return pd.concat(pieces)[["seed", "combiner", "num_antennas", "nmse"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("antennas", type=Path, help="the --out of antennas_quickstart")
    parser.add_argument("maxmin", type=Path, help="the --out of antennas_maxmin_quickstart")
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    table = round0_table(args.antennas, args.maxmin)
    base = table[table["num_antennas"] == 1].drop_duplicates("seed").set_index("seed")["nmse"]
    results = {}
    for combiner in COMBINERS:
        rows = table[table["combiner"] == combiner].pivot(index="seed", columns="num_antennas",
                                                          values="nmse")
        falls = bool(np.all(np.diff(rows.to_numpy(), axis=1) < 0))
        print(f"{combiner}: falls at every step in every seed: {falls}")
        results[combiner] = []
        for n in rows.columns:
            change = (rows[n] / base - 1.0) * 100.0
            results[combiner].append((n, rows[n].mean(), _half_width(rows[n]), change.mean(),
                                      _half_width(change)))
            print(f"  N_r = {n:2d}: NMSE {rows[n].mean():.3f} ± {_half_width(rows[n]):.2f}; "
                  f"against N_r = 1 {change.mean():+.2f} % ± {_half_width(change):.2f}")
    if args.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
        for combiner, marker in COMBINERS.items():
            n, mean, half, change, change_half = map(np.array, zip(*results[combiner], strict=True))
            (line,) = left.plot(n, mean, marker=marker, label=combiner)
            left.fill_between(n, mean - half, mean + half, alpha=0.15, color=line.get_color(), lw=0)
            right.errorbar(n, change, yerr=change_half, marker=marker, color=line.get_color(),
                           capsize=3, label=combiner)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks([1, 2, 4, 8, 16], labels=["1", "2", "4", "8", "16"])
            ax.set_xlabel("BS antennas N_r")
            ax.grid(alpha=0.3)
        left.set_ylabel("round-0 NMSE, phase rho")
        left.set_title("mean over seeds, 95 % CI")
        right.set_ylabel("change against N_r = 1, same seed (%)")
        right.set_title("paired by seed, 95 % CI")
        right.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=150)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
