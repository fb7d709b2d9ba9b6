"""Readers of a trace that a run is writing: every read returns the committed rounds (or
says the trace is being written), never that it is damaged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from cosim.api import to_pandas
from cosim.trace import TraceError, read_trace
from cosim.trace.file_format import writer_pid
from cosim.trace.verify import verify_trace

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    sys.path.insert(0, sys.argv[2] + "/tests/cosim")
    from pathlib import Path
    from test_trace import new_trace, write_round
    writer = new_trace(Path(sys.argv[1]), 0)
    print("created", flush=True)
    for t in range(int(sys.argv[3])):
        if t % 40 == 0:
            sys.stdin.readline()  # paced by the reader: at most 40 rounds per read
        write_round(writer, t)
        writer.commit()
    while sys.stdin.readline().strip() != "close":  # holds the trace open until the test has looked
        pass
    writer.close()
""")


def test_a_trace_read_in_a_loop_while_it_is_written_is_never_damaged(tmp_path):
    path = tmp_path / "live.h5"
    rounds = 400
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(ROOT), str(rounds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "created"
        seen, reads, verdicts = 0, 0, set()
        while seen < rounds and proc.poll() is None:
            reads += 1
            proc.stdin.write("go\n")
            proc.stdin.flush()
            try:
                frame = to_pandas(path).rounds if reads % 2 else None
                data = read_trace(path)
            except TraceError as error:  # allowed only as "being written"
                assert "is incomplete, being written by process" in str(error), error
                continue
            assert data.completed_rounds >= seen  # committed rounds never go back
            seen = data.completed_rounds
            np.testing.assert_array_equal(data.rounds.get("round", np.arange(0)), np.arange(seen))
            if frame is not None and len(frame):
                assert list(frame["round"]) == list(range(len(frame)))
            verdict = verify_trace(path)
            verdicts.add(verdict.state)
            assert verdict.state == "incomplete", verdict.line()
            assert f"being written by process {proc.pid}" in verdict.detail, verdict.line()
        assert reads >= 10 and seen == rounds
        assert writer_pid(path) == proc.pid
    finally:
        proc.communicate("close\n", timeout=300)
    assert proc.returncode == 0
    assert writer_pid(path) is None
    assert verify_trace(path).state == "ok"  # its scenario plans 6 rounds; it holds 400
