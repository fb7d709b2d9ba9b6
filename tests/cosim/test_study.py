"""`cosim study run | report` on tiny synthetic studies: the local executor's and Ray's
tasks, resume, failures, the report's statistics, bad study files, and a two-node Ray
cluster (`--address`). The executors' signals, sockets and addresses:
test_study_executor.py."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_cli_startup import _probe
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.health import health
from cosim.scenario import load_scenario, migrate_table, parse_scenario
from cosim.study import StudyError, load_study, run_name, run_study
from cosim.study.cost import run_cost
from cosim.study.report import cost_summary, final_values, study_table
from cosim.study.runner import _follow, _Status
from cosim.study.task import _health_flags
from cosim.trace import TIMING_COLUMNS, read_trace

RAY = Path(sys.executable).with_name("ray")
AXIS = "power.tx_power_dbm"


def _study(directory: Path, *, axes: str = f'"{AXIS}" = [10.0, 20.0]', seeds: str = "[1, 2]",
           extra: str = "", rounds: int = 2) -> Path:
    """A study of the tiny scenario (``rounds`` rounds, evaluated every round)."""
    write_tiny(directory, rounds=rounds, every=1)
    path = directory / "study.toml"
    path.write_text(f'scenario = "tiny.toml"\nseeds = {seeds}\n{extra}\n'
                    f'[set]\n"model.hidden_units" = [8]\n[axes]\n{axes}\n'
                    "[resources]\ncpus_per_run = 1\n")
    return path


def _status(out: Path) -> dict:
    return json.loads((out / "status.json").read_text())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 4-run study (2 tx powers x 2 seeds) run once by the local executor (2 CPUs: two
    worker processes), with a summary line every 0.2 s; ``(study, out, exit status,
    printed)``."""
    base = tmp_path_factory.mktemp("study")
    study = _study(base)
    out = base / "out"
    printed = io.StringIO()
    status = run_study(study, out, num_cpus=2, summary_every_s=0.2, stream=printed)
    return study, out, status, printed.getvalue()


@pytest.fixture(scope="module")
def report_command(finished, tmp_path_factory):
    """`cosim study report` (the default x, rounds) of `finished`'s directory, run once in
    a fresh interpreter (:func:`test_cli_startup._probe`), so that the report read by
    the tests below is also the one whose imports are checked: ``(out, exit status,
    printed, the heavy modules it imported)``."""
    _, out, _, _ = finished
    return (out, *_probe("study", "report", str(out), cwd=tmp_path_factory.mktemp("report")))


@pytest.fixture(scope="module")
def reported(report_command):
    """`finished`'s directory after `cosim study report` (the default x, rounds)."""
    out, status, printed, _ = report_command
    assert status == 0, printed
    return out


@pytest.fixture(scope="module")
def uninterrupted(finished):
    """`finished`'s table (:func:`cosim.study.report.study_table`, what `table.csv`
    holds) without the wall-clock column: what a resumed copy of it must end with."""
    _, out, _, _ = finished
    return study_table(out)[0].drop(columns=list(TIMING_COLUMNS))


def test_a_study_runs_every_point_as_a_ray_task(finished, capsys):
    study, out, status, printed = finished
    assert status == 0
    summaries = [line for line in printed.splitlines() if line.startswith("[summary]")]
    assert summaries, printed
    for line in summaries:  # runs by state, and the rounds committed over all runs
        found = re.search(r"(\d+) done, (\d+) failed, (\d+) running, (\d+) queued of 4; "
                          r"rounds (\d+)/8;", line)
        assert found, line
        assert sum(map(int, found.groups()[:4])) == 4 and int(found.group(5)) <= 8
    names = [run_name({AXIS: p}, s) for p in (10.0, 20.0) for s in (1, 2)]
    assert names[0] == "power.tx_power_dbm=10-seed1"
    for name in names:
        trace = read_trace(out / "runs" / f"{name}.h5")
        assert trace.completed_rounds == 2
        assert trace.attrs["seed"] == int(name[-1])
    state = _status(out)
    assert state["tasks_submitted"] == 4
    assert {r["state"] for r in state["runs"].values()} == {"done"}
    for name, run in state["runs"].items():  # the health summary's flags, from the worker
        flags = health(out / "runs" / f"{name}.h5")["flags"]
        assert run["health_flags"] == [flag["name"] for flag in flags]
    assert (out / "study.toml").read_bytes() == study.read_bytes()


def test_a_run_that_ends_at_chance_says_so_in_its_line(tmp_path):
    """A run that learned and lost it is done unless its loss crossed the divergence
    stop; its line names the health flag (the executor faked: the line alone)."""
    study = load_study(_study(tmp_path))
    points = study.points(tmp_path / "out")
    status = _Status(tmp_path / "status.json", study, points)
    flags = {points[0].name: ["loss_rising", "at_chance"], points[1].name: ["loss_rising"],
             points[2].name: ["fell_from_best"]}

    class Finishing:
        def __init__(self):
            self.names: list[str] = []

        @property
        def pending(self) -> int:
            return len(self.names)

        def submit(self, name, scenario):
            self.names.append(name)

        def wait(self, timeout):
            done = [(name, {"state": "done", "error": None, "completed_rounds": 2, "wall_s": 1.0,
                            "node": "local:h:1", "health_flags": flags.get(name, [])})
                    for name in self.names]
            self.names = []
            return done

    lines: list[str] = []
    _follow(Finishing(), points, points, status, summary_every_s=60.0, say=lines.append)
    assert lines[0] == (f"[1 done, 0 failed / 4] {points[0].name}: done (1.0 s); its last "
                        "evaluation is at chance (health flag at_chance)")
    assert lines[1] == f"[2 done, 0 failed / 4] {points[1].name}: done (1.0 s)"
    assert lines[2] == (f"[3 done, 0 failed / 4] {points[2].name}: done (1.0 s); its last "
                        "evaluation fell from its best (health flag fell_from_best)")
    assert json.loads((tmp_path / "status.json").read_text())["runs"][points[0].name][
        "health_flags"] == ["loss_rising", "at_chance"]
    (tmp_path / "not_a_trace.h5").write_bytes(b"x")  # advice only: the task never raises
    assert _health_flags(tmp_path / "not_a_trace.h5") is None


