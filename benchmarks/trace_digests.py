"""SHA-1 of every dataset of the traces of a fixed set of short runs, to hold a refactoring
to bit-identical traces.

Each run is a shipped scenario with ``--set`` overrides (a few rounds, seconds each on two
cores) that takes one path through the round: the quickstart (the proposed method, KKT
power control), FedAvg, the time-domain uplink with timing offsets and CFO, a
multi-antenna BS (frequency and time domain), partial participation (scheduling,
dropouts, stragglers that take fewer steps), truncated channel inversion with imperfect
CSI, the error-free aggregation, raw signals kept (the reference chain), and the
two-phase baselines SCAFFOLD and FedSMOO and FedGMT-v2, the other uplink schemes
(digital OFDMA, one-bit and non-coherent majority votes with signSGD), the joint receiver
scaling, the privacy columns and SCAFFOLD with dropouts.

Every dataset of a trace is hashed (its dtype, shape and bytes), except ``/rounds/wall_s``
and ``/rounds/cpu_s`` (the round's wall and CPU time); of the root attributes only ``started_at`` (a clock time),
``resume_count`` and the ``version_*`` package versions are left out (``docs/trace.md``),
and the trace's directory is replaced by ``<out>`` in the ``scenario`` attribute.

Usage (one Numba thread: see benchmarks/README.md for what differs between two passes
of the same tree otherwise)::

    export NUMBA_NUM_THREADS=1
    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/trace_digests.py --write digests.json
    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/trace_digests.py --check digests.json
    python benchmarks/trace_digests.py --only fedavg,time_domain --check digests.json

``--check`` prints every run and dataset whose digest differs (or is missing on one side)
and exits 1 when any does, 0 when all are equal. Run it with a fresh ``NUMBA_CACHE_DIR``
when a kernel's callee module changed (``docs/faults.md``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

QUICK = ["rounds=3", "eval.every=3"]
SMALL = ["cell.num_devices=30", "rounds=3", "eval.every=3"]
TIME_DOMAIN = ['ofdm.domain="time"', "channel.num_taps=16", "sync.timing_offset_max_samples=48.0",
               "sync.cfo_max_subcarriers=0.05"]

RUNS: dict[str, list[str]] = {
    "quickstart": ["rounds=6", "eval.every=3"],
    "fedavg": [*QUICK, 'algorithm.name="fedavg"', 'algorithm.nll_reduction="mean"',
               "algorithm.learning_rate=0.1"],
    "time_domain": [*QUICK, *TIME_DOMAIN],
    "time_domain_fedavg_tci": [*SMALL, *TIME_DOMAIN, 'algorithm.name="fedavg"',
                               'power.control="truncated_inversion"', 'sync.precompensate="timing"'],
    "antennas": [*QUICK, "bs.num_antennas=4"],
    "antennas_time_mrc": [*SMALL, *TIME_DOMAIN, "bs.num_antennas=2", 'bs.combiner="mrc_strongest"'],
    "participation": [*QUICK, "participation.fraction=0.3", 'participation.scheduling="best_channel"',
                      "participation.dropout_probability=0.2", "participation.bs_knows_dropouts=false"],
    "stragglers": [*SMALL, "participation.deadline_s=1.0", "participation.step_time_min_s=0.1",
                   "participation.step_time_extra_mean_s=0.2", 'participation.straggler_policy="fewer_steps"',
                   "participation.dropout_probability=0.1"],
    "tci_gaussian_csi": [*SMALL, 'power.control="truncated_inversion"', 'csi.model="gaussian"',
                         "csi.nmse_db=-10.0", 'channel.model="tdl"', 'channel.tdl_profile="A"'],
    "ideal": [*SMALL, 'power.control="ideal"', 'algorithm.name="fedprox"'],
    "full_inversion": [*SMALL, 'power.control="full_inversion"', 'algorithm.name="fedavg"'],
    "signals": [*SMALL, "trace.signals=true", "trace.signal_rounds=[1]"],
    "signals_time": [*SMALL, *TIME_DOMAIN, "trace.signals=true", "trace.signal_rounds=[0]",
                     'algorithm.name="fedavg"'],
    "scaffold": [*SMALL, 'algorithm.name="scaffold"'],
    "fedsmoo": [*SMALL, 'algorithm.name="fedsmoo"'],
    "fedgmt": [*SMALL, 'algorithm.name="fedgmt"'],
    "digital_ofdma": [*SMALL, 'uplink.scheme="digital_ofdma"', "uplink.bits_per_value=4",
                      'algorithm.name="fedavg"'],
    "one_bit_signsgd": [*SMALL, 'uplink.scheme="one_bit"', 'uplink.one_bit_modulation="qpsk"',
                        'algorithm.name="signsgd"', "algorithm.signsgd.error_feedback=true"],
    "noncoherent_mv": [*SMALL, 'uplink.scheme="noncoherent_mv"', 'algorithm.name="signsgd"'],
    "joint_gamma": [*QUICK, "bs.num_antennas=4", 'power.gamma="joint"'],
    "privacy": [*SMALL, "power.tx_power_dbm=-40", "privacy.delta=1e-5"],
    "scaffold_dropouts": [*SMALL, 'algorithm.name="scaffold"', "participation.dropout_probability=0.2",
                          "participation.bs_knows_dropouts=false"],
}
"""Run name -> ``--set`` overrides of the shipped ``quickstart`` scenario."""

SKIPPED_DATASETS = {"rounds/wall_s", "rounds/cpu_s"}
"""The timings (``cosim.trace.TIMING_COLUMNS``), spelled out: an older tree has no such name."""
SKIPPED_ATTRS = {"started_at", "resume_count"}


def _sha1(array: np.ndarray) -> str:
    digest = hashlib.sha1()
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def trace_digests(path: Path) -> dict[str, str]:
    """``{dataset name or @attribute: SHA-1}`` of one trace file (the directory it lies in
    is replaced by ``<out>`` in the attributes: the scenario names its trace path)."""
    out: dict[str, str] = {}
    with h5py.File(path, "r") as file:
        for key, value in file.attrs.items():
            if key not in SKIPPED_ATTRS and not key.startswith("version_"):
                text = repr(value).replace(path.parent.as_posix(), "<out>")
                out[f"@{key}"] = hashlib.sha1(text.encode()).hexdigest()

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name not in SKIPPED_DATASETS:
                out[name] = _sha1(obj[()] if obj.shape != () else np.asarray(obj[()]))
            if isinstance(obj, h5py.Group):
                for key, value in obj.attrs.items():
                    out[f"{name}@{key}"] = hashlib.sha1(repr(value).encode()).hexdigest()

        file.visititems(visit)
    return out


def run_all(names: list[str], out_dir: Path) -> dict[str, dict[str, str]]:
    from cosim.run import run_scenario
    from cosim.scenario import load_scenario

    result = {}
    for name in names:
        started = time.perf_counter()
        trace = out_dir / f"{name}.h5"
        scenario = load_scenario("quickstart", [*RUNS[name], f'trace.path="{trace.as_posix()}"'])
        run_scenario(scenario, progress=False)
        result[name] = trace_digests(trace)
        print(f"{name}: {len(result[name])} digests, {time.perf_counter() - started:.1f} s", flush=True)
    return result


def compare(saved: dict, now: dict) -> list[str]:
    """Lines naming every difference between two digest files (empty when equal)."""
    lines = []
    for run in sorted(set(saved) | set(now)):
        if run not in saved or run not in now:
            lines.append(f"{run}: only in {'the saved file' if run in saved else 'this run'}")
            continue
        a, b = saved[run], now[run]
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                lines.append(f"{run}: {key}: {a.get(key)} -> {b.get(key)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="save the digests to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with this saved JSON file")
    parser.add_argument("--only", help="comma-separated run names (default: all)")
    parser.add_argument("--keep", type=Path, help="write the traces here (default: a temporary directory)")
    args = parser.parse_args(argv)
    names = list(RUNS) if not args.only else args.only.split(",")
    unknown = [name for name in names if name not in RUNS]
    if unknown:
        print(f"--only: unknown run(s) {', '.join(unknown)}; known: {', '.join(RUNS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        digests = run_all(names, out_dir)
    if args.write:
        args.write.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}")
    if args.check:
        saved = json.loads(args.check.read_text())
        if args.only:
            saved = {name: saved[name] for name in names if name in saved}
        lines = compare(saved, digests)
        for line in lines:
            print(line)
        total = sum(len(v) for v in digests.values())
        print(f"{'DIFFERENT' if lines else 'EQUAL'}: {len(digests)} runs, {total} digests, "
              f"{len(lines)} differences")
        return 1 if lines else 0
    if not args.write:
        print(json.dumps(digests, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
