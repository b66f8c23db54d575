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

:func:`prepare` forks one process when a report starts (before the run is read): it imports the modules the
report's sections need (matplotlib and the figure code) and warms up the figure machinery while this process reads
the run store and analyses it; :func:`call_prepared` then runs the section builder there (it forks the figure
workers in turn) and returns its result, so that the importing never waits on the critical path. Without a
prepared process (no ``fork``, one CPU, threads running, or it failed) the function runs here, with the same result.

>>> call_prepared("operator:add", 2, 3)  # nothing prepared: runs in this process
5
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from medvlm_audit.cpus import usable_cpus

#: at most this many worker processes (a report has about a dozen figures). 8 was measured against 4 on an idle
#: 16-core machine (paper-sized report, 3 alternating repeats): 3.91 against 3.73 s median wall, 11.1 against
#: 10.0 CPU-s, so 4
MAX_WORKERS = 4

#: the jobs of the pool being filled (inherited by the forked workers, which get only an index)
_JOBS: list[Callable[[], Any]] = []


def _run(i: int) -> Any:
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
        workers = min(usable_cpus(), MAX_WORKERS)
    return max(1, min(int(workers), n_jobs))


def map_forked(jobs: Sequence[Callable[[], Any]], *, workers: int | None = None, first: Sequence[int] = (),
               timeout_s: float = 600.0, warm: bool = True) -> Callable[[], list[Any]]:
    """Start the jobs in forked worker processes; returns a function that waits and gives their results in order.

    ``workers``: processes (None: the CPU count, at most ``MAX_WORKERS``); 1 runs the jobs in the parent, when
    the returned function is called. ``first``: indices of the slowest jobs, handed out before the others so that
    no worker is left with a long job at the end. An exception in a job is raised by the returned function.
    ``warm``: load what figure jobs need first (:func:`warm_up`) before the fork; False for jobs that draw nothing
    (their results must pickle)."""
    global _JOBS
    jobs = list(jobs)
    w = _workers(workers, len(jobs))
    if w == 1 or "fork" not in multiprocessing.get_all_start_methods() or _JOBS:
        return lambda: [job() for job in jobs]
    _JOBS = jobs
    if warm:
        warm_up()
    head = [i for i in dict.fromkeys(first) if 0 <= i < len(jobs)]
    order = head + [i for i in range(len(jobs)) if i not in set(head)]
    gc.freeze()  # the workers' garbage collector leaves the inherited objects alone: fewer copied pages
    try:
        with warnings.catch_warnings():  # Python >= 3.12 warns on fork in a process that has (idle) threads
            warnings.simplefilter("ignore", DeprecationWarning)
            # a fork-context executor forks all its workers at the first submit (here, while frozen); a worker
            # that dies (the out-of-memory killer) breaks the pool at once (BrokenProcessPool), where a
            # multiprocessing.Pool lost the job and waited out the timeout
            pool = ProcessPoolExecutor(w, mp_context=multiprocessing.get_context("fork"))
            futures = {i: pool.submit(_run, i) for i in order}
    except OSError:
        _JOBS = []
        return lambda: [job() for job in jobs]
    finally:
        gc.unfreeze()

    def wait() -> list[Any]:
        global _JOBS
        try:
            done, _ = futures_wait(futures.values(), timeout=timeout_s)
            if len(done) < len(futures):
                raise TimeoutError
            return [futures[i].result() for i in range(len(jobs))]
        except (TimeoutError, BrokenProcessPool) as e:
            why = "did not finish in time" if isinstance(e, TimeoutError) else "died (killed?)"
            print(f"warning: a worker process {why}; its jobs run in this process", file=sys.stderr)
            _stop(pool)
            return [job() for job in jobs]
        finally:
            _stop(pool)
            _JOBS = []

    return wait


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now (a figure job left running is not waited for)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


#: seconds the parent waits for the prepared process's answer before it runs the function itself
PREPARED_TIMEOUT_S = 600.0

#: (pid, connection) of the prepared process, if one was started and not yet used
_PREPARED: tuple[int, Any] | None = None

#: (key, connection) of the prepared process's first result (see :func:`prepare`), if not yet taken
_FIRST: tuple[str, Any] | None = None


