"""The same FedAvg job in Flower's simulation engine and here, side by side (issue 61).

Usage::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/vs_flower.py                      # K = 100, 1,000
    PYTHONPATH=$PWD .venv/bin/python benchmarks/vs_flower.py --devices 10 --rounds 2   # a smoke run
    PYTHONPATH=$PWD .venv/bin/python benchmarks/vs_flower.py --backend tensorflow   # our batched TF steps

The job is the quickstart scenario (``scenarios/quickstart.toml``: MNIST, the MLP
784-128-128-10, Poisson(10) single-class devices, seed 1) with ``algorithm.name =
"fedavg"`` and ``power.control = "ideal"`` (the error-free aggregation, the exact
weighted sum sum_k pi_k Delta_k), ``cell.num_devices = K``: every device runs
``local_steps`` (E = 3) full-batch gradient steps of plain SGD (``learning_rate`` 0.05)
on its local mean cross-entropy from the global weights, and the server averages the
new weights with pi_k = |D_k| / |D|.

For each K, three fresh processes, one after the other:

1. ``export`` (this project's venv): builds the scenario's world and writes the job file
   (``.npz``): the partition's per-device rows of the training set (the indices of the
   scenario's seed stream, with the images), the 10,000 test images, the initial weights
   ``w0`` of the scenario's seed, the layer sizes, eta and E.
2. ``ours``: ``cosim.engine.Engine`` on the same scenario runs the rounds
   (``Engine.run_round``: local steps, the PHY round with ideal power control, the
   aggregation, the evaluation after the last round; the trace file is not written). It
   checks that its partition and initial weights are the exported ones. Its local steps
   run on ``runtime.backend = --backend``: ``numba`` (the default: each device's E steps
   back to back on one core, the two cores taking alternate devices,
   ``learning/local/fused_sgd.py``) or ``tensorflow`` (all K devices batched in one
   TensorFlow call per step); the same steps up to float32 rounding.
3. ``flower``: ``benchmarks/flower/fedavg_app.py`` in Flower's own virtual environment:
   ``flwr.simulation.run_simulation`` with K virtual SuperNodes on Ray, a NumPy client
   doing the same E steps on the same rows from the same ``w0``, and Flower's
   ``FedAvg`` strategy weighted by ``num-examples`` (= |D_k|).

Seconds per round exclude start-up on both sides: process start, imports (TensorFlow
here, Flower and Ray there), building the world, and the whole first round (here TF's
tracing of the local step and Numba's first kernels; there Ray's start, which Flower runs
in a thread beside the ServerApp so that round 1 waits for it, and the Ray workers'
first imports). A round's time is the mean of rounds 2..N. No timed round evaluates:
here the scenario is one round longer than the rounds run and the model is evaluated
after the loop; there the strategy's ``evaluate_fn`` marks the round's end before it
evaluates. The table also gives the seconds of local training in a round: here
``local_update`` (all K devices' E steps), there the clients' SGD steps summed
over the round's K calls; the rest of a round is the aggregation and the framework's
own work (here the PHY round with ideal control, there Flower's messages and Ray's
scheduling and object transfers). The peak memory is the whole process
tree's, sampled from /proc every ``--sample-s`` seconds by this process: the sum of the
processes' VmRSS (shared pages counted in every process that maps them) and of their
Pss (shared pages split), Ray's GCS, raylet and workers included (the child leads its
own process group (setsid); every process of that group counts, in the tree or not). Accuracy is the global
model's on the 10,000 MNIST test images after the last round, on both sides.

Flower's environment is created on first use in ``--venv`` (default
``~/.cache/aircomp-cosim/flower-venv``) from ``benchmarks/flower/requirements.txt``
with the ``--python`` interpreter (default ``python3``), and re-used while the file's
SHA-256 and the interpreter's version match (the stamp file in the venv).

Prints one table and, last, one JSON line. Bad options are refused (exit 2) before
anything is built or installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own helpers
from _provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
FLOWER_DIR = ROOT / "benchmarks" / "flower"
REQUIREMENTS = FLOWER_DIR / "requirements.txt"
FLOWER_APP = FLOWER_DIR / "fedavg_app.py"
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aircomp-cosim" / "flower-venv"
STAMP = "aircomp-requirements.sha256"
SIDES = ("ours", "flower")
BACKENDS = ("numba", "tensorflow")
MAX_DEVICES = 100_000


def overrides(devices: int, rounds: int, backend: str = "numba") -> dict:
    """The job: the quickstart scenario's FedAvg on the ideal channel, K devices, our local
    steps on ``backend`` (``runtime.backend``: ``"numba"``, device by device, or
    ``"tensorflow"``, all devices batched; the same steps). The scenario is one round
    longer than the rounds run, so that no timed round evaluates (the evaluation after the
    last round is called on its own, untimed)."""
    return {"algorithm.name": "fedavg", "power.control": "ideal", "cell.num_devices": devices,
            "rounds": rounds + 1, "eval.every": rounds + 1, "trace.per_device": False,
            "runtime.backend": backend}


# ----------------------------------------------------------------------------- options
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="100,1000",
                        help="comma-separated K values (default 100,1000)")
    parser.add_argument("--rounds", default="20",
                        help="rounds of the job for K < 1,000, >= 2 (default 20)")
    parser.add_argument("--rounds-large", default="5",
                        help="rounds for K >= 1,000, >= 2 (default 5)")
    parser.add_argument("--sides", default="ours,flower", help="which sides to run (default ours,flower)")
    parser.add_argument("--backend", default="numba",
                        help="our runtime.backend: numba or tensorflow (default numba)")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help=f"Flower's venv (default {DEFAULT_VENV})")
    parser.add_argument("--python", default="python3", help="interpreter for Flower's venv (default python3)")
    parser.add_argument("--client-cpus", default="1",
                        help="Ray's num_cpus per ClientApp (default 1: one actor per core)")
    parser.add_argument("--sample-s", default="0.2", help="memory sampling period in seconds (default 0.2)")
    parser.add_argument("--timeout-s", default="3600", help="each process's limit in seconds (default 3600)")
    parser.add_argument("--workdir", default=None, help="keep the job files and results here")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args

    def refuse(option: str, value: str, why: str) -> None:
        parser.error(f"{option} {value!r}: {why}")

    try:
        devices = [_positive_int(part) for part in args.devices.split(",")]
    except ValueError:
        refuse("--devices", args.devices, "must be comma-separated integers >= 1")
    if len(set(devices)) != len(devices) or max(devices) > MAX_DEVICES:
        refuse("--devices", args.devices, f"must be distinct and at most {MAX_DEVICES:,}")
    args.devices = devices
    for option in ("rounds", "rounds_large"):
        text = getattr(args, option)
        name = "--" + option.replace("_", "-")
        try:
            value = int(text)
        except ValueError:
            refuse(name, text, "must be an integer >= 2 (round 1 is excluded as warm-up)")
        if value < 2:
            refuse(name, text, "must be an integer >= 2 (round 1 is excluded as warm-up)")
        setattr(args, option, value)
    sides = [part.strip() for part in args.sides.split(",")]
    if not sides or any(side not in SIDES for side in sides) or len(set(sides)) != len(sides):
        refuse("--sides", args.sides, "must be ours, flower or ours,flower")
    args.sides = sides
    if args.backend not in BACKENDS:
        refuse("--backend", args.backend, "must be numba or tensorflow")
    for option, low in (("client_cpus", 0.0), ("sample_s", 0.0), ("timeout_s", 0.0)):
        name = "--" + option.replace("_", "-")
        try:
            value = float(getattr(args, option))
        except ValueError:
            refuse(name, getattr(args, option), "must be a number > 0")
        if not value > low or value != value:
            refuse(name, getattr(args, option), "must be a number > 0")
        setattr(args, option, value)
    if "flower" in args.sides and shutil.which(args.python) is None:
        refuse("--python", args.python, "is not an executable on PATH")
    venv = Path(args.venv)
    if venv.exists() and not venv.is_dir():
        refuse("--venv", args.venv, "exists and is not a directory")
    if args.workdir is not None and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        refuse("--workdir", args.workdir, "exists and is not a directory")
    return args


def rounds_for(args, devices: int) -> int:
    return args.rounds_large if devices >= 1000 else args.rounds


# ----------------------------------------------------------------------------- memory
def _process_table() -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Parent -> children and setsid group (stat field 6) -> members, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    groups: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        groups.setdefault(int(fields[3]), []).append(int(entry))
    return children, groups


def process_tree(root: int) -> list[int]:
    """``root``, every process descended from it, and every process of its setsid group
    (``root`` leads one: a process that left the tree by a double fork still counts)."""
    children, groups = _process_table()
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return sorted(tree | set(groups.get(root, ())))


def _kib(path: str, key: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeMemory(threading.Thread):
    """Samples a process tree's summed VmRSS and Pss (KiB) until :meth:`stop`; keeps the
    peaks and the largest number of processes seen."""

    def __init__(self, pid: int, period_s: float):
        super().__init__(daemon=True)
        self.pid, self.period_s = pid, period_s
        self.peak_rss_kib = self.peak_pss_kib = self.max_processes = 0
        self._done = threading.Event()

    def sample(self) -> None:
        tree = process_tree(self.pid)
        rss = sum(_kib(f"/proc/{pid}/status", "VmRSS:") for pid in tree)
        pss = sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in tree)
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        self.peak_pss_kib = max(self.peak_pss_kib, pss)
        self.max_processes = max(self.max_processes, len(tree))

    def run(self) -> None:
        while not self._done.wait(self.period_s):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()


def run_measured(command: list[str], env: dict, period_s: float, timeout_s: float, log: Path) -> dict:
    """Run ``command`` (stdout and stderr to ``log``) with its process tree's memory sampled."""
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   preexec_fn=os.setsid)
        monitor = TreeMemory(process.pid, period_s)
        monitor.start()
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            code = "timeout"
        finally:
            monitor.stop()
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise RuntimeError(f"{command[1]} ... exited {code} (log {log}):\n{tail}")
    return {"wall_s": time.perf_counter() - started, "peak_rss_gib": monitor.peak_rss_kib / 2**20,
            "peak_pss_gib": monitor.peak_pss_kib / 2**20, "max_processes": monitor.max_processes}


