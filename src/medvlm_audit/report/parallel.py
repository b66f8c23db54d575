"""Figures drawn in forked worker processes while the parent goes on (matplotlib holds the GIL, threads do not help).

A report's figures are independent of one another: each job builds one figure and returns its HTML. With
``fork`` available (Linux), :func:`map_forked` starts a small process pool that inherits the jobs (closures over
the analysis, never pickled), so the parent can render its tables meanwhile and collect the figures in order
afterwards; the page is the same as with one process (each figure's SVG ids come from its number, not from a
process-wide counter; tested). Without ``fork``, with one CPU, one job or ``workers=1``, the jobs run in the
parent when the results are asked for. A pool that does not answer within ``timeout_s`` is terminated and the
jobs run in the parent.

>>> wait = map_forked([lambda: "a", lambda: "b"], workers=1)
>>> wait()
['a', 'b']
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import warnings
from collections.abc import Callable, Sequence

#: at most this many worker processes (a report has about a dozen figures)
MAX_WORKERS = 4

#: the jobs of the pool being filled (inherited by the forked workers, which get only an index)
_JOBS: list[Callable[[], str]] = []


def _run(i: int) -> str:
    return _JOBS[i]()


def warm_up() -> None:
    """What every figure job needs first, done once before the fork so that the workers inherit it: the report's
    template macros compiled and the house style's font loaded."""
    import matplotlib
    from matplotlib import font_manager

    from medvlm_audit.report.figures import STYLE
    from medvlm_audit.report.render import macro

    macro("figure")
    with matplotlib.rc_context(STYLE):  # type: ignore[arg-type]
        font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))


def _workers(workers: int | None, n_jobs: int) -> int:
    if workers is None:
        workers = min(os.cpu_count() or 1, MAX_WORKERS)
    return max(1, min(int(workers), n_jobs))


def map_forked(jobs: Sequence[Callable[[], str]], *, workers: int | None = None, first: Sequence[int] = (),
               timeout_s: float = 600.0) -> Callable[[], list[str]]:
    """Start the jobs in forked worker processes; returns a function that waits and gives their results in order.

    ``workers``: processes (None: the CPU count, at most ``MAX_WORKERS``); 1 runs the jobs in the parent, when
    the returned function is called. ``first``: indices of the slowest jobs, handed out before the others so that
    no worker is left with a long job at the end. An exception in a job is raised by the returned function."""
    global _JOBS
    jobs = list(jobs)
    w = _workers(workers, len(jobs))
    if w == 1 or "fork" not in multiprocessing.get_all_start_methods() or _JOBS:
        return lambda: [job() for job in jobs]
    _JOBS = jobs
    warm_up()
    gc.freeze()  # the workers' garbage collector leaves the inherited objects alone: fewer copied pages
    try:
        with warnings.catch_warnings():  # Python >= 3.12 warns on fork in a process that has (idle) threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pool = multiprocessing.get_context("fork").Pool(w)
    except OSError:
        _JOBS = []
        return lambda: [job() for job in jobs]
    finally:
        gc.unfreeze()
    head = [i for i in dict.fromkeys(first) if 0 <= i < len(jobs)]
    order = head + [i for i in range(len(jobs)) if i not in set(head)]
    pending = pool.map_async(_run, order, chunksize=1)

    def wait() -> list[str]:
        global _JOBS
        try:
            got = dict(zip(order, pending.get(timeout_s)))
            return [got[i] for i in range(len(jobs))]
        except multiprocessing.TimeoutError:
            pool.terminate()
            return [job() for job in jobs]
        finally:
            pool.terminate()
            pool.join()
            _JOBS = []

    return wait