def test_the_report_equals_a_hand_computation(reported, capsys):
    out = reported
    table = pd.read_csv(out / "table.csv")
    assert len(table) == 8 and list(table.columns[:4]) == ["run", "seed", AXIS, "round"]
    assert {"cumulative_uplink_symbols", "cumulative_channel_uses", "test_accuracy", "ece"} \
        <= set(table.columns)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "table.parquet"), table,
                                  check_dtype=False)
    summary = pd.read_csv(out / "summary.csv")
    for power in (10.0, 20.0):
        for metric in ("test_accuracy", "ece", "posterior_mean_accuracy", "posterior_mean_nll"):
            for r in (0, 1):
                values = np.array([read_trace(out / "runs" / f"{run_name({AXIS: power}, s)}.h5")
                                   .rounds[metric][r] for s in (1, 2)])
                half = stats.t.ppf(0.975, 1) * values.std(ddof=1) / np.sqrt(2)
                row = summary[(summary[AXIS] == power) & (summary["x_kind"] == "round")
                              & (summary["x"] == r) & (summary["metric"] == metric)]
                assert len(row) == 1
                row = row.iloc[0]
                assert row["n"] == 2
                np.testing.assert_allclose(row["mean"], values.mean(), rtol=1e-12)
                np.testing.assert_allclose(row["ci95_low"], values.mean() - half, rtol=1e-9)
                np.testing.assert_allclose(row["ci95_high"], values.mean() + half, rtol=1e-9)
        for kind in ("uplink", "uplink_seconds", "uplink_energy", "total"):  # interpolated onto a grid both seeds cover
            rows = summary[(summary[AXIS] == power) & (summary["x_kind"] == kind)
                           & (summary["metric"] == "test_accuracy")]
            assert len(rows) >= 1 and (rows["n"] == 2).all()
    capsys.readouterr()
    assert main(["study", "report", str(out), "--x", "total"]) == 0  # uplink_energy: below
    printed = capsys.readouterr().out
    assert printed.startswith((out / "results.md").read_text())  # the table of results first
    printed = printed.splitlines()
    assert printed[-1] == cost_summary(pd.read_csv(out / "cost.csv")), printed
    for x in ("rounds", "total"):
        assert (out / "figures" / f"test_accuracy_vs_{x}.png").stat().st_size > 1000
        assert (out / "figures" / f"ece_vs_{x}.png").stat().st_size > 1000
        assert (out / "figures" / f"posterior_mean_accuracy_vs_{x}.png").stat().st_size > 1000
        for phase in ("rho", "nu"):  # the over-the-air error, with its bands
            assert (out / "figures" / f"aggregate_nmse_{phase}_vs_{x}.png").stat().st_size > 1000


def test_the_report_sets_the_cpu_each_run_used_beside_its_estimate(reported):
    """cost.csv, per run: the rounds it committed and evaluated, what the cost model says
    they cost (its own scenario's, fixed cost included), the CPU its rounds used (the sum
    of the trace's cpu_s) and their wall time; the summary line says it over the runs."""
    out = reported
    costs = pd.read_csv(out / "cost.csv")
    assert sorted(costs["run"]) == sorted(run_name({AXIS: p}, s) for p in (10.0, 20.0) for s in (1, 2))
    for row in costs.itertuples():
        trace = read_trace(out / "runs" / f"{row.run}.h5")
        assert row.completed_rounds == trace.completed_rounds == 2
        assert row.evaluations == np.isfinite(trace.rounds["test_accuracy"]).sum() >= 1
        assert (trace.rounds["cpu_s"] > 0).all() and (trace.rounds["wall_s"] > 0).all()
        np.testing.assert_allclose(row.cpu_core_s, trace.rounds["cpu_s"].sum(), rtol=1e-12)
        np.testing.assert_allclose(row.wall_s, trace.rounds["wall_s"].sum(), rtol=1e-12)
        cost = run_cost(parse_scenario(migrate_table(trace.scenario)))
        assert cost.known
        np.testing.assert_allclose(row.estimated_core_s, cost.fixed_core_s + 2 * cost.round_core_s
                                   + row.evaluations * cost.eval_core_s, rtol=1e-9)
    line = cost_summary(costs)
    assert line.startswith("cost: 4 run(s), 8 rounds committed; estimated "), line
    ratio = costs["cpu_core_s"].sum() / costs["estimated_core_s"].sum()
    assert f"of CPU, {ratio:.2f} x the estimate; " in line, line
    untimed = costs.assign(cpu_core_s=np.nan)  # traces written before the column
    assert "; CPU not timed (traces written before the cpu_s column); " in cost_summary(untimed)
    partly = costs.assign(cpu_core_s=[np.nan, *costs["cpu_core_s"][1:]])
    assert "x the estimate (over the 3 runs with both); " in cost_summary(partly)
    unpriced = costs.assign(estimated_core_s=[np.nan, *costs["estimated_core_s"][1:]])
    assert " (1 run(s) the cost table cannot estimate left out); " in cost_summary(unpriced)


def test_the_report_pools_reliability_and_groups_distortion_by_distance(reported):
    """reliability.csv: each combination's bins summed over its seeds (sample-weighted
    accuracy); the table's distortion_<phase>_<ring> columns: the ring means of the
    per-device distortion; and their figures."""
    out = reported
    pooled = pd.read_csv(out / "reliability.csv")
    table = pd.read_csv(out / "table.csv")
    for power in (10.0, 20.0):
        traces = [read_trace(out / "runs" / f"{run_name({AXIS: power}, s)}.h5") for s in (1, 2)]
        last = [np.flatnonzero(np.isfinite(t.rounds["ece"]))[-1] for t in traces]
        counts = [np.nan_to_num(t.reliability["bin_count"][r]) for t, r in zip(traces, last)]
        correct = sum(c * np.nan_to_num(t.reliability["bin_accuracy"][r])
                      for c, t, r in zip(counts, traces, last))
        rows = pooled[pooled[AXIS] == power].sort_values("bin")
        np.testing.assert_array_equal(rows["count"], sum(counts))
        filled = sum(counts) > 0
        np.testing.assert_allclose(rows["accuracy"][filled], correct[filled] / sum(counts)[filled],
                                   rtol=1e-12)
        np.testing.assert_allclose(rows["ece_mean"], np.mean([t.rounds["ece"][r]
                                                              for t, r in zip(traces, last)]))
        trace = traces[0]
        radius = 100.0  # the tiny scenario's cell.radius_m
        distance = trace.devices["distance_m"]
        far = distance >= 2 * radius / 3
        rows = table[(table[AXIS] == power) & (table["seed"] == 1)].sort_values("round")
        np.testing.assert_allclose(rows["distortion_rho_far"],
                                   trace.per_device["local_distortion_rho"][:, far].mean(axis=1),
                                   rtol=1e-6)
    assert (out / "figures" / "reliability.png").stat().st_size > 1000
    for phase in ("rho", "nu"):
        assert (out / "figures" / f"distortion_by_distance_{phase}.png").stat().st_size > 1000


