"""Readers never trust a size a file claims, and never block: a crafted trace whose
datasets claim more than its own shapes (or the memory) is refused before anything is
allocated, under a memory limit too; a FIFO, a socket or a symbolic-link loop where a
trace belongs is refused (per entry in a study) instead of blocking; an MNIST file that
claims more images than it holds is refused by ``cosim validate`` and the loader."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from cosim.cli import main
from cosim.trace import TraceError, TraceWriter, read_trace
from learning.data.files import DatasetFormatError, check_dataset_files

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = 'name = "t"\nseed = 3\nrounds = 3\n'


def _trace(path: Path, rounds: int = 2) -> Path:
    devices = {"position_m": np.zeros((3, 2)), "distance_m": np.ones(3)}
    with TraceWriter.create(path, SCENARIO, seed=3, devices=devices) as writer:
        for _ in range(rounds):
            writer.append_round({"test_accuracy": 0.5, "ece": 0.1})
            writer.append_per_device("tx_power_w", np.ones(3))
            writer.commit()
    return path


def _craft(path: Path, kind: str) -> None:
    """Sparse datasets (nothing written: a few KiB on disk) claiming a huge size."""
    with h5py.File(path, "r+") as f:
        if kind == "per_device":  # [3, 4e8]: 8.9 GiB of float64 rows
            del f["rounds/per_device/tx_power_w"]
            f["rounds/per_device"].create_dataset("tx_power_w", shape=(3, 400_000_000),
                                                  dtype="f8", chunks=(1, 1 << 20))
        elif kind == "positions":  # [1e9, 2]: 14.9 GiB
            del f["devices/position_m"]
            f["devices"].create_dataset("position_m", shape=(1_000_000_000, 2), dtype="f8",
                                        chunks=(1 << 20, 2))
        else:  # every table and column agrees: only the memory refuses it
            for name, shape in (("devices/position_m", (10**9, 2)), ("devices/distance_m", (10**9,)),
                                ("rounds/per_device/tx_power_w", (2, 10**9))):
                del f[name]
                f.create_dataset(name, shape=shape, dtype="f8", chunks=True)


LIMITED = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
    from cosim.api import to_pandas
    from cosim.cli import main
    from cosim.trace import TraceError
    try:
        to_pandas(sys.argv[1])
    except TraceError as error:
        print("refused:", error)
    sys.exit(main(["inspect", sys.argv[1]]))
""")


@pytest.mark.parametrize(("kind", "expected"), [
    ("per_device", "/rounds/per_device/tx_power_w has rows of shape (400000000,), but the "
                   "trace has 3 devices"),
    ("positions", "/devices/position_m has shape (1000000000, 2), but the trace has 3 devices"),
    ("consistent", "reading it would take 37.25 GiB, more than the")])
def test_a_trace_claiming_huge_datasets_is_refused_under_a_memory_limit(tmp_path, kind, expected):
    path = _trace(tmp_path / "t.h5")
    _craft(path, kind)
    assert path.stat().st_size < 2**20
    out = subprocess.run([sys.executable, "-c", LIMITED, str(path)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "MemoryError" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.startswith(f"refused: refusing trace {path}: "), out.stdout
    assert expected in out.stdout and expected in out.stderr, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_fifos_sockets_and_link_loops_are_refused_not_waited_for(tmp_path, capsys):
    study = tmp_path / "study"
    runs = study / "runs"
    runs.mkdir(parents=True)
    _trace(runs / "seed1.h5")
    os.mkfifo(runs / "seed2.h5")
    (runs / "seed3.h5").symlink_to("seed3.h5")  # a loop
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(runs / "seed4.h5"))
    try:
        assert main(["verify", str(study)]) == 2
        out = capsys.readouterr().err
        assert f"{runs / 'seed1.h5'}: incomplete (2 of 3 rounds)" in out
        assert f"{runs / 'seed2.h5'}: not a trace (it is a FIFO (named pipe), not a regular file)" in out
        assert f"{runs / 'seed3.h5'}: not a trace (Too many levels of symbolic links)" in out
        assert f"{runs / 'seed4.h5'}: not a trace (it is a socket, not a regular file)" in out
        for name in ("seed2.h5", "seed4.h5"):
            with pytest.raises(TraceError, match="not a regular file"):
                read_trace(runs / name)
        assert main(["inspect", str(runs / "seed2.h5")]) == 2
        assert "seed2.h5: not a regular file" in capsys.readouterr().err
    finally:
        server.close()


def _npy(shape: tuple[int, ...], dtype: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
        "shape": shape})
    return buffer.getvalue() + data


def test_an_mnist_file_claiming_more_images_than_it_holds_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "mnist.npz", "w", compression=zipfile.ZIP_DEFLATED) as npz:
        npz.writestr("x_train.npy", _npy((2_000_000, 28, 28), "u1", bytes(784)))
        npz.writestr("y_train.npy", _npy((2_000_000,), "u1", bytes(1)))
        npz.writestr("x_test.npy", _npy((1, 28, 28), "u1", bytes(784)))
        npz.writestr("y_test.npy", _npy((1,), "u1", bytes(1)))
    with pytest.raises(DatasetFormatError, match=r"mnist\.npz: x_train claims shape "
                       r"\(2000000, 28, 28\) \(1,568,000,000 bytes\) but holds 784"):
        check_dataset_files("mnist", tmp_path)
    from learning.data.datasets import load_mnist

    with pytest.raises(DatasetFormatError, match="x_train claims shape"):
        load_mnist(tmp_path)


def test_an_mnist_file_of_python_objects_names_the_file(tmp_path):
    np.savez(tmp_path / "mnist.npz", x_train=np.array([object()] * 2), y_train=np.zeros(2),
             x_test=np.zeros((1, 28, 28)), y_test=np.zeros(1))
    with pytest.raises(DatasetFormatError, match=rf"{tmp_path / 'mnist.npz'}: x_train is an "
                       "array of Python objects"):
        check_dataset_files("mnist", tmp_path)
