"""A disk that fills up at any instant loses nothing: the trace keeps its committed rounds
and resumes to the uninterrupted result, the run ends with one line (exit 2), figures
already made stay.

The disk is a real one: a 4 MiB tmpfs mounted for the test and unmounted after it, filled
by a file written until the system answers ``ENOSPC`` (then shortened by a few bytes so
that some room is left, at several instants of a run). Mounting needs root (or
``CAP_SYS_ADMIN``); without it these tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from small_trace import write_small_trace
from test_run_faults import assert_same_trace
from test_trace import SCENARIO, assert_same, content, new_trace, write_round
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.trace import TraceError, TraceWriter, partial_path

SIZE = "4m"


@contextlib.contextmanager
def small_file_system(where: Path, options: str = f"size={SIZE}"):
    """A fresh tmpfs mounted at ``where`` (created) for the block, unmounted after it."""
    where.mkdir(parents=True, exist_ok=True)
    if sys.platform != "linux":
        pytest.skip("needs Linux's tmpfs to make a small file system")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small file system here ({made.stderr.strip()}): "
                    "the full-disk tests need root or CAP_SYS_ADMIN")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def disk(tmp_path):
    """A fresh 4 MiB file system (tmpfs) at ``tmp_path / "disk"``, unmounted afterwards."""
    with small_file_system(tmp_path / "disk") as where:
        yield where


def fill(directory: Path, leave: int = 0) -> Path:
    """Write ``directory / "filler"`` until the file system is full, then give back
    ``leave`` bytes; the filler's path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        block = bytes(1 << 16)
        while True:
            try:
                out.write(block)
            except OSError:
                break
        small = bytes(512)
        while True:
            try:
                out.write(small)
            except OSError:
                break
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def fill_when(monkeypatch, method: str, round_index: int, directory: Path, leave: int) -> None:
    """Fill ``directory`` the first time ``TraceWriter.<method>`` is called in round
    ``round_index`` (before the call)."""
    original = getattr(TraceWriter, method)

    def wrapped(self, *args, **kwargs):
        if self.completed_rounds == round_index and not (directory / "filler").exists():
            fill(directory, leave)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TraceWriter, method, wrapped)


ROUNDS = 60
SIGNAL_VALUES = 4096
"""Raw signals of every round (32 KiB): the trace grows at every round, so the room
reserved ahead is used up within a few rounds of the disk filling up."""


def write_growing_round(writer: TraceWriter, t: int) -> None:
    write_round(writer, t)
    writer.write_signals({"y": np.random.default_rng(t).normal(size=SIGNAL_VALUES)})


def signals(path: Path) -> dict:
    with h5py.File(path, "r", locking=False) as file:
        return {name: group["y"][()] for name, group in file["signals"].items()}