# ----------------------------------------------------------------------------- Flower's venv
def requirements_digest(python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    return hashlib.sha256(REQUIREMENTS.read_bytes() + version.encode()).hexdigest()


def ensure_venv(venv: Path, python: str) -> tuple[Path, str]:
    """Flower's interpreter in ``venv``, created (``python -m venv``, ``pip install -r``)
    unless its stamp holds the requirements' digest; ``(interpreter, what was done)``."""
    digest = requirements_digest(python)
    interpreter, stamp = venv / "bin" / "python", venv / STAMP
    if interpreter.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return interpreter, "re-used"
    if venv.exists():
        shutil.rmtree(venv)
    started = time.perf_counter()
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        errors = [line for line in (pip.stderr + pip.stdout).splitlines()
                  if not line.startswith("WARNING: Location")]
        sys.stderr.write("pip could not install Flower's requirements:\n" + "\n".join(errors[-40:]) + "\n")
        raise SystemExit(1)
    stamp.write_text(digest + "\n")
    return interpreter, f"created in {time.perf_counter() - started:.0f} s"


# ----------------------------------------------------------------------------- children (our venv)
def _partition_digest(indices) -> str:
    import numpy as np

    sha = hashlib.sha256()
    for rows in indices:
        sha.update(np.asarray(rows, np.int64).tobytes() + b"|")
    return sha.hexdigest()


def child_export(spec: dict) -> dict:
    """Write the job file for ``spec["devices"]`` devices (see the module docstring)."""
    import numpy as np

    from cosim.scenario import load_scenario
    from cosim.world import build_world

    scenario = load_scenario(None, overrides(spec["devices"], spec["rounds"], spec["backend"]))
    world = build_world(scenario)
    indices = world.partition.indices
    x_train = world.dataset.x_train.reshape(world.dataset.x_train.shape[0], -1)
    rows = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    sizes = np.array([i.size for i in indices], np.int64)
    w0 = np.asarray(world.initial_state().w, np.float32)
    np.savez(spec["path"], x=x_train[rows].astype(np.float32), y=world.dataset.y_train[rows].astype(np.int64),
             indices=rows, offsets=np.concatenate([[0], np.cumsum(sizes)]),
             x_test=np.asarray(world.evaluator.x_test, np.float32).reshape(len(world.evaluator.y_test), -1),
             y_test=np.asarray(world.evaluator.y_test, np.int64), w0=w0,
             layer_sizes=np.asarray(world.model.layer_sizes, np.int64),
             learning_rate=np.float64(scenario.algorithm.learning_rate),
             local_steps=np.int64(scenario.algorithm.local_steps))
    return {"partition_sha256": _partition_digest(indices), "num_params": int(w0.size),
            "samples": int(sizes.sum()), "empty_devices": int((sizes == 0).sum()),
            "w0_sha256": hashlib.sha256(w0.tobytes()).hexdigest(),
            "learning_rate": float(scenario.algorithm.learning_rate),
            "local_steps": int(scenario.algorithm.local_steps)}


def child_ours(spec: dict) -> dict:
    """This project's rounds; the round times from after the world is built."""
    import numpy as np

    from cosim.engine import Engine
    from cosim.scenario import load_scenario

    started = time.perf_counter()
    scenario = load_scenario(None, overrides(spec["devices"], spec["rounds"], spec["backend"]))
    engine = Engine(scenario)
    state = engine.initial_state()
    w0 = np.asarray(state.w, np.float32)
    same = {"partition": _partition_digest(engine.world.partition.indices) == spec["partition_sha256"],
            "w0": hashlib.sha256(w0.tobytes()).hexdigest() == spec["w0_sha256"]}
    parts: dict[str, float] = {}

    def timed(obj, name: str, key: str) -> None:
        # measurement only: the method's seconds added to parts[key]
        method = getattr(obj, name)

        def wrapper(*a, **k):
            begun = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                parts[key] = parts.get(key, 0.0) + time.perf_counter() - begun

        setattr(obj, name, wrapper)

    timed(engine.algorithm, "local_update", "local")
    split = []
    marks = [time.perf_counter()]
    record = None
    for t in range(spec["rounds"]):
        parts.clear()
        state, record = engine.run_round(t, state)
        marks.append(time.perf_counter())
        split.append(dict(parts))
        if record.evaluated:
            raise RuntimeError(f"round {t} evaluated inside the timed rounds")
    evaluator = dataclasses.replace(engine.world.evaluator, every=1)
    evaluated = evaluator.columns(engine.algorithm, state, spec["rounds"] - 1)
    return {"round_s": [b - a for a, b in itertools.pairwise(marks)], "startup_s": marks[0] - started,
            "local_s": [p.get("local", 0.0) for p in split],
            "accuracy": float(evaluated.scalars["test_accuracy"]), "same_as_export": same}


# ----------------------------------------------------------------------------- driver
def _our_env() -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=path)


