"""Study files and study copies that once gave tracebacks: one line each (exit 2), or a
clean report."""

from __future__ import annotations

import pytest
from small_trace import write_small_trace

from cosim.cli import main
from cosim.study.file import MAX_LABEL_CHARS, RUNS_DIR, STUDY_COPY, run_name


def _study_dir(tmp_path, extra: str = "", axes: bool = True):
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    head = 'scenario = "x"\nseeds = [1]\n'
    body = '[axes]\n"power.tx_power_dbm" = [10.0, 20.0]\n' if axes else ""
    (out / STUDY_COPY).write_text(head + extra + body)
    for power in (10.0, 20.0):
        write_small_trace(out / RUNS_DIR / f"{run_name({'power.tx_power_dbm': power}, 1)}.h5")
    return out


def test_math_text_in_a_study_label_is_drawn_as_text(tmp_path):
    out = _study_dir(tmp_path)
    (out / STUDY_COPY).write_text((out / STUDY_COPY).read_text()
                                  + '[labels]\n"power.tx_power_dbm" = "$\\\\frac{$"\n')
    assert main(["study", "report", str(out)]) == 0


@pytest.mark.parametrize(("copy", "expected"), [
    ("axes = 5\n", "axes: must be a table of dotted keys -> lists (got 5)"),
    ('seeds = "1"\n', "seeds: must be a non-empty list of ints (got '1')"),
    ('[set]\n"model.x" = {a = 1}\n', "set.model.x: a nested table"),
])
def test_a_damaged_study_copy_is_one_line(tmp_path, capsys, copy, expected):
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    write_small_trace(out / RUNS_DIR / "seed1.h5")
    seeds = "" if copy.startswith("seeds") else "seeds = [1]\n"
    (out / STUDY_COPY).write_text(f'scenario = "x"\n{seeds}{copy}')
    assert main(["study", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_a_label_longer_than_the_bound_is_refused_with_it(tmp_path, capsys):
    out = _study_dir(tmp_path)
    (out / STUDY_COPY).write_text((out / STUDY_COPY).read_text()
                                  + f'[labels]\n"power.tx_power_dbm" = "{"x" * 200_000}"\n')
    assert main(["study", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert (f"labels.power.tx_power_dbm: at most {MAX_LABEL_CHARS} characters, a figure's "
            "legend or axis (got 200,000:") in err, err


def test_a_study_whose_scenario_is_not_a_scenario_file_names_it(tmp_path, capsys):
    study = tmp_path / "s.toml"
    study.write_text('scenario = "/etc/passwd"\nseeds = [1]\n')
    assert main(["validate", str(study)]) == 2
    err = capsys.readouterr().err
    assert "seed 1: scenario /etc/passwd: TOML syntax error" in err, err


def test_a_read_only_out_for_study_run_is_one_line(tmp_path, capsys):
    """A read-only file system (root ignores a directory's permissions, so the test
    mounts one; skipped where mounting is refused)."""
    import subprocess

    study = tmp_path / "s.toml"
    study.write_text('scenario = "quickstart"\nseeds = [1]\n')
    where = tmp_path / "ro"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only file system here ({made.stderr.strip()})")
    try:
        assert main(["study", "run", str(study), "--out", str(where / "out")]) == 2
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
    err = capsys.readouterr().err
    assert f"--out: cannot write {where / 'out'}: Read-only file system" in err, err
    assert "Traceback" not in err


TABLE_AXIS = '[axes]\n"privacy.clip_norm" = [{rho = 1.0, nu = 0.5}, {rho = 2.0, nu = 1.0}]\n'


def test_table_values_of_an_axis_and_of_set_are_written_and_read_back(tmp_path, capsys):
    import tomllib

    from tiny_scenario import write_tiny

    from cosim.scenario import toml_value
    from cosim.study import load_study

    value = {"rho": 1.0, "nu": 0.5, "a b": [1, {"c": True}]}
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
    write_tiny(tmp_path)
    study = tmp_path / "s.toml"
    study.write_text('scenario = "tiny.toml"\nseeds = [1]\n' + TABLE_AXIS)
    assert main(["validate", str(study)]) == 0
    assert "privacy.clip_norm = {rho = 1.0, nu = 0.5}" in capsys.readouterr().out
    points = load_study(study).points(tmp_path / "out")
    assert [p.scenario.privacy.clip_norm for p in points] == [{"rho": 1.0, "nu": 0.5},
                                                               {"rho": 2.0, "nu": 1.0}]
    assert points[0].name == "privacy.clip_norm=rho_1+nu_0.5-seed1"
    study.write_text('scenario = "tiny.toml"\nseeds = [1]\n[set]\n'
                     '"privacy.clip_norm" = {rho = 1.0, nu = 0.5}\n')
    assert main(["validate", str(study)]) == 0
    (point,) = load_study(study).points()
    assert point.scenario.privacy.clip_norm == {"rho": 1.0, "nu": 0.5}
    # the report reads such a study's copy back and finds its runs
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text('scenario = "x"\nseeds = [1]\n' + TABLE_AXIS)
    for p in points:
        write_small_trace(out / RUNS_DIR / f"{p.name}.h5")
    assert main(["study", "report", str(out)]) == 0
    table = (out / "table.csv").read_text()
    assert '"{rho = 1.0, nu = 0.5}"' in table and '"{rho = 2.0, nu = 1.0}"' in table


def test_report_of_a_study_being_written_reads_its_committed_rounds(tmp_path, capsys):
    import numpy as np

    from cosim.trace import TraceWriter

    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text('scenario = "x"\nseeds = [1]\n'
                                  '[axes]\n"power.tx_power_dbm" = [10.0, 20.0]\n')
    first, second = (out / RUNS_DIR / f"{run_name({'power.tx_power_dbm': p}, 1)}.h5"
                     for p in (10.0, 20.0))
    scenario = 'name = "t"\nseed = 1\nrounds = 5\n'
    TraceWriter.create(second, scenario, seed=1, name="t").close()  # started, no round yet
    with TraceWriter.create(first, scenario, seed=1, name="t") as writer:
        writer.append_round({"train_loss": 1.0, "test_accuracy": np.nan, "ece": np.nan,
                             "uplink_symbols": 1.0, "cumulative_uplink_symbols": 1.0})
        writer.commit()  # round 0: not evaluated
        writer.append_round({"train_loss": 0.9, "test_accuracy": 0.5, "ece": 0.1})
        writer.flush()  # round 1 written, not committed: a report must not see it
        assert main(["study", "report", str(out)]) == 0, capsys.readouterr().err
    table = (out / "table.csv").read_text().splitlines()
    assert len(table) == 2 and "0.5" not in table[1], table
    assert (out / "stability.csv").exists()


class _Executor:
    """An executor whose runs end at once (no worker, no TensorFlow); ``before_wait`` is
    called before each wait returns a run: the instant a fault is planted."""

    name = "test"

    def __init__(self, before_wait=lambda: None):
        self.queue, self.before_wait, self.stopped = [], before_wait, False

    @property
    def pending(self):
        return len(self.queue)

    def check(self):
        pass

    def start(self):
        return "executor: test"

    def submit(self, name, scenario):
        self.queue.append(name)

    def wait(self, timeout_s):
        self.before_wait()
        return [(self.queue.pop(0), {"state": "done", "error": None, "completed_rounds": 2,
                                     "wall_s": 0.0, "node": None})]

    def stop(self):
        self.stopped = True
        self.queue.clear()

    def close(self):
        pass


def _tiny_study(directory):
    from tiny_scenario import write_tiny

    write_tiny(directory)
    study = directory / "s.toml"
    study.write_text('scenario = "tiny.toml"\nseeds = [1, 2]\n[set]\nrounds = 2\n')
    return study


def _run_with(monkeypatch, study, out, executor):
    import io

    from cosim.study import executor as executors
    from cosim.study.runner import run_study

    monkeypatch.setattr(executors, "make_executor", lambda *args, **kwargs: executor)
    return run_study(study, out, stream=io.StringIO())


def test_a_link_planted_at_status_json_mid_study_stops_it_in_one_line(tmp_path, monkeypatch, capsys):
    import os

    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.write_text("keep")

    def plant():
        os.replace(out / "status.json", victim.with_name("moved"))
        (out / "status.json").symlink_to(victim)

    executor = _Executor(plant)
    assert _run_with(monkeypatch, _tiny_study(tmp_path), out, executor) == 2
    err = capsys.readouterr().err
    assert err == (f"cosim study run: cannot write {out / 'status.json'}: a symbolic link where "
                   "the study writes its own file; refusing to write through it; the runs were "
                   "stopped and their traces keep every committed round: the same command "
                   "resumes the study once that is mended\n"), err
    assert executor.stopped and victim.read_text() == "keep"


def test_a_link_planted_at_a_worker_log_is_named_by_the_driver(tmp_path, capsys):
    import io

    from cosim.study.runner import run_study

    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.write_text("keep")
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "worker-0.log").symlink_to(victim)
    assert run_study(_tiny_study(tmp_path), out, executor="local", num_cpus=1,
                     stream=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cosim study run: cannot write {out / 'logs' / 'worker-0.log'}: a "
                          "symbolic link where the study writes its own file"), err
    assert len(err.splitlines()) == 1 and victim.read_text() == "keep"


def test_a_study_whose_output_reader_went_away_goes_on(tmp_path, monkeypatch):
    """`cosim study run ... | head`: the driver's lines meet a broken pipe; the study goes
    on to its end (was: the BrokenPipeError stopped it, exit 0 with its runs killed)."""
    import json

    from cosim.study import executor as executors
    from cosim.study.runner import run_study

    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    executor = _Executor()
    monkeypatch.setattr(executors, "make_executor", lambda *args, **kwargs: executor)
    out = tmp_path / "out"
    assert run_study(_tiny_study(tmp_path), out, stream=Gone()) == 0
    assert not executor.stopped
    runs = json.loads((out / "status.json").read_text())["runs"]
    assert {run["state"] for run in runs.values()} == {"done"}


@pytest.mark.parametrize("command", ["validate", "study report"])
def test_more_commands_in_process_with_no_standard_output(tmp_path, monkeypatch, command):
    import sys

    from tiny_scenario import write_tiny

    args = ["validate", str(write_tiny(tmp_path))] if command == "validate" else \
        ["study", "report", str(_study_dir(tmp_path))]
    monkeypatch.setattr(sys, "stdout", None)
    assert main(args) == 0
