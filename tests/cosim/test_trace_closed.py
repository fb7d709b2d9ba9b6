"""A trace is a closed file: on every read and on resume, a dataset stored in another
file (external storage, a virtual layout), an external or soft link, and a header that
claims more rounds than the file holds are refused with exit 2 naming the file and the
object; the other file is never read or written."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from test_trace import new_trace

from cosim.cli import main
from cosim.trace import TraceError, TraceWriter, read_trace


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.h5"
    new_trace(path, 3, name="t").close()
    return path


def _victim(tmp_path: Path) -> tuple[Path, bytes]:
    victim = tmp_path / "victim.bin"
    content = bytes(range(256)) * 512
    victim.write_bytes(content)
    return victim, content


def _external(path: Path, name: str, victim: Path) -> None:
    """Replace dataset ``name`` by one of the same shape and dtype stored in ``victim``."""
    with h5py.File(path, "r+") as f:
        old = f[name]
        shape, dtype = old.shape, old.dtype
        del f[name]
        nbytes = int(np.prod(shape)) * dtype.itemsize
        f.create_dataset(name, shape=shape, dtype=dtype, external=[(str(victim), 0, nbytes)])


def _refused(capsys, argv: list[str], *named: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in named:
        assert text in err, err


def test_a_column_stored_in_another_file_is_refused_everywhere(tmp_path, capsys):
    path = _trace(tmp_path)
    victim, content = _victim(tmp_path)
    _external(path, "rounds/train_loss", victim)
    before = path.read_bytes()
    with pytest.raises(TraceError, match="/rounds/train_loss stores its data in an external file"):
        read_trace(path)
    _refused(capsys, ["inspect", str(path)], str(path), "/rounds/train_loss")
    _refused(capsys, ["plot", str(path), "--out", str(tmp_path / "figs")], "/rounds/train_loss")
    assert not (tmp_path / "figs").exists()
    assert victim.read_bytes() == content and path.read_bytes() == before


def test_a_checkpoint_stored_in_another_file_is_not_written_on_resume(tmp_path):
    path = _trace(tmp_path)
    victim, content = _victim(tmp_path)
    with h5py.File(path, "r") as f:
        slot = next(name for name in f["checkpoint"] if "mu" in f["checkpoint"][name])
    _external(path, f"checkpoint/{slot}/mu", victim)
    before = path.read_bytes()
    with pytest.raises(TraceError, match=rf"cannot resume {path}: refusing it: /checkpoint/{slot}/mu"):
        TraceWriter.resume(path)
    assert victim.read_bytes() == content and path.read_bytes() == before


@pytest.mark.parametrize("kind", ["external-link", "soft-link", "virtual"])
def test_links_and_virtual_datasets_are_refused(tmp_path, kind):
    path = _trace(tmp_path)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(3.0)
    with h5py.File(path, "r+") as f:
        if kind == "external-link":
            f["rounds/extra"] = h5py.ExternalLink(str(other), "x")
        elif kind == "soft-link":
            f["rounds/extra"] = h5py.SoftLink("/devices/distance_m")
        else:
            layout = h5py.VirtualLayout(shape=(3,), dtype="f8")
            layout[:] = h5py.VirtualSource(str(other), "x", shape=(3,))
            f.create_virtual_dataset("rounds/extra", layout)
    expected = {"external-link": "is an external link", "soft-link": "is a soft link",
                "virtual": "is a virtual dataset"}[kind]
    with pytest.raises(TraceError, match=f"/rounds/extra {expected}"):
        read_trace(path)


@pytest.mark.parametrize("value", [-1, 10**11, 2.5])
def test_a_header_claiming_rounds_the_file_does_not_hold_is_refused(tmp_path, capsys, value):
    path = _trace(tmp_path)
    with h5py.File(path, "r+") as f:
        f.attrs["completed_rounds"] = value
    _refused(capsys, ["inspect", str(path)], f"completed_rounds = {value!r} cannot be real")
