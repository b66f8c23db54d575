"""Figures drawn in forked worker processes (report/parallel.py): same results, in order, errors raised."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from medvlm_audit.report.parallel import map_forked

needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")


def _pid_job(i: int) -> str:
    return f"{i}:{os.getpid()}"


@needs_fork
def test_jobs_run_in_worker_processes_and_come_back_in_order() -> None:
    from functools import partial

    wait = map_forked([partial(_pid_job, i) for i in range(7)], workers=2)
    got = wait()
    assert [g.split(":")[0] for g in got] == [str(i) for i in range(7)]
    assert all(g.split(":")[1] != str(os.getpid()) for g in got)  # drawn elsewhere
    # the slowest jobs handed out first: the results still come back in the jobs' order
    got = map_forked([partial(_pid_job, i) for i in range(7)], workers=2, first=[5, 2, 5, 99])()
    assert [g.split(":")[0] for g in got] == [str(i) for i in range(7)]
    # one worker: run in this process, when asked
    assert [g.split(":")[1] for g in map_forked([partial(_pid_job, 0)], workers=1)()] == [str(os.getpid())]


@needs_fork
def test_an_error_in_a_job_is_raised_by_wait() -> None:
    def boom() -> str:
        raise RuntimeError("figure failed")

    wait = map_forked([lambda: "a", boom, lambda: "c"], workers=2)
    with pytest.raises(RuntimeError, match="figure failed"):
        wait()
    assert map_forked([lambda: "x", lambda: "y"], workers=2)() == ["x", "y"]  # the next pool starts clean


@pytest.mark.slow
@needs_fork
def test_grounding_page_is_the_same_with_worker_processes() -> None:
    from test_report import make_analysis

    from medvlm_audit.suites.grounding.sections import grounding_sections

    a = make_analysis()
    one = [s.html for s in grounding_sections(a, figure_workers=1)]
    two = [s.html for s in grounding_sections(a, figure_workers=2)]
    assert one == two  # also: the second call draws the same SVG ids as the first (no process-wide counter)
    assert one[1].count("<svg") >= 10
