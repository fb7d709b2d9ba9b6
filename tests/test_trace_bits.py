"""The bits guard: eight tiny runs keep the traces of ``tests/data/trace_bits.json``.

``benchmarks/trace_digests.py --guard`` runs the shipped MNIST scenarios made tiny, FedAvg,
the time-domain uplink and every other uplink scheme (:data:`GUARD_RUNS`) in one
subprocess on one thread of each kind, and compares the SHA-1 of every dataset and
attribute of their traces with the committed baseline: bit for bit on the machine class
the baseline was written on (its LLVM host CPU, CPU features and the numerical packages'
versions), by compact values at a relative 1e-3 elsewhere. A changed stream purpose, a
changed chain step or sampler fails it, naming the run and the dataset. Moving the bits
on purpose: ``docs/architecture.md``, "What must stay bit-identical".

The other tests here hold the comparison itself, without running anything.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "data" / "trace_bits.json"
SCRIPT = ROOT / "benchmarks" / "trace_digests.py"
sys.path.insert(0, str(SCRIPT.parent))

import trace_digests  # noqa: E402


def _guard(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--guard", "--check", str(BASELINE)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def test_the_guarded_runs_keep_their_bits(tmp_path):
    """The runs' bits against the baseline. A Numba cache written by other processes (the
    suite's, a developer's older code) can hold kernels whose sums differ in the last bit
    from the same kernels compiled fresh (docs/faults.md), so when the runs differ with
    the process's cache they are run again compiling every kernel into an empty
    ``NUMBA_CACHE_DIR``: the baseline is a fresh compile's bits, and only a difference
    that holds then fails."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **trace_digests.THREADS,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = _guard(env)
    if result.returncode == 1:
        result = _guard({**env, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")})
    out = result.stdout.strip().splitlines() or ["(no output)"]
    lines = [line for line in out[:-1] if " digests, " not in line and not line.startswith("moved: ")]
    shown = lines if len(lines) <= 30 else [*lines[:30], f"... and {len(lines) - 30} more"]
    summary = [line for line in out if line.startswith("moved: ")] + out[-1:]
    assert result.returncode == 0 and out[-1].startswith("EQUAL: 8 runs"), (
        "the traces moved (run: dataset: before -> now); if on purpose, rewrite the baseline "
        "(docs/architecture.md, 'What must stay bit-identical'); these are a fresh compile's "
        "bits (an empty NUMBA_CACHE_DIR):\n" + "\n".join([*shown, *summary])
        + ("" if result.returncode in (0, 1) else "\n" + result.stderr[-3000:]))


def test_the_baseline_holds_every_guarded_run_and_the_machine():
    saved = trace_digests.load(BASELINE)
    assert set(saved["runs"]) == set(trace_digests.GUARD_RUNS)
    assert {name: tuple(run) for name, (*run,) in saved["runs"].items()} == {
        name: (base, list(overrides)) for name, (base, overrides) in trace_digests.GUARD_RUNS.items()}
    assert set(saved["digests"]) == set(saved["values"]) == set(trace_digests.GUARD_RUNS)
    assert saved["platform"]["cpu"] and saved["platform"]["features"]
    assert min(len(d) for d in saved["digests"].values()) >= 50


def _saved() -> dict:
    return trace_digests.load(BASELINE)


def test_a_changed_digest_names_its_run_and_dataset():
    saved = _saved()
    now = copy.deepcopy(saved)
    now["digests"]["one_bit"]["rounds/train_loss"] = "0" * 40
    del now["digests"]["fedavg"]["rounds/test_accuracy"]
    lines = trace_digests.check(saved, now, list(saved["runs"]))
    assert lines == [f"fedavg: rounds/test_accuracy: {saved['digests']['fedavg']['rounds/test_accuracy']} -> None",
                     f"one_bit: rounds/train_loss: {saved['digests']['one_bit']['rounds/train_loss']} -> " + "0" * 40]


def test_another_machine_compares_values_at_the_tolerance():
    """On another CPU the digests of numeric datasets may all differ: the values decide,
    within a relative 1e-3 and not beyond; text and attributes still exactly."""
    saved = _saved()
    now = copy.deepcopy(saved)
    now["platform"]["cpu"] = "another"
    now["digests"] = {run: dict.fromkeys(d, "f" * 40) for run, d in saved["digests"].items()}
    for run, digests in saved["digests"].items():  # non-numeric entries keep their digests
        for key, value in digests.items():
            if key not in saved["values"][run]:
                now["digests"][run][key] = value
    loss = now["values"]["quickstart"]["rounds/train_loss"]
    loss[0] *= 1 + 1e-5
    assert trace_digests.check(saved, now, list(saved["runs"])) == []
    loss[0] *= 1 + 1e-2
    lines = trace_digests.check(saved, now, list(saved["runs"]))
    assert len(lines) == 1 and lines[0].startswith("quickstart: rounds/train_loss: values [")
    now["digests"]["quickstart"]["@scenario"] = "0" * 40
    assert len(trace_digests.check(saved, now, list(saved["runs"]))) == 2


def test_the_machine_record_names_what_differs():
    now = trace_digests.platform()
    assert trace_digests.platform_differences(now, now) == []
    other = {**now, "features": [*now["features"][1:], "x-new"], "packages": {**now["packages"], "numba": "0"}}
    lines = trace_digests.platform_differences(other, now)
    assert len(lines) == 2 and "only now: ['" + now["features"][0] in lines[0] and lines[1].startswith("numba 0 ->")


def test_a_file_of_the_older_format_is_compared_exactly():
    """A digest file written before the machine was recorded (``{run: digests}``, as
    ``/tmp`` files of a refactoring's before and after are) is compared digest by digest."""
    saved = _saved()
    now = copy.deepcopy(saved)
    now["platform"]["cpu"] = "another"
    older = {"digests": copy.deepcopy(saved["digests"])}
    assert trace_digests.check(older, now, list(saved["runs"])) == []
    now["digests"]["fedavg"]["rounds/train_loss"] = "0" * 40
    assert trace_digests.check(older, now, list(saved["runs"])) == [
        f"fedavg: rounds/train_loss: {saved['digests']['fedavg']['rounds/train_loss']} -> " + "0" * 40]
