"""Run a coroutine to completion from synchronous code, whether or not an event loop is already running.

``asyncio.run`` refuses to start inside a running loop (a Jupyter kernel, an async web handler); there the
coroutine runs on its own loop in a worker thread and the caller blocks until it finishes, so ``api.run`` works
the same in a script and in a notebook cell.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="medvlm-audit-loop") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()