def test_report_imports_neither_tensorflow_nor_ray(report_command):
    _, status, text, heavy = report_command
    assert status == 0, text
    assert heavy == [], heavy
    probe = "import sys, cosim.study.report; print(sorted(m for m in sys.modules if m.startswith('ray')))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_a_rerun_runs_only_what_is_missing_and_ends_with_the_same_table(finished, uninterrupted,
                                                                        tmp_path, capsys):
    """In a moved copy of the study directory (where a trace lies is not part of the
    comparison on resume, so the copy resumes; docs/studies.md), after `cosim study
    compact` dropped the finished runs' checkpoints: they are skipped as done, the
    partial run resumes from its own checkpoint, the missing one starts."""
    study, finished_out, _, _ = finished
    out = tmp_path / "moved"
    shutil.copytree(finished_out, out)
    missing = run_name({AXIS: 10.0}, 2)
    partial = run_name({AXIS: 20.0}, 1)
    (out / "runs" / f"{missing}.h5").unlink()
    with h5py.File(out / "runs" / f"{partial}.h5", "r+") as f:  # killed before round 1's commit
        f.attrs["completed_rounds"] = 1
    assert read_trace(out / "runs" / f"{partial}.h5").completed_rounds == 1

    sizes = {p.name: p.stat().st_size for p in (out / "runs").glob("*.h5")}
    status, printed, heavy = _probe("study", "compact", str(out), cwd=tmp_path)
    assert status == 0 and heavy == [], (printed, heavy)  # no TensorFlow
    assert "compacted 2 (" in printed and "kept 1 as they were" in printed, printed
    for path in (out / "runs").glob("*.h5"):
        with h5py.File(path, "r") as f:
            assert ("checkpoint" in f) == (path.stem == partial), path.name
            if path.stem != partial:
                assert path.stat().st_size < sizes[path.name] and f.attrs["checkpoint_dropped"] == 1
                assert f"{path.name}: " in printed
    assert not list((out / "runs").glob(".*"))

    capsys.readouterr()  # one worker runs both (a second would import TensorFlow again)
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 0
    printed = capsys.readouterr().out
    assert "4 runs, 2 complete already, 0 diverged already, 2 to run" in printed
    state = _status(out)
    assert state["tasks_submitted"] == 2
    actions = {name: run["action"] for name, run in state["runs"].items()}
    assert actions.pop(missing) == "started" and actions.pop(partial) == "resumed"
    assert set(actions.values()) == {"skipped"}
    assert {r["state"] for r in state["runs"].values()} == {"done"}
    assert sum(line.startswith("[") and ": done" in line for line in printed.splitlines()) == 2

    pd.testing.assert_frame_equal(study_table(out)[0].drop(columns=list(TIMING_COLUMNS)), uninterrupted)
    for name in (missing, partial):  # the resumed runs' stored scenarios name where they are now
        assert str(out / "runs") in read_trace(out / "runs" / f"{name}.h5").scenario_text
    assert main(["study", "compact", str(out)]) == 0
    printed = capsys.readouterr().out  # now the two runs just completed
    assert "compacted 2 (" in printed and "kept 2 as they were" in printed, printed
    assert f"{partial}.h5: " in printed and f"{missing}.h5: " in printed


def _processes_naming(*marks: str, also: str = "") -> list[int]:
    """PIDs of the processes (not this one) whose command line contains one of ``marks``
    (and ``also``), or that hold open a file whose path contains one of ``marks``.

    The second test matters: a Ray worker renames itself (``ray::_run_task``, so its
    command line names nothing) and runs in a process group of its own, but keeps its
    log files open in the session directory under ``RAY_TMPDIR``."""
    import os

    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if also not in cmdline:
            continue
        if any(mark in cmdline for mark in marks):
            pids.append(int(entry.name))
            continue
        try:
            opened = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:  # gone, or not ours to read
            continue
        if any(mark in path for path in opened for mark in marks):
            pids.append(int(entry.name))
    return pids


