"""The security headers of the project's local web apps (the reader-study app and the run explorer): one ASGI
middleware that adds each header a response does not already set (CSP, no referrer, no sniffing, no framing,
no caching)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SecurityHeaders:
    """ASGI middleware: every HTTP response gets ``headers`` (name -> value) unless it sets that header itself.

    >>> import asyncio
    >>> sent = []
    >>> async def app(scope, receive, send):
    ...     await send({"type": "http.response.start", "status": 200, "headers": [(b"x-frame-options", b"SAMEORIGIN")]})
    >>> mw = SecurityHeaders(app, {"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"})
    >>> async def send(message):
    ...     sent.append(message)
    >>> asyncio.run(mw({"type": "http"}, None, send))
    >>> sent[0]["headers"]
    [(b'x-frame-options', b'SAMEORIGIN'), (b'referrer-policy', b'no-referrer')]
    """

    def __init__(self, app: Any, headers: Mapping[str, str]) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in self.headers if k not in present]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
