"""A dataset file never runs code: the pickles of MNIST and CIFAR-100 are read by a
restricted unpickler (containers, numbers, strings, NumPy arrays only), and a file that
is not its format is a one-line error naming it (exit 2 from `cosim run`/`validate`)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from cosim.cli import main
from learning.data.datasets import DatasetFormatError, check_dataset_files, load_cifar100


class _Payload:
    """Unpickling this would create ``marker`` (what a crafted file does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _cifar_dir(root: Path, train=None, test=None) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, content in (("train", train), ("test", test)):
        if content is None:
            n = 8
            content = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                       b"fine_labels": list(range(n)), b"filenames": [b"x"] * n}
        (folder / split).write_bytes(pickle.dumps(content, protocol=2))
    return root


def test_a_valid_cifar_copy_loads(tmp_path):
    data = load_cifar100(_cifar_dir(tmp_path))
    assert data.x_train.shape == (8, 32, 32, 3) and data.num_classes == 100
    assert "hold the format" in check_dataset_files("cifar100", tmp_path)


def test_a_crafted_pickle_never_runs(tmp_path):
    marker = tmp_path / "ran"
    root = _cifar_dir(tmp_path / "data", train={b"data": _Payload(marker), b"fine_labels": [0]})
    with pytest.raises(DatasetFormatError, match=r"cifar-100-python/train: refers to posix\.system"):
        load_cifar100(root)
    with pytest.raises(DatasetFormatError):
        check_dataset_files("cifar100", root)
    assert not marker.exists()


@pytest.mark.parametrize(("content", "expected"), [
    ([1, 2, 3], "not a CIFAR-100 batch"),
    ({b"data": np.zeros((2, 10), np.uint8), b"fine_labels": [0, 1]}, "not a [N, 3072] uint8 array"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 100]}, "not 2 labels in 0..99"),
])
def test_a_file_of_the_wrong_shape_is_named(tmp_path, content, expected):
    root = _cifar_dir(tmp_path, test=content)
    with pytest.raises(DatasetFormatError, match=expected.replace("[", r"\[").replace(".", r"\.")):
        load_cifar100(root)


def test_a_truncated_pickle_is_named(tmp_path):
    root = _cifar_dir(tmp_path)
    path = root / "cifar-100-python" / "train"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DatasetFormatError, match="train: not a dataset pickle"):
        load_cifar100(root)


def _scenario(tmp_path: Path, data_dir: Path) -> Path:
    path = tmp_path / "crafted.toml"
    path.write_text(f'rounds = 1\n[data]\ndataset = "cifar100"\ndata_dir = "{data_dir}"\n'
                    '[model]\narchitecture = "cnn"\n[cell]\nnum_devices = 2\n'
                    f'[trace]\npath = "{tmp_path / "run.h5"}"\n')
    return path


def test_cosim_validate_and_run_refuse_a_crafted_file_with_exit_2(tmp_path, capsys):
    marker = tmp_path / "ran"
    root = _cifar_dir(tmp_path / "data", test={b"data": _Payload(marker), b"fine_labels": [0]})
    scenario = _scenario(tmp_path, root)
    assert main(["validate", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "cifar-100-python/test: refers to posix.system" in err and "Traceback" not in err
    assert main(["run", str(scenario), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "cifar-100-python/test" in err and "Traceback" not in err, err
    assert not marker.exists() and not (tmp_path / "run.h5").exists()