def _in_session(session: int) -> list[str]:
    """The live processes of ``session``, each as ``"PID: command line"``: not a zombie,
    and not one whose command line reads empty (it has released its memory on the way
    out: multiprocessing's resource tracker read a moment after the driver exited)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z" and cmdline:
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_study_killed_with_sigkill_runs_only_what_is_missing(uninterrupted, tmp_path, capsys,
                                                               executor):
    """`cosim study run` (4 runs, 2 at a time) is SIGKILLed as soon as its first run is
    done. With `--executor ray`, all of it at one instant, as when its machine goes down:
    the driver with its whole process group (the embedded Ray's head processes) and the
    Ray workers, which sit in process groups of their own (found by the files they hold
    open under the study's RAY_TMPDIR). Killed with the driver alone, a Ray worker
    finishes the tasks it holds before it notices its raylet gone (docs/studies.md), and
    a tiny study's runs take 0.1 s: it may complete every run. With the local executor
    the driver alone is killed: its workers see it gone and end by themselves (no
    process of the study's session is left). Nothing of the study survives the kill. Run
    again (by the local executor, one worker: what runs again is the driver's decision, made
    from the traces before any executor starts), the study submits exactly the runs whose traces were not complete (resuming
    the partial ones) and ends with the table of the uninterrupted study (the
    `finished` fixture: the same study run once)."""
    import os
    import signal
    import tempfile
    import time

    study = _study(tmp_path)
    out = tmp_path / "out"
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled"}
    driver = subprocess.Popen([sys.executable, "-m", "cosim.cli", "study", "run", str(study),
                               "--out", str(out), "--num-cpus", "2", "--executor", executor],
                              env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            try:
                if any(r["state"] == "done" for r in _status(out)["runs"].values()):
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        assert driver.poll() is None, "the study ended before it could be killed"
        workers = _processes_naming(ray_tmp)
        if executor == "local":  # the driver alone: its workers must leave by themselves
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait(timeout=300)
            deadline = time.monotonic() + 120
            while _in_session(driver.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _in_session(driver.pid), "local workers outlived their killed driver"
        with contextlib.suppress(ProcessLookupError):  # the group is gone with the local one
            os.killpg(driver.pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while workers and time.monotonic() < deadline:  # and any worker started meanwhile
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
            workers = _processes_naming(ray_tmp)
        driver.wait(timeout=300)
        survivors = _processes_naming(ray_tmp)
    finally:
        for line in _in_session(driver.pid):  # stop what the test started, whatever happened
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        for pid in _processes_naming(ray_tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert survivors == [], f"Ray processes outlived the killed study: {survivors}"

    names = [run_name({AXIS: p}, seed) for p in (10.0, 20.0) for seed in (1, 2)]
    complete = {n for n in names if (out / "runs" / f"{n}.h5").exists()
                and read_trace(out / "runs" / f"{n}.h5").completed_rounds == 2}
    partial = {n for n in names if (out / "runs" / f"{n}.h5").exists()} - complete
    assert 1 <= len(complete) < len(names)

    capsys.readouterr()
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 0
    state = _status(out)
    assert state["tasks_submitted"] == len(names) - len(complete)
    for name, run in state["runs"].items():
        want = "skipped" if name in complete else "resumed" if name in partial else "started"
        assert run["action"] == want, (name, run)
        assert run["state"] == "done"
    pd.testing.assert_frame_equal(study_table(out)[0].drop(columns=list(TIMING_COLUMNS)), uninterrupted)


def test_failing_and_diverging_runs_are_reported_and_the_others_complete(tmp_path, capsys):
    # one worker runs the four in turn. 10 training images cannot feed 8 devices of ~20
    # samples: valid, fails at set-up; a learning rate of 1000 diverges in round 1 (the
    # trace holds it)
    study = _study(tmp_path, seeds="[1]", axes='"data.synthetic_train_size" = [1200, 10]\n'
                   '"algorithm.learning_rate" = [0.05, 1000.0]')
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 1
    printed = capsys.readouterr().out
    runs = _status(out)["runs"]
    good = "data.synthetic_train_size=1200,algorithm.learning_rate=0.05-seed1"
    diverged = "data.synthetic_train_size=1200,algorithm.learning_rate=1000-seed1"
    setup = [f"data.synthetic_train_size=10,algorithm.learning_rate={lr}-seed1"
             for lr in ("0.05", "1000")]
    assert runs[good]["state"] == "done"
    assert read_trace(out / "runs" / f"{good}.h5").completed_rounds == 2
    assert runs[diverged]["state"] == "failed" and "diverged" in runs[diverged]["error"]
    for bad in setup:
        assert runs[bad]["state"] == "failed" and "SetupError" in runs[bad]["error"]
        line = next(line for line in printed.splitlines() if f"] {bad}: failed" in line)
        assert "SetupError" in line, printed
    assert "1 done, 3 failed of 4" in printed

    # again: the complete run is skipped, the diverged one is reported from its trace,
    # only the two set-up failures run (and fail) again
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 1
    printed = capsys.readouterr().out
    assert "4 runs, 1 complete already, 1 diverged already, 2 to run" in printed
    state = _status(out)
    assert state["tasks_submitted"] == 2
    assert state["runs"][diverged]["action"] == "skipped"
    assert "diverged: round" in state["runs"][diverged]["error"]
    assert "1 done, 3 failed of 4" in printed


def test_a_worker_releases_each_runs_memory_before_the_next(tmp_path):
    """A run's objects sit in reference cycles (tf.functions of their own methods) that
    hold its host buffers; a worker runs one task after another, so each task ends with
    a full collection (:func:`cosim.study.task._run_and_release`). With the automatic collector
    off, no run's ``BufferPool`` outlives its task (without the collection, one per run
    stayed: +0.55 GB per paper-size run, measured)."""
    import gc

    import phy.symbol_gains  # noqa: F401  (its pool of the compiled chain's gains is the process's)
    from cosim.scenario import load_scenario
    from cosim.study.runner import _run_and_release
    from native.host_arrays import BufferPool

    def pools():
        return sum(isinstance(o, BufferPool) for o in gc.get_objects())

    gc.collect()
    alive = pools()
    gc.disable()
    try:
        for seed in (1, 2):
            (tmp_path / str(seed)).mkdir()
            scenario = load_scenario(write_tiny(tmp_path / str(seed), rounds=1, every=100,
                                                hidden=8), [f"seed={seed}"])
            summary = _run_and_release(scenario)
            assert summary.completed_rounds == 1
            assert pools() == alive
    finally:
        gc.enable()


@pytest.mark.parametrize(("text", "expected"), [
    ('scenario = "tiny.toml"\nseeds = [1]\ncolour = 1\n', "colour: unknown key"),
    ('scenario = "nope.toml"\nseeds = [1]\n', "scenario: 'nope.toml' is not a scenario file"),
    ('scenario = "tiny.toml"\nseeds = "1"\n', "seeds: must be a non-empty list of ints (got '1')"),
    ('scenario = "tiny.toml"\nseeds = [1, 1]\n', "seeds: must be distinct"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"power.tx_power_dbm" = 10.0\n',
     "axes.power.tx_power_dbm: must be a non-empty list of values (got 10.0)"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes]\nseed = [1, 2]\n', "axes.seed: set by the study"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[resources]\ncpus_per_run = 0\n',
     "resources.cpus_per_run: must be a positive number (got 0)"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[resources]\ngpus = 1\n', "resources.gpus: unknown key"),
    ('scenario = "tiny.toml"\nseeds = [1, 2]\n[axes]\n"power.tx_power_dbm" = [10.0, "loud"]\n',
     'point power.tx_power_dbm = "loud", seed 1: power.tx_power_dbm:'),
    ('scenario = "tiny.toml"\nseeds = [1]\n[set]\n"cell.radius_mm" = 5\n', "cell.radius_mm"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes\n', "TOML syntax error"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"algorithm.name" = ["fedavg"]\n[only]\n'
     '"power.tx_power_dbm" = {"algorithm.name" = ["fedavg"]}\n', "only.power.tx_power_dbm: not an axis"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"algorithm.name" = ["fedavg", "fedprox"]\n'
     '"power.tx_power_dbm" = [10.0, 20.0]\n[only]\n'
     '"power.tx_power_dbm" = {"algorithm.name" = ["fedsmoo"]}\n',
     "only.power.tx_power_dbm.algorithm.name: ['fedsmoo'] not among the axis's values"),
    ('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"power.tx_power_dbm" = [10.0, 20.0]\n[only]\n'
     '"power.tx_power_dbm" = {"power.tx_power_dbm" = [10.0]}\n',
     "only.power.tx_power_dbm.power.tx_power_dbm: not another axis"),
])
def test_bad_study_files_exit_2_naming_the_key(tmp_path, capsys, text, expected):
    write_tiny(tmp_path, rounds=2)
    study = tmp_path / "study.toml"
    study.write_text(text)
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert not out.exists(), "nothing is written for a bad study"


def test_every_point_is_validated_before_anything_runs(tmp_path):
    study = _study(tmp_path, axes=f'"{AXIS}" = [10.0, 1000.0]\n"algorithm.name" = ["fedavg", "x"]')
    with pytest.raises(StudyError) as error:
        load_study(study)
    problems = error.value.problems
    assert any(p.startswith(f'point {AXIS} = 1000.0, algorithm.name = "fedavg", seed 1: '
                            f"{AXIS}:") for p in problems), problems
    assert any('algorithm.name = "x", seed 2: algorithm.name' in p for p in problems), problems


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not RAY.exists(), reason="the `ray` command is not installed")
def test_a_study_runs_on_a_two_node_ray_cluster(tmp_path, capsys, monkeypatch):
    # one authentication mode for the head, the second node and the driver: Ray turns
    # token authentication on for a head when ~/.ray/auth_token exists but not for a
    # node joining it, which then fails to connect
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)  # every process of this cluster writes there
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env_cmd = {"capture_output": True, "text": True, "timeout": 600}
    try:
        head = subprocess.run([str(RAY), "start", "--head", f"--port={port}", "--num-cpus=1",
                               "--include-dashboard=false", "--disable-usage-stats"], **env_cmd)
        assert head.returncode == 0, head.stdout + head.stderr
        worker = subprocess.run([str(RAY), "start", f"--address={address}", "--num-cpus=1",
                                 "--disable-usage-stats"], **env_cmd)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        study = _study(tmp_path, seeds="[1]")
        out = tmp_path / "out"
        assert main(["study", "run", str(study), "--out", str(out), "--address", address]) == 0
        printed = capsys.readouterr().out
        assert f"cluster {address}, 2 CPUs, 2 node(s)" in printed
        runs = _status(out)["runs"].values()
        assert {r["state"] for r in runs} == {"done"}
        assert len({r["node"] for r in runs}) == 2, "one run on each node"
        for power in (10.0, 20.0):
            assert read_trace(out / "runs" / f"{run_name({AXIS: power}, 1)}.h5").completed_rounds == 2
    finally:
        _stop_nodes_of(port, ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _stop_nodes_of(port: int, ray_tmp: str) -> None:
    """Stop the Ray processes of the cluster at ``port`` only (``ray stop`` would stop
    every Ray on the machine, a user's too): every process whose command line names the
    cluster's GCS port or its ``RAY_TMPDIR`` (or that holds a file open there: its
    workers), SIGTERM, then SIGKILL after 10 s."""
    import os
    import signal
    import time

    marks = (f":{port}", f"--gcs_server_port={port}", f"--port={port}", ray_tmp)

    def ours() -> list[int]:
        return _processes_naming(*marks, also="ray")

    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in ours():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while ours() and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not ours(), f"Ray processes of port {port} still running: {ours()}"


def test_the_report_groups_list_valued_axes(tmp_path):
    """An axis over arrays (``model.hidden_units``) names its runs and groups its rows
    (lists become tuples in the table); no Ray needed: the traces are written here."""
    from small_trace import write_small_trace

    from cosim.study import RUNS_DIR, STUDY_COPY
    from cosim.study.report import study_table, summarize_over_seeds

    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text('scenario = "x"\nseeds = [1, 2]\n[axes]\n"model.hidden_units" = [[8], [16, 16]]\n')
    for units in ([8], [16, 16]):
        for seed in (1, 2):
            write_small_trace(out / RUNS_DIR / f"{run_name({'model.hidden_units': units}, seed)}.h5")
    table, axes = study_table(out)
    assert axes == ["model.hidden_units"] and set(table["model.hidden_units"]) == {(8,), (16, 16)}
    summary = summarize_over_seeds(table, axes, metrics=["test_accuracy"])
    rows = summary[(summary["x_kind"] == "round") & (summary["model.hidden_units"] == (8,))]
    assert list(rows["n"]) == [2, 2, 2]
    np.testing.assert_allclose(rows["mean"], [0.3, 0.4, 0.5])


@pytest.mark.parametrize(("x", "column"), [("uplink_seconds", "cumulative_uplink_seconds"),
                                           ("uplink_energy", "cumulative_uplink_energy_j")])
def test_the_report_against_uplink_seconds_and_energy(tmp_path, x, column):
    """``cosim study report --x uplink_seconds | uplink_energy``: each seed's accuracy
    interpolated onto the grid both seeds cover (seed 1 spends 0.5 s and 2 J per round,
    seed 2 0.75 s and 3 J), by hand, and the figure named after the axis."""
    from small_trace import write_small_trace

    from cosim.study import RUNS_DIR, STUDY_COPY

    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text(f'scenario = "x"\nseeds = [1, 2]\n[axes]\n"{AXIS}" = [10.0]\n')
    per_round = {1: (0.5, 2.0), 2: (0.75, 3.0)}
    for seed, (seconds, joules) in per_round.items():
        write_small_trace(out / RUNS_DIR / f"{run_name({AXIS: 10.0}, seed)}.h5", seconds=seconds,
                          energy_j=joules)
    assert main(["study", "report", str(out), "--x", x]) == 0
    assert (out / "figures" / f"test_accuracy_vs_{x}.png").stat().st_size > 1000
    summary = pd.read_csv(out / "summary.csv")
    rows = summary[(summary["x_kind"] == x) & (summary["metric"] == "test_accuracy")]
    index = 0 if x == "uplink_seconds" else 1
    curves = [(per_round[s][index] * np.arange(1, 4), 0.3 + 0.1 * np.arange(3)) for s in (1, 2)]
    grid = np.linspace(curves[1][0][0], curves[0][0][-1], 50)  # the largest first, smallest last x
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    np.testing.assert_allclose(rows["x"], grid, rtol=1e-12)
    np.testing.assert_allclose(rows["mean"], values.mean(axis=0), rtol=1e-12)
    assert (rows["n"] == 2).all()
    table = pd.read_csv(out / "table.csv")
    assert column in table.columns


def test_final_values_keep_the_studys_run_order():
    """Runs in the table's (the study file's) order, whatever round each ended at: the
    final-value figures then list and colour the axis values as the curves do (an
    unstable sort by round once scrambled them)."""
    runs = [("z", 1), ("z", 2), ("y", 1), ("y", 2), ("x", 1), ("x", 2)]
    rows = []
    for name, seed in runs:
        for r in range(4):
            ended = name == "y" and seed == 1 and r > 1  # diverged: NaN evaluations after round 1
            rows.append({"run": f"{name}-seed{seed}", "seed": seed, "algorithm.name": name,
                         "round": r, "test_accuracy": np.nan if ended else 0.1 * r + seed})
    table = pd.DataFrame(rows)  # the study's order, as study_table builds it
    final = final_values(table, ["algorithm.name"], "test_accuracy")
    assert final["run"].tolist() == [f"{n}-seed{s}" for n, s in runs]
    assert final.set_index("run").loc["y-seed1", "round"] == 1
    assert final.set_index("run").loc["x-seed2", "test_accuracy"] == pytest.approx(2.3)


def test_the_driver_waits_on_ray_in_short_slices():
    """Python runs the SIGTERM handler only between bytecodes: the driver's waits inside
    Ray (``ray.wait(timeout=wait_timeout(...))``) last at most WAIT_SLICE_S, even with the
    next summary 30 s away (it once waited for the summary, holding a SIGTERM that long),
    and end early when a summary is due sooner."""
    from cosim.study.runner import WAIT_SLICE_S, wait_timeout

    assert wait_timeout(30.0) == WAIT_SLICE_S <= 0.5
    assert wait_timeout(0.3) == 0.3 and wait_timeout(-5.0) == 0.1


def test_only_sweeps_an_axis_at_some_values_of_another(tmp_path):
    """``[only]``: the tx power is swept for FedAvg alone; FedProx runs once per seed at
    the axis's first value. The points, their names and the report's table follow."""
    from small_trace import write_small_trace

    from cosim.study import RUNS_DIR, STUDY_COPY
    from cosim.study.report import study_table

    study = _study(tmp_path, axes=f'"algorithm.name" = ["fedavg", "fedprox"]\n"{AXIS}" = [10.0, 20.0]',
                   extra=f'[only]\n"{AXIS}" = {{"algorithm.name" = ["fedavg"]}}')
    loaded = load_study(study)
    combos = [(p.axis_values["algorithm.name"], p.axis_values[AXIS], p.seed) for p in loaded.points()]
    assert combos == [("fedavg", 10.0, 1), ("fedavg", 10.0, 2), ("fedavg", 20.0, 1),
                      ("fedavg", 20.0, 2), ("fedprox", 10.0, 1), ("fedprox", 10.0, 2)]
    assert all(p.scenario.power.tx_power_dbm == p.axis_values[AXIS] for p in loaded.points())
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text(study.read_text())
    for point in loaded.points(out, validate=False):
        write_small_trace(out / RUNS_DIR / f"{point.name}.h5")
    table, axes = study_table(out)
    assert axes == ["algorithm.name", AXIS]
    groups = table.groupby(["algorithm.name", AXIS])["seed"].nunique()
    assert groups.to_dict() == {("fedavg", 10.0): 2, ("fedavg", 20.0): 2, ("fedprox", 10.0): 2}
    # the legends leave out the axis where it is not swept (FedProx's placeholder power)
    from cosim.study.report import _combination_label
    only = load_study(study, validate=False).only
    assert _combination_label(axes, ("fedprox", 10.0), None, only) == "FedProx"
    assert _combination_label(axes, ("fedavg", 20.0), None, only) == "FedAvg, P = 20 dBm"
    assert _combination_label([AXIS], (20.0,), None, only) == "P = 20 dBm"


def test_a_shipped_name_beside_a_directory_of_that_name_is_the_shipped_study(tmp_path, monkeypatch):
    """``cosim study run init_std_mnist --out init_std_mnist`` run again from the same
    directory: the bare name is the shipped study, not the output directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "init_std_mnist").mkdir()
    (tmp_path / "quickstart").mkdir()
    study = load_study("init_std_mnist")
    assert study.source.name == "init_std_mnist.toml" and study.source.is_file()
    assert load_scenario("quickstart").name == "quickstart"


