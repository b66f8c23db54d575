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


@needs_fork
def test_a_killed_worker_does_not_stall_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    # audit D2: a worker killed by a signal (the out-of-memory killer) lost its job, and the report waited out
    # the 600 s timeout; now the pool breaks at once and the jobs run in this process
    import signal
    import time

    parent = os.getpid()

    def dies_in_a_worker() -> str:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return "drawn here"

    t0 = time.monotonic()
    got = map_forked([lambda: "a", dies_in_a_worker, lambda: "c"], workers=2, timeout_s=120)()
    assert got == ["a", "drawn here", "c"]
    assert time.monotonic() - t0 < 30
    assert "worker process died" in capsys.readouterr().err
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


@needs_fork
def test_a_prepared_process_runs_the_call_and_returns_its_result() -> None:
    from medvlm_audit.report import parallel

    if not parallel.prepare(["colorsys"]):
        pytest.skip("no prepared process here (one CPU or threads running)")
    assert parallel._PREPARED is not None
    child = parallel._PREPARED[0]
    assert parallel.call_prepared("os:getpid") == child  # ran there, not here
    assert parallel._PREPARED is None  # used once
    with pytest.raises(ChildProcessError):
        os.waitpid(child, 0)  # already reaped
    assert parallel.call_prepared("os:getpid") == os.getpid()  # nothing prepared: runs here


@needs_fork
def test_an_error_in_the_prepared_call_is_raised_here() -> None:
    from medvlm_audit.report import parallel

    if not parallel.prepare(["colorsys"]):
        pytest.skip("no prepared process here (one CPU or threads running)")
    with pytest.raises(ZeroDivisionError):
        parallel.call_prepared("operator:truediv", 1, 0)
    assert parallel._PREPARED is None


@needs_fork
def test_a_prepared_process_that_failed_to_import_leaves_the_call_to_this_process() -> None:
    from medvlm_audit.report import parallel

    if not parallel.prepare(["medvlm_audit.no_such_module_here"]):
        pytest.skip("no prepared process here (one CPU or threads running)")
    assert parallel.call_prepared("os:getpid") == os.getpid()
    assert parallel.call_prepared("operator:add", 2, 3) == 5


@needs_fork
def test_an_unused_prepared_process_is_ended_and_reaped() -> None:
    from medvlm_audit.report import parallel

    if not parallel.prepare(["colorsys"]):
        pytest.skip("no prepared process here (one CPU or threads running)")
    assert not parallel.prepare(["colorsys"])  # one at a time
    child = parallel._PREPARED[0]
    parallel.release_prepared()
    assert parallel._PREPARED is None
    with pytest.raises(ChildProcessError):
        os.waitpid(child, 0)
    parallel.release_prepared()  # nothing left: a no-op


@needs_fork
def test_a_report_with_its_sections_built_in_the_prepared_process_is_the_same(tmp_path, monkeypatch) -> None:
    from test_import_results import _manifest, _results

    from medvlm_audit import api
    from medvlm_audit.report import parallel
    from medvlm_audit.suites.grounding.import_results import import_results

    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 0, 0, 1, 0],
                                     "target_mask": [0, 1, 1, 1], "irrelevant_mask": [1, 1, 0, 1]})
    _results(tmp_path, "textlm", {"original": [1, 1, 1, 1, 1], "swap": [1, 1, 1, 1, 1]})
    run = import_results(_manifest(tmp_path), res, tmp_path / "run", text_only=("textlm",))
    started: list[bool] = []
    real = parallel.prepare
    monkeypatch.setattr(parallel, "prepare", lambda modules: started.append(real(modules)) or started[-1])
    a = api.report(run, tmp_path / "a")
    if started != [True]:
        pytest.skip("no prepared process here (one CPU or threads running)")
    assert parallel._PREPARED is None
    monkeypatch.setattr(parallel, "prepare", lambda modules: False)  # everything in this process
    b = api.report(run, tmp_path / "b")
    page = a.read_text()
    assert page == b.read_text() and page.count("<svg") >= 3
    for name in ("metrics.csv", "comparisons.csv", "categories.csv", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def _first_job(x: int) -> tuple[list[int], tuple[str, ...]]:
    return [x, os.getpid()], ("colorsys",)


def _big_first_job() -> tuple[bytes, tuple[str, ...]]:
    return b"x" * 2_000_000, ()


def _failing_first_job(x: int) -> tuple[list[int], tuple[str, ...]]:
    raise ValueError(f"no table {x}")


@needs_fork
def test_the_prepared_process_first_job_comes_back_for_its_key_only(monkeypatch) -> None:
    from medvlm_audit.report import parallel

    if not parallel.prepare(first="test_report_parallel:_first_job", first_args=(7,), key="run-a"):
        pytest.skip("no prepared process here (one CPU or threads running)")
    child = parallel._PREPARED[0]
    assert parallel.take_first("run-a") == [7, child]  # computed there
    assert parallel.take_first("run-a") is None  # taken once
    assert parallel.call_prepared("os:getpid") == child  # the process goes on to serve the job
    # another key, or a first job that failed: nothing comes back (the caller computes it, and sees its error)
    if parallel.prepare(first="test_report_parallel:_first_job", first_args=(8,), key="run-a"):
        assert parallel.take_first("run-b") is None
        parallel.release_prepared()
    if parallel.prepare(first="test_report_parallel:_failing_first_job", first_args=(9,), key="run-c"):
        assert parallel.take_first("run-c") is None
        assert parallel.call_prepared("operator:add", 1, 2) == 3
    # a first result nobody takes (larger than a pipe holds) does not hold up the job
    if parallel.prepare(first="test_report_parallel:_big_first_job", key="run-d"):
        child = parallel._PREPARED[0]
        monkeypatch.setattr(parallel, "PREPARED_TIMEOUT_S", 20.0)
        assert parallel.call_prepared("os:getpid") == child  # not the fallback after a timeout
    assert parallel._PREPARED is None and parallel._FIRST is None


@needs_fork
def test_the_report_command_reads_the_run_in_the_prepared_process_with_the_same_report(tmp_path, monkeypatch) -> None:
    from test_import_results import _manifest, _results
    from typer.testing import CliRunner

    from medvlm_audit import api
    from medvlm_audit.cli import app
    from medvlm_audit.report import parallel
    from medvlm_audit.suites.grounding.import_results import import_results

    res = _results(tmp_path, "gpt", {"original": [1, 1, 0, 1, 0], "swap": [1, 0, 0, 1, 0],
                                     "target_mask": [0, 1, 1, 1], "irrelevant_mask": [1, 1, 0, 1]})
    run = import_results(_manifest(tmp_path), res, tmp_path / "run")
    taken: list[bool] = []
    real = parallel.take_first
    monkeypatch.setattr(parallel, "take_first", lambda key: taken.append((got := real(key)) is not None) or got)
    out = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    if taken != [True]:
        pytest.skip("no prepared process here (one CPU or threads running)")
    monkeypatch.setattr(parallel, "prepare", lambda *a, **k: False)  # everything in this process
    api.report(run, tmp_path / "b")
    for name in ("report.html", "metrics.csv", "comparisons.csv", "categories.csv", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
