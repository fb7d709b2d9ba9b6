"""A damaged Numba cache file is compiled again with a one-line note (it was an
UnpicklingError traceback at the kernel's first call)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNEL = textwrap.dedent("""
    from numba import njit

    @njit(cache=True)
    def plus_one(x):
        return x + 1
""")

CALL = textwrap.dedent("""
    import sys
    if sys.argv[1] == "recovering":
        import native.launch  # noqa: F401  (installs the recovery, as every kernel module's import does)
    import kernel
    print(kernel.plus_one(41))
""")


@pytest.mark.parametrize("damaged", [".nbi", ".nbc"])
def test_a_damaged_cache_file_is_compiled_again_with_a_note(tmp_path, damaged):
    (tmp_path / "kernel.py").write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}

    def call(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", CALL, mode], capture_output=True, text=True,
                              env=env, timeout=300, cwd=tmp_path)

    first = call("recovering")
    assert first.returncode == 0 and first.stdout.strip() == "42", first.stderr
    files = sorted((tmp_path / "cache").rglob(f"*{damaged}"))
    assert files, list((tmp_path / "cache").rglob("*"))
    for path in files:
        path.write_bytes(b"\x80\x04not a pickle at all")
    plain = call("plain")  # Numba alone
    assert plain.returncode != 0 and "Traceback" in plain.stderr
    for path in files:
        path.write_bytes(b"\x80\x04not a pickle at all")
    again = call("recovering")
    assert again.returncode == 0 and again.stdout.strip() == "42", again.stderr
    notes = [line for line in again.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: Numba's cache of "), again.stderr
    assert notes[0].endswith("cannot be read (UnpicklingError); compiling it again"), notes
    healed = call("recovering")  # the fresh compilation was saved: no note now
    assert healed.returncode == 0 and healed.stderr.strip() == "", healed.stderr


SUMS = textwrap.dedent("""
    import numpy as np
    from numba import njit

    @njit(nogil=True, cache=True, fastmath=True)
    def weighted(x, y, out):
        total = np.float32(0.0)
        for i in range(x.size):
            value = x[i] * y[i] + np.float32(0.5) * x[i] * x[i]
            total += value
            out[i] = value * np.float32(1.0001)
        return total

    @njit(nogil=True, cache=True, fastmath=True)
    def series(x, y, out):
        total, count = np.float32(0.0), np.float32(0.0)
        for i in range(x.size):
            q = x[i] / (np.float32(1.0) + y[i] * y[i])
            total += q * q * (np.float32(0.5) + q * (np.float32(-2.0 / 3.0) + q * np.float32(0.75)))
            count += np.float32(q > 0.1)
            out[i] = max(q - np.float32(0.05) * total, np.float32(-1.0))
        return total, count

    @njit(nogil=True, cache=True, fastmath=True)
    def blocks(x, y, out, out2):
        total = 0.0
        for lo in range(0, x.size, 2048):
            total += weighted(x[lo:lo + 2048], y[lo:lo + 2048], out[lo:lo + 2048])
            part, count = series(x[lo:lo + 2048], y[lo:lo + 2048], out2[lo:lo + 2048])
            total += part + count
        return total
""")

BLOCKS = textwrap.dedent("""
    import hashlib
    import sys
    import numpy as np
    if sys.argv[1] == "bundling":
        import native.launch  # noqa: F401  (installs the bundles, as every kernel module's import does)
    import sums
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(300_000).astype(np.float32) for _ in range(2))
    out, out2 = np.empty_like(x), np.empty_like(x)
    total = sums.blocks(x, y, out, out2)
    digest = hashlib.sha1(out.tobytes() + out2.tobytes() + np.float64(total).tobytes()).hexdigest()
    print(digest, sum(sums.blocks.stats.cache_hits.values()))
""")


def _blocks(tmp_path, mode: str) -> tuple[str, int]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_NUM_THREADS": "1",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-c", BLOCKS, mode], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    digest, hits = done.stdout.split()
    return digest, int(hits)


def test_a_kernel_loaded_from_the_cache_computes_what_it_computed_compiled(tmp_path):
    """A kernel calling other ``@njit`` functions with ``reassoc`` sums gives the same bits
    in the process that compiled it and in one that loads it from the cache. Without
    the callee bundles the loaded kernel ran its callees' copies, optimised a second
    time with the caller (measured 2026-11-27 with this kernel: other bits in
    ``out``); the entry now carries the callees' own code, loaded first."""
    (tmp_path / "sums.py").write_text(SUMS)
    compiled = _blocks(tmp_path, "bundling")
    loaded = _blocks(tmp_path, "bundling")
    assert compiled[1] == 0 and loaded[1] == 1, (compiled, loaded)
    assert loaded[0] == compiled[0]


def test_a_cache_entry_without_its_callees_is_compiled_again(tmp_path):
    """An entry written by Numba alone (no bundle, e.g. before this change) is compiled
    again silently, so the run computes the compiled bits; the new entry is then used."""
    (tmp_path / "sums.py").write_text(SUMS)
    plain = _blocks(tmp_path, "plain")
    again = _blocks(tmp_path, "bundling")
    assert plain[1] == 0 and again == (plain[0], 0), (plain, again)
    assert _blocks(tmp_path, "bundling") == (plain[0], 1)