def test_an_axis_mixing_a_keyword_and_numbers_writes_parquet(tmp_path):
    """``algorithm.covariance_learning_rate = ["learning_rate", 5.0]``: the Parquet table
    holds the axis as text (one type per column), the CSV as written."""
    from cosim.study.report import parquet_ready

    table = pd.DataFrame({"run": ["a", "b"], "seed": [1, 1],
                          "algorithm.covariance_learning_rate": ["learning_rate", 5.0],
                          "round": [0, 0], "test_accuracy": [0.5, 0.6]})
    ready = parquet_ready(table, ["algorithm.covariance_learning_rate"])
    ready.to_parquet(tmp_path / "t.parquet", index=False)
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert list(back["algorithm.covariance_learning_rate"]) == ["learning_rate", "5.0"]


def test_stability_measures_the_drop_after_the_peak_and_the_time_near_it():
    """One run that keeps what it attains and one that degrades after its peak (the
    paper's SAM methods): the measures of cosim.study.report.stability, by hand."""
    from cosim.study.report import NEAR_PEAK, stability, stability_over_seeds

    rounds = np.arange(0, 50, 5)
    keeps = [0.2, 0.5, 0.8, 0.85, 0.86, 0.862, 0.861, 0.86, 0.858, 0.861]
    degrades = [0.2, 0.6, 0.8, 0.9, 0.85, 0.8, 0.82, 0.75, 0.7, 0.7]
    table = pd.DataFrame({
        "run": ["a"] * 10 + ["b"] * 10 + ["c"] * 10, "seed": [1] * 10 + [1] * 10 + [2] * 10,
        "algorithm.name": ["keeps"] * 10 + ["degrades"] * 20, "round": np.tile(rounds, 3),
        "test_accuracy": keeps + degrades + degrades})
    table.loc[3, "test_accuracy"] = np.nan  # a round that was not evaluated
    per_run = stability(table, ["algorithm.name"])
    a, b = per_run.iloc[0], per_run.iloc[1]
    assert (a["peak"], a["peak_round"], a["final"], a["final_round"]) == (0.862, 25, 0.861, 45)
    assert a["post_peak_drop"] == pytest.approx(0.001)
    # from the first evaluation within 1 % of 0.862 (0.86 at round 20) every one stays near
    assert a["near_peak_share"] == 1.0 and a["evaluations"] == 9
    assert (0.99 * 0.862 <= 0.858) and NEAR_PEAK == 0.01
    assert (b["peak"], b["peak_round"], b["final"]) == (0.9, 15, 0.7)
    assert b["post_peak_drop"] == pytest.approx(0.2)
    assert b["near_peak_share"] == pytest.approx(1 / 7)  # rounds 15-45: only the peak itself
    summary = stability_over_seeds(per_run, ["algorithm.name"])
    drop = summary[(summary["algorithm.name"] == "degrades")
                   & (summary["measure"] == "post_peak_drop")].iloc[0]
    assert drop["n"] == 2 and drop["mean"] == pytest.approx(0.2) and drop["std"] == pytest.approx(0)


