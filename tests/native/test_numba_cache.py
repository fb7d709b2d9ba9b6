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
