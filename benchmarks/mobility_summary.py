"""The air-side facts of a finished ``mobility_quickstart`` study, per scheme and speed,
over its seeds (docs/schemes.md, "Devices that move"): the final test accuracy (mean and
range over seeds; a diverged run counts at its last evaluation), the runs that diverged,
the median aging correlation between the estimate and the channel (at the phase's middle;
at the slot's middle for digital OFDMA), the estimate's median NMSE (``aggregate_nmse_<phase>``),
the vote error rate (one-bit), the fraction of senders decoded (digital), and the uplink
seconds and device joules per round. Runs done or stopped as diverged (``status.json``)
only.

    python benchmarks/mobility_summary.py STUDY_OUT_DIR   # the --out of `cosim study run`
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from cosim.trace import read_trace

_NAME = re.compile(r"uplink\.scheme=(?P<scheme>[a-z_]+),mobility\.speed_mps=(?P<speed>[0-9.]+)-seed(?P<seed>\d+)")
_KMH = {0.0: "0 (block fading)", 0.8333: "3", 8.333: "30", 33.33: "120"}


def _median_of(rounds: dict, per_device: dict, prefix: str, *, devices: bool) -> float:
    """The median over rounds (and devices) of every column named ``prefix<phase>``."""
    source = per_device if devices else rounds
    values = [np.ravel(v) for k, v in source.items() if k.startswith(prefix)]
    values = np.concatenate(values) if values else np.array([np.nan])
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else float("nan")


def run_facts(path: Path) -> dict[str, float]:
    """One run's facts (module docstring)."""
    trace = read_trace(path)
    rounds, per_device = trace.rounds, trace.series.get("per_device", {})
    accuracy = rounds["test_accuracy"][np.isfinite(rounds["test_accuracy"])]
    outage = [v for k, v in rounds.items() if k.startswith("outage_devices_")]
    senders = trace.devices["num_samples"].shape[0]
    return {
        "accuracy": float(accuracy[-1]),
        "rounds": trace.completed_rounds,
        "aging": _median_of(rounds, per_device, "aging_correlation_", devices=True),
        "nmse": _median_of(rounds, per_device, "aggregate_nmse_", devices=False),
        "vote_error": _median_of(rounds, per_device, "vote_error_rate_", devices=False),
        "decoded": (float(1.0 - np.mean(np.concatenate(outage)) / senders) if outage else float("nan")),
        "seconds": float(np.mean(rounds["uplink_seconds"])),
        "joules": float(np.mean(rounds["uplink_energy_j"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the study's --out directory")
    args = parser.parse_args()
    status = json.loads((args.out / "status.json").read_text())["runs"]
    groups: dict[tuple[str, float], list[dict]] = defaultdict(list)
    for path in sorted((args.out / "runs").glob("*.h5")):
        match = _NAME.fullmatch(path.stem)
        state = status.get(path.stem, {})
        if match and (state.get("state") == "done" or str(state.get("error")).startswith("diverged")):
            facts = run_facts(path) | {"diverged": state.get("state") != "done"}
            groups[(match["scheme"], float(match["speed"]))].append(facts)
    print("| scheme | km/h | final accuracy, mean [min, max] | runs diverged | aging correlation | "
          "estimate NMSE | vote error (one-bit) | senders decoded (digital) | uplink s / round | uplink J / round |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (scheme, speed), runs in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1])):
        acc = np.array([r["accuracy"] for r in runs])
        diverged = sum(r["diverged"] for r in runs)
        med = {key: np.nanmedian([r[key] for r in runs]) if any(np.isfinite(r[key]) for r in runs) else np.nan
               for key in ("aging", "nmse", "vote_error", "decoded", "seconds", "joules")}
        cells = [f"{v:.3g}" if np.isfinite(v) else "-" for v in med.values()]
        print(f"| {scheme} | {_KMH.get(speed, speed)} | {acc.mean():.3f} [{acc.min():.3f}, {acc.max():.3f}] "
              f"(n = {len(runs)}) | {diverged} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
