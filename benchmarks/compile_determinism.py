"""Kernels compiled in the process and kernels loaded from Numba's cache give the same
bits: the tiny scenario under six configurations, run twice for two rounds in two
processes sharing a fresh ``NUMBA_CACHE_DIR`` (the first compiles, the second loads),
every dataset of the two traces compared (the timings ``wall_s`` and ``cpu_s`` left out).

    python benchmarks/compile_determinism.py     # about two minutes; exit 1 on a difference

A check, not a timing: the kill-and-resume test (tests/cosim/test_run_faults.py) covers
the default configuration in the suite; this covers the other readings and FedAvg.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "precision": ("bayes_aircomp", []),
    "lrt": ("bayes_aircomp", ["algorithm.estimator=local_reparameterization"]),
    "lrt_softplus_std": ("bayes_aircomp", ["algorithm.estimator=local_reparameterization",
                                           "algorithm.covariance_parameter=softplus_std"]),
    "softplus_std": ("bayes_aircomp", ["algorithm.covariance_parameter=softplus_std"]),
    "log_precision": ("bayes_aircomp", ["algorithm.covariance_parameter=log_precision"]),
    "fedavg": ("fedavg", []),
}

_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from tiny_scenario import write_tiny
from cosim.cli import main
for name, algorithm, sets in {configs!r}:
    where = Path({out!r}) / name
    where.mkdir(parents=True)
    extra = [a for s in sets for a in ("--set", s)]
    assert main(["run", str(write_tiny(where, rounds=2, every=2, algorithm=algorithm)),
                 "--no-plots", *extra]) == 0
"""


def digests(out: Path) -> dict[str, str]:
    import h5py

    found = {}
    for trace in sorted(out.rglob("*.h5")):
        with h5py.File(trace, "r") as f:
            def visit(name, obj, trace=trace):
                if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] not in ("wall_s", "cpu_s"):
                    key = f"{trace.parent.name}:{name}"
                    found[key] = hashlib.sha256(obj[()].tobytes()).hexdigest()
            f.visititems(visit)
    return found


def main() -> int:
    configs = [(name, algorithm, sets) for name, (algorithm, sets) in CONFIGS.items()]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {"NUMBA_CACHE_DIR": str(tmp / "numba_cache")}
        runs = []
        for label in ("compiled", "cached"):
            out = tmp / label
            code = _CHILD.format(tests=str(ROOT / "tests" / "cosim"), configs=configs, out=str(out))
            subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                           env={**os.environ, **env})
            runs.append(digests(out))
    compiled, cached = runs
    differ = sorted(k for k in compiled if compiled[k] != cached.get(k))
    print(f"{len(compiled)} datasets in {len(CONFIGS)} configurations; "
          f"{len(differ)} differ between the compiled and the cached kernels")
    for key in differ:
        print("  differs:", key)
    return 1 if differ or sorted(compiled) != sorted(cached) else 0


if __name__ == "__main__":
    sys.exit(main())
