"""TensorFlow's import-time log lines, filtered at the packages' edge.

Importing TensorFlow on a machine without a GPU writes C++ log lines straight to file
descriptor 2, whatever ``TF_CPP_MIN_LOG_LEVEL`` says for some of them: absl's "All log
messages before absl::InitializeLog() is called ...", "Unable to register
cuDNN/cuFFT/cuBLAS factory", "Could not find cuda drivers", the oneDNN and CPU-feature
notes. :func:`install` puts a one-shot finder in front of ``sys.meta_path``: the first
``import tensorflow`` of the process, by whatever module (``phy.channel``,
``learning.models.model``, ``cosim.engine``, Sionna, a user's own), runs with file descriptor 2
captured, and afterwards every captured line that is not one of these known lines
(:data:`IMPORT_NOISE`) is written to ``sys.stderr``. Only that import is filtered:
anything else it prints, its exceptions and every later log line pass unchanged. Once
TensorFlow is imported the finder is gone; nothing happens when TensorFlow was imported
before :func:`install`.

``phy``, ``learning`` and ``cosim`` call :func:`install` from their ``__init__`` (the
module is standard library only, so ``phy.units`` and ``cosim.scenario`` stay free of
TensorFlow). The ``cosim`` commands also set ``TF_CPP_MIN_LOG_LEVEL`` (:func:`import_for_command`); a
plain library import changes no environment variable.

Caveat: while TensorFlow is being imported, file descriptor 2 is process-wide
redirected, so another thread's stderr output of that moment is printed after the
import instead of during it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

__all__ = ["IMPORT_NOISE", "filtered_stderr", "import_for_command", "install"]

IMPORT_NOISE = re.compile(
    r"(All log messages before absl::InitializeLog\(\) is called"
    r"|Unable to register (cuDNN|cuFFT|cuBLAS) factory"
    r"|computation placer already registered"
    r"|Could not find cuda drivers on your machine, GPU will not be used"
    r"|oneDNN custom operations are on"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions:.*rebuild TensorFlow)"
)
"""The lines TensorFlow 2.18 prints on import on a machine without a GPU (nothing else
is dropped)."""


@contextmanager
def filtered_stderr(noise: re.Pattern[str] = IMPORT_NOISE) -> Iterator[None]:
    """Capture file descriptor 2 for the ``with`` block, then write every captured line
    that ``noise`` does not match to ``sys.stderr`` (also when the block raises).

    Without a real file descriptor 2 (an embedded interpreter) the block runs unfiltered.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        saved = None
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()  # Python's own writes of the block go to the capture too
            except (OSError, ValueError, AttributeError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines():
                if line.strip() and not noise.search(line):
                    print(line, file=sys.stderr)


class _QuietLoader(importlib.abc.Loader):
    """Runs the wrapped loader's ``exec_module`` under :func:`filtered_stderr`."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # the module keeps TensorFlow's own loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        with filtered_stderr():
            self.loader.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Answers only for ``tensorflow``, once: the spec the other finders give, with
    its loader wrapped in :class:`_QuietLoader`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        _uninstall()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _QuietLoader(spec.loader)
        return spec


def _uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietFinder)]


def install() -> None:
    """Filter the first ``import tensorflow`` of this process (module docstring).

    Idempotent; does nothing when TensorFlow is already imported.
    """
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietFinder())


def import_for_command() -> None:
    """Import TensorFlow with a command's environment: ``TF_CPP_MIN_LOG_LEVEL=3`` and
    ``TF_CPU_ALLOCATOR_USE_BFC=true``, each unless already set (the ``cosim`` commands
    and :mod:`cosim.api` call it before their first TensorFlow import; its import-time
    noise is filtered by :func:`install`). Nothing happens once TensorFlow is loaded."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    import tensorflow  # noqa: F401
