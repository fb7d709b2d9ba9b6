"""The study runner's start-up: the local executor against an embedded Ray (issue 45).

One tiny study (the tests' synthetic scenario, ``tests/cosim/tiny_scenario.py``: one run
of one round) is run with ``cosim study run`` as a user types it, alternately with the
default local executor and with ``--executor ray`` (the embedded Ray every study
started before the local executor existed), ``--repeats`` times each, into fresh
directories. Three instants are taken from the command's launch (wall clock):

- ``ready_s``: the executor's line is printed (``executor: local ...`` / ``ray: local
  ...``): the driver's imports, the study's validation and the executor's start;
- ``first_trace_s``: the run's trace appears (a worker has started and imported
  TensorFlow, and the run has begun);
- ``done_s``: the run's line is printed (``[1 done, ...``): the run is over;
- ``total_s``: the command has exited (the executor stopped);

and ``run_wall_s``, the run's own ``wall_s`` in ``status.json`` (the run in its worker,
TensorFlow's import excluded).

The medians per executor are printed, then one JSON line with every sample and the
load average at start and end (a changing background load affects both sides alike;
they alternate). No timing is asserted anywhere.

Usage::

    .venv/bin/python benchmarks/study_startup.py                # 5 repeats of each
    .venv/bin/python benchmarks/study_startup.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cosim"))

from tiny_scenario import write_tiny  # noqa: E402

READY = {"local": "executor: local", "ray": "ray: local"}


def _study(directory: Path) -> Path:
    write_tiny(directory, rounds=1, every=1, hidden=8)
    path = directory / "study.toml"
    path.write_text('scenario = "tiny.toml"\nseeds = [1]\n[resources]\ncpus_per_run = 1\n')
    return path


def time_once(executor: str, scratch: Path, num_cpus: int) -> dict[str, float]:
    """One ``cosim study run`` of the one-run study with ``executor``; its three instants."""
    study = _study(scratch)
    out = scratch / "out"
    command = [sys.executable, "-m", "cosim.cli", "study", "run", str(study), "--out", str(out),
               "--num-cpus", str(num_cpus), "--executor", executor]
    env = {**os.environ, "MPLBACKEND": "Agg", "RAY_TMPDIR": str(scratch)}
    log_path = scratch / "printed.log"
    with log_path.open("w") as log:
        started = time.perf_counter()
        driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  cwd=scratch)
        ready = first_trace = done = None
        while driver.poll() is None:
            now = time.perf_counter() - started
            printed = log_path.read_text()
            if ready is None and READY[executor] in printed:
                ready = now
            if done is None and "[1 done" in printed:
                done = now
            if first_trace is None and any((out / "runs").glob("*.h5")):
                first_trace = now
            time.sleep(0.01)
        total = time.perf_counter() - started
    printed = log_path.read_text()
    if driver.returncode != 0 or None in (ready, first_trace, done):
        raise SystemExit(f"{executor}: exit {driver.returncode}:\n{printed}")
    (run,) = json.loads((out / "status.json").read_text())["runs"].values()
    return {"ready_s": ready, "first_trace_s": first_trace, "done_s": done, "total_s": total,
            "run_wall_s": run["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each executor (5)")
    parser.add_argument("--num-cpus", type=int, default=1, help="the study's --num-cpus (1)")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    samples: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
    for repeat in range(args.repeats):
        for executor in ("local", "ray") if repeat % 2 == 0 else ("ray", "local"):
            with tempfile.TemporaryDirectory(prefix="su", dir="/tmp") as scratch:
                sample = time_once(executor, Path(scratch), args.num_cpus)
            samples[executor].append(sample)
            print(f"{executor:5s} " + "  ".join(f"{k} {v:6.2f}" for k, v in sample.items()),
                  flush=True)
    print("medians:")
    for executor, rows in samples.items():
        print(f"  {executor:5s} " + "  ".join(
            f"{k} {statistics.median(r[k] for r in rows):6.2f}" for k in rows[0]))
    print(json.dumps({"samples": samples, "load": [load_start, os.getloadavg()[0]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
