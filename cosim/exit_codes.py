"""The exit statuses of the ``cosim`` commands, owned by the library that returns them.

:mod:`cosim.run` and :mod:`cosim.study` return these; the command line (``cli.py``)
passes them to the shell. Nothing else under ``cosim/`` imports the command line.
"""

from __future__ import annotations

__all__ = ["EXIT_DIVERGED", "EXIT_FAILED", "EXIT_HANGUP", "EXIT_INTERRUPTED", "EXIT_OK",
           "EXIT_TERMINATED", "EXIT_USAGE"]

EXIT_OK = 0
"""Everything asked for was done."""
EXIT_FAILED = 1
"""Some runs of a study failed (``cosim study run``)."""
EXIT_USAGE = 2
"""Bad input or a file fault; nothing written."""
EXIT_DIVERGED = 3
"""``cosim run`` stopped at a diverged round (:mod:`cosim.divergence`)."""
EXIT_HANGUP = 129
"""SIGHUP (128 + 1), its terminal gone: ``cosim study run`` stops as for SIGTERM."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT); completed rounds are in the trace (``cosim study run``: stopped as for
SIGTERM)."""
EXIT_TERMINATED = 143
"""SIGTERM (128 + 15): ``cosim study run`` stopped its runs and wrote its status; the
same command resumes it."""
