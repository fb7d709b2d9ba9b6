"""Subnormal floats flushed to zero inside the local training's Numba kernels.

TensorFlow's CPU thread pools run every op with subnormal results flushed to zero and
subnormal inputs read as zero (``port::ScopedFlushDenormal``: the FTZ and DAZ bits of
x86's MXCSR). Numba's threads run with the default control word, and on Intel CPUs
every operation that meets a subnormal takes a microcode assist: the LRT's phase 2,
whose products met them, took 0.62 s per paper-size round with them and 0.42 s
flushed (2026-11-27, an Intel Xeon; ``benchmarks/README.md``). The parallel
kernels of the local training (``learning/fused_*.py``, :mod:`native.sampling`)
therefore start each work item with :func:`flush_subnormals` and end it with
:func:`restore_float_control`: the same arithmetic as TF's, without the assists.

The control word is per thread and is restored at the end of each work item, so
nothing outside the kernel (NumPy on the main thread, the PHY) sees the change. BLAS
called from inside such a work item (``np.dot`` under
:func:`native.launch.single_threaded_blas`) runs on the same thread and flushes too.

On CPUs other than x86-64 both calls do nothing (the subnormals are kept).
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from native import numba_cache

numba_cache.install()  # a damaged cache file is compiled again, with a note

__all__ = ["FLUSH_TO_ZERO", "READ_AS_ZERO", "float_control_word", "flush_subnormals", "restore_float_control"]

FLUSH_TO_ZERO = 0x8000
"""MXCSR bit 15 (FTZ): subnormal results are written as zero."""

READ_AS_ZERO = 0x0040
"""MXCSR bit 6 (DAZ): subnormal inputs are read as zero."""

_X86 = platform.machine().lower() in ("x86_64", "amd64")


def _mxcsr_call(builder, name, slot):
    """Call the LLVM intrinsic ``llvm.x86.sse.<name>`` on the 32-bit ``slot``."""
    pointer = ir.PointerType(ir.IntType(8))
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [pointer]),
                                              f"llvm.x86.sse.{name}")
    builder.call(function, [builder.bitcast(slot, pointer)])


@intrinsic
def _read_control(typingctx):
    def codegen(context, builder, signature, args):
        if not _X86:
            return ir.Constant(ir.IntType(32), 0)
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        _mxcsr_call(builder, "stmxcsr", slot)
        return builder.load(slot)

    return types.uint32(), codegen


@intrinsic
def _write_control(typingctx, word):
    def codegen(context, builder, signature, args):
        if _X86:
            slot = cgutils.alloca_once(builder, ir.IntType(32))
            builder.store(args[0], slot)
            _mxcsr_call(builder, "ldmxcsr", slot)
        return context.get_dummy_value()

    return types.void(types.uint32), codegen


@njit(nogil=True, cache=True)
def float_control_word():
    """The calling thread's float control word (MXCSR; 0 off x86-64), uint32."""
    return _read_control()


@njit(nogil=True, cache=True)
def flush_subnormals():
    """Set FTZ and DAZ on the calling thread; returns the control word before, to be
    given back to :func:`restore_float_control` (uint32)."""
    before = _read_control()
    _write_control(before | (FLUSH_TO_ZERO | READ_AS_ZERO))
    return before


@njit(nogil=True, cache=True)
def restore_float_control(word):
    """Put back the calling thread's control word ``word`` (from :func:`flush_subnormals`)."""
    _write_control(word)
