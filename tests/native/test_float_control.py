"""Subnormals flushed inside the local training's kernels (:mod:`native.float_control`),
as TensorFlow's thread pools flush them, and the caller's control word kept."""

import platform

import numpy as np
import pytest

from learning.local import fused_local, fused_mlp
from native import sampling
from native.float_control import (
    FLUSH_TO_ZERO,
    READ_AS_ZERO,
    float_control_word,
    flush_subnormals,
    restore_float_control,
)

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the control word is x86-64's MXCSR")

SUBNORMAL = np.float32(1e-40)
TINY = np.float32(1e-20)  # TINY * TINY = 1e-40 is subnormal in float32
_STICKY = 0x3F  # the exception flags, which any arithmetic may raise


def _mode() -> int:
    return int(float_control_word()) & ~_STICKY


def test_flush_sets_both_bits_and_restore_puts_the_word_back():
    before = _mode()
    word = flush_subnormals()
    assert int(word) & ~_STICKY == before
    assert _mode() == before | FLUSH_TO_ZERO | READ_AS_ZERO
    restore_float_control(word)
    assert _mode() == before


def test_numpy_on_the_calling_thread_keeps_its_subnormals():
    before = _mode()
    out = np.empty(8, np.float32)
    fused_local._shifted_mean(np.zeros(8, np.float32), np.full(8, TINY), np.full(8, TINY), out)
    assert np.all(out == 0.0)  # flushed inside the kernel
    assert _mode() == before
    assert np.full(8, TINY) @ np.full(8, TINY) > 0.0  # and not outside it


def test_the_phase_passes_flush_results_and_read_subnormal_inputs_as_zero():
    out = np.empty((2, 8), np.float32)
    rows = np.full((2, 8), TINY)
    # Delta_nu_k = (Delta_rho_k - Delta_rho) / rho_next * mu_t + z_k
    fused_local.phase2_update(rows, np.zeros(8, np.float32), np.ones(8, np.float32), np.full(8, TINY),
                              np.zeros((2, 8), np.float32), out)
    assert np.all(out == 0.0)
    fused_local.phase2_update(np.zeros((2, 8), np.float32), np.zeros(8, np.float32), np.ones(8, np.float32),
                              np.zeros(8, np.float32), np.full((2, 8), SUBNORMAL), out)
    assert np.all(out == 0.0)


def test_the_mlp_products_flush():
    h = np.full((1, 3, 4), TINY)
    w = np.full((2, 4 * 5), TINY)
    out = np.empty((2, 3, 5), np.float32)
    fused_mlp._dense_forward(h, w, np.zeros((2, 5), np.float32), False, out)
    assert np.all(out == 0.0)
    reference = np.einsum("ri,ij->rj", h[0], w[0].reshape(4, 5))
    assert np.all(reference > 0.0)  # the same sums outside the kernel are subnormal


def test_the_sampler_reads_a_subnormal_std_as_zero():
    mean = np.zeros(4096, np.float32)
    std = np.full(4096, SUBNORMAL)
    out = sampling.fill_normal(mean, std, 2, (1, 2), 0)
    assert np.all(out == 0.0)
    assert np.count_nonzero(np.float32(np.random.default_rng(0).standard_normal(4096)) * SUBNORMAL) > 0