def test_curve_figures_of_many_runs_stay_readable():
    """A curve figure's x is on a log scale when it spans over two decades (the schemes
    study's joules: 5e-4 J for an analog round at 0 dBm, 2e4 J for digital ones), never
    when it starts at 0 (rounds); and up to 32 curves differ in colour or line style."""
    from cosim.study.report import curve_style, spans_decades

    assert spans_decades(pd.Series([5e-4, 1.0, 2.4e4]))
    assert not spans_decades(pd.Series([0.0, 1.0, 2.4e4]))  # the round axis
    assert not spans_decades(pd.Series([1.0, 99.0]))
    assert not spans_decades(pd.Series([], dtype=float))
    styles = {(s["color"], s["linestyle"]) for s in map(curve_style, range(32))}
    assert len(styles) == 32


def test_the_intervals_row_by_row_equal_each_rows_own():
    """``_ci_rows`` (the interpolated grid's intervals in one call) gives, for every row,
    the numbers of that row alone written out (mean, std with ddof 1, the Student-t
    quantile; NaN beyond the mean for n = 1), bit for bit: the summary's bytes are
    those of a row-at-a-time computation."""
    from cosim.study.report import _ci_rows

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 8, 9, 33):
        values = rng.standard_normal((20, n)) * 1e3
        for row, got in zip(values, _ci_rows(values), strict=True):
            mean = float(row.mean())
            if n == 1:
                want = (1, mean, np.nan, np.nan, np.nan)
            else:
                std = float(row.std(ddof=1))
                half = float(stats.t.ppf(0.975, n - 1)) * std / np.sqrt(n)
                want = (n, mean, std, mean - half, mean + half)
            assert tuple(map(repr, got)) == tuple(map(repr, want)), (n, got, want)


