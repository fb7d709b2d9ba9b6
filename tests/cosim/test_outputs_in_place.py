"""Every write stays in its place: planted symbolic links are refused (exit 2, naming
the file; the link's target unchanged), derived names cannot leave the output
directory, and SIGTERM stops a study cleanly (exit 143, status.json says stopped, the
same command resumes it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from small_trace import write_small_trace
from test_study import _processes_naming, _study
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.study import RUNS_DIR, STUDY_COPY, run_name
from cosim.trace.compact import drop_checkpoint
from cosim.trace.writer import partial_path


def _victim(tmp_path: Path) -> tuple[Path, bytes]:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    return victim, victim.read_bytes()


def test_a_planted_partial_trace_link_is_refused(tmp_path, capsys):
    write_tiny(tmp_path, rounds=1, every=1)
    victim, content = _victim(tmp_path)
    trace = tmp_path / "tiny-seed3.h5"
    partial_path(trace).symlink_to(victim)
    assert main(["run", str(tmp_path / "tiny.toml"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and str(partial_path(trace)) in err
    assert victim.read_bytes() == content and not trace.exists()


def test_a_planted_compact_link_is_not_written_through(tmp_path):
    trace = write_small_trace(tmp_path / "t.h5")
    victim, content = _victim(tmp_path)
    (tmp_path / ".t.h5.compact").symlink_to(victim)
    drop_checkpoint(trace)
    assert victim.read_bytes() == content


def _report_dir(tmp_path: Path, axis: str = "power.tx_power_dbm") -> Path:
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text(f'scenario = "x"\nseeds = [1, 2]\n[axes]\n"{axis}" = [10.0, 20.0]\n')
    for value in (10.0, 20.0):
        for seed in (1, 2):
            write_small_trace(out / RUNS_DIR / f"{run_name({axis: value}, seed)}.h5")
    return out


def test_report_outputs_through_links_are_refused(tmp_path, capsys):
    victim, content = _victim(tmp_path)
    for planted in ("table.csv", "figures"):
        out = _report_dir(tmp_path / planted)
        (out / planted).symlink_to(victim)
        assert main(["study", "report", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is a symbolic link" in err and planted in err, err
        assert victim.read_bytes() == content


def test_an_axis_key_cannot_place_a_figure_outside_the_study(tmp_path, capsys):
    out = _report_dir(tmp_path, axis="../../../escaped")
    assert main(["study", "report", str(out)]) == 0
    capsys.readouterr()
    outside = [p for p in tmp_path.rglob("*") if out not in p.parents and p != out]
    assert outside == []
    assert list((out / "figures").glob("final_*escaped.png"))


def test_a_planted_status_link_is_refused_before_anything_runs(tmp_path, capsys):
    study = _study(tmp_path)
    victim, content = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "status.json").symlink_to(victim)
    assert main(["study", "run", str(study), "--out", str(out)]) == 2
    assert "status.json: a symbolic link" in capsys.readouterr().err
    assert victim.read_bytes() == content and not (out / RUNS_DIR).exists()


def test_sigterm_stops_a_study_cleanly_and_a_rerun_resumes_it(tmp_path):
    """One CPU runs the two points one after the other, so SIGTERM, sent once the first
    is done, always finds the second in flight (with two CPUs both could end first). "Done"
    is the driver's own line for it, read as it is printed: no polling of status.json,
    whose periodic summary writes the rounds of a run still in flight."""
    study = _study(tmp_path, rounds=20, seeds="[1]")
    out = tmp_path / "out"
    ray_tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"rt{os.getpid()}"
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    command = [sys.executable, "-m", "cosim.cli", "study", "run", str(study), "--out", str(out),
               "--num-cpus", "1"]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    watchdog = threading.Timer(240, driver.kill)  # a hung study fails the test, never hangs it
    watchdog.start()
    try:
        before = []
        for line in driver.stdout:  # each line as the driver flushes it
            before.append(line)
            if line.startswith("[1 done, 0 failed / 2] "):
                break
        assert driver.poll() is None, "the study ended before it could be stopped"
        driver.send_signal(signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=600)
        stdout = "".join(before) + stdout
    finally:
        watchdog.cancel()
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 143, stdout + stderr
    status = json.loads((out / "status.json").read_text())
    assert status["stopped"] == "SIGTERM" and "study stopped (SIGTERM)" in stdout
    assert sorted(r["state"] for r in status["runs"].values()) == ["done", "stopped"]
    assert "WARNING" not in stderr and "authentication" not in stderr, stderr
    assert _processes_naming(str(ray_tmp)) == []
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert all(r["state"] == "done" for r in json.loads((out / "status.json").read_text())["runs"].values())


def test_plot_refuses_a_planted_figure_link_and_writes_each_figure_whole(tmp_path, capsys):
    """`cosim plot` draws in a scratch directory (often another file system) and puts each
    figure in place by a fresh file renamed onto its name: a planted link is refused,
    its target unchanged, and nothing half-written is left."""
    trace = write_small_trace(tmp_path / "t.h5")
    victim, content = _victim(tmp_path)
    out = tmp_path / "figures"
    out.mkdir()
    (out / "ece.png").symlink_to(victim)
    assert main(["plot", str(trace), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and "ece.png" in err, err
    assert victim.read_bytes() == content
    assert sorted(p.name for p in out.iterdir()) == ["ece.png"]  # only the link; no temporaries
    (out / "ece.png").unlink()
    assert main(["plot", str(trace), "--out", str(out)]) == 0
    written = sorted(out.iterdir())
    assert written and all(p.suffix == ".png" and not p.name.startswith(".") for p in written)
