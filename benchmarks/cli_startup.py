"""Wall-clock start-up of the ``cosim`` commands that do not train, against ``import h5py`` (issue 20).

Only ``cosim run`` imports TensorFlow; ``--version``, ``validate``, ``inspect``,
``plot`` and ``scenarios`` do not (``tests/cosim/test_cli_startup.py`` holds that).
This times, as separate processes, the whole command as a user types it (interpreter
start, imports, the work, exit):

- ``python -c "import h5py"``: the baseline, what any command that reads a trace pays;
- ``cosim --version``;
- ``cosim validate scenarios/quickstart.toml`` (output discarded);
- ``cosim inspect TRACE`` (a small trace written here with ``cosim.trace.TraceWriter``,
  or ``--trace PATH``);
- with ``--tensorflow`` also ``python -c "import tensorflow"``: what every command paid
  before it stopped importing TensorFlow.

One untimed warm-up pass, then ``--repeats`` passes (default 5) with the commands
interleaved (one of each per pass, so a change of the machine's load affects all
alike); the median and min wall time of each, and the median's ratio to the h5py
baseline's. The last line of stdout is the same as one JSON object
(``{"<row>_s": median, ..., "load": [start, end]}``). No timing is asserted anywhere.

Usage::

    .venv/bin/python benchmarks/cli_startup.py
    .venv/bin/python benchmarks/cli_startup.py --repeats 9 --tensorflow
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "cosim"))

from small_trace import write_small_trace  # noqa: E402


def _cosim() -> list[str]:
    """The ``cosim`` console script next to this interpreter (as installed), else
    ``python -m cosim.cli``."""
    script = Path(sys.executable).with_name("cosim")
    if script.is_file():
        return [str(script)]
    found = shutil.which("cosim")
    return [found] if found else [sys.executable, "-m", "cosim.cli"]


def _time(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command`` (from ROOT, output discarded); raises
    when it fails."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (median of them)")
    parser.add_argument("--trace", type=Path, default=None,
                        help="trace for `cosim inspect` (default: a small one written here)")
    parser.add_argument("--tensorflow", action="store_true",
                        help='also time python -c "import tensorflow" (the old cost)')
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg"}
    cosim = _cosim()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace or write_small_trace(Path(tmp) / "bench-seed1.h5", rounds=20, uplink=912.0, downlink=6.6e6)
        rows = {  # key: (label, command)
            "h5py": ('python -c "import h5py"', [sys.executable, "-c", "import h5py"]),
            "version": ("cosim --version", [*cosim, "--version"]),
            "validate": ("cosim validate scenarios/quickstart.toml",
                         [*cosim, "validate", "scenarios/quickstart.toml"]),
            "inspect": ("cosim inspect TRACE", [*cosim, "inspect", str(trace)]),
        }
        if args.tensorflow:
            rows["tensorflow"] = ('python -c "import tensorflow"',
                                  [sys.executable, "-c", "import tensorflow"])
        for _, command in rows.values():  # warm-up: file cache, byte-compiled modules
            _time(command, env)
        times: dict[str, list[float]] = {key: [] for key in rows}
        for _ in range(args.repeats):
            for key, (_, command) in rows.items():
                times[key].append(_time(command, env))
    load_end = os.getloadavg()[0]

    medians = {key: statistics.median(values) for key, values in times.items()}
    width = max(len(label) for label, _ in rows.values())
    print(f"cosim = {' '.join(cosim)}; median of {args.repeats} (interleaved, after 1 warm-up); "
          f"load average {load_start:.2f} -> {load_end:.2f}")
    print(f"{'command':<{width}}  {'median s':>8}  {'min s':>6}  {'x h5py':>6}")
    for key, (label, _) in rows.items():
        print(f"{label:<{width}}  {medians[key]:8.3f}  {min(times[key]):6.3f}  "
              f"{medians[key] / medians['h5py']:6.2f}")
    summary = {f"{key}_s": round(value, 4) for key, value in medians.items()}
    summary |= {f"{key}_per_repeat_s": [round(t, 4) for t in times[key]] for key in rows}
    summary["load"] = [round(load_start, 2), round(load_end, 2)]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
