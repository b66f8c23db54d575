"""The one small cache helper: a thread-safe LRU bounded by item count and/or a byte budget.

Every in-memory cache of the project (decoded sources, rendered pixels, encoded data URLs, image grids, the
reading view's PNGs) is an :class:`LRU`, so eviction and locking are written once.

>>> c = LRU(max_items=2)
>>> c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)
1
>>> c.get("b") is None, c.get("a"), c.get("c")
(True, 1, 3)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


def nbytes(value: Any) -> int:
    """Size of a cached value: arrays and bytes by their bytes, tuples summed, anything else 0."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sum(nbytes(v) for v in value)
    return 0


class LRU:
    """Least-recently-used cache. ``max_items`` and ``max_bytes`` (``None`` = unbounded) bound it; a value larger
    than ``max_bytes`` is not kept. ``put`` keeps an existing value unless ``replace``."""

    def __init__(self, max_items: int | None = None, max_bytes: int | None = None,
                 sizeof: Callable[[Any], int] = nbytes) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.sizeof = sizeof
        self.nbytes = 0
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def peek(self, key: Hashable) -> Any:
        """The value without touching its recency (``None`` when absent)."""
        return self._d.get(key)

    def get(self, key: Hashable) -> Any:
        with self.lock:
            value = self._d.get(key)
            if value is not None:
                self._d.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any, *, replace: bool = False) -> None:
        size = self.sizeof(value)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        with self.lock:
            if key in self._d:
                if not replace:
                    self._d.move_to_end(key)
                    return
                self.nbytes -= self.sizeof(self._d.pop(key))
            self._d[key] = value
            self.nbytes += size
            while len(self._d) > 1 and (
                    (self.max_items is not None and len(self._d) > self.max_items)
                    or (self.max_bytes is not None and self.nbytes > self.max_bytes)):
                _, old = self._d.popitem(last=False)
                self.nbytes -= self.sizeof(old)

    def pop(self, key: Hashable) -> Any:
        """Remove and return the value (``None`` when absent)."""
        with self.lock:
            value = self._d.pop(key, None)
            if value is not None:
                self.nbytes -= self.sizeof(value)
            return value
