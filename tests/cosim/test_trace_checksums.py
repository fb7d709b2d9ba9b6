"""Checksums on every dataset of a trace (HDF5 Fletcher-32): one byte flipped inside a
dataset's stored data is caught by `cosim inspect`, `cosim plot`, `cosim run --resume`,
`cosim verify`, `cosim.api` and the study report, each naming the file and the dataset;
nothing is written over it. `cosim verify` sorts traces into ok / incomplete / damaged /
not a trace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import pytest
from test_trace import new_trace
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.trace import TraceError, read_trace


def _flip_inside(path: Path, dataset: str) -> None:
    """Flip one byte in the middle of ``dataset``'s first stored chunk."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        assert ds.fletcher32, f"{dataset} is not checksummed"
        info = ds.id.get_chunk_info(0)
        offset = info.byte_offset + info.size // 3
    with open(path, "r+b") as raw:
        raw.seek(offset)
        byte = raw.read(1)
        raw.seek(offset)
        raw.write(bytes([byte[0] ^ 0xFF]))


def test_every_dataset_of_a_new_trace_is_checksummed(tmp_path):
    path = tmp_path / "t.h5"
    new_trace(path, 3, name="t").close()
    with h5py.File(path, "r") as f:
        assert f.attrs["checksums"] == "fletcher32"
        unchecked = []
        f.visititems(lambda name, obj: unchecked.append(name) if isinstance(obj, h5py.Dataset)
                     and obj.ndim >= 1 and obj.size > 0 and not obj.fletcher32 else None)
    assert unchecked == []


def test_a_flipped_byte_is_caught_everywhere_and_nothing_is_written(tmp_path, capsys):
    write_tiny(tmp_path, rounds=2, every=1)
    assert main(["run", str(tmp_path / "tiny.toml"), "--no-plots"]) == 0
    (trace,) = tmp_path.glob("*.h5")
    capsys.readouterr()
    _flip_inside(trace, "rounds/train_loss")
    before = trace.read_bytes()
    with pytest.raises(TraceError, match="dataset /rounds/train_loss is damaged"):
        read_trace(trace)
    for argv in (["inspect", str(trace)], ["plot", str(trace), "--out", str(tmp_path / "f")],
                 ["run", str(tmp_path / "tiny.toml"), "--resume", "--set", "rounds=3", "--no-plots"],
                 ["verify", str(trace)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert str(trace) in err and "/rounds/train_loss" in err and "Traceback" not in err, (argv, err)
    assert trace.read_bytes() == before
    assert not (tmp_path / "f").exists()


def test_verify_sorts_traces(tmp_path, capsys):
    whole = tmp_path / "whole.h5"
    new_trace(whole, 6, name="t").close()  # the scenario plans 6 rounds
    partial = tmp_path / "partial.h5"
    new_trace(partial, 2, name="t").close()
    text = tmp_path / "notes.h5"
    text.write_text("not a trace")
    assert main(["verify", str(whole)]) == 0
    assert f"{whole}: ok" in capsys.readouterr().out
    assert main(["verify", str(whole), str(partial)]) == 1
    assert f"{partial}: incomplete (2 of 6 rounds)" in capsys.readouterr().err
    assert main(["verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{text}: not a trace" in err and f"{partial}: incomplete" in err


def test_a_trace_written_before_checksums_still_reads_with_a_note(tmp_path, capsys):
    path = tmp_path / "old.h5"
    new_trace(path, 6, name="t").close()
    with h5py.File(path, "r+") as f:
        del f.attrs["checksums"]
    assert read_trace(path).completed_rounds == 6
    assert main(["inspect", str(path)]) == 0
    assert "written before checksums" in capsys.readouterr().out
    assert main(["verify", str(path)]) == 0
    assert "written before checksums" in capsys.readouterr().out


@pytest.mark.parametrize("rounds", ["inf", "nan", "1e400", "99999999999999999999999", '"six"'])
def test_verify_reads_a_stored_scenario_with_an_absurd_round_count(tmp_path, capsys, rounds):
    """A trace whose stored scenario claims ``rounds = inf`` (or NaN, an overflowing float,
    a huge integer, a string) is verified against its committed rounds: one line, no
    OverflowError traceback (it raised one at 63dafd1)."""
    path = tmp_path / "odd.h5"
    new_trace(path, 2, name="t").close()
    with h5py.File(path, "r+") as f:
        f.attrs["scenario"] = f"rounds = {rounds}\n"
    status = main(["verify", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    huge = rounds == "99999999999999999999999"
    assert status == (1 if huge else 0)
    assert (f"{path}: incomplete (2 of {rounds} rounds)" in err) if huge else (f"{path}: ok" in out)


def _as_nobody(*args: str) -> subprocess.CompletedProcess:
    """``python -m cosim.cli ARGS`` run as the unprivileged user 65534."""
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "cosim.cli", *args], capture_output=True, text=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to read as an unprivileged user (root reads anything)")
def test_unreadable_entries_of_a_study_directory_are_reported_per_entry():
    """As a user who may not read one run's trace, ``cosim verify DIR`` names that entry
    "unreadable" (it said "not a trace (not an HDF5 file)" before) and reads the others;
    a runs directory it may not list is one "unreadable" line, not "without traces"."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        runs = base / "runs"
        runs.mkdir(mode=0o755)
        for name, mode in (("seed1.h5", 0o644), ("seed2.h5", 0o000)):
            new_trace(runs / name, 6, name="t").close()
            (runs / name).chmod(mode)
        if _as_nobody("--help").returncode != 0:
            pytest.skip("the project is not readable by an unprivileged user on this machine")
        result = _as_nobody("verify", str(base))
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"{runs / 'seed1.h5'}: ok" in result.stdout
        assert f"{runs / 'seed2.h5'}: unreadable (permission denied" in result.stderr
        runs.chmod(0o700)
        result = _as_nobody("verify", str(base))
        assert result.returncode == 2
        assert result.stderr.strip() == f"{runs}: unreadable (permission denied: this user may not list it)"
    finally:
        shutil.rmtree(base)
