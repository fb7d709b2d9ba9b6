"""Bounds the scenario's schema and the trace's readers share (standard library only)."""

from __future__ import annotations

__all__ = ["MAX_ROUNDS"]

MAX_ROUNDS = 10_000_000
"""The most rounds a scenario may ask for and a trace may claim (``completed_rounds``):
at the fastest round measured (about 0.05 s, the tiny test scenario) they would take
six days; more is a typing slip or a crafted file, refused before anything is
estimated or allocated."""
