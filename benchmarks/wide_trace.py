"""A trace of K devices (default 100,000) written and read without the simulator (issue 61).

The trace is written with :class:`cosim.trace.TraceWriter`, the writer a run uses, with
exactly the datasets a real run writes: the names, groups and dtypes of every
``/rounds`` column, every ``/rounds/per_device`` and ``/rounds/reliability`` series and
every ``/devices`` table are those of a *template* trace, a real run of the tests' tiny
scenario (``tests/cosim/tiny_scenario.py``, K = 8) with ``[participation]`` (half the
devices scheduled, a 10 % dropout), run once with ``cosim run`` when ``--template`` is
not given. At width K the values are plausible, not simulated:

* ``per_device/participated``: each device scheduled with probability ``--fraction``
  (default 0.1), a scheduled one dropping out of one phase with probability 0.1 (codes
  0, 1, 2); the columns the template leaves NaN for a device that did not send
  (``local_distortion_<phase>``, ``tx_power_w_<phase>``, ...) are NaN where it did not
  send that phase, those the template leaves 0 (``tx_energy_j``) are 0 for a device
  not scheduled; every other value is drawn from the template's values of that column
  times a log-normal factor (fractions as they are);
* scalar columns cycle through the template's rows (NaN of a round without evaluation
  included), ``cumulative_*`` grow linearly, ``devices_scheduled`` and
  ``devices_sent_<phase>`` count the drawn codes;
* ``/devices``: a uniform drop in the scenario's disk, path gains d^-4, 20 samples a
  device on 2 labels;
* the scenario stored in the header is the template's with ``cell.num_devices = K``,
  ``rounds = R`` and the participation fraction.

Then each of these runs in a fresh subprocess (its wall time, and its peak resident set,
``ru_maxrss`` of ``wait4``, VmHWM): the writing (seconds per round), ``cosim inspect``,
``cosim verify``, ``cosim plot`` (its default figures), the health summary
(``cosim.health.health``) and ``cosim.api.to_pandas``. Prints a table.

Usage::

    PYTHONPATH=$PWD nice -n 19 .venv/bin/python benchmarks/wide_trace.py --devices 100000
    PYTHONPATH=$PWD .venv/bin/python benchmarks/wide_trace.py --devices 1000 --rounds 200 --keep /tmp/w
    PYTHONPATH=$PWD .venv/bin/python benchmarks/wide_trace.py --write-only --template T.h5 --devices 20000 --out x.h5

``--only inspect,verify`` times those commands only; ``--memory-limit-gib`` caps every
timed subprocess's address space (default 12 GiB: a command that needs more fails with
a MemoryError, reported, rather than take the machine's memory).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("write", "inspect", "verify", "plot", "health", "to_pandas")
PARTICIPATION = "\n[participation]\nfraction = 0.5\ndropout_probability = 0.1\n"


def template_trace(directory: Path) -> Path:
    """A real run's trace: the tests' tiny scenario (K = 8, 4 rounds) with participation."""
    sys.path.insert(0, str(ROOT / "tests" / "cosim"))
    from tiny_scenario import write_tiny

    scenario = write_tiny(directory)
    scenario.write_text(scenario.read_text() + PARTICIPATION)
    subprocess.run([sys.executable, "-m", "cosim.cli", "run", str(scenario), "--no-plots"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return directory / "tiny-seed3.h5"


def _set_key(text: str, section: str | None, key: str, value: str) -> str:
    """``key = value`` in ``[section]`` (None: the top level) of a resolved scenario."""
    parts = re.split(r"(?m)^(\[[^\]]+\]\s*)$", text)
    # parts: [top, header1, body1, header2, body2, ...]
    index = 0 if section is None else next(
        i + 1 for i, part in enumerate(parts) if part.strip() == f"[{section}]")
    body, count = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {value}", parts[index], count=1)
    if not count:
        body = body.rstrip("\n") + f"\n{key} = {value}\n\n"
    parts[index] = body
    return "".join(parts)


def read_template(path: Path) -> dict:
    import h5py

    with h5py.File(path, "r") as file:
        t = int(file.attrs["completed_rounds"])
        template = {"attrs": {k: v for k, v in file.attrs.items()}, "rounds": {}, "series": {},
                    "devices": {k: ds[()] for k, ds in file["devices"].items()}}
        for name, obj in file["rounds"].items():
            if isinstance(obj, h5py.Dataset):
                template["rounds"][name] = obj[:t]
            else:
                template["series"][name] = {k: ds[:t] for k, ds in obj.items()}
    return template


def _devices(k: int, template: dict, radius_m: float, min_m: float, rng) -> dict[str, np.ndarray]:
    r = np.sqrt(rng.uniform(min_m**2, radius_m**2, k))
    phi = rng.uniform(0, 2 * np.pi, k)
    classes = template["devices"]["label_hist"].shape[1]
    samples = 1 + rng.poisson(19, k)
    hist = np.zeros((k, classes), np.int64)
    first = rng.integers(0, classes, k)
    second = (first + rng.integers(1, classes, k)) % classes
    half = samples // 2
    hist[np.arange(k), first] += samples - half
    hist[np.arange(k), second] += half
    tables = {"distance_m": r, "position_m": np.stack([r * np.cos(phi), r * np.sin(phi)], axis=1),
              "path_gain": 1e-3 * r**-4.0, "num_samples": samples, "label_hist": hist}
    return {name: tables[name].astype(template["devices"][name].dtype) for name in template["devices"]}


def _phases(names) -> list[str]:
    return sorted({n.rsplit("_", 1)[1] for n in names if n.startswith("local_distortion_")})


def _per_device_row(template: dict, codes: np.ndarray, failed_phase: np.ndarray, rng) -> dict[str, np.ndarray]:
    """One round's per-device rows at width K from the template's columns."""
    series = template["series"]["per_device"]
    phases = _phases(series)
    t_codes = series["participated"]
    row = {"participated": codes.astype(np.float64)}
    for name, values in series.items():
        if name == "participated":
            continue
        finite = values[np.isfinite(values)]
        drawn = rng.choice(finite, codes.size)
        if "fraction" not in name and np.any(finite > 0):
            drawn = drawn * rng.lognormal(0.0, 0.3, codes.size)
        if np.isnan(values).any():  # NaN for a device that did not send the phase
            phase = name.rsplit("_", 1)[1]
            sent = (codes == 1) | ((codes == 2) & (failed_phase != phases.index(phase)))
            drawn[~sent] = np.nan
        elif np.all(values[t_codes == 0] == 0):  # 0 for a device not scheduled
            drawn[codes == 0] = 0.0
        row[name] = drawn
    return row


def _scalar_row(template: dict, t: int, rounds: int, codes, failed_phase) -> dict[str, float]:
    columns = template["rounds"]
    t_rows = len(columns["round"])
    phases = _phases(template["series"]["per_device"])
    row = {}
    for name, values in columns.items():
        if name == "round":
            continue
        value = values[t % t_rows]
        if name.startswith("cumulative_"):
            value = values[-1] / t_rows * (t + 1)
            if "symbols" in name or "channel_uses" in name:
                value = float(np.floor(value))
        row[name] = value
    if "devices_scheduled" in columns:
        row["devices_scheduled"] = float(np.count_nonzero(codes > 0))
    for i, phase in enumerate(phases):
        if f"devices_sent_{phase}" in columns:
            row[f"devices_sent_{phase}"] = float(np.count_nonzero((codes == 1) | ((codes == 2) & (failed_phase != i))))
    return row


def write_wide(path: Path, template: dict, k: int, rounds: int, fraction: float, seed: int = 0) -> float:
    """Write the wide trace at ``path``; the seconds per round of the writing (rounds only)."""
    from cosim.trace import TraceWriter

    rng = np.random.default_rng(seed)
    scenario = str(template["attrs"]["scenario"])
    scenario = _set_key(scenario, None, "rounds", str(rounds))
    scenario = _set_key(scenario, "cell", "num_devices", str(k))
    scenario = _set_key(scenario, "participation", "fraction", repr(float(fraction)))
    scenario = _set_key(scenario, "trace", "path", json.dumps(str(path)))
    cell = tomllib.loads(scenario)["cell"]
    devices = _devices(k, template, cell["radius_m"], cell["min_distance_m"], rng)
    attrs = {key: template["attrs"][key] for key in ("name", "algorithm", "num_params") if key in template["attrs"]}
    phases = _phases(template["series"]["per_device"])
    t_rows = len(template["rounds"]["round"])
    path.unlink(missing_ok=True)
    with TraceWriter.create(path, scenario, int(template["attrs"]["seed"]), devices=devices, **attrs) as writer:
        start = time.perf_counter()
        for t in range(rounds):
            scheduled = rng.random(k) < fraction
            dropped = scheduled & (rng.random(k) < 0.1)
            codes = np.where(dropped, 2, np.where(scheduled, 1, 0))
            failed_phase = rng.integers(0, len(phases), k)
            writer.append_round(_scalar_row(template, t, rounds, codes, failed_phase))
            for name, values in _per_device_row(template, codes, failed_phase, rng).items():
                writer.append_per_device(name, values)
            for name, values in template["series"].get("reliability", {}).items():
                writer.append_series("reliability", name, values[t % t_rows])
            writer.commit()
        seconds = time.perf_counter() - start
    return seconds / rounds


def _vmhwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(argv: list[str], limit_bytes: int, env: dict) -> tuple[float, float, int, str]:
    """Run ``argv`` in a fresh process: (wall s, peak resident set MiB: ``ru_maxrss`` of
    ``wait4``, the child's VmHWM; exit code; its last line of stdout, or of stderr when
    it failed)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT, preexec_fn=cap)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = (err if code else out).read().strip().splitlines()
    return wall, usage.ru_maxrss / 1024, code, lines[-1] if lines else ""


