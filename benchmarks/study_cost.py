"""The cost table behind ``cosim validate``'s and ``cosim study run``'s estimates (issue 30).

Run from the repository root::

    .venv/bin/python benchmarks/study_cost.py                 # print the table and a JSON line
    .venv/bin/python benchmarks/study_cost.py --write         # also rewrite cosim/study/cost_table.py
    .venv/bin/python benchmarks/study_cost.py --tiny          # seconds; a smoke run

For every algorithm (and, for the proposed method, both estimators) it runs
``paper_mnist`` as a study runs it, one core (TensorFlow's and Numba's thread pools held
to 1, as ``cpus_per_run = 1``), each configuration in its own subprocess, for
5 rounds, evaluated at the last only: rounds 1-3 give the round's cost (their
median); building the engine (data, partition, model, PHY) and round 0's excess over a
round (tracing, first touches) are the run's fixed cost; then the evaluation the engine runs (the
predictive and, for the proposed method, the posterior mean's prediction on the test
set, then the metrics) is called three times more on the final state, and its median
is the evaluation's cost. Each configuration is measured at 10 and at 50 mean samples
per device: the round's cost grows by the slope between them per extra sample. Cost is the process's **CPU time** per round (``time.process_time``: all
threads), so a configuration timed beside other work is charged its own core-seconds,
not the wall clock of a shared machine (cache and memory-bandwidth contention still
count). The figures are what :mod:`cosim.study.cost` scales by d, K, M, E and rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own helpers
from _provenance import git_commit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

ROOT = Path(__file__).resolve().parents[1]
TABLE_MODULE = ROOT / "cosim" / "study/cost_table.py"
ALGORITHMS = ("bayes_aircomp", "fedavg", "fedprox", "scaffold", "fedsmoo", "fedgmt", "signsgd")
ESTIMATORS = ("reparameterization", "local_reparameterization")
EVAL_ROUNDS = (4,)
SAMPLES = (10, 50)
"""Mean samples per device measured: Table I's 10, and 50 (Fig. VaryingSizes' largest),
for the round's cost per extra sample."""


CONVNETS = {
    "resnet56": {
        "scenario": "paper_cifar100.toml",
        "stand_in": ['data.dataset="synthetic"', "data.synthetic_classes=100",
                     "data.synthetic_shape=[32, 32, 3]", "data.synthetic_train_size=5000",
                     "data.synthetic_test_size=200", "cell.num_devices=1", "rounds=2"],
        "samples": {"bayes_aircomp": (50, 100)},
        "default_samples": (100,),
    },
}
"""The convnets' measurement (``--architecture``): the paper's CIFAR-100 scenario on a
synthetic stand-in with CIFAR-100's shapes (32 x 32 x 3 images, 100 classes; the real data
is not on this machine), one device (a paper-size round of ResNet-56 costs hours of CPU),
two rounds (round 0 traces, round 1 is measured; the run's one evaluation, at its last
round, is subtracted), 200 test images (the cost model scales the evaluation by the test
set's size). The proposed method is measured at 50 and 100 samples per device for the
slope; a baseline at 100 only, its slope taken as proportional (round / n): a convnet's
full-batch step is its per-sample convolutions."""


def _configurations(tiny: bool, architecture: str = "mlp") -> list[tuple[str, str]]:
    if architecture != "mlp":
        return [("bayes_aircomp", "reparameterization")] + [(a, "any") for a in ALGORITHMS[1:]]
    configs = [("bayes_aircomp", e) for e in ESTIMATORS]
    configs += [(a, "any") for a in ALGORITHMS[1:]]
    return configs[:2] + configs[2:3] if tiny else configs


def _samples(algorithm: str, architecture: str) -> tuple[int, ...]:
    if architecture == "mlp":
        return SAMPLES
    convnet = CONVNETS[architecture]
    return convnet["samples"].get(algorithm, convnet["default_samples"])


def _overrides(algorithm: str, estimator: str, tiny: bool, samples: int,
               architecture: str = "mlp") -> list[str]:
    items = [f'algorithm.name="{algorithm}"', "rounds=5", "eval.every=100", "trace.per_device=false",
             f"data.mean_samples_per_device={samples}"]
    if estimator != "any":
        items.append(f'algorithm.estimator="{estimator}"')
    if tiny:
        items += ["cell.num_devices=4", "model.hidden_units=[8]", 'data.dataset="synthetic"']
    if architecture != "mlp":
        items += CONVNETS[architecture]["stand_in"]
    return items


