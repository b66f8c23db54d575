"""Run a coroutine to completion from synchronous code, whether or not an event loop is already running.

``asyncio.run`` refuses to start inside a running loop (a Jupyter kernel, an async web handler); there the
coroutine runs on its own loop in a worker thread and the caller blocks until it finishes, so ``api.run`` works
the same in a script and in a notebook cell. Inside :func:`one_loop` every such call of the block reuses one
event loop (a run's endpoint check, server identification and execution: one loop, one resolver thread pool).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_RUNNER: contextvars.ContextVar[asyncio.Runner | None] = contextvars.ContextVar("medvlm_audit_runner", default=None)


def in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, or, inside a running event loop, the same on a fresh loop in a worker thread
    (exceptions propagate; the caller's context variables are carried over)."""
    if not in_running_loop():
        runner = _RUNNER.get()
        if runner is None:
            return asyncio.run(coro)
        # each call in a copy of the caller's context, as asyncio.run gives it (not the runner's first one)
        return runner.run(coro, context=contextvars.copy_context())
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="medvlm-audit-loop") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()


@contextlib.contextmanager
def one_loop() -> Iterator[None]:
    """Within the block, :func:`run_sync` called outside a running loop runs every coroutine on the same event
    loop (closed at the end of the block, as ``asyncio.run`` closes its own), not a new loop per call; inside a
    running loop, or nested in another ``one_loop``, it changes nothing.

    >>> async def loop_id() -> int:
    ...     return id(asyncio.get_running_loop())
    >>> with one_loop():
    ...     run_sync(loop_id()) == run_sync(loop_id())
    True
    """
    if in_running_loop() or _RUNNER.get() is not None:
        yield
        return
    with asyncio.Runner() as runner:
        token = _RUNNER.set(runner)
        try:
            yield
        finally:
            _RUNNER.reset(token)
