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

:func:`install` also makes a kernel loaded from the cache run the same machine code as
the process that compiled it (:func:`_install_callee_bundles`): see there and
``docs/faults.md``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys

__all__ = ["install"]

_UNREADABLE = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
               ImportError, IndexError, KeyError, OverflowError)


def install() -> None:
    """Wrap ``numba.core.caching.Cache.load_overload`` and install
    :func:`_install_callee_bundles` (idempotent)."""
    from numba.core import caching

    _install_callee_bundles()
    original = caching.Cache.load_overload
    if getattr(original, "recovers_damaged_files", False):
        return

    def load_overload(self, sig, target_context):
        try:
            return original(self, sig, target_context)
        except _UnbundledCacheEntry:  # written before the callees were bundled: compile again
            return None
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


class _UnbundledCacheEntry(Exception):
    """A cache entry without its callees' code (written by a process that had not
    installed :func:`_install_callee_bundles`): treated as absent, compiled again."""


_LOADED: dict[str, object] = {}
"""Callee libraries loaded from bundles in this process, by the SHA-1 of their code
(kept alive: the JIT runs their code)."""


def _own_symbols(library) -> tuple[str, ...]:
    """The functions ``library``'s object code defines with external linkage: its own,
    not the ``linkonce_odr`` copies of its callees."""
    own = getattr(library, "_cosim_own_symbols", None)
    if own is not None:
        return own
    from llvmlite import binding as ll

    return tuple(fn.name for fn in library._final_module.functions
                 if not fn.is_declaration and fn.linkage == ll.Linkage.external)


def _callee_bundle(library) -> tuple[tuple[str, bytes, tuple[str, ...]], ...]:
    """``(name, object code, own symbols)`` of every library that ``library`` links in,
    transitively, each callee before its callers: the order in which the compiling
    process put their code into the JIT (a library is finalised before any library that
    links it). A callee loaded from the cache contributes its own bundle first."""
    out: list[tuple[str, bytes, tuple[str, ...]]] = []
    seen: set[int] = set()
    codes: set[bytes] = set()

    def add(entry):
        digest = hashlib.sha1(entry[1]).digest()
        if digest not in codes:
            codes.add(digest)
            out.append(entry)

    def visit(lib):
        for dep in lib._linking_libraries:
            if id(dep) in seen:
                continue
            seen.add(id(dep))
            for entry in getattr(dep, "_cosim_bundle", ()):
                add(entry)
            visit(dep)
            code = getattr(dep, "_cosim_object", None) or getattr(dep, "_compiled_object", None)
            if code is not None:
                add((dep.name, bytes(code), _own_symbols(dep)))

    visit(library)
    return tuple(out)


def _load_callee(codegen, name: str, code: bytes, symbols: tuple[str, ...]) -> None:
    """Put one bundled callee's object code into the JIT, unless this process already
    defines one of its symbols (compiled, or loaded before) or loaded the same code."""
    digest = hashlib.sha1(code).hexdigest()
    engine = codegen._engine
    if digest in _LOADED or any(engine.is_symbol_defined(symbol) for symbol in symbols):
        return
    library = codegen.create_library(name)
    library.enable_object_caching()
    library._set_compiled_object(code)
    library._finalize_final_module()
    engine._defined_symbols.update(symbols)
    library._cosim_object, library._cosim_own_symbols = code, symbols
    _LOADED[digest] = library


def _install_callee_bundles() -> None:
    """Make a kernel loaded from Numba's cache call the code its compiling process called.

    A kernel that calls another ``@njit`` function (or runs a ``prange`` loop, whose body
    Numba compiles as a function of its own) links a copy of the callee's optimised IR
    into its module and optimises it again with the kernel. The copy is ``linkonce_odr``
    (a weak symbol in the object code). In the compiling process the callee's own build
    is already in the JIT, so the JIT binds the kernel's calls to it and drops the copy;
    loaded from the cache, the kernel's object code is alone and its calls bind to the
    copy, optimised twice. Under ``fastmath`` with ``reassoc`` the second optimisation
    can order a sum differently (measured on ``learning.local.fused_local.rho_update_serial``:
    one float32 ulp in 2,104 of 300,000 entries), so a run's numbers depended on whether
    its kernels were compiled in the process or loaded.

    Installed: every library keeps its object code (object caching enabled on
    creation); a cache entry carries, beside the kernel's object code, the object code
    of every library it links (:func:`_callee_bundle`), and loading it puts those into
    the JIT first (:func:`_load_callee`), so its weak copies are dropped as in the
    compiling process. An entry written without them is compiled again. Idempotent.
    """
    from numba.core import codegen

    library_class = codegen.CPUCodeLibrary
    if getattr(library_class, "_cosim_bundles_callees", False):
        return
    original_create = codegen.JITCPUCodegen.create_library
    original_serialize = library_class.serialize_using_object_code
    original_unserialize = library_class._unserialize.__func__

    def create_library(self, name, **kwargs):
        library = original_create(self, name, **kwargs)
        if not library._object_caching_enabled:
            library.enable_object_caching()  # so that a caller's cache entry can carry its code
        return library

    def serialize_using_object_code(self):
        name, kind, (code, shared_bitcode) = original_serialize(self)
        return name, kind, (code, shared_bitcode, (_own_symbols(self), _callee_bundle(self)))

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        if kind != "object":
            return original_unserialize(cls, codegen_, state)
        if len(data) != 3:
            raise _UnbundledCacheEntry(name)
        code, shared_bitcode, (own, bundle) = data
        for callee in bundle:
            _load_callee(codegen_, *callee)
        library = original_unserialize(cls, codegen_, (name, kind, (code, shared_bitcode)))
        library._cosim_object, library._cosim_own_symbols, library._cosim_bundle = code, own, bundle
        return library

    codegen.JITCPUCodegen.create_library = create_library
    library_class.serialize_using_object_code = serialize_using_object_code
    library_class._unserialize = classmethod(_unserialize)
    library_class._cosim_bundles_callees = True