def _resolve(target: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _send_quietly(conn: Any, msg: Any) -> None:
    try:
        conn.send(msg)
    except Exception:  # the parent went on without it (or it does not pickle): the parent computes it itself
        pass
    finally:
        conn.close()


def _serve(conn: Any, modules: Sequence[str], first: tuple[str, tuple[Any, ...], Any] | None = None) -> None:
    """The prepared process: run the ``first`` job (its result goes back on its own connection, sent by a thread
    while this one imports), import ``modules`` and warm up, then run one job sent by the parent and send back
    ("ok", result), ("err", the exception it raised) or ("fail", why it could not run)."""
    sender = None
    modules = list(modules)
    if first is not None:
        target, args, first_conn = first
        try:
            value, more = _resolve(target)(*args)
            modules += [m for m in more if m not in modules]
            msg: tuple[str, Any] = ("ok", value)
        except Exception:
            msg = ("fail", traceback.format_exc(limit=3))
        sender = threading.Thread(target=_send_quietly, args=(first_conn, msg), daemon=True)
        sender.start()
    broken = ""
    try:
        for m in modules:
            importlib.import_module(m)
        if modules:  # a suite whose report draws figures (none: this process only read the table)
            warm_up()
    except Exception:  # the parent then runs the job itself
        broken = traceback.format_exc(limit=3)
    try:
        target, args, kwargs = conn.recv()
    except (EOFError, OSError):  # the parent went on without us
        return
    if sender is not None:
        sender.join()  # no thread left when the job forks its workers
    if broken:
        conn.send(("fail", broken))
        return
    try:
        reply: tuple[str, Any] = ("ok", _resolve(target)(*args, **kwargs))
    except Exception as e:
        reply = ("err", e)
    try:
        conn.send(reply)
    except Exception:  # an unpicklable result or exception: the parent runs the job itself
        conn.send(("fail", traceback.format_exc(limit=3)))


def prepare(modules: Sequence[str] = (), *, first: str | None = None, first_args: tuple[Any, ...] = (),
            key: str = "") -> bool:
    """Fork the prepared process (see the module's doc) importing ``modules``; False where none was started: no
    modules and no first job, no ``fork``, one CPU, other threads running (forking them is unsafe) or one is
    already prepared. ``first`` (``"package.module:function"``, called with ``first_args``) runs there at once,
    before the imports, and returns (value, more modules to import): the value is sent back for
    :func:`take_first` with this ``key`` (e.g. the run's table, read while this process imports the analysis)."""
    global _PREPARED, _FIRST
    if ((not modules and first is None) or _PREPARED is not None or usable_cpus() < 2 or _JOBS
            or "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1):
        return False
    try:
        here, there = multiprocessing.Pipe()
        first_here, first_there = multiprocessing.Pipe(duplex=False) if first is not None else (None, None)
        gc.freeze()  # the prepared process's garbage collector leaves the inherited objects alone: fewer copied pages
        with warnings.catch_warnings():  # Python >= 3.12 warns on fork in a process with (idle BLAS) threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        gc.unfreeze()
        return False
    if pid != 0:
        gc.unfreeze()
    if pid == 0:  # the prepared process: never returns into the caller's code
        code = 1
        try:
            here.close()
            if first_here is not None:
                first_here.close()
            _serve(there, list(modules), (first, first_args, first_there) if first is not None else None)
            code = 0
        finally:
            os._exit(code)
    there.close()
    if first_there is not None:
        first_there.close()
        _FIRST = (key, first_here)
    _PREPARED = (pid, here)
    return True


def take_first(key: str) -> Any | None:
    """The value of the prepared process's first job if it was started with this ``key`` and succeeded (waits
    for it); None otherwise (then compute it here: an error is raised here, where it names the input)."""
    global _FIRST
    if _FIRST is None:
        return None
    got, conn = _FIRST
    _FIRST = None
    status, value = "fail", None
    try:
        if got == key and conn.poll(PREPARED_TIMEOUT_S):
            status, value = conn.recv()
    except Exception:
        status = "fail"
    finally:
        conn.close()
    return value if status == "ok" else None


def release_prepared() -> None:
    """End an unused prepared process (it exits when its connection closes) and reap it."""
    global _PREPARED, _FIRST
    if _FIRST is not None:
        _FIRST[1].close()
        _FIRST = None
    if _PREPARED is None:
        return
    pid, conn = _PREPARED
    _PREPARED = None
    conn.close()
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def run_key(run_dir: str | os.PathLike[str]) -> str:
    """The key of a run folder's prepared table: its resolved path."""
    return str(Path(run_dir).resolve())


def call_prepared(target: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``target`` (``"package.module:function"``) with these (picklable) arguments in the prepared process
    and return its result, or raise the exception it raised there; without a usable prepared process (none
    started, it failed or did not answer within ``PREPARED_TIMEOUT_S``) run it in this process."""
    global _PREPARED, _FIRST
    if _PREPARED is None:
        return _resolve(target)(*args, **kwargs)
    pid, conn = _PREPARED
    _PREPARED = None
    if _FIRST is not None:  # a first result nobody took: closed, so that its sender there does not wait for us
        _FIRST[1].close()
        _FIRST = None
    status, value = "fail", None
    try:
        conn.send((target, args, kwargs))
        if conn.poll(PREPARED_TIMEOUT_S):
            status, value = conn.recv()
    except Exception:  # a broken pipe, an unpicklable argument: run it here
        status = "fail"
    finally:
        if status == "fail":
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        conn.close()
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if status == "ok":
        return value
    if status == "err":
        raise value
    return _resolve(target)(*args, **kwargs)