def measure(algorithm: str, estimator: str, tiny: bool, samples: int,
            architecture: str = "mlp") -> dict:
    """In this process: one core, the scenario's rounds through the engine; CPU seconds."""
    import numba
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    numba.set_num_threads(1)

    from cosim.engine import Engine
    from cosim.scenario import load_scenario, scenario_num_params

    convnet = architecture != "mlp"
    scenario = load_scenario(
        ROOT / "scenarios" / (CONVNETS[architecture]["scenario"] if convnet else "paper_mnist.toml"),
        _overrides(algorithm, estimator, tiny, samples, architecture))
    c0 = time.process_time()
    engine = Engine(scenario)
    state = engine.initial_state()
    build_s = time.process_time() - c0
    cpu, wall = [], []
    for t in range(scenario.rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        state, record = engine.run_round(t, state)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        assert record.evaluated == (t + 1 == scenario.rounds if convnet else t in EVAL_ROUNDS)
    evals = []
    evaluator = engine.world.evaluator
    for _ in range(1 if convnet else 3):  # the last round's evaluation (predictive and, with a posterior, its mean)
        c0 = time.process_time()
        evaluator.columns(engine.algorithm, state, scenario.rounds - 1)
        evals.append(time.process_time() - c0)
    eval_s = statistics.median(evals)
    round_s = cpu[1] - eval_s if convnet else statistics.median(cpu[1:4])
    fixed_s = build_s + max(0.0, cpu[0] - round_s)
    return {"algorithm": algorithm, "architecture": architecture, "test_size": len(evaluator.y_test), "estimator": estimator, "round_core_s": round_s,
            "eval_core_s": eval_s, "fixed_core_s": fixed_s, "cpu_s": cpu, "wall_s": wall,
            "num_params": scenario_num_params(scenario), "num_devices": scenario.cell.num_devices,
            "local_steps": scenario.algorithm.local_steps,
            "mc_samples": scenario.algorithm.mc_samples,
            "predictive_samples": scenario.eval.predictive_samples,
            "mean_samples_per_device": samples}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _table(rows: list[dict]) -> dict:
    """One architecture's table from its rows (one or two sample sizes per configuration:
    two give the slope per extra sample, one a slope proportional to the round)."""
    rounds: dict[str, dict[str, float]] = {}
    evals: dict[str, float] = {}
    slopes: dict[str, dict[str, float]] = {}
    fixed: dict[str, dict[str, float]] = {}
    architecture = rows[0]["architecture"]
    reference = SAMPLES[0] if architecture == "mlp" else CONVNETS[architecture]["default_samples"][0]
    for key in dict.fromkeys((r["algorithm"], r["estimator"]) for r in rows):
        sizes = sorted((r for r in rows if (r["algorithm"], r["estimator"]) == key),
                       key=lambda r: r["mean_samples_per_device"])
        at = next(r for r in sizes if r["mean_samples_per_device"] == reference)
        algorithm, estimator = key
        rounds.setdefault(algorithm, {})[estimator] = round(at["round_core_s"], 4)
        if len(sizes) > 1:
            slope = (sizes[-1]["round_core_s"] - sizes[0]["round_core_s"]) / (
                sizes[-1]["mean_samples_per_device"] - sizes[0]["mean_samples_per_device"])
        else:
            slope = at["round_core_s"] / at["mean_samples_per_device"]
        slopes.setdefault(algorithm, {})[estimator] = round(max(slope, 0.0), 5)
        fixed.setdefault(algorithm, {})[estimator] = round(at["fixed_core_s"], 3)
        evals[algorithm] = round(max(evals.get(algorithm, 0.0), at["eval_core_s"]), 4)
    first = rows[0]
    test_size = 10_000 if architecture == "mlp" else first["test_size"]
    return {
        "measured": f"{datetime.date.today().isoformat()}, commit {git_commit() or 'unknown'}, {_cpu_model()}, "
                    "one core per run, CPU time",
        "architectures": [architecture],
        "reference": {"num_params": first["num_params"], "num_devices": first["num_devices"],
                      "local_steps": first["local_steps"], "mc_samples": first["mc_samples"],
                      "predictive_samples": first["predictive_samples"], "test_size": test_size,
                      "mean_samples_per_device": reference},
        "test_set_sizes": {"mnist": 10_000, "cifar100": 10_000},
        "round_core_s": rounds,
        "round_core_s_per_sample": slopes,
        "run_fixed_core_s": fixed,
        "eval_core_s": evals,
    }


def merged(old: dict, new: dict) -> dict:
    """``old`` with the algorithms measured in ``new`` (``--only``) replaced by theirs and
    their provenance in ``measured_by_algorithm``; ValueError when the two were measured
    at different reference sizes (their figures would not scale alike)."""
    if old["reference"] != new["reference"]:
        raise ValueError(f"--only: the table's reference {old['reference']} is not the one "
                         f"measured now {new['reference']}: measure every algorithm")
    table = json.loads(json.dumps(old))
    for key in ("round_core_s", "round_core_s_per_sample", "run_fixed_core_s", "eval_core_s"):
        table[key].update(new[key])
    table.setdefault("measured_by_algorithm", {}).update(
        dict.fromkeys(new["round_core_s"], new["measured"]))
    return table


def write_table(rows: list[dict], path: Path, only: bool = False) -> None:
    """Rewrite ``cosim/study/cost_table.py`` with the rows' architecture's table, keeping the
    other architectures' tables as they are; with ``only``, the rows' algorithms merged
    into the architecture's table (:func:`merged`)."""
    from cosim.study.cost_table import ARCHITECTURE_TABLES, COST_TABLE

    table, architecture = _table(rows), rows[0]["architecture"]
    if only:
        table = merged(COST_TABLE if architecture == "mlp" else ARCHITECTURE_TABLES[architecture], table)
    main_table, others = COST_TABLE, dict(ARCHITECTURE_TABLES)
    if architecture == "mlp":
        main_table = table
    else:
        others[architecture] = table
    text = (
        '"""The measured cost table of :mod:`cosim.study.cost` (written by\n'
        "``benchmarks/study_cost.py --write``; do not edit by hand): CPU seconds of one\n"
        "paper-size round (without evaluation) per algorithm and estimator, and of one\n"
        "evaluation, on one core: ``COST_TABLE`` for the MLP, ``ARCHITECTURE_TABLES`` for\n"
        'the other architectures (``--architecture NAME``), each with its own reference size."""\n\n'
        f"COST_TABLE = {json.dumps(main_table, indent=4)}\n\n"
        f"ARCHITECTURE_TABLES = {json.dumps(others, indent=4)}\n"
    )
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite cosim/study/cost_table.py")
    p.add_argument("--tiny", action="store_true", help="a tiny model on synthetic data")
    p.add_argument("--architecture", default="mlp", choices=("mlp", *CONVNETS),
                   help="measure this architecture's table (the convnets on a stand-in: CONVNETS)")
    p.add_argument("--only", action="append", choices=ALGORITHMS, metavar="ALGORITHM",
                   help="measure only this algorithm (repeatable); with --write, merged into "
                        "the table, the others kept as measured")
    p.add_argument("--one", nargs=3, metavar=("ALGORITHM", "ESTIMATOR", "SAMPLES"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        algorithm, estimator, samples = args.one
        print("RESULT " + json.dumps(measure(algorithm, estimator, args.tiny, int(samples),
                                             args.architecture)), flush=True)
        return 0
    rows: list[dict] = []
    for algorithm, estimator, samples in (
            (a, e, n) for a, e in _configurations(args.tiny, args.architecture)
            if not args.only or a in args.only
            for n in _samples(a, args.architecture)):
        command = [sys.executable, __file__, "--one", algorithm, estimator, str(samples),
                   "--architecture", args.architecture] + (["--tiny"] if args.tiny else [])
        done = subprocess.run(command, cwd=ROOT, text=True, capture_output=True)
        result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not result:
            print(f"{algorithm} / {estimator} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(result[-1][len("RESULT "):]))
        row = rows[-1]
        print(f"{algorithm:14s} {estimator:26s} {samples:3d}/device round {row['round_core_s']:7.2f} core-s   "
              f"evaluation {row['eval_core_s']:6.2f} core-s   fixed {row['fixed_core_s']:5.1f} core-s   "
              f"(wall per round "
              f"{', '.join(f'{w:.1f}' for w in row['wall_s'])} s)", flush=True)
    load = os.getloadavg()[0]
    print(json.dumps({"rows": [{k: r[k] for k in ("algorithm", "estimator", "mean_samples_per_device",
                                                    "round_core_s", "eval_core_s", "fixed_core_s")} for r in rows],
                      "load_average": round(load, 2), "commit": git_commit() or "unknown"}))
    if args.write and not args.tiny:
        write_table(rows, TABLE_MODULE, only=bool(args.only))
        print(f"wrote {TABLE_MODULE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