CHILD = {
    "inspect": ["-m", "cosim.cli", "inspect", "{trace}"],
    "verify": ["-m", "cosim.cli", "verify", "{trace}"],
    "plot": ["-m", "cosim.cli", "plot", "{trace}", "--out", "{figures}"],
    "health": ["-c", "import sys; from cosim.health import health, health_lines; "
                     "print(len(health_lines(health(sys.argv[1]))), 'health lines')", "{trace}"],
    "to_pandas": ["-c", "import sys; from cosim.api import to_pandas; f = to_pandas(sys.argv[1]); "
                        "print(len(f.per_device), 'per-device rows')", "{trace}"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--fraction", type=float, default=0.1, help="participation.fraction")
    parser.add_argument("--template", type=Path, help="a real run's trace (default: run the tiny scenario)")
    parser.add_argument("--keep", type=Path, help="directory to keep the trace and figures in")
    parser.add_argument("--only", default=",".join(COMMANDS))
    parser.add_argument("--memory-limit-gib", type=float, default=12.0)
    parser.add_argument("--write-only", action="store_true",
                        help="write the trace at --out from --template and stop")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", action="store_true", help="a JSON line per command")
    args = parser.parse_args()

    if args.write_only:  # the timed child: the template given
        template = read_template(args.template)
        per_round = write_wide(args.out, template, args.devices, args.rounds, args.fraction)
        print(json.dumps({"seconds_per_round": per_round, "vmhwm_mib": _vmhwm_mib()}))
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="wide-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    template_path = args.template or (work / "tiny-seed3.h5")
    if not template_path.exists():
        template_path = template_trace(work)

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TF_CPP_MIN_LOG_LEVEL="3", MPLBACKEND="Agg")
    limit = int(args.memory_limit_gib * 2**30)
    trace = work / f"wide-K{args.devices}-T{args.rounds}.h5"
    figures = work / f"figures-K{args.devices}"
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    rows = []
    if "write" in only or not trace.exists():
        argv = [sys.executable, __file__, "--write-only", "--devices", str(args.devices), "--rounds",
                str(args.rounds), "--fraction", str(args.fraction), "--template", str(template_path),
                "--out", str(trace)]
        wall, rss, code, last = timed(argv, limit, env)
        detail = json.loads(last)["seconds_per_round"] if code == 0 else last
        rows.append(("write", wall, rss, code, f"{detail:.4f} s/round" if code == 0 else detail))
    size_mib = trace.stat().st_size / 2**20
    for name in [c for c in only if c != "write"]:
        shutil.rmtree(figures, ignore_errors=True)
        argv = [sys.executable] + [a.format(trace=trace, figures=figures) for a in CHILD[name]]
        wall, rss, code, last = timed(argv, limit, env)
        rows.append((name, wall, rss, code, last[:70]))
    print(f"K = {args.devices:,} devices, R = {args.rounds} rounds, fraction {args.fraction}: "
          f"{trace} ({size_mib:,.1f} MiB)")
    print(f"{'command':<10} {'wall s':>8} {'peak RSS MiB':>13} {'exit':>5}  output")
    for name, wall, rss, code, last in rows:
        print(f"{name:<10} {wall:>8.2f} {rss:>13.0f} {code:>5}  {last}")
        if args.json:
            print(json.dumps({"command": name, "devices": args.devices, "rounds": args.rounds,
                              "wall_s": wall, "peak_rss_mib": rss, "exit": code, "size_mib": size_mib}))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
