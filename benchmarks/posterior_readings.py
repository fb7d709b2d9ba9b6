"""Issue 16's evidence: the readings of phase 1's parameter against FedAvg and FedSMOO.

Runs (with ``--run``) or only reports the traces of the paper's MNIST set-up
(``scenarios/paper_mnist.toml``: K = 100, d = 466,698, Table II: eta = 0.1, E = 3, M = 5;
the mean NLL, which the file now sets) with the local reparameterization estimator, evaluated every 25 rounds::

    python benchmarks/posterior_readings.py --run --out runs/issue16-mean --seeds 1 2 3 --rounds 100 \
        --configs softplus_std log_std precision fedavg fedsmoo --set 'algorithm.nll_reduction="mean"'
    python benchmarks/posterior_readings.py --out runs/issue16-mean --figure docs/figures/posterior_readings.png

(what docs/reproduction.md reports: about 100 minutes here).

The report prints one row per configuration: test accuracy after 25, 50 and 100 rounds
(mean and spread over the seeds found) and the last ECE, then the posterior's movement
(mean ``precision_rel_change`` and the last ``posterior_std_p50``), and draws
``precision_rel_change`` and ``posterior_std_p50`` against rounds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

CONFIGS = ("softplus_std", "log_std", "log_precision", "precision", "fedavg", "fedsmoo")
ROOT = Path(__file__).resolve().parent.parent


def run(config: str, seed: int, rounds: int, out: Path, proposed_settings=()) -> int:
    """One ``cosim run`` of ``config`` (a covariance reading or a baseline's name);
    ``proposed_settings`` (``--set`` strings) apply to the proposed method's runs only."""
    baseline = config in ("fedavg", "fedsmoo")
    setting = f'algorithm.name="{config}"' if baseline else f'algorithm.covariance_parameter="{config}"'
    extra = [] if baseline else [a for s in proposed_settings for a in ("--set", s)]
    command = [
        sys.executable, "-m", "cosim.cli", "run", str(ROOT / "scenarios/paper_mnist.toml"),
        "--set", f"rounds={rounds}", "--set", "eval.every=25", "--set", f"seed={seed}",
        "--set", 'algorithm.estimator="local_reparameterization"', "--set", setting,
        "--set", f'trace.path="{out}/{config}-seed{{seed}}.h5"', *extra, "--resume",
    ]
    return subprocess.call(command)


def at_round(values: np.ndarray, rounds: int) -> float:
    """The value after ``rounds`` rounds (row ``rounds - 1``), NaN when not there."""
    return float(values[rounds - 1]) if values.shape[0] >= rounds else float("nan")


def report(out: Path, figure: Path | None) -> None:
    rows = []
    curves = {}
    for config in CONFIGS:
        traces = sorted(out.glob(f"{config}-seed*.h5"))
        if not traces:
            continue
        acc = {25: [], 50: [], 100: []}
        ece, moved, std50, spread, seeds = [], [], [], [], []
        for path in traces:
            with h5py.File(path, "r") as f:
                done = int(f.attrs["completed_rounds"])  # rows past it are not committed
                r = {name: f["rounds"][name][:done] for name in f["rounds"]
                     if not isinstance(f["rounds"][name], h5py.Group)}
            seeds.append(path.stem.split("seed")[-1] + f"({r['round'].shape[0]})")
            for k in acc:
                acc[k].append(at_round(r["test_accuracy"], k))
            finite = np.isfinite(r["ece"])
            ece.append(float(r["ece"][finite][-1]) if finite.any() else float("nan"))
            if "precision_rel_change" in r:
                moved.append(float(np.mean(r["precision_rel_change"])))
                std50.append(float(r["posterior_std_p50"][-1]))
                spread.append(float(r["posterior_std_p95"][-1] - r["posterior_std_p05"][-1]))
                curves.setdefault(config, []).append((r["precision_rel_change"], r["posterior_std_p50"]))
        cells = []
        for k in (25, 50, 100):
            values = np.asarray(acc[k])
            values = values[np.isfinite(values)]
            cells.append(f"{values.mean():.3f} ± {values.std():.3f} (n={values.size})" if values.size else "-")
        rows.append((config, " ".join(seeds), *cells, f"{np.nanmean(ece):.3f}",
                     f"{np.mean(moved):.2e}" if moved else "-", f"{np.mean(std50):.6f}" if std50 else "-",
                     f"{np.mean(spread):.2e}" if spread else "-"))
    header = ("configuration", "seeds(rounds)", "acc@25", "acc@50", "acc@100", "last ECE",
              "mean rel. change of rho / round", "sigma p50 at end", "sigma p95 - p05 at end")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if figure is not None and curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=150)
        for i, (config, runs) in enumerate(curves.items()):
            for j, (change, std) in enumerate(runs):
                label = config if j == 0 else None
                rounds = np.arange(1, change.size + 1)
                left.semilogy(rounds, np.maximum(change, 1e-16), color=f"C{i}", lw=1, label=label)
                right.plot(rounds, std, color=f"C{i}", lw=1, label=label)
        left.set(xlabel="round", ylabel="precision_rel_change", title="relative change of rho per round")
        right.set(xlabel="round", ylabel="posterior_std_p50", title="median posterior std")
        right.ticklabel_format(axis="y", useOffset=False)
        left.legend(fontsize=7)
        fig.tight_layout()
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure)
        print(f"figure: {figure}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/issue16"))
    parser.add_argument("--run", action="store_true", help="run the missing rounds first (resumes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--figure", type=Path, default=None)
    parser.add_argument("--set", dest="proposed_settings", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a --set for the proposed method's runs only (e.g. "
                             "'algorithm.nll_reduction=\"mean\"'); repeatable")
    args = parser.parse_args()
    if args.run:
        args.out.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            for config in args.configs:
                run(config, seed, args.rounds, args.out, args.proposed_settings)
    report(args.out, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
