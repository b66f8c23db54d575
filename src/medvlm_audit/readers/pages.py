"""Pages rendered once per shape and filled per request: the reading view differs between two requests for the
same item and answer state only in a few printed values (the reader's token in its links, her CSRF token, the
item's position, the progress counts), so the template runs once per shape and each request only joins
strings."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from markupsafe import escape

from medvlm_audit.cache import LRU

__all__ = ["Prerendered"]


class Prerendered:
    """A Jinja2 template rendered once per ``key`` with markers in place of the ``slots`` values, then filled.

    ``fill(key, make_ctx, **values)`` renders ``template`` with ``make_ctx()`` (called only the first time a
    key is seen) and a marker for each slot, splits the page at the markers, and joins the parts with each
    value HTML-escaped, as Jinja2's autoescape would print it. A marker holds a nonce drawn per instance, so
    no page content can forge one. The filled page equals the template rendered with the values as long as
    the template only prints a slot (never tests, loops over or compares it): what it tests belongs in the
    context and in the key. At most ``max_items`` shapes are kept (least recently used dropped).

    >>> import jinja2
    >>> t = jinja2.Environment(autoescape=True).from_string(
    ...     "<p>{{ who }}: {{ n }} of {{ total }}</p><a href='{{ base }}/next'>{% if done %}done{% endif %}</a>")
    >>> pages = Prerendered(t, slots=("n", "total", "base"))
    >>> pages.fill(("ana", False), lambda: {"who": "<Ana>", "done": False}, n=3, total=10, base="/r/x&y")
    "<p>&lt;Ana&gt;: 3 of 10</p><a href='/r/x&amp;y/next'></a>"
    >>> pages.fill(("ana", False), lambda: {"who": "never rendered again", "done": True}, n=4, total=10, base="/r/x")
    "<p>&lt;Ana&gt;: 4 of 10</p><a href='/r/x/next'></a>"
    """

    def __init__(self, template: Any, slots: tuple[str, ...], max_items: int = 4096) -> None:
        self.template = template
        self.slots = tuple(slots)
        self._nonce = secrets.token_hex(8)
        self._markers = {name: f"\x00{self._nonce}:{name}\x00" for name in self.slots}
        self._split = re.compile(f"\x00{self._nonce}:(\\w+)\x00")
        self._shapes = LRU(max_items=max_items, sizeof=lambda _: 1)

    def _shape(self, key: Hashable, make_ctx: Callable[[], Mapping[str, Any]]) -> tuple[list[str], list[str]]:
        got = self._shapes.get(key)
        if got is None:
            ctx = dict(make_ctx())
            clash = sorted(set(ctx) & set(self.slots))
            if clash:
                raise ValueError(f"context names {clash} are slots: give them as values to fill")
            parts = self._split.split(self.template.render(**ctx, **self._markers))
            got = (parts[0::2], parts[1::2])
            self._shapes.put(key, got)
        return got

    def fill(self, key: Hashable, make_ctx: Callable[[], Mapping[str, Any]], **values: Any) -> str:
        texts, names = self._shape(key, make_ctx)
        printed = {k: str(escape(v)) for k, v in values.items()}
        out = [""] * (len(texts) + len(names))
        out[0::2] = texts
        out[1::2] = [printed[name] for name in names]
        return "".join(out)
