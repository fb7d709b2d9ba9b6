"""Round-time benchmark (issue 6): the project's round against a per-device loop and the RNG floor.

Run as a plain script from the repository root::

    .venv/bin/python benchmarks/round_time.py                  # paper MNIST round, K = 100
    .venv/bin/python benchmarks/round_time.py --devices 10,100,1000   # time and memory vs K
    .venv/bin/python benchmarks/round_time.py --tiny           # seconds; what the test runs
    .venv/bin/python benchmarks/round_time.py --baseline-tree /tmp/base   # this tree against another, one run

It builds the paper's MNIST round from ``scenarios/paper_mnist.toml`` (the scenario's
own data by default: the real MNIST that ships with the install; ``--dataset
synthetic`` for synthetic data of the same shapes, which ``--tiny`` always uses) and
times, after warm-up, the median of ``--repeats`` repetitions of:

``exact``      the project's full round (:meth:`cosim.engine.Engine.run_round`: channel
               and CSI, local training of both phases for all devices, PHY of both
               phases, server updates) with ``estimator = "reparameterization"``;
``lrt``        the same with ``estimator = "local_reparameterization"``;
``reference``  the per-device ``tfp.layers`` loop of ``benchmarks/_reference.py``;
``floor``      drawing K*M*d*E*2 standard normals with TF's fastest generator here
               (``benchmarks/_rng_floor.py``).

Evaluation of the global model is timed apart. Every configuration runs in its own
subprocess (so each gets its own peak RSS, read from ``VmHWM``). They are built and
warmed up one after the other, then their timed repetitions are interleaved: exact,
LRT, reference, floor, exact, LRT, ... This VM's speed drifts by 10-20 % within
minutes (and up to 2x from one run to the next), and a configuration timed minutes
after another sees a different machine; interleaved, every ratio compares
repetitions taken within about a minute of each other. ``--in-process`` runs them all in this process (the
same interleaving) and takes each configuration's peak over its own build and steps,
resetting ``VmHWM`` before each through ``/proc/self/clear_refs``. While a
subprocess works, its RSS is polled and the subprocess is killed if it passes
``--memory-limit-gib`` (default: 24 GiB or the memory available, whichever is
smaller), so a configuration that does not fit is reported instead of taking the
machine down.

Output: one table on stdout; its last line is the same figures as one JSON object
with the keys ``exact_s``, ``lrt_s``, ``reference_s``, ``floor_s``, ``phy_share`` (of
the exact round) and ``peak_rss_gib`` (the larger of the two project rounds), plus
extra keys (ratios, per-configuration peaks, load average). With ``--devices`` the
table and the JSON hold one row per K instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # as `cosim` does; applies to every configuration alike

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCENARIO = ROOT / "scenarios" / "paper_mnist.toml"
CONFIGS = ("exact", "lrt", "reference", "floor")
ESTIMATORS = {"exact": "reparameterization", "lrt": "local_reparameterization"}
RESULT_PREFIX = "ROUND_TIME_RESULT "
READY = "ROUND_TIME_READY"
STEP = "ROUND_TIME_STEP "
GIB = 2.0**30

TINY_OVERRIDES = (
    "cell.num_devices=4",
    "model.hidden_units=[16, 16]",
    "ofdm.num_subcarriers=64",
    "algorithm.mc_samples=2",
    "algorithm.local_steps=2",
    "data.synthetic_shape=[6, 6, 1]",
    "data.synthetic_train_size=400",
    "data.synthetic_test_size=50",
    "eval.predictive_samples=2",
)


# ---------------------------------------------------------------------- memory and machine
def _status_kib(field: str, pid: int | str = "self") -> int:
    """A ``/proc/<pid>/status`` field in KiB (0 when unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _peak_rss_gib() -> float:
    kib = _status_kib("VmHWM")
    if not kib:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024 / GIB


def _available_gib() -> float:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return float("inf")


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = _status_kib("MemTotal")
    try:
        with open("/proc/meminfo") as meminfo:
            mem = int(meminfo.readline().split()[1])
    except OSError:
        pass
    return f"{cpu}, {cores} cores, {mem / 2**20:.1f} GiB RAM, Python {platform.python_version()}"


# ---------------------------------------------------------------------- scenarios
LITERAL_READINGS = ['algorithm.covariance_parameter="precision"', 'algorithm.nll_reduction="sum"']
"""The paper's literal readings (phase 1 on the precision, the summed NLL): the round the
reference loop implements, timed as ``exact``/``lrt``. The ``shipped_*`` configurations
time the scenario file's own readings (paper_mnist.toml: softplus_std, the mean NLL)."""


def scenario_overrides(args: argparse.Namespace, num_devices: int | None = None, *,
                       literal: bool = True) -> list[str]:
    """``--set`` items that turn the scenario file into the benchmarked round (with the
    paper's literal readings, or, ``literal=False``, the file's own)."""
    items = ["rounds=1000000", "eval.every=1000000"]  # evaluation only where timed apart
    if literal:  # --set may choose them here too
        items += LITERAL_READINGS
    if args.dataset == "synthetic" or args.tiny:
        items.append('data.dataset="synthetic"')
        if not args.tiny:
            k = num_devices or 100
            items.append(f"data.synthetic_train_size={max(10000, 40 * k)}")
    if args.tiny:
        items += TINY_OVERRIDES
    items += list(args.set or ())
    if num_devices is not None:
        items.append(f"cell.num_devices={num_devices}")
    return items


def load(spec: dict):
    from cosim.scenario import load_scenario

    return load_scenario(spec["scenario"], spec["overrides"])


# ---------------------------------------------------------------------- one configuration
class _ReferenceRounds:
    """:class:`_reference.ReferenceLoop` rounds, timed one at a time (as ProjectRounds)."""

    def __init__(self, scenario):
        import _project_round
        from _reference import ReferenceLoop

        if scenario.model.architecture != "mlp":
            raise ValueError("the reference loop is the MLP only (model.architecture = 'mlp')")
        arrays = _project_round.device_arrays(scenario)
        algo = scenario.algorithm
        self.loop = ReferenceLoop(
            arrays["x"], arrays["y"], arrays["counts"], arrays["weights"],
            hidden_units=tuple(scenario.model.hidden_units), num_classes=arrays["num_classes"],
            mc_samples=algo.mc_samples, local_steps=algo.local_steps,
            learning_rate=algo.learning_rate, kl_scale=algo.kl_scale_value(scenario.cell.num_devices),
            init_std=algo.init_std, seed=scenario.seed,
        )
        self.loop.warmup()
        self.samples: list[float] = []

    def step(self) -> float:
        start = time.perf_counter()
        self.loop.run_round()
        self.samples.append(time.perf_counter() - start)
        return self.samples[-1]

    def result(self) -> dict:
        import statistics

        return {"seconds": statistics.median(self.samples), "samples": self.samples,
                "num_params": self.loop.num_params}


def make_timed_round(spec: dict):
    """Build configuration ``spec["config"]`` (one of CONFIGS) and warm it up.

    Returns an object with ``step()`` (time one repetition, returns seconds) and
    ``result()`` (a JSON-able dict: ``seconds`` = the median of the steps, ``samples``
    and the configuration's own figures)."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    config = spec["config"]
    if config in ESTIMATORS:
        import _project_round

        scenario = load(spec | {"overrides": [*spec["overrides"],
                                              f'algorithm.estimator="{ESTIMATORS[config]}"']})
        return _project_round.ProjectRounds(scenario, spec["warmup"])
    if config == "reference":
        return _ReferenceRounds(load(spec))
    if config == "floor":
        import _rng_floor

        scenario = load(spec)
        sizes, num_mc, calls = _fused_layout(scenario)
        return _rng_floor.FloorDraws(_normals_per_round(scenario), sizes, num_mc, calls)
    raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")


def _normals_per_round(scenario) -> int:
    """K * M * d * E * 2: the normals of one exact-estimator round."""
    from learning.models.architectures import build_model

    data = scenario.data
    model = build_model(
        scenario.model.architecture, tuple(data.input_shape), data.num_classes,
        tuple(scenario.model.hidden_units),
    )
    algo = scenario.algorithm
    return scenario.cell.num_devices * algo.mc_samples * model.num_params * algo.local_steps * 2


def _fused_layout(scenario) -> tuple[list[int], int, int]:
    """Tensor sizes, M and the number of per-device fills (K * E * 2) of one exact round."""
    import math

    from learning.models.architectures import build_model

    data = scenario.data
    model = build_model(
        scenario.model.architecture, tuple(data.input_shape), data.num_classes,
        tuple(scenario.model.hidden_units),
    )
    algo = scenario.algorithm
    calls = scenario.cell.num_devices * algo.local_steps * 2
    return [math.prod(s) for s in model.param_shapes], algo.mc_samples, calls


def serve(spec: dict) -> int:
    """The worker's side: build and warm up ``spec``, print READY, then answer one command
    per stdin line: ``step`` times one repetition (prints STEP and its seconds),
    ``result`` prints RESULT and the JSON result and ends the worker."""
    timed = make_timed_round(spec)
    print(READY, flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "step":
            print(f"{STEP}{timed.step()}", flush=True)
        elif command == "result":
            result = timed.result() | {"config": spec["config"], "peak_rss_gib": _peak_rss_gib()}
            print(RESULT_PREFIX + json.dumps(result), flush=True)
            return 0
        else:
            raise ValueError(f"unknown worker command {command!r}; expected 'step' or 'result'")
    return 1


# ---------------------------------------------------------------------- running workers
class Worker:
    """One configuration in a guarded subprocess (:func:`serve`): its RSS is polled while
    it works and it is killed when it passes ``limit_gib``; failures become ``error``."""

    def __init__(self, spec: dict, limit_gib: float):
        self.config, self.limit_gib = spec["config"], limit_gib
        self.error: str | None = None
        self.peak = 0.0
        self._buffer = b""
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3"))
        root, script = ROOT, Path(__file__).resolve()
        if spec.get("tree"):  # the same configuration in another tree (--baseline-tree)
            root = Path(spec["tree"]).resolve()
            script = root / "benchmarks" / "round_time.py"
            env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--worker-spec", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(root),
        )
        self._expect(READY)

    def _expect(self, prefix: str) -> str | None:
        """The rest of the worker's next stdout line that starts with ``prefix``."""
        fd = self.proc.stdout.fileno()
        while self.error is None:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(prefix):
                    return text[len(prefix):]
            ready, _, _ = select.select([fd], [], [], 0.05)
            rss = _status_kib("VmRSS", self.proc.pid) * 1024 / GIB
            self.peak = max(self.peak, rss)
            if rss > self.limit_gib:
                self.proc.kill()
                self.error = f"killed: RSS passed the {self.limit_gib:.1f} GiB limit"
            elif ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait()
                    self.error = f"worker exited with status {self.proc.returncode} (see stderr above)"
                self._buffer += chunk
        return None

    def _send(self, command: str) -> bool:
        if self.error is not None:
            return False
        try:
            self.proc.stdin.write((command + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.error = "worker closed its input (see stderr above)"
            return False
        return True

    def step(self) -> float | None:
        """Time one repetition in the worker; its seconds (None after a failure)."""
        if not self._send("step"):
            return None
        text = self._expect(STEP)
        return None if text is None else float(text)

    def result(self) -> dict:
        if self._send("result"):
            text = self._expect(RESULT_PREFIX)
            if text is not None:
                self.proc.wait()
                return json.loads(text)
        self.proc.kill()
        self.proc.wait()
        return {"config": self.config, "peak_rss_gib": self.peak, "error": self.error}


class _InProcess:
    """:class:`Worker`'s interface on a timed configuration in this process; the peak RSS of a
    configuration is the largest ``VmHWM`` seen over its own build and steps, reset
    before each (``/proc/self/clear_refs``)."""

    def __init__(self, spec: dict):
        self.config = spec["config"]
        self.error: str | None = None
        self.reset = _reset_peak_rss()
        self.timed = self._guard(make_timed_round, spec)
        self.peak = _peak_rss_gib()

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # report, keep the other configurations going
            self.error = f"{type(exc).__name__}: {exc}"
            return None

    def step(self) -> float | None:
        if self.error is not None:
            return None
        _reset_peak_rss()
        seconds = self._guard(self.timed.step)
        self.peak = max(self.peak, _peak_rss_gib())
        return seconds

    def result(self) -> dict:
        result = None if self.error else self._guard(self.timed.result)
        if result is None:
            return {"config": self.config, "error": self.error}
        return result | {"config": self.config, "peak_rss_gib": self.peak,
                         "peak_rss_reset": self.reset}


def run_interleaved(specs: list[dict], in_process: bool, limit_gib: float) -> dict:
    """Build the configurations one after the other, then time their repetitions in
    turn (A B C A B C ...; each ``spec["repeats"]`` times), so that a drift of the
    machine's speed reaches all of them alike; returns each one's result by name."""
    workers = {}
    for spec in specs:
        name = spec.get("name", spec["config"])
        print(f"[round_time] {name}: building and warming up ...", file=sys.stderr, flush=True)
        workers[name] = Worker(spec, limit_gib) if spec.get("tree") or not in_process else _InProcess(spec)
    repeats = {spec.get("name", spec["config"]): spec["repeats"] for spec in specs}
    for rep in range(max(repeats.values())):
        for config, worker in workers.items():
            if rep >= repeats[config]:
                continue
            seconds = worker.step()
            print(f"[round_time] repetition {rep + 1}/{repeats[config]}: {config} "
                  f"{'failed' if seconds is None else f'{seconds:.2f} s'}", file=sys.stderr, flush=True)
    results = {config: worker.result() for config, worker in workers.items()}
    for config, result in results.items():
        if "error" in result:
            print(f"[round_time] {config}: {result['error']}", file=sys.stderr)
    return results


def _spec(args, config: str, num_devices: int | None = None) -> dict:
    repeats = args.repeats
    if config == "reference" and args.reference_repeats is not None:
        repeats = args.reference_repeats
    return {"config": config, "scenario": str(args.scenario), "repeats": repeats,
            "warmup": args.warmup, "overrides": scenario_overrides(args, num_devices)}


def _fmt(value, spec: str = ".2f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


# ---------------------------------------------------------------------- the two modes
def single(args, limit_gib: float) -> dict:
    load_start = os.getloadavg()[0]
    specs = [_spec(args, config) for config in args.only]
    if args.shipped:  # the scenario file's own readings, interleaved with the literal ones
        specs += [_spec(args, config) | {"name": f"shipped_{config}",
                                          "overrides": scenario_overrides(args, literal=False)}
                  for config in args.only if config in ESTIMATORS]
    if args.baseline_tree:  # the project's rounds of another tree, interleaved with these
        specs += [_spec(args, config) | {"tree": str(args.baseline_tree), "name": f"{config}@baseline"}
                  for config in args.only if config in ESTIMATORS]
    results = run_interleaved(specs, args.in_process, limit_gib)
    load_end = os.getloadavg()[0]

    def get(config, key="seconds"):
        return results.get(config, {}).get(key)

    def ratio(a, b):
        return a / b if a and b else None

    exact, lrt, ref, floor = get("exact"), get("lrt"), get("reference"), get("floor")
    peaks = [get(c, "peak_rss_gib") for c in ("exact", "lrt") if get(c, "peak_rss_gib")]
    summary = {
        "exact_s": exact, "lrt_s": lrt, "reference_s": ref, "floor_s": floor,
        "phy_share": get("exact", "phy_share"),
        "peak_rss_gib": max(peaks) if peaks else None,
        "reference_over_exact": ratio(ref, exact), "reference_over_lrt": ratio(ref, lrt),
        "exact_over_floor": ratio(exact, floor),
        "shipped_exact_s": get("shipped_exact"), "shipped_lrt_s": get("shipped_lrt"),
        "shipped_over_literal_exact": ratio(get("shipped_exact"), exact),
        "shipped_over_literal_lrt": ratio(get("shipped_lrt"), lrt),
        "fused_sampler_s": results.get("floor", {}).get("fused", {}).get("seconds"),
        "exact_over_fused_sampler": ratio(
            exact, results.get("floor", {}).get("fused", {}).get("seconds")
        ),
        "lrt_phy_share": get("lrt", "phy_share"),
        "exact_peak_rss_gib": get("exact", "peak_rss_gib"),
        "lrt_peak_rss_gib": get("lrt", "peak_rss_gib"),
        "reference_peak_rss_gib": get("reference", "peak_rss_gib"),
        "floor_generator": get("floor", "generator"),
        "eval_s": get("exact", "eval_seconds"),
        "load_avg_start": round(load_start, 2), "load_avg_end": round(load_end, 2),
        "errors": {c: r["error"] for c, r in results.items() if "error" in r},
        "nonfinite_rounds": {c: get(c, "nonfinite_rounds") for c in ("exact", "lrt")
                             if get(c, "nonfinite_rounds") is not None},
    }
    first = next((r for r in results.values() if "num_params" in r), {})
    print(f"round time: {args.scenario.name} {' '.join(scenario_overrides(args)[2:])}")
    print(f"d = {first.get('num_params', '?')}, uplink symbols/round = "
          f"{get('exact', 'uplink_symbols') or get('lrt', 'uplink_symbols') or '?'}; "
          f"median of {args.repeats} after {args.warmup} warm-up round(s); "
          f"{'one process' if args.in_process else 'one subprocess per configuration'}, "
          "repetitions interleaved")
    print(f"machine: {machine_description()}; load average {load_start:.2f} -> {load_end:.2f}")
    print(f"{'configuration':44s} {'s/round':>9s} {'PHY s':>7s} {'PHY %':>6s} {'eval s':>7s} "
          f"{'peak RSS GiB':>12s}")
    names = {"exact": "ours, reparameterization (exact)", "lrt": "ours, local_reparameterization",
             "reference": "reference: tfp.layers device loop",
             "floor": f"RNG floor ({get('floor', 'generator') or '?'})"}
    for config in args.only:
        r = results[config]
        share = r.get("phy_share")
        print(f"{names[config]:44s} {_fmt(r.get('seconds'), '9.2f', 'error'):>9s} "
              f"{_fmt(r.get('phy_seconds'), '7.2f'):>7s} "
              f"{_fmt(None if share is None else 100 * share, '6.1f'):>6s} "
              f"{_fmt(r.get('eval_seconds'), '7.2f'):>7s} {_fmt(r.get('peak_rss_gib'), '12.2f'):>12s}")
    for config in ESTIMATORS:
        r = results.get(f"shipped_{config}")
        if r is not None:
            print(f"{names[config] + ', shipped readings':44s} "
                  f"{_fmt(r.get('seconds'), '9.2f', 'error'):>9s} "
                  f"{_fmt(r.get('phy_seconds'), '7.2f'):>7s}")
    if summary["fused_sampler_s"] is not None:
        print(f"{'same normals, our fused sampler':44s} "
              f"{summary['fused_sampler_s']:9.2f}")
    for config in ("exact", "lrt"):
        parts = results.get(config, {}).get("phy_parts")
        if parts:
            print(f"PHY of the {config} round (s): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(parts.items())))
    for config, count in summary["nonfinite_rounds"].items():
        if count:
            print(f"WARNING: {count} timed {config} round(s) diverged (NaN or inf updates or "
                  "loss): their times are not those of training; use the scenario's data or "
                  "a smaller learning rate")
    if args.baseline_tree:
        base = {c: get(f"{c}@baseline") for c in ESTIMATORS}
        summary["baseline"] = {
            "tree": str(args.baseline_tree), "exact_s": base["exact"], "lrt_s": base["lrt"],
            "reference_over_exact": ratio(ref, base["exact"]),
            "reference_over_lrt": ratio(ref, base["lrt"]),
            "exact_over_floor": ratio(base["exact"], floor),
        }
        for config in ESTIMATORS:
            r = results.get(f"{config}@baseline")
            if r is not None:
                print(f"{names[config] + ' [baseline]':44s} {_fmt(r.get('seconds'), '9.2f', 'error'):>9s} "
                      f"{_fmt(r.get('phy_seconds'), '7.2f'):>7s}")
        b = summary["baseline"]
        print(f"baseline {args.baseline_tree}: reference/exact = {_fmt(b['reference_over_exact'])}x, "
              f"reference/lrt = {_fmt(b['reference_over_lrt'])}x, "
              f"exact/floor = {_fmt(b['exact_over_floor'])}x")
    if args.shipped:
        print(f"shipped/literal: exact {_fmt(summary['shipped_over_literal_exact'])}x, "
              f"lrt {_fmt(summary['shipped_over_literal_lrt'])}x")
    print(f"ratios: reference/exact = {_fmt(summary['reference_over_exact'])}x, "
          f"reference/lrt = {_fmt(summary['reference_over_lrt'])}x, "
          f"exact/floor = {_fmt(summary['exact_over_floor'])}x, "
          f"exact/fused sampler = {_fmt(summary['exact_over_fused_sampler'])}x")
    return summary


def sweep(args, limit_gib: float) -> dict:
    configs = [c for c in args.only if c in ("exact", "lrt", "reference")]
    rows = []
    for k in args.devices:
        row = {"devices": k}
        for config in configs:
            print(f"[round_time] K={k} {config} ...", file=sys.stderr, flush=True)
            row[config] = run_interleaved([_spec(args, config, k)], args.in_process, limit_gib)[config]
        rows.append(row)
    print(f"time and memory per round vs K: {args.scenario.name}; median of {args.repeats} "
          f"after {args.warmup} warm-up round(s); memory limit {limit_gib:.1f} GiB")
    print(f"machine: {machine_description()}; load average {os.getloadavg()[0]:.2f}")
    header = f"{'K':>6s}"
    for config in configs:
        header += f" {config + ' s':>11s} {config + ' ms/dev':>13s} {config + ' GiB':>11s}"
    print(header)
    for row in rows:
        line = f"{row['devices']:6d}"
        for config in configs:
            r = row[config]
            sec = r.get("seconds")
            line += (f" {_fmt(sec, '11.2f', 'error'):>11s}"
                     f" {_fmt(None if sec is None else 1e3 * sec / row['devices'], '13.1f'):>13s}"
                     f" {_fmt(r.get('peak_rss_gib'), '11.2f'):>11s}")
        print(line)
    for row in rows:
        for config in configs:
            if "error" in row[config]:
                print(f"K={row['devices']} {config}: {row[config]['error']}")
            if row[config].get("nonfinite_rounds"):
                print(f"WARNING: K={row['devices']} {config}: {row[config]['nonfinite_rounds']} "
                      "timed round(s) diverged (NaN or inf updates or loss)")
    summary = {"devices": [r["devices"] for r in rows]}
    for config in configs:
        key = {"exact": "exact", "lrt": "lrt", "reference": "reference"}[config]
        summary[f"{key}_s"] = [r[config].get("seconds") for r in rows]
        summary[f"{key}_peak_rss_gib"] = [r[config].get("peak_rss_gib") for r in rows]
        summary[f"{key}_phy_share"] = [r[config].get("phy_share") for r in rows]
    return summary


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="scenario override (repeatable), as for `cosim run --set`")
    p.add_argument("--dataset", choices=("scenario", "synthetic"), default="scenario",
                   help="the scenario's own data (default; MNIST for paper_mnist.toml) or "
                        "synthetic data of its shapes (at the paper's learning rate the "
                        "synthetic task's dense images diverge within a few rounds, and "
                        "the rounds after that time NaN arithmetic); --tiny is synthetic")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny configuration (K=4, a 36-16-16-C MLP, F=64) that runs in seconds")
    p.add_argument("--devices", type=lambda s: [int(k) for k in s.split(",")],
                   help="sweep K over these values (e.g. 10,100,1000): time and memory per round")
    p.add_argument("--only", type=lambda s: s.split(","), default=None,
                   help=f"comma-separated subset of {','.join(CONFIGS)}")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions (median)")
    p.add_argument("--reference-repeats", type=int, default=None,
                   help="timed rounds of the reference loop (default: --repeats)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up rounds")
    p.add_argument("--in-process", action="store_true",
                   help="run every configuration in this process (peaks per configuration "
                        "through /proc/self/clear_refs)")
    p.add_argument("--memory-limit-gib", type=float, default=None,
                   help="kill a configuration whose RSS passes this (default min(24, available))")
    p.add_argument("--no-shipped", dest="shipped", action="store_false",
                   help="skip the scenario file's own readings (shipped_exact, shipped_lrt; "
                        "timed by default beside the paper's literal ones)")
    p.add_argument("--baseline-tree", type=Path, default=None,
                   help="also time the project's rounds (exact, lrt) of another checkout "
                        "(e.g. `git worktree add /tmp/base HEAD~1`), interleaved with these, "
                        "and print both trees' ratios side by side; the other tree reads "
                        "this tree's --scenario file and --set items, so they must be "
                        "valid there too")
    p.add_argument("--worker-spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.only is None:
        args.only = list(CONFIGS) if args.devices is None else ["exact", "lrt"]
    bad = [c for c in args.only if c not in CONFIGS]
    if bad:
        p.error(f"--only: unknown configuration(s) {bad}; choose from {CONFIGS}")
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.reference_repeats is not None and args.reference_repeats < 1:
        p.error(f"--reference-repeats must be >= 1, got {args.reference_repeats}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.memory_limit_gib is not None and args.memory_limit_gib <= 0:
        p.error(f"--memory-limit-gib must be > 0, got {args.memory_limit_gib}")
    return args


def main(argv=None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    args = parse_args(argv)
    if args.worker_spec:
        return serve(json.loads(args.worker_spec))
    limit = args.memory_limit_gib or min(24.0, max(1.0, _available_gib() - 1.0))
    summary = sweep(args, limit) if args.devices else single(args, limit)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
