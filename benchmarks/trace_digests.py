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

``--guard`` takes the runs of :data:`GUARD_RUNS` instead, tiny ones (two rounds, a few
devices, a small model) that cover the chain in seconds: the baseline of the suite's
``tests/test_trace_bits.py``, ``tests/data/trace_bits.json``, rewritten on purpose with::

    python benchmarks/trace_digests.py --guard --write tests/data/trace_bits.json

A file written by ``--write`` holds, beside the digests, the machine and packages it was
written on (:func:`platform`) and compact values of every numeric dataset (all of them up
to 16 numbers, else their count, sum, sum of magnitudes, minimum and maximum; and a
checkpoint's totals). ``--check``
compares digests, bit for bit, when the machine is the same (the LLVM host CPU, its
features and the numerical packages' versions); on another one it says so and compares
the values at a relative tolerance of :data:`RTOL` (the other entries still exactly). With
``--guard`` the script runs everything on one Numba, TF and OpenMP thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
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

TINY = ["cell.num_devices=6", "ofdm.num_subcarriers=64", "model.hidden_units=[8]", "rounds=2", "eval.every=2",
        "eval.predictive_samples=2", "algorithm.mc_samples=2", "data.test_subset=200"]
"""A shipped scenario made tiny: 6 devices, 64 subcarriers, 784-8-10 (d = 6,370), two rounds."""
TINY_TIME = ['ofdm.domain="time"', "ofdm.cyclic_prefix_length=16", "channel.num_taps=4",
             "sync.timing_offset_max_samples=24.0", "sync.cfo_max_subcarriers=0.05"]
SIGNSGD = ['algorithm.name="signsgd"', "algorithm.signsgd.server_learning_rate=0.01"]

GUARD_RUNS: dict[str, tuple[str, list[str]]] = {
    "quickstart": ("quickstart", TINY),
    "imperfect_csi": ("imperfect_csi", TINY),
    "paper_mnist": ("paper_mnist", TINY),
    "fedavg": ("quickstart", [*TINY, 'algorithm.name="fedavg"', "algorithm.learning_rate=0.1"]),
    "time_domain": ("quickstart", [*TINY, *TINY_TIME]),
    "digital_ofdma": ("quickstart", [*TINY, 'uplink.scheme="digital_ofdma"', "uplink.bits_per_value=4",
                                     'algorithm.name="fedavg"']),
    "one_bit": ("quickstart", [*TINY, 'uplink.scheme="one_bit"', *SIGNSGD]),
    "noncoherent_mv": ("quickstart", [*TINY, 'uplink.scheme="noncoherent_mv"', *SIGNSGD]),
}
"""The bits guard's runs: run name -> (shipped scenario, ``--set`` overrides). The three
shipped MNIST scenarios (the proposed method with the KKT power control: LRT, Gaussian
CSI, the exact reparameterization), FedAvg, the time-domain uplink with timing offsets
beyond the prefix and CFO, and the other uplink schemes: digital OFDMA, one-bit and
non-coherent majority votes. Mobility is none (the block-fading channels draw every
round afresh)."""

RTOL, ATOL = 1e-3, 1e-12
"""The tolerance of values compared on another machine (``numpy.isclose``)."""
IN_FULL = 16
"""Numeric datasets up to this many numbers are stored in full, larger ones summarised."""
THREADS = {"NUMBA_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
"""``--guard``'s threads: one of each kind, on every machine."""
PACKAGES = ("numpy", "scipy", "tensorflow", "tensorflow_probability", "sionna", "numba", "llvmlite", "h5py")

SKIPPED_DATASETS = {"rounds/wall_s", "rounds/cpu_s"}
"""The timings (``cosim.trace.TIMING_COLUMNS``), spelled out: an older tree has no such name."""
SKIPPED_ATTRS = {"started_at", "resume_count"}


def _sha1(array: np.ndarray) -> str:
    digest = hashlib.sha1()
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _values(array: np.ndarray):
    """Compact values of a numeric array (None for text): the numbers (float64, complex
    as real and imaginary parts) up to :data:`IN_FULL`, else ``{"summary": [count,
    non-finite count, sum, sum of magnitudes, min, max]}`` of the finite ones."""
    array = np.asarray(array)
    if array.dtype.kind == "c":
        array = np.stack([array.real, array.imag], axis=-1)
    if array.dtype.kind not in "biuf":
        return None
    flat = array.astype(np.float64).ravel()
    if flat.size <= IN_FULL:
        return flat.tolist()
    finite = flat[np.isfinite(flat)]
    if finite.size == 0:
        return {"summary": [flat.size, flat.size]}
    return {"summary": [flat.size, flat.size - finite.size, float(finite.sum()), float(np.abs(finite).sum()),
                        float(finite.min()), float(finite.max())]}


def read_trace(path: Path) -> tuple[dict[str, str], dict]:
    """``({dataset name or @attribute: SHA-1}, {numeric dataset name: compact values})``
    of one trace file (the directory it lies in is replaced by ``<out>`` in the
    attributes: the scenario names its trace path)."""
    out: dict[str, str] = {}
    values: dict = {}
    with h5py.File(path, "r") as file:
        for key, value in file.attrs.items():
            if key not in SKIPPED_ATTRS and not key.startswith("version_"):
                text = repr(value).replace(path.parent.as_posix(), "<out>")
                out[f"@{key}"] = hashlib.sha1(text.encode()).hexdigest()

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name not in SKIPPED_DATASETS:
                array = obj[()] if obj.shape != () else np.asarray(obj[()])
                out[name] = _sha1(array)
                if (compact := _values(array)) is not None:
                    values[name] = compact
            if isinstance(obj, h5py.Group):
                for key, value in obj.attrs.items():
                    out[f"{name}@{key}"] = hashlib.sha1(repr(value).encode()).hexdigest()
                    if key == "attrs_json":  # a checkpoint's totals: computed numbers
                        numbers = {k: v for k, v in json.loads(value).items() if isinstance(v, int | float)}
                        values[f"{name}@{key}"] = [float(numbers[k]) for k in sorted(numbers)]

        file.visititems(visit)
    return out, values


def trace_digests(path: Path) -> dict[str, str]:
    """``{dataset name or @attribute: SHA-1}`` of one trace file (:func:`read_trace`)."""
    return read_trace(path)[0]


def platform() -> dict:
    """What the bits of a run depend on beyond the tree: the CPU as LLVM (Numba's
    compiler) sees it, its enabled features (the ISA: TF's kernels pick theirs from the
    same CPUID bits) and the numerical packages' versions."""
    import importlib

    import llvmlite.binding as llvm

    features = sorted(f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+"))
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except ImportError:
            versions[name] = "absent"
    return {"cpu": llvm.get_host_cpu_name(), "features": features, "packages": versions}


def platform_differences(saved: dict | None, now: dict) -> list[str]:
    """What differs between two :func:`platform` records (all when ``saved`` is None)."""
    if saved is None:
        return ["the saved file records no machine"]
    lines = []
    if saved.get("cpu") != now["cpu"]:
        lines.append(f"LLVM host CPU {saved.get('cpu')} -> {now['cpu']}")
    old, new = set(saved.get("features", [])), set(now["features"])
    if old != new:
        lines.append(f"CPU features only before: {sorted(old - new)}, only now: {sorted(new - old)}")
    for name in sorted(set(saved.get("packages", {})) | set(now["packages"])):
        if saved.get("packages", {}).get(name) != now["packages"].get(name):
            lines.append(f"{name} {saved.get('packages', {}).get(name)} -> {now['packages'].get(name)}")
    return lines


def run_all(names: list[str], out_dir: Path, runs: dict | None = None) -> dict:
    """``{"digests": {run: digests}, "values": {run: values}}`` of the runs ``names`` of
    ``runs`` (name -> (scenario, overrides); default :data:`RUNS` on the quickstart)."""
    from cosim.run import run_scenario
    from cosim.scenario import load_scenario

    runs = runs or {name: ("quickstart", overrides) for name, overrides in RUNS.items()}
    result: dict = {"digests": {}, "values": {}}
    for name in names:
        started = time.perf_counter()
        trace = out_dir / f"{name}.h5"
        base, overrides = runs[name]
        scenario = load_scenario(base, [*overrides, f'trace.path="{trace.as_posix()}"'])
        run_scenario(scenario, progress=False)
        result["digests"][name], result["values"][name] = read_trace(trace)
        print(f"{name}: {len(result['digests'][name])} digests, {time.perf_counter() - started:.1f} s", flush=True)
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


def _close(a, b) -> bool:
    """Two compact values (:func:`_values`) equal at :data:`RTOL` (NaN equal to NaN)."""
    if a is None or b is None or isinstance(a, dict) != isinstance(b, dict):
        return False
    if isinstance(a, dict):
        a, b = a["summary"], b["summary"]
    if len(a) != len(b):
        return False
    return bool(np.all(np.isclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=RTOL, atol=ATOL,
                                  equal_nan=True)))


def _shown(values) -> str:
    numbers = values["summary"] if isinstance(values, dict) else values
    text = ", ".join(f"{v:.6g}" for v in numbers[:6])
    return f"[{text}{', ...' if len(numbers) > 6 else ''}]"


def compare_values(saved: dict, now: dict) -> list[str]:
    """Like :func:`compare`, for two files written on different machines: numeric
    datasets by their compact values at :data:`RTOL`, every other entry (text datasets,
    attributes) by its digest."""
    lines = []
    for run in sorted(set(saved["digests"]) | set(now["digests"])):
        if run not in saved["digests"] or run not in now["digests"]:
            lines.append(f"{run}: only in {'the saved file' if run in saved['digests'] else 'this run'}")
            continue
        a, b = saved["digests"][run], now["digests"][run]
        va, vb = saved.get("values", {}).get(run, {}), now["values"][run]
        for key in sorted(set(a) | set(b)):
            if key in va or key in vb:
                if not _close(va.get(key), vb.get(key)):
                    lines.append(f"{run}: {key}: values {_shown(va[key]) if key in va else None} -> "
                                 f"{_shown(vb[key]) if key in vb else None} (rtol {RTOL:g})")
            elif a.get(key) != b.get(key):
                lines.append(f"{run}: {key}: {a.get(key)} -> {b.get(key)}")
    return lines


def load(path: Path) -> dict:
    """A file of ``--write``: ``{"platform", "runs", "digests", "values"}`` (a file of the
    older format, ``{run: digests}``, as ``{"digests": ...}``)."""
    data = json.loads(path.read_text())
    return data if "digests" in data else {"digests": data}


def check(saved: dict, now: dict, names: list[str]) -> list[str]:
    """Every difference of ``now`` against ``saved`` (restricted to the runs ``names``),
    exact on the machine ``saved`` was written on (and against a file that records none,
    of the older format), by values at :data:`RTOL` elsewhere (a first line then says
    why)."""
    saved = {**saved, "digests": {n: saved["digests"][n] for n in names if n in saved["digests"]}}
    changed = [f"{n}: its runs entry changed, {saved['runs'][n]} -> {now['runs'][n]}"
               for n in names if n in saved.get("runs", {}) and saved["runs"][n] != now["runs"][n]]
    machine = platform_differences(saved.get("platform"), now["platform"])
    if not machine or "platform" not in saved:  # a file of the older format: digests only, exactly
        return changed + compare(saved["digests"], now["digests"])
    print(f"another machine or packages ({'; '.join(machine)}): numeric datasets compared at rtol {RTOL:g}, "
          "the rest exactly")
    if "values" not in saved:
        return [*changed, "the saved file holds no values: write it again on this machine"]
    return changed + compare_values(saved, now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="save the digests to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with this saved JSON file")
    parser.add_argument("--only", help="comma-separated run names (default: all)")
    parser.add_argument("--guard", action="store_true", help="the tiny runs of GUARD_RUNS, on one thread")
    parser.add_argument("--keep", type=Path, help="write the traces here (default: a temporary directory)")
    args = parser.parse_args(argv)
    runs = GUARD_RUNS if args.guard else {name: ("quickstart", overrides) for name, overrides in RUNS.items()}
    names = list(runs) if not args.only else args.only.split(",")
    unknown = [name for name in names if name not in runs]
    if unknown:
        print(f"--only: unknown run(s) {', '.join(unknown)}; known: {', '.join(runs)}", file=sys.stderr)
        return 2
    if args.guard:
        os.environ.update(THREADS)  # read when Numba and TF start, below
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        result = run_all(names, out_dir, runs)
    now = {"platform": platform(), "runs": {n: list(runs[n]) for n in names}, **result}
    if args.write:
        args.write.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}")
    if args.check:
        lines = check(load(args.check), now, names)
        for line in lines:
            print(line)
        moved = Counter(line.split(":")[0] for line in lines)
        if moved:
            print("moved: " + ", ".join(f"{run} ({count})" for run, count in sorted(moved.items())))
        total = sum(len(v) for v in now["digests"].values())
        print(f"{'DIFFERENT' if lines else 'EQUAL'}: {len(names)} runs, {total} digests, {len(lines)} differences")
        return 1 if lines else 0
    if not args.write:
        print(json.dumps(now["digests"], indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
