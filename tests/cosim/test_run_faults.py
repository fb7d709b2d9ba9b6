"""`cosim run` under faults: divergence stops it (exit 3), a kill at any instant resumes
to the uninterrupted trace, `--resume` may raise `rounds`, and trace paths that cannot be
written are refused before anything is written (exit 2)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.divergence import LOSS_EXPLOSION_FACTOR, DivergenceWatch
from cosim.trace import TIMING_COLUMNS, partial_path

RUN_HISTORY_ATTRS = ("started_at", "resume_count")
"""Root attributes that record a run's history, not its result (docs/faults.md)."""


def _without_trace_path(scenario_text: str) -> str:
    """The runs compared live in different directories: their ``trace.path`` differs."""
    return "\n".join(line for line in scenario_text.splitlines() if not line.startswith("path = "))


def read_everything(path: Path) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Every dataset (but the timings, ``TIMING_COLUMNS``) and every attribute of every object,
    the run-history root attributes left out."""
    datasets, attrs = {}, {}
    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            if key == "scenario":
                value = _without_trace_path(str(value))
            if key not in RUN_HISTORY_ATTRS:
                attrs[f"/@{key}"] = value

        def visit(name, obj):
            for key, value in obj.attrs.items():
                attrs[f"{name}@{key}"] = value
            if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] not in TIMING_COLUMNS:
                datasets[name] = obj[()]

        f.visititems(visit)
    return datasets, attrs


def assert_same_trace(a: Path, b: Path) -> None:
    da, aa = read_everything(a)
    db, ab = read_everything(b)
    assert sorted(da) == sorted(db)
    for name in da:
        np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    assert sorted(aa) == sorted(ab)
    for key in aa:
        if isinstance(aa[key], np.ndarray):
            np.testing.assert_array_equal(aa[key], ab[key], err_msg=key)
        else:
            assert aa[key] == ab[key], key


# ------------------------------------------------------------------ divergence
def test_watch_findings():
    watch = DivergenceWatch()
    sane = {"train_loss_rho": 3.0, "train_loss": 3.0, "model_finite": 1.0,
            "nonfinite_update_entries": 0.0, "test_accuracy": math.nan, "ece": math.nan}
    assert watch.check(0, sane) == []
    assert watch.reference_loss == 3.0
    assert watch.check(1, {**sane, "train_loss": 2.9e3}) == []
    found = watch.check(2, {**sane, "train_loss": 3.1e3})
    assert found and f"{LOSS_EXPLOSION_FACTOR:g} times round 0's" in found[0]
    found = watch.check(3, {**sane, "train_loss_rho": math.nan, "train_loss": math.nan,
                            "nonfinite_update_entries": 17.0, "delta_bar_rho": math.inf})
    assert found == ["17 non-finite entries in the devices' updates",
                     "training loss non-finite (train_loss_rho=nan, train_loss=nan)",
                     "non-finite metrics (delta_bar_rho=inf)"]
    assert watch.check(4, {**sane, "model_finite": 0.0}) == ["the global model holds or predicts NaN/Inf"]
    # NaN by design: no evaluation this round; no loss reported at all
    assert DivergenceWatch().check(0, {"train_loss": math.nan, "ece": math.nan}) == []
    # an evaluated round (finite accuracy) must have a finite NLL and ECE
    assert DivergenceWatch().check(0, {"test_accuracy": 0.5, "test_nll": math.nan, "ece": 0.1}) == [
        "non-finite metrics (test_nll=nan)"]
    # the run's totals are NaN in rows of traces written before they existed
    assert DivergenceWatch().check(0, {"cumulative_uplink_symbols": math.nan}) == []
    # epsilon = inf is the accountant's answer for a round without privacy, not a divergence
    # (a run without a target whose model learns goes on); NaN still is one
    eps = {"privacy_epsilon": math.inf, "privacy_epsilon_round": math.inf,
           "eavesdropper_epsilon": math.inf, "eavesdropper_epsilon_round": math.inf}
    assert DivergenceWatch().check(0, {"train_loss": 1.3, **eps}) == []
    assert DivergenceWatch().check(0, {"train_loss": 1.3, "privacy_epsilon": math.nan}) == [
        "non-finite metrics (privacy_epsilon=nan)"]
    # and a phase that nobody sent has an infinite noise multiplier
    assert DivergenceWatch().check(0, {"privacy_noise_multiplier_rho": math.inf,
                                       "eavesdropper_joint_noise_multiplier": math.inf}) == []
    assert DivergenceWatch().check(0, {"privacy_noise_multiplier_rho": math.nan}) == [
        "non-finite metrics (privacy_noise_multiplier_rho=nan)"]
    assert DivergenceWatch().check(0, {"aggregate_nmse_rho": math.inf}) == [
        "non-finite metrics (aggregate_nmse_rho=inf)"]
    # a resumed run takes round 0's loss from the trace
    assert DivergenceWatch(reference_loss=1.0).check(7, {"train_loss": 1001.0})


def test_divergence_stops_the_run_with_exit_3_and_says_why(tmp_path, capsys):
    path = write_tiny(tmp_path, rounds=6, every=1, learning_rate=1000.0)
    assert main(["run", str(path), "--no-plots"]) == 3
    err = capsys.readouterr().err
    assert "cosim run: stopped: round " in err and " diverged: " in err
    assert "algorithm.learning_rate (now 1000" in err and "--continue-on-divergence" in err
    with h5py.File(tmp_path / "tiny-seed3.h5", "r") as f:
        done = int(f.attrs["completed_rounds"])
    stopped_at = int(err.split("stopped: round ")[1].split()[0])
    assert done == stopped_at + 1 < 6, "the diverged round is written, nothing after it"
    # a resume would go on past the diverged round: refused, the file left byte for byte
    before = (tmp_path / "tiny-seed3.h5").read_bytes()
    assert main(["run", str(path), "--no-plots", "--resume"]) == 3
    err = capsys.readouterr().err
    assert f"tiny-seed3.h5: round {stopped_at} diverged: " in err and "nothing was run" in err
    assert "--resume --continue-on-divergence" in err
    assert (tmp_path / "tiny-seed3.h5").read_bytes() == before
    # ... unless asked to go on: from the trace's checkpoint, the warning once, exit 3
    assert main(["run", str(path), "--no-plots", "--resume", "--continue-on-divergence"]) == 3
    err = capsys.readouterr().err
    assert err.count(" diverged: ") == 1 and "going on from round" in err
    with h5py.File(tmp_path / "tiny-seed3.h5", "r") as f:
        assert int(f.attrs["completed_rounds"]) == 6
    # going on anyway: the message once, every round run, exit status still 3
    assert main(["run", str(path), "--no-plots", "--overwrite", "--continue-on-divergence"]) == 3
    err = capsys.readouterr().err
    assert err.count(" diverged: ") == 1 and "going on" in err
    with h5py.File(tmp_path / "tiny-seed3.h5", "r") as f:
        assert int(f.attrs["completed_rounds"]) == 6


def test_finite_weights_with_overflowing_predictions_stop_the_run(tmp_path, capsys):
    """Weights finite, logits overflowing (SCAFFOLD at 10 labels per device did this at
    paper size): the evaluation records NaN and model_finite = 0, and the run stops with
    exit 3 saying so, instead of an exception out of the metrics."""
    from cosim.engine import Engine
    from cosim.run import run_scenario
    from cosim.scenario import load_scenario

    scenario = load_scenario(write_tiny(tmp_path, rounds=3, every=1))
    engine = Engine(scenario)
    predict = engine.algorithm.predict_probs
    calls = []

    def overflowing(state, x, num_samples, seed):
        probs = np.array(predict(state, x, num_samples, seed))
        calls.append(1)
        if len(calls) == 2:  # round 1's evaluation
            probs[0, :] = np.nan
        return probs

    engine.algorithm.predict_probs = overflowing
    summary = run_scenario(scenario, progress=False, engine=engine)
    assert summary.diverged
    assert "round 1 diverged: the global model holds or predicts NaN/Inf" in capsys.readouterr().err
    with h5py.File(summary.trace_path, "r") as f:
        assert int(f.attrs["completed_rounds"]) == 2
        np.testing.assert_array_equal(f["rounds/model_finite"][()], [1.0, 0.0])
        assert np.isfinite(f["rounds/test_accuracy"][0]) and np.isnan(f["rounds/test_accuracy"][1])


# ------------------------------------------------------------------ extend, overwrite, paths
def test_resume_may_raise_rounds_and_equals_a_longer_run(tmp_path, capsys):
    short, full = tmp_path / "short", tmp_path / "full"
    short.mkdir()
    full.mkdir()
    # every = 2: the short run's last round (index 2) is evaluated only because it is last
    assert main(["run", str(write_tiny(short, rounds=3, every=2)), "--no-plots"]) == 0
    longer = write_tiny(short, rounds=5, every=2)
    assert main(["run", str(longer), "--no-plots", "--resume"]) == 0
    assert main(["run", str(write_tiny(full, rounds=5, every=2, trace_dir=short / "ref")),
                 "--no-plots"]) == 0
    assert_same_trace(short / "tiny-seed3.h5", short / "ref" / "tiny-seed3.h5")
    # fewer rounds than the trace's: refused, the trace untouched
    before = (short / "tiny-seed3.h5").read_bytes()
    assert main(["run", str(write_tiny(short, rounds=4, every=2)), "--resume", "--no-plots"]) == 2
    assert "--resume may raise rounds, not lower it" in capsys.readouterr().err
    assert (short / "tiny-seed3.h5").read_bytes() == before


def test_overwrite_refuses_a_file_that_is_not_a_trace(tmp_path, capsys):
    path = write_tiny(tmp_path, rounds=1)
    precious = tmp_path / "tiny-seed3.h5"
    precious.write_text("my thesis")
    assert main(["run", str(path), "--overwrite", "--no-plots"]) == 2
    assert f"refusing to overwrite {precious}: it is not an aircomp-cosim trace" in capsys.readouterr().err
    assert precious.read_text() == "my thesis"
    assert not partial_path(precious).exists()


@pytest.mark.parametrize("fault", ["directory", "parent_is_file", "unreadable_on_resume",
                                   "incomplete_on_resume"])
def test_trace_path_faults_exit_2_with_one_line(tmp_path, capsys, fault):
    if fault == "directory":
        path = write_tiny(tmp_path, rounds=1)
        (tmp_path / "tiny-seed3.h5").mkdir()
        args, expect = [], "is a directory"
    elif fault == "parent_is_file":
        (tmp_path / "blocker").write_text("x")
        path = write_tiny(tmp_path, rounds=1, trace_dir=tmp_path / "blocker" / "sub")
        args, expect = [], "is not a directory"
    elif fault == "unreadable_on_resume":
        path = write_tiny(tmp_path, rounds=1)
        (tmp_path / "tiny-seed3.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(200))
        args, expect = ["--resume"], "cannot open trace"
    else:
        path = write_tiny(tmp_path, rounds=1)
        with h5py.File(tmp_path / "tiny-seed3.h5", "w") as f:
            f.attrs["schema_version"] = 1
            f.attrs["scenario"] = "x"
        args, expect = ["--resume"], "an incomplete trace (no completed_rounds, /rounds, /devices)"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["run", str(path), "--no-plots", *args]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "nothing may be written"


# ------------------------------------------------------------------ kills at any instant
def _spawn(scenario: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cosim.cli", "run", str(scenario), "--no-plots"],
        cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _completed(trace: Path) -> int:
    try:
        with h5py.File(trace, "r", locking=False) as f:
            return int(f.attrs["completed_rounds"])
    except (OSError, KeyError):
        return -1


INSTANTS = {
    # while the trace is being created (its hidden sibling exists), or just after
    "creation": lambda trace: partial_path(trace).exists() or trace.exists(),
    # the trace exists, round 0 not committed yet
    "round_0": lambda trace: trace.exists(),
    # mid-run, rounds committed
    "round_2": lambda trace: _completed(trace) >= 2,
}


def test_a_kill_at_any_instant_resumes_to_the_uninterrupted_trace(tmp_path):
    """Real processes killed with SIGKILL at several instants, each resumed with
    `--resume`: every dataset and attribute equals an uninterrupted run's.

    The uninterrupted run and the resumptions run in this process, the killed runs in
    processes that load the kernels from Numba's cache. From a cold cache (a fresh
    clone, as CI runs it) this process compiled its kernels itself, so the test also
    compares compiled with cached kernels, which once differed by a float32 ulp; with a
    warm cache that part is covered by tests/phy/test_grid_sums.py's subprocess test and
    benchmarks/compile_determinism.py."""
    rounds = 4
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    assert main(["run", str(write_tiny(reference_dir, rounds=rounds, every=2)), "--no-plots"]) == 0
    reference = reference_dir / "tiny-seed3.h5"
    for instant, reached in INSTANTS.items():
        where = tmp_path / instant
        where.mkdir()
        scenario = write_tiny(where, rounds=rounds, every=2)
        trace = where / "tiny-seed3.h5"
        proc = _spawn(scenario, where)
        deadline = time.monotonic() + 300
        while not reached(trace) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, f"{instant}: the run ended before the kill"
        if trace.exists():  # whatever the instant, a file under the name is a whole trace
            with h5py.File(trace, "r", locking=False) as f:
                assert int(f.attrs["completed_rounds"]) < rounds, instant
                assert "num_params" in f.attrs and "distance_m" in f["devices"], instant
        elif instant == "creation":  # killed before the rename: only the hidden sibling
            assert partial_path(trace).exists()
        assert main(["run", str(scenario), "--no-plots", "--resume"]) == 0, instant
        assert_same_trace(trace, reference)


@pytest.mark.parametrize(("algorithm", "overrides", "expected"), [
    ("bayes_aircomp", [], ['algorithm.learning_rate (now 0.05;', 'algorithm.nll_reduction (now "sum";',
                           "algorithm.init_std (now "]),
    ("bayes_aircomp", ["algorithm.covariance_learning_rate=50.0"],
     ["algorithm.covariance_learning_rate (now 50; phase 1's own step)"]),
    ("fedavg", [], ["algorithm.learning_rate (now 0.05;"]),
    ("signsgd", [], ["algorithm.signsgd.server_learning_rate (now 0.003; the server's step on the vote)"]),
])
def test_divergence_advice_names_the_algorithms_own_keys(tmp_path, algorithm, overrides, expected):
    """The keys a diverged run names come from the algorithm's catalog entry
    (``divergence_keys``), with their values and their table (``algorithm.signsgd.``);
    ``covariance_learning_rate = "learning_rate"`` follows the step already named and is
    left out; FedAvg names the step alone."""
    from cosim.divergence import advice
    from cosim.scenario import load_scenario

    scenario = load_scenario(write_tiny(tmp_path, algorithm=algorithm), overrides=overrides)
    text = advice(scenario.algorithm)
    assert text.startswith("Likely knobs: algorithm.learning_rate")
    for part in expected:
        assert part in text
    if algorithm == "fedavg":
        assert text.count("algorithm.") == 1
    if not overrides:
        assert "covariance_learning_rate" not in text


# ------------------------------------------------------------------ per-device tables on disk
def _streamed_scaffold(directory: Path, rounds: int, trace_dir: Path | None = None) -> Path:
    """The tiny scenario with SCAFFOLD, its rounds streaming chunks of 3 of its 8 devices:
    its control variates c_k live on disk beside the trace (learning/device_table.py)."""
    path = write_tiny(directory, rounds=rounds, every=2, algorithm="scaffold", trace_dir=trace_dir)
    path.write_text(path.read_text() + "\n[runtime]\ndevices_in_memory = 3\n")
    return path


def _table_files(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / "tiny-seed3-device-tables").iterdir())


def test_a_resumed_streamed_scaffold_run_equals_the_straight_one(tmp_path, capsys):
    """1 round, then --resume to 3, against 3 straight rounds: the same trace (the
    checkpoint names the table version, c_k.v1, which the resume reads); once committed,
    only the last checkpoint's version is left. A version gone from disk is a one-line
    refusal naming the file."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir()
    resumed.mkdir()
    assert main(["run", str(_streamed_scaffold(straight, 3)), "--no-plots"]) == 0
    assert main(["run", str(_streamed_scaffold(resumed, 1)), "--no-plots"]) == 0
    assert _table_files(resumed) == ["c_k.v1.f32"]
    with h5py.File(resumed / "tiny-seed3.h5", "r") as f:
        np.testing.assert_array_equal(f["checkpoint/slot_0/c_k"][()], [1, 8, f.attrs["num_params"]])
    assert main(["run", str(_streamed_scaffold(resumed, 3)), "--no-plots", "--resume"]) == 0
    assert_same_trace(resumed / "tiny-seed3.h5", straight / "tiny-seed3.h5")
    assert _table_files(resumed) == _table_files(straight) == ["c_k.v3.f32"]
    (resumed / "tiny-seed3-device-tables" / "c_k.v3.f32").unlink()
    capsys.readouterr()
    assert main(["run", str(_streamed_scaffold(resumed, 4)), "--no-plots", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "c_k.v3.f32: version 3 of the device table 'c_k'" in err and "is missing" in err
    assert len(err.strip().splitlines()) == 1, err


def test_compacting_a_streamed_run_frees_its_tables(tmp_path):
    """``drop_checkpoint`` (``cosim study compact``) of a streamed SCAFFOLD run deletes its
    per-device tables with the checkpoint (only a resume reads them) and counts their
    bytes; a file of another name in their directory is left, with the directory."""
    from cosim.trace.compact import drop_checkpoint

    assert main(["run", str(_streamed_scaffold(tmp_path, 2)), "--no-plots"]) == 0
    tables = tmp_path / "tiny-seed3-device-tables"
    size = (tables / "c_k.v2.f32").stat().st_size
    trace = tmp_path / "tiny-seed3.h5"
    before = trace.stat().st_size
    assert drop_checkpoint(trace) == before - trace.stat().st_size + size
    assert not tables.exists()
    (tmp_path / "kept").mkdir()
    assert main(["run", str(_streamed_scaffold(tmp_path / "kept", 1)), "--no-plots"]) == 0
    (tmp_path / "kept" / "tiny-seed3-device-tables" / "notes.txt").write_text("mine")
    drop_checkpoint(tmp_path / "kept" / "tiny-seed3.h5")
    assert _table_files(tmp_path / "kept") == ["notes.txt"]


def test_overwriting_a_streamed_run_with_one_that_holds_every_device_clears_its_tables(tmp_path):
    """``--overwrite`` by a run whose rounds hold every device (no tables on disk): the
    overwritten run's table versions are deleted with it."""
    assert main(["run", str(_streamed_scaffold(tmp_path, 1)), "--no-plots"]) == 0
    assert _table_files(tmp_path) == ["c_k.v1.f32"]
    path = write_tiny(tmp_path, rounds=1, every=2, algorithm="scaffold")  # every device in memory
    assert main(["run", str(path), "--no-plots", "--overwrite"]) == 0
    assert not (tmp_path / "tiny-seed3-device-tables").exists()


def test_resuming_with_the_other_form_of_the_tables_names_devices_in_memory(tmp_path, capsys):
    """A streamed run resumed with every device in memory, and the other way round: one
    line naming runtime.devices_in_memory; the trace keeps its round and checkpoint."""
    streamed, whole = tmp_path / "streamed", tmp_path / "whole"
    streamed.mkdir()
    whole.mkdir()
    assert main(["run", str(_streamed_scaffold(streamed, 1)), "--no-plots"]) == 0
    assert main(["run", str(write_tiny(whole, rounds=1, every=2, algorithm="scaffold")), "--no-plots"]) == 0
    capsys.readouterr()
    for directory, path in ((streamed, write_tiny(streamed, rounds=2, every=2, algorithm="scaffold")),
                            (whole, _streamed_scaffold(whole, 2))):
        with h5py.File(directory / "tiny-seed3.h5", "r") as f:
            before = f["checkpoint/slot_0/c_k"][()]
        assert main(["run", str(path), "--no-plots", "--resume"]) == 2
        err = capsys.readouterr().err
        assert "runtime.devices_in_memory" in err and "resume with the value the run had" in err, err
        assert len(err.strip().splitlines()) == 1, err
        with h5py.File(directory / "tiny-seed3.h5", "r") as f:
            assert f.attrs["completed_rounds"] == 1
            np.testing.assert_array_equal(f["checkpoint/slot_0/c_k"][()], before)


def test_a_disk_that_cannot_hold_the_tables_is_refused_up_front(tmp_path, monkeypatch, capsys):
    import cosim.scenario.derived as derived

    real = derived.check_table_disk
    monkeypatch.setattr(derived, "check_table_disk",
                        lambda scenario, d, chunk, free=None: real(scenario, d, chunk, free=1000))
    assert main(["run", str(_streamed_scaffold(tmp_path, 2)), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "runtime.devices_in_memory = 3" in err and "more than the 1,000 bytes free" in err
    assert not (tmp_path / "tiny-seed3.h5").exists()


def test_a_kill_at_any_instant_of_a_streamed_scaffold_run_resumes_to_the_straight_trace(tmp_path):
    """SIGKILL while a round writes the next version of c_k (its .partial file exists),
    and after rounds were committed: each resumed with --resume equals the straight run."""
    rounds = 4
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    assert main(["run", str(_streamed_scaffold(reference_dir, rounds)), "--no-plots"]) == 0
    tables = "tiny-seed3-device-tables"
    instants = {"writing_a_version": lambda where: any((where / tables).glob("*.partial")),
                "round_2": lambda where: _completed(where / "tiny-seed3.h5") >= 2}
    for instant, reached in instants.items():
        where = tmp_path / instant
        where.mkdir()
        scenario = _streamed_scaffold(where, rounds)
        proc = _spawn(scenario, where)
        deadline = time.monotonic() + 300
        while (where / tables).is_dir() is False or not reached(where):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, f"{instant}: the run ended before the kill"
        assert main(["run", str(scenario), "--no-plots", "--resume"]) == 0, instant
        assert_same_trace(where / "tiny-seed3.h5", reference_dir / "tiny-seed3.h5")
        assert _table_files(where) == ["c_k.v4.f32"], instant


def test_a_kill_between_checkpoints_resumes_from_the_older_table_version(tmp_path):
    """``trace.checkpoint_every = 2`` (three versions of c_k on disk): SIGKILL after round 3
    is committed without a checkpoint, the trace's checkpoint that of round 2. The resume
    reads version 2, which the run kept beside its current version 3, drops version 3, and
    ends with the straight run's trace."""
    rounds, tables = 5, "tiny-seed3-device-tables"

    def scenario_in(directory: Path) -> Path:
        path = _streamed_scaffold(directory, rounds)
        path.write_text(path.read_text().replace("[trace]\n", "[trace]\ncheckpoint_every = 2\n", 1))
        assert "checkpoint_every = 2" in path.read_text()
        return path

    reference_dir, where = tmp_path / "reference", tmp_path / "killed"
    reference_dir.mkdir()
    where.mkdir()
    assert main(["run", str(scenario_in(reference_dir)), "--no-plots"]) == 0
    scenario = scenario_in(where)
    proc = _spawn(scenario, where)
    deadline = time.monotonic() + 300
    while _completed(where / "tiny-seed3.h5") < 3:
        if proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before the kill"
    with h5py.File(where / "tiny-seed3.h5", "r") as f:
        completed = int(f.attrs["completed_rounds"])
    assert completed in (3, 4)
    if completed == 3:  # the checkpoint's version kept beside the current one
        assert "c_k.v2.f32" in _table_files(where)
    assert main(["run", str(scenario), "--no-plots", "--resume"]) == 0
    assert_same_trace(where / "tiny-seed3.h5", reference_dir / "tiny-seed3.h5")
    assert _table_files(where) == ["c_k.v5.f32"]
    assert (where / tables).is_dir()