def test_the_report_prints_a_table_of_final_and_best_per_point(reported):
    """`cosim study report` prints, and writes wide as results.csv and results.md, per
    point the final and the best test accuracy and ECE: mean and 95 % interval over its
    seeds, n stated."""
    out = reported
    wide = pd.read_csv(out / "results.csv")
    assert list(wide[AXIS]) == [10.0, 20.0] and list(wide["n"]) == [2, 2]
    assert list(wide["last_round"]) == [1, 1]
    for power, row in zip((10.0, 20.0), wide.itertuples(index=False), strict=True):
        accuracy = np.array([read_trace(out / "runs" / f"{run_name({AXIS: power}, s)}.h5")
                             .rounds["test_accuracy"] for s in (1, 2)])  # [seed, round]
        ece = np.array([read_trace(out / "runs" / f"{run_name({AXIS: power}, s)}.h5")
                        .rounds["ece"] for s in (1, 2)])
        for name, values in (("test_accuracy_final", accuracy[:, -1]),
                             ("test_accuracy_best", accuracy.max(axis=1)),
                             ("ece_final", ece[:, -1]), ("ece_best", ece.min(axis=1))):
            half = stats.t.ppf(0.975, 1) * values.std(ddof=1) / np.sqrt(2)
            got = row._asdict()
            np.testing.assert_allclose(got[f"{name}_mean"], values.mean(), rtol=1e-12)
            np.testing.assert_allclose(got[f"{name}_ci95_low"], values.mean() - half,
                                       rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(got[f"{name}_ci95_high"], values.mean() + half,
                                       rtol=1e-9, atol=1e-15)
    markdown = (out / "results.md").read_text()  # printed first: the hand computation's test
    lines = markdown.splitlines()
    assert lines[0].startswith("Per point: mean ± half-width of the 95 % confidence interval "
                               "over its n seeds")
    head = [c.strip() for c in lines[2].strip("|").split("|")]
    assert head[:3] == [AXIS, "n", "last round"] and "test_accuracy final" in head
    first = [c.strip() for c in lines[4].strip("|").split("|")]
    mean, half = wide.loc[0, "test_accuracy_final_mean"], (
        wide.loc[0, "test_accuracy_final_ci95_high"] - wide.loc[0, "test_accuracy_final_ci95_low"]) / 2
    assert first[:3] == ["10", "2", "1"]
    assert first[head.index("test_accuracy final")] == f"{mean:.4f} ± {half:.4f}"
    assert len({len(line) for line in lines[2:]}) == 1  # lined up


def test_curves_of_fewer_than_three_seeds_are_drawn_as_the_seeds(tmp_path, monkeypatch):
    """A curve figure says each curve's n in its legend; a combination of 3 seeds gets its
    band, one of 2 seeds gets its two seeds' own curves and no band (the t-interval of 2
    seeds is 12.7 standard errors wide); neighbours in the palette of similar hue differ
    in line style."""
    import matplotlib.pyplot as plt

    from cosim.study.report import _plot, curve_style, summarize_over_seeds

    rows = [{"run": f"{p}-{s}", "seed": s, AXIS: p, "round": r,
             "test_accuracy": 0.1 * r + 0.01 * s}
            for p, seeds in ((0.0, (1, 2, 3)), (10.0, (1, 2))) for s in seeds for r in range(4)]
    table = pd.DataFrame(rows)
    summary = summarize_over_seeds(table, [AXIS])
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    assert _plot(summary, [AXIS], "test_accuracy", "round", tmp_path / "a.png", table=table)
    (fig,) = figures
    ax = fig.axes[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["P = 0 dBm (n = 3)", "P = 10 dBm (n = 2: seeds)"]
    seeds = [line for line in ax.get_lines() if line.get_gid() == "seed"]
    assert len(seeds) == 2 and {line.get_color() for line in seeds} == {ax.get_lines()[1].get_color()}
    np.testing.assert_allclose(seeds[1].get_ydata(), [0.02, 0.12, 0.22, 0.32])
    assert len(ax.collections) == 1  # one band: the 3 seeds'
    real_close(fig)
    assert curve_style(0)["linestyle"] != curve_style(5)["linestyle"]  # blue, sky blue
    assert curve_style(1)["linestyle"] != curve_style(4)["linestyle"]  # vermillion, orange


def test_seeds_whose_x_ranges_do_not_meet_are_drawn_apart_not_dropped(tmp_path, monkeypatch):
    """Against the transmit energy, seeds of drops whose gains differ by decades share no
    stretch of x, so no mean over them exists: the combination is drawn as its seeds, said
    so in its legend, not left out of the figure."""
    import matplotlib.pyplot as plt

    from cosim.study.report import _plot, summarize_over_seeds

    rows = [{"run": f"{p}-{s}", "seed": s, AXIS: p, "round": r, "test_accuracy": 0.1 * r,
             "cumulative_uplink_energy_j": (r + 1) * (1.0 if p == 0.0 else 1000.0 ** s)}
            for p in (0.0, 10.0) for s in (1, 2, 3) for r in range(4)]
    table = pd.DataFrame(rows)
    summary = summarize_over_seeds(table, [AXIS])
    assert set(summary[summary["x_kind"] == "uplink_energy"][AXIS]) == {0.0}  # no mean at 10 dBm
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    assert _plot(summary, [AXIS], "test_accuracy", "uplink_energy", tmp_path / "e.png", table=table)
    (fig,) = figures
    ax = fig.axes[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["P = 0 dBm (n = 3)", "P = 10 dBm (n = 3: seeds, no common x)"]
    seeds = [line for line in ax.get_lines() if line.get_gid() == "seed"]
    assert len(seeds) == 3 and ax.get_xscale() == "log"
    np.testing.assert_allclose(seeds[2].get_xdata(), [1e9, 2e9, 3e9, 4e9])
    real_close(fig)
    # a combination without the metric at all (FedAvg's posterior) is no curve, not "seeds"
    table["posterior_mean_accuracy"] = np.where(table[AXIS] == 0.0, 0.5, np.nan)
    summary = summarize_over_seeds(table, [AXIS])
    assert _plot(summary, [AXIS], "posterior_mean_accuracy", "uplink_energy", tmp_path / "p.png", table=table)
    labels = [t.get_text() for t in figures[-1].legends[0].get_texts()]
    assert labels == ["P = 0 dBm (n = 3)"]
    real_close(figures[-1])


def test_recorded_options_naming_an_axis_the_study_lost_are_one_line(tmp_path):
    """A study file edited after its directory recorded `--only` on an axis it no longer
    has: the recorded options are refused as a StudyError naming the axis (one line at the
    command line), not a KeyError traceback."""
    from cosim.study.file import StudyError
    from cosim.study.options import StudyOptions

    study = load_study(_study(tmp_path, axes='"algorithm.name" = ["bayes_aircomp", "fedavg"]'),
                       validate=False)
    with pytest.raises(StudyError, match=r"--only power\.tx_power_dbm: the study has no such axis"):
        StudyOptions(only={"power.tx_power_dbm": ("0",)}).apply(study)


def test_study_options_shrink_and_filter_the_points(tmp_path):
    """--seeds (a count: the study's first N; a list: those seeds), --rounds, --set (every
    point, after the study's [set]) and --only (a filter, values as in run names) make
    the points; the same flags as `cosim validate`'s line says them."""
    from cosim.study.options import parse_options

    study = load_study(_study(tmp_path, axes=f'"{AXIS}" = [0.0, 10.0, 20.0]\n'
                              '"algorithm.name" = ["bayes_aircomp", "fedavg"]',
                              seeds="[1, 2, 3]"), validate=False)
    options = parse_options(study, overrides=["eval.every=2", "model.hidden_units=[4]"],
                            seeds="2", rounds=1, only=[f"{AXIS}=20,0", "algorithm.name=fedavg"])
    assert options.seeds == (1, 2) and options.only == {AXIS: ("0", "20")}.__or__(
        {"algorithm.name": ("fedavg",)})
    points = options.apply(study).points()
    assert [p.name for p in points] == [f"{AXIS}={p},algorithm.name=fedavg-seed{s}"
                                        for p in (0, 20) for s in (1, 2)]
    for point in points:
        assert point.scenario.rounds == 1 and point.scenario.eval.every == 2
        assert list(point.scenario.model.hidden_units) == [4]  # over the study's [8]
    assert options.flags() == ("--set eval.every=2 --set model.hidden_units=[4] --seeds 1,2 "
                               f"--rounds 1 --only {AXIS}=0,20 --only algorithm.name=fedavg")
    one = parse_options(study, seeds="7,")
    assert one.seeds == (7,) and [p.seed for p in one.apply(study).points()][:2] == [7, 7]
    assert one.flags() == "--seeds 7,"


@pytest.mark.parametrize(("args", "expected"), [
    (["--seeds", "4"], "--seeds: '4': a count must be 1 to the study's 2 seeds [1, 2]"),
    (["--seeds", "1,1"], "--seeds: must be distinct ints (got '1,1')"),
    (["--seeds", "two"], "--seeds: must be a count N or a comma list of ints"),
    (["--only", "cell.radius_m=100"], "--only: 'cell.radius_m' is not an axis of the study"),
    (["--only", f"{AXIS}=15"], f"--only {AXIS}=15: not among the axis's values (10, 20)"),
    (["--only", AXIS], f"--only: '{AXIS}': must be AXIS=VALUE[,VALUE...]"),
    (["--set", f"{AXIS}=5"], f"--set {AXIS}=5: {AXIS} is an axis of the study"),
    (["--set", "seed=5"], "--set seed=5: seed is set by the study"),
    (["--set", "cell.radius_m=-1"], "cell.radius_m: must be > 0 (got -1)"),
    (["--set", "cell.radius=1"], "cell.radius: unknown key"),
    (["--rounds", "0"], "rounds: must be >= 1 (got 0)"),
    (["--rounds", "2", "--set", "rounds=3"], "--set rounds=3: give the rounds once (--rounds 2)"),
])
def test_bad_study_options_exit_2_naming_the_flag(tmp_path, capsys, args, expected):
    study = _study(tmp_path)
    for command in (["validate", str(study)], ["study", "run", str(study), "--out",
                                               str(tmp_path / "out")]):
        assert main([*command, *args]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[1].strip().startswith(expected), err
        assert len(err.splitlines()) == 2
    assert not (tmp_path / "out").exists()
    assert main(["validate", str(write_tiny(tmp_path)), "--seeds", "2"]) == 2
    assert capsys.readouterr().err == ("cosim validate: --seeds: an option of a study; a "
                                       "scenario takes --set seed=N\n")


def test_a_shrunk_study_records_its_options_and_a_resume_keeps_them(tmp_path, capsys):
    """`cosim study run --seeds --rounds --only --set` runs the shrunk study, records the
    options in DIR/options.json; the same command without them resumes with the recorded
    ones (said in a line), with other ones is refused in one line; the report reads the
    recorded points (a seed the study file does not list)."""
    study = _study(tmp_path)
    out = tmp_path / "out"
    flags = ["--seeds", "5,", "--rounds", "1", "--only", f"{AXIS}=20", "--set", "eval.every=1"]
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1", *flags]) == 0
    printed = capsys.readouterr().out
    assert "1 runs, 0 complete already, 0 diverged already, 1 to run" in printed, printed
    (trace,) = (out / "runs").glob("*.h5")
    assert trace.name == f"{AXIS}=20-seed5.h5" and read_trace(trace).completed_rounds == 1
    assert json.loads((out / "options.json").read_text()) == {
        "set": ["eval.every=1"], "seeds": [5], "rounds": 1, "only": {AXIS: ["20"]}}
    assert main(["study", "run", str(study), "--out", str(out)]) == 0  # resumed as recorded
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"options recorded in {out / 'options.json'}: --set eval.every=1 "
                          f"--seeds 5, --rounds 1 --only {AXIS}=20")
    assert "1 runs, 1 complete already" in printed[1]
    assert main(["study", "run", str(study), "--out", str(out), "--rounds", "2"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].strip() == (
        f"{out / 'options.json'}: this directory was run with --set eval.every=1 --seeds 5, "
        f"--rounds 1 --only {AXIS}=20, not --rounds 2; give the same options (or none) to "
        "resume it, or a new --out")
    assert main(["study", "report", str(out)]) == 0
    wide = pd.read_csv(out / "results.csv")
    assert list(wide[AXIS]) == [20.0] and list(wide["n"]) == [1]


def test_local_workers_say_when_they_start_and_when_they_are_ready(finished):
    """Each local worker's start is a line (its pid; TensorFlow to import, the kernels to
    compile), before any run's result, and so is its readiness (the seconds it took, the
    run it is on)."""
    _, _, _, printed = finished
    lines = printed.splitlines()
    first_result = next(i for i, line in enumerate(lines) if line.startswith("[1 done"))
    for index in (0, 1):  # 2 CPUs: two workers
        starting = [i for i, line in enumerate(lines) if re.fullmatch(
            rf"worker {index} starting \(pid \d+\): it imports TensorFlow, then runs; its first "
            r"run compiles the kernels", line)]
        ready = [i for i, line in enumerate(lines) if re.fullmatch(
            rf"worker {index} ready after \d+\.\d s; running power\.tx_power_dbm=\d+-seed\d", line)]
        assert len(starting) == 1 and len(ready) == 1, printed
        assert starting[0] < first_result and starting[0] < ready[0]  # both start at once
    assert min(i for i, line in enumerate(lines) if " ready after " in line) \
        < first_result  # no run ends before its worker is ready


def test_results_of_a_study_without_axes_or_evaluations():
    """The table of results of a study without axes is one row; runs with no evaluation
    yet make no row (and no error); n counts the seeds with one, the last round their
    latest."""
    from cosim.study.results import results, results_markdown

    table = pd.DataFrame({"run": ["a", "a", "b", "b"], "seed": [1, 1, 2, 2], "round": [0, 1, 0, 1],
                          "test_accuracy": [0.1, 0.3, 0.2, np.nan]})
    wide = results(table, [])
    assert list(wide["n"]) == [2] and list(wide["last_round"]) == [1]
    assert wide.loc[0, "test_accuracy_final_mean"] == pytest.approx(0.25)  # 0.3 and 0.2
    assert "| 2 | 1          | 0.2500 ± " in results_markdown(wide, [])
    assert results(table.assign(test_accuracy=np.nan), []).empty
