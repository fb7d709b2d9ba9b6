"""A damaged Numba cache file is compiled again, with a one-line note, not a traceback.

Numba keeps a kernel compiled with ``cache=True`` in two files beside its module (in
``__pycache__``, or under ``NUMBA_CACHE_DIR``): an index (``.nbi``) and the code
(``.nbc``), both pickles. A file cut short by a full disk or a kill, or overwritten,
made the first call of the kernel raise ``UnpicklingError`` (or ``EOFError``, ...)
from deep inside Numba. :func:`install` makes Numba's cache load treat such a file as
absent: it says once on stderr which file it was, removes the index (so the fresh
compilation is saved anew) and compiles. Called by the native modules that import
Numba (:mod:`native.launch`, :mod:`native.float_control`, :mod:`native.sampling`),
before any kernel can run.
"""

from __future__ import annotations

import os
import pickle
import sys

__all__ = ["install"]

_UNREADABLE = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
               ImportError, IndexError, KeyError, OverflowError)


def install() -> None:
    """Wrap ``numba.core.caching.Cache.load_overload`` (idempotent)."""
    from numba.core import caching

    original = caching.Cache.load_overload
    if getattr(original, "recovers_damaged_files", False):
        return

    def load_overload(self, sig, target_context):
        try:
            return original(self, sig, target_context)
        except _UNREADABLE as error:
            cache_file = getattr(self, "_cache_file", None)
            index = getattr(cache_file, "_index_path", None)
            where = index or getattr(self, "_cache_path", "its cache directory")
            func = getattr(self, "_py_func", None)
            name = getattr(func, "__qualname__", None) or getattr(self, "_name", "a kernel")
            print(f"note: Numba's cache of {name} ({where}) cannot "
                  f"be read ({type(error).__name__}); compiling it again", file=sys.stderr)
            if index:
                try:
                    os.unlink(index)
                except OSError:
                    pass
            return None

    load_overload.recovers_damaged_files = True
    caching.Cache.load_overload = load_overload
