"""Scores computed once per answer text and kept in the run store (issue 23): the knowledge-base CF of each chain
of thought and the validation of each judge answer. The tidy table re-scored every stored answer at every
invocation (``run``, ``export``, ``report``, ``view``); with these, an invocation scores only the answers that are
new since the last writable one.

Each value is stored in the store's ``derived`` table under a *kind* that names everything the value depends on
besides its own inputs: the scorer's source code (a hash of its module files) and, for the KB score, the knowledge
base and the scoring flags. A changed KB, flag or scorer gives a new kind, so nothing stale is read; the old kind's
values are dropped when the new ones are written. A value's key is a hash of its own inputs (question, gold answer,
CoT; judge answer text, CoT, validation mode, transport error), so a re-asked answer with a new text is scored
again. A read-only store is read but never written: the scores missing there are computed in memory.

    >>> memo = StoredScores("example", "v1", {})
    >>> memo.get("a", "b") is None
    True
    >>> memo.put(["a", "b"], [1, 2]); memo.get("a", "b")
    [1, 2]
    >>> memo.new_rows()
    [('...', '[1,2]')]
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medvlm_audit.errors import StoreError

_SEP = "\x1f"
_NONE = "\x00"


@functools.lru_cache(maxsize=8)
def code_hash(*modules: str) -> str:
    """sha1 (16 hex digits) of the source files of the named modules: a scorer's code version."""
    import importlib

    h = hashlib.sha1()
    for name in modules:
        h.update(Path(importlib.import_module(name).__file__ or name).read_bytes())
    return h.hexdigest()[:16]


def _part(v: Any) -> str:
    if v is None:
        return _NONE
    return v if isinstance(v, str) else f"{type(v).__name__}{_NONE}{v}"


class StoredScores:
    """The values of one kind: those the store holds, and those computed in this invocation (``put``)."""

    def __init__(self, family: str, version: str, known: dict[str, str]) -> None:
        self.family = family
        self.kind = f"{family}:{version}"
        self._known = known
        self._new: dict[str, str] = {}

    @classmethod
    def load(cls, store: Any, family: str, version: str) -> StoredScores:
        known = store.derived(f"{family}:{version}") if hasattr(store, "derived") else {}
        return cls(family, version, known)

    @staticmethod
    def key(*parts: Any) -> str:
        return hashlib.sha1(_SEP.join(map(_part, parts)).encode("utf-8", "surrogatepass")).hexdigest()[:24]

    def get(self, *parts: Any) -> Any:
        """The stored value for these inputs (a JSON value), or None."""
        k = self.key(*parts)
        text = self._known.get(k) or self._new.get(k)
        return None if text is None else json.loads(text)

    def put(self, parts: Sequence[Any], value: Any) -> None:
        k = self.key(*parts)
        if k not in self._known:
            self._new[k] = json.dumps(value, separators=(",", ":"))

    def new_rows(self) -> list[tuple[str, str]]:
        return list(self._new.items())

    def save(self, store: Any) -> None:
        """Write the new values (a read-only store or one that cannot be written keeps them in memory only:
        they are a cache, never a reason for a tidy to fail)."""
        if not self._new or getattr(store, "readonly", True) or not hasattr(store, "put_derived"):
            return
        try:
            store.put_derived(self.family, self.kind, self.new_rows())
        except StoreError:
            return
        self._known.update(self._new)
        self._new = {}
