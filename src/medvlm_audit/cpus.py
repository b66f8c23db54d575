"""The number of CPUs this process may run on: what thread pools and worker processes are sized by."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The cores this process may run on (``taskset``, a container's CPU set), not the machine's count:
    ``os.cpu_count()`` counts every core, so a process pinned to one would start workers that only queue.

    >>> usable_cpus() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1
