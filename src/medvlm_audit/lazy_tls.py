"""aiohttp without the cost of its TLS contexts for a process that never opens a TLS connection.

aiohttp (3.10 and later) builds its two default TLS contexts when it is imported, and each loads the system's
CA bundle (``set_default_verify_paths``: about 0.02 CPU-s each), whatever URLs the process will use; a run
against a plain-http server (a local vLLM, the fake server) pays 0.04 CPU-s for nothing. :func:`import_aiohttp`
imports aiohttp with that loading deferred: both contexts are built as aiohttp builds them, and get their CA
certificates just before the first TLS connection (``TCPConnector._get_ssl_context`` for an https request),
so an https request sees the same contexts aiohttp would have given it.

Fails closed and falls back: if aiohttp was already imported, or its internals are not what this expects,
the certificates are loaded at once (aiohttp's own behaviour); until they are loaded, a verifying context has
no trusted CA at all, so a missed hook refuses a TLS connection rather than trusting it.
"""

from __future__ import annotations

import ssl
import sys
import threading
from types import ModuleType
from typing import Any

_pending: list[ssl.SSLContext] = []
_lock = threading.Lock()


def _load_pending() -> None:
    """Give the deferred contexts their CA certificates (once)."""
    with _lock:
        while _pending:
            ssl.SSLContext.set_default_verify_paths(_pending.pop())


def pending() -> int:
    """How many of aiohttp's default TLS contexts still wait for their CA certificates (0 after the first TLS
    request, or when the loading could not be deferred)."""
    return len(_pending)


def import_aiohttp() -> ModuleType:
    """``import aiohttp``, with its default TLS contexts' CA loading deferred to the first TLS request."""
    if "aiohttp" in sys.modules:
        return sys.modules["aiohttp"]
    recorded: list[ssl.SSLContext] = []
    own = "set_default_verify_paths" in ssl.SSLContext.__dict__
    original = ssl.SSLContext.set_default_verify_paths

    def record(self: ssl.SSLContext) -> None:
        recorded.append(self)

    with _lock:
        ssl.SSLContext.set_default_verify_paths = record  # type: ignore[method-assign]
        try:
            import aiohttp
            import aiohttp.connector as connector
        finally:
            if own:
                ssl.SSLContext.set_default_verify_paths = original  # type: ignore[method-assign]
            else:
                del ssl.SSLContext.set_default_verify_paths
    expected = [getattr(connector, "_SSL_CONTEXT_VERIFIED", None), getattr(connector, "_SSL_CONTEXT_UNVERIFIED", None)]
    get = getattr(connector.TCPConnector, "_get_ssl_context", None)
    _pending.extend(recorded)
    if recorded != expected or get is None:  # not the aiohttp this was written for: load now, as aiohttp does
        _load_pending()
        return aiohttp

    def _get_ssl_context(self: Any, req: Any) -> Any:
        if _pending and req.is_ssl():
            _load_pending()
        return get(self, req)

    connector.TCPConnector._get_ssl_context = _get_ssl_context  # type: ignore[method-assign]  # type: ignore[method-assign]
    return aiohttp
