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


#: glibc's ``M_ARENA_MAX`` option of ``mallopt``
_M_ARENA_MAX = -8


def limit_malloc_arenas(n: int = 2) -> bool:
    """Let this process's C allocator (glibc) keep at most ``n`` arenas; False where it is not glibc's.

    By default glibc gives each thread that meets a busy arena one of its own, up to 8 per core, and each keeps
    its freed memory: a report whose resampling runs in 8 threads peaked at 336 MB against 298 MB with 2 arenas
    (the paper-sized grounding run, issue 23), for the same CPU. Call it before the threads start (glibc fixes
    the limit when the first thread needs an arena); forked processes inherit it. A no-op for the process's own
    requests where another C library is in use.

    >>> limit_malloc_arenas() in (True, False)
    True
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (musl, macOS)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, int(n)))