def run_child(kind: str, spec: dict, args, workdir: Path) -> dict:
    out = workdir / f"{kind}-{spec['devices']}.json"
    spec = dict(spec, out=str(out))
    measured = run_measured([sys.executable, __file__, "--child", kind, json.dumps(spec)], _our_env(),
                            args.sample_s, args.timeout_s, workdir / f"{kind}-{spec['devices']}.log")
    return {**json.loads(out.read_text()), **measured}


def run_flower(interpreter: Path, job: Path, rounds: int, devices: int, args, workdir: Path) -> dict:
    out = workdir / f"flower-{devices}.json"
    env = dict(os.environ, PYTHONPATH=str(FLOWER_DIR), FLWR_TELEMETRY_ENABLED="0",
               RAY_USAGE_STATS_ENABLED="0", PYTHONNOUSERSITE="1")
    env.pop("VIRTUAL_ENV", None)
    measured = run_measured([str(interpreter), str(FLOWER_APP), "--data", str(job), "--rounds", str(rounds),
                             "--out", str(out), "--client-cpus", str(args.client_cpus)], env,
                            args.sample_s, args.timeout_s, workdir / f"flower-{devices}.log")
    return {**json.loads(out.read_text()), **measured}


def summarise(side: dict) -> dict:
    """Means over rounds 2..N: seconds per round, and the seconds of local training in it
    (ours: ``local_update``, all devices; Flower: the clients' SGD steps, summed)."""
    timed = side["round_s"][1:]
    training = side.get("local_s") or side.get("client_compute_s") or []
    return {**side, "s_per_round": statistics.fmean(timed), "median_s": statistics.median(timed),
            "first_round_s": side["round_s"][0],
            "training_s": statistics.fmean(training[1:]) if len(training) > 1 else None}


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        kind, spec = args.child[0], json.loads(args.child[1])
        result = {"export": child_export, "ours": child_ours}[kind](spec)
        Path(spec["out"]).write_text(json.dumps(result))
        return
    load = os.getloadavg()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="vs-flower-"))
    workdir.mkdir(parents=True, exist_ok=True)
    interpreter, venv_note = (None, "not used")
    if "flower" in args.sides:
        interpreter, venv_note = ensure_venv(Path(args.venv), args.python)
        print(f"Flower's venv {args.venv}: {venv_note}", flush=True)
    results: dict[int, dict] = {}
    for devices in args.devices:
        rounds = rounds_for(args, devices)
        job = workdir / f"job-{devices}.npz"
        spec = {"devices": devices, "rounds": rounds, "path": str(job), "backend": args.backend}
        exported = run_child("export", spec, args, workdir)
        print(f"K = {devices:,}: job written ({exported['samples']:,} samples, "
              f"{exported['empty_devices']} devices without any, d = {exported['num_params']:,})", flush=True)
        entry = {"rounds": rounds, "export": exported}
        for side in args.sides:
            if side == "ours":
                entry["ours"] = summarise(run_child("ours", {**spec, **exported}, args, workdir))
            else:
                entry["flower"] = summarise(run_flower(interpreter, job, rounds, devices, args, workdir))
            done = entry[side]
            print(f"  {side}: {done['s_per_round']:.3f} s/round, accuracy {done['accuracy']:.4f}, "
                  f"peak RSS {done['peak_rss_gib']:.2f} GiB", flush=True)
        if "ours" in entry and "flower" in entry:
            entry["ratio"] = entry["flower"]["s_per_round"] / entry["ours"]["s_per_round"]
            entry["accuracy_difference"] = entry["flower"]["accuracy"] - entry["ours"]["accuracy"]
        results[devices] = entry
    print()
    header = ("| K | rounds | side | s/round (mean of 2..N) | median | of it local training | round 1 "
              "| before round 1 | process wall s | peak RSS GiB | peak PSS GiB | processes | accuracy |")
    print(header)
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for devices, entry in results.items():
        for side in args.sides:
            s = entry[side]
            before = s.get("startup_s", 0.0) + s.get("import_s", 0.0)
            print(f"| {devices:,} | {entry['rounds']} | {side} | {s['s_per_round']:.3f} | {s['median_s']:.3f} "
                  f"| {_fmt(s['training_s'], '.3f')} | {s['first_round_s']:.2f} | {before:.1f} | {s['wall_s']:.1f} "
                  f"| {s['peak_rss_gib']:.2f} "
                  f"| {s['peak_pss_gib']:.2f} | {s['max_processes']} | {s['accuracy']:.4f} |")
    for devices, entry in results.items():
        if "ratio" in entry:
            print(f"K = {devices:,}: Flower s/round / ours = {entry['ratio']:.2f}x; accuracy Flower - ours "
                  f"= {entry['accuracy_difference']:+.4f}")
    summary = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": git_commit(), "load_before": load, "load_after": os.getloadavg(),
        "venv": venv_note, "client_cpus": args.client_cpus, "backend": args.backend, "workdir": str(workdir),
        "results": {str(k): {"rounds": e["rounds"], "ratio": e.get("ratio"),
                             "accuracy_difference": e.get("accuracy_difference"),
                             **{side: {key: e[side].get(key) for key in
                                       ("s_per_round", "median_s", "training_s", "first_round_s", "round_s",
                                        "startup_s", "import_s", "local_s", "client_compute_s",
                                        "accuracy", "peak_rss_gib", "peak_pss_gib", "max_processes",
                                        "wall_s", "flwr_version", "same_as_export")}
                                for side in args.sides}}
                    for k, e in results.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
