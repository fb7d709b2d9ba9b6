"""Eight small runs as one ``cosim study run`` against the same eight runs one after another
with ``cosim run`` subprocesses (issue 17).

The runs: the tests' tiny synthetic scenario (``tests/cosim/tiny_scenario.py``) with
``--rounds`` rounds, 2 tx powers x 4 seeds. Both sides write their traces into a fresh
temporary directory; both are timed as a user types them (wall clock of the whole
command: interpreter start, imports, Ray start-up or TensorFlow start-up per
process, the runs, exit). The serial side pays TensorFlow's start-up once per run;
the study pays Ray's start-up once and TensorFlow's once per worker (workers are
reused across tasks), and runs ``--num-cpus`` runs at a time. The serial side runs
first, then the study; a changing background load affects both (the load average
is printed at start and end). No timing is asserted anywhere.

Usage::

    .venv/bin/python benchmarks/study_vs_serial.py
    .venv/bin/python benchmarks/study_vs_serial.py --rounds 5 --num-cpus 2

The last line of stdout is one JSON object
(``{"serial_s", "study_s", "ratio", "runs", "load": [start, end]}``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cosim"))

from tiny_scenario import write_tiny  # noqa: E402

POWERS_DBM = (10.0, 20.0)
SEEDS = (1, 2, 3, 4)


def _cosim() -> list[str]:
    return [sys.executable, "-m", "cosim.cli"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run (default 3)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs of the study's local Ray (default: this machine's)")
    args = parser.parse_args(argv)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cosim-study-bench-") as scratch:
        base = Path(scratch)
        write_tiny(base, rounds=args.rounds, every=1, trace_dir=base / "serial")
        started = time.perf_counter()
        for power in POWERS_DBM:
            for seed in SEEDS:
                subprocess.run([*_cosim(), "run", str(base / "tiny.toml"), "--no-plots",
                                "--set", f"power.tx_power_dbm={power}", "--set", f"seed={seed}",
                                "--set", f'trace.path="{base}/serial/p{power:g}-seed{seed}.h5"'],
                               env=env, check=True, capture_output=True)
        serial_s = time.perf_counter() - started
        study = base / "study.toml"
        study.write_text(f'scenario = "tiny.toml"\nseeds = {list(SEEDS)}\n'
                         f'[axes]\n"power.tx_power_dbm" = {list(POWERS_DBM)}\n'
                         "[resources]\ncpus_per_run = 1\n")
        command = [*_cosim(), "study", "run", str(study), "--out", str(base / "study")]
        if args.num_cpus:
            command += ["--num-cpus", str(args.num_cpus)]
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        study_s = time.perf_counter() - started
    runs = len(POWERS_DBM) * len(SEEDS)
    load_end = os.getloadavg()[0]
    print(f"{runs} runs of {args.rounds} rounds (tiny synthetic scenario), {os.cpu_count()} CPUs, "
          f"load average {load_start:.2f} -> {load_end:.2f}")
    print(f"  serial `cosim run` x {runs}: {serial_s:7.1f} s")
    print(f"  one `cosim study run`:     {study_s:7.1f} s")
    print(f"  serial / study:            {serial_s / study_s:7.2f}x")
    print(json.dumps({"serial_s": serial_s, "study_s": study_s, "ratio": serial_s / study_s,
                      "runs": runs, "load": [load_start, load_end]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