def assert_same_signals(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize(("method", "round_index", "leave"), [
    ("append_round", 3, 0), ("append_round", 3, 9000), ("write_checkpoint", 10, 0),
    ("write_checkpoint", 10, 30000), ("commit", 20, 4096), ("commit", 20, 40000)])
def test_a_disk_filled_at_any_instant_keeps_every_committed_round(
        tmp_path, disk, monkeypatch, method, round_index, leave):
    """The writer stops at the round whose room cannot be reserved, before any of its
    bytes could leave the file half-written; the file resumes, and finished equals a
    trace written without the fault, bit for bit."""
    reference = tmp_path / "reference.h5"
    with new_trace(reference, 0) as writer:
        for t in range(ROUNDS):
            write_growing_round(writer, t)
            writer.commit()
    path = disk / "t.h5"
    fill_when(monkeypatch, method, round_index, disk, leave)
    writer = new_trace(path, 0)
    with pytest.raises(TraceError) as raised:
        for t in range(ROUNDS):
            write_growing_round(writer, t)
            writer.commit()
    message = str(raised.value)
    stopped = writer.completed_rounds
    print(method, round_index, leave, "stopped at", stopped)
    assert round_index <= stopped < ROUNDS
    assert "\n" not in message
    assert message.startswith(f"cannot write round {stopped} of trace {path}: No space left on "
                              "device (")
    assert "the round needs about" in message  # stopped by the reservation, not half-way
    assert f"it holds rounds 0-{stopped - 1}" in message
    with pytest.raises(TraceError, match="cannot write round"):  # and nothing more is written
        writer.commit()
    writer.close()
    monkeypatch.undo()
    (disk / "filler").unlink()
    writer, checkpoint, start = TraceWriter.resume(path, SCENARIO)
    assert start == checkpoint.completed_rounds == stopped  # a checkpoint every round
    for t in range(start, ROUNDS):
        write_growing_round(writer, t)
        writer.commit()
    writer.close()
    assert_same(content(path), content(reference))
    assert_same_signals(signals(path), signals(reference))


def test_a_full_disk_at_creation_leaves_nothing(disk):
    fill(disk, 0)
    path = disk / "t.h5"
    with pytest.raises(TraceError, match=f"cannot create trace {path}: No space left on device"):
        new_trace(path, 0)
    assert not path.exists() and not partial_path(path).exists()


def test_a_full_disk_on_resume_leaves_the_trace_as_it_was(disk):
    path = disk / "t.h5"
    new_trace(path, 3).close()
    after_three = content(path)
    fill(disk, 0)
    with pytest.raises(TraceError, match=f"cannot resume {path}: No space left on device"):
        TraceWriter.resume(path, SCENARIO)
    (disk / "filler").unlink()
    assert_same(content(path), after_three)


# ----------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The tiny scenario's 4 rounds, run without a fault."""
    where = tmp_path_factory.mktemp("uninterrupted")
    assert main(["run", str(write_tiny(where, rounds=4, every=2)), "--no-plots"]) == 0
    return where / "tiny-seed3.h5"


def _one_line_error(err: str, start: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("cosim run: ")]
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert len(lines) == 1 and lines[0].startswith(start), err
    return lines[0]


@pytest.mark.parametrize(("method", "leave"), [("append_round", 0), ("write_checkpoint", 100_000)])
def test_cosim_run_on_a_disk_that_fills_up_ends_with_one_line_and_resumes(
        tmp_path, disk, monkeypatch, capsys, uninterrupted, method, leave):
    """The disk fills up in round 0 (while its rows are written, which the room reserved
    at creation does not hold; before its checkpoint, which the reservation meets):
    exit 2, one line naming the trace and what it holds; once there is room, --resume
    finishes it as if nothing had happened. (A run whose file no longer grows goes on:
    the room its flushes need is reserved ahead, see the writer's test above.)"""
    scenario = write_tiny(tmp_path, rounds=4, every=2, trace_dir=disk)
    fill_when(monkeypatch, method, 0, disk, leave)
    assert main(["run", str(scenario), "--no-plots"]) == 2
    line = _one_line_error(capsys.readouterr().err, "cosim run: cannot write round 0 of trace ")
    assert "No space left on device" in line and "it holds no round yet" in line, line
    monkeypatch.undo()
    (disk / "filler").unlink()
    assert main(["run", str(scenario), "--no-plots", "--resume"]) == 0
    assert_same_trace(disk / "tiny-seed3.h5", uninterrupted)


def test_tensorboard_on_a_disk_that_fills_up_stops_alone_and_says_so(
        tmp_path, disk, monkeypatch, capsys, uninterrupted):
    scenario = write_tiny(tmp_path, rounds=4, every=2)
    fill_when(monkeypatch, "commit", 1, disk, 0)  # the trace is on another disk
    assert main(["run", str(scenario), "--no-plots", "--tensorboard", str(disk / "board")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert ("cosim run: warning: TensorBoard summaries stopped at round 1 "
            f"({disk / 'board'}: No space left on device); the run goes on without them") in err
    assert_same_trace(tmp_path / "tiny-seed3.h5", uninterrupted)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_tensorboard_directory_that_cannot_be_written_is_refused_before_the_trace(
        tmp_path, capsys, fault):
    scenario = write_tiny(tmp_path, rounds=1, every=1)
    options = f"size={SIZE}" + (",ro" if fault == "read-only" else "")
    with small_file_system(tmp_path / "disk", options) as board_disk:
        if fault == "full":
            fill(board_disk, 0)
        assert main(["run", str(scenario), "--tensorboard", str(board_disk / "board")]) == 2
    reason = "No space left on device" if fault == "full" else "Read-only file system"
    _one_line_error(capsys.readouterr().err,
                    f"cosim run: --tensorboard {board_disk / 'board'}: cannot write TensorBoard "
                    f"summaries there: {reason}")
    assert not list(tmp_path.glob("*.h5"))


@pytest.mark.parametrize("leave", [0, 20_000, 60_000, 120_000])
def test_plot_into_a_full_disk_keeps_the_earlier_figures(tmp_path, disk, capsys, leave):
    """A second `cosim plot` into the same --out fails on a full disk (exit 2, one line)
    and leaves every figure of the first one as it was, and no temporary file."""
    out = disk / "figures"
    assert main(["plot", str(write_small_trace(tmp_path / "a.h5", rounds=3)), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before) >= 4
    fill(disk, leave)
    capsys.readouterr()
    assert main(["plot", str(write_small_trace(tmp_path / "b.h5", rounds=5)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(
        f"cosim plot: cannot write figures to {out}: No space left on device"), err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("leave", [0, 30_000, 150_000])
def test_study_report_into_a_full_disk_is_one_line(disk, capsys, leave):
    """`cosim study report` of a study on a disk that fills: one line naming the file it
    could not write (exit 2), the traces as they were (the tables fail at 0 bytes left,
    a figure with more room)."""
    from cosim.study.file import RUNS_DIR, STUDY_COPY, run_name

    out = disk / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text('scenario = "x"\nseeds = [1]\n[axes]\n"power.tx_power_dbm" = [10.0, 20.0]\n')
    for power in (10.0, 20.0):
        write_small_trace(out / RUNS_DIR / f"{run_name({'power.tx_power_dbm': power}, 1)}.h5")
    traces = {p.name: p.read_bytes() for p in (out / RUNS_DIR).iterdir()}
    fill(disk, leave)
    assert main(["study", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2, err
    assert f"cannot write the report: {out}/" in err and ": No space left on device" in err, err
    assert {p.name: p.read_bytes() for p in (out / RUNS_DIR).iterdir()} == traces
    assert not [p for p in out.rglob(".*.tmp")]  # no temporary file left


def test_a_study_whose_disk_fills_up_stops_in_one_line_and_resumes(disk, monkeypatch, capsys):
    """The disk of `--out` fills while a study runs (after its first run ends, before the
    driver rewrites status.json): exit 2, one line naming status.json, the runs stopped;
    once there is room the same command completes the study."""
    import json

    from test_hostile_studies import _Executor, _run_with, _tiny_study

    study, out = _tiny_study(disk.parent), disk / "out"
    fillers = []
    executor = _Executor(lambda: fillers.append(fill(disk)) if not fillers else None)
    assert _run_with(monkeypatch, study, out, executor) == 2
    err = capsys.readouterr().err
    assert err == (f"cosim study run: cannot write {out / 'status.json'}: No space left on "
                   "device; the runs were stopped and their traces keep every committed round: "
                   "the same command resumes the study once that is mended\n"), err
    assert executor.stopped and not list(out.glob(".*.tmp"))
    fillers[0].unlink()
    assert _run_with(monkeypatch, study, out, _Executor()) == 0
    runs = json.loads((out / "status.json").read_text())["runs"]
    assert {run["state"] for run in runs.values()} == {"done"}
