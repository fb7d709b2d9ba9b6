"""A process asked to end while it writes a trace ends where the trace is whole
(:mod:`cosim.trace.exit_point`): what a local study worker does when its driver is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cosim.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys, threading
    from cosim.trace import TraceWriter
    from cosim.trace.exit_point import exit_when_consistent

    writer = TraceWriter.create(sys.argv[1], "rounds = 3\\n", 1)
    writer.append_round({"train_loss": 1.0})
    asker = threading.Thread(target=exit_when_consistent, args=(1,))
    asker.start()
    asker.join()  # it returned: a trace is open, so the process waits for its commit
    print("asked", flush=True)
    writer.append_round({"train_loss": 2.0})
    writer.commit()
    print("after the commit", flush=True)
""")


def test_a_process_asked_to_end_finishes_the_round_it_writes_then_ends(tmp_path):
    """Asked from another thread in the middle of round 0, the process goes on writing
    the round, ends with the code it was given right after the commit's flush, and the
    trace holds round 0; asked with no trace open, it ends at once."""
    path = tmp_path / "t.h5"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == ["asked"], done.stdout
    trace = read_trace(path)
    assert trace.completed_rounds == 1
    assert trace.rounds["train_loss"].tolist() == [2.0]

    idle = subprocess.run([sys.executable, "-c", "from cosim.trace.exit_point import "
                           "exit_when_consistent\nexit_when_consistent(3)\nprint('went on')"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert (idle.returncode, idle.stdout) == (3, "")
