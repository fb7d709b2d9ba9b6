"""How much memory a reader may still take: the check a reader makes of what a file
claims (a trace's shapes, a dataset's image count) before it allocates. Standard
library only."""

from __future__ import annotations

import os

__all__ = ["MEMORY_SHARE", "memory_budget"]

MEMORY_SHARE = 0.5
"""The share of the memory this process may still take (the smaller of the system's
available memory and what its address-space limit leaves) that the arrays of a file
it reads (a trace's datasets, a dataset file's images) may take."""


def memory_budget(cap: int = 16 * 2**30) -> int:
    """Bytes a reader may allocate for the arrays of a file it reads (a trace, a
    dataset): :data:`MEMORY_SHARE` of the memory still to be had (``MemAvailable``; the
    address-space limit, ``RLIMIT_AS``, less this process's size), at most ``cap``."""
    import resource

    budget = cap
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    budget = min(budget, int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as statm:
                used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            used = 0
        budget = min(budget, max(0, soft - used))
    return int(budget * MEMORY_SHARE)
