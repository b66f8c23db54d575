"""A small client of the provider's ``/files`` and ``/batches`` routes (OpenAI, Azure OpenAI, and servers that
copy them), with the model's own base URL and credentials.

The API key is read from the model's environment variable for each request, never kept, and scrubbed from
every message. Transient failures (connection, timeout, 429, 5xx) are retried with backoff; others raise
:class:`~medvlm_audit.batch.lines.BatchError` naming the route, the status and the server's message.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from yarl import URL

from medvlm_audit.batch.lines import BatchError
from medvlm_audit.lazy_tls import import_aiohttp

aiohttp = import_aiohttp()  # its TLS contexts get their CA certificates at the first https request

_RETRY = frozenset({408, 409, 429, 500, 502, 503, 504})


class BatchClient:
    """The files and batches API behind an :class:`~medvlm_audit.models.openai_compat.OpenAIChatModel`'s first
    base URL."""

    def __init__(self, served: Any, timeout_s: float = 300.0, retries: int = 5, backoff_s: float = 1.0) -> None:
        self.served = served
        self.base: URL = served._endpoints[0].base
        self.display: str = served._endpoints[0].display
        self.azure = served.api_style == "azure"
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s

    def _url(self, route: str) -> URL:
        path = self.base.path.rstrip("/")
        if self.azure:
            return self.base.with_path(f"{path}/openai/{route}").with_query(self.base.query).update_query(
                {"api-version": self.served.azure_api_version})
        return self.base.with_path(f"{path}/{route}").with_query(self.base.query)

    def _auth(self) -> tuple[dict[str, str], list[str]]:
        key = self.served._api_key()
        headers = {k: v for k, v in self.served._headers(key).items() if k != "Content-Type"}
        return headers, self.served._secrets(key)

    async def _request(self, method: str, route: str, *, json_body: Any = None, data: Any = None,
                       params: dict[str, str] | None = None, raw: bool = False) -> Any:
        from medvlm_audit.models.openai_compat import _error_message, scrub

        url = self._url(route)
        if params:
            url = url.update_query(params)
        attempt = 0
        while True:
            attempt += 1
            headers, secrets = self._auth()
            payload = data() if callable(data) else data  # a multipart body can be sent only once
            try:
                async with (aiohttp.ClientSession(timeout=self.timeout, trust_env=False,
                                                  cookie_jar=aiohttp.DummyCookieJar()) as session,
                            session.request(method, url, headers=headers, json=json_body, data=payload) as resp):
                    status, body = resp.status, await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                status, body = None, f"{type(e).__name__}: {e}".encode()
            if status is not None and status < 400:
                if raw:
                    return body
                try:
                    return json.loads(body)
                except ValueError:
                    raise BatchError(scrub(f"{method} {self.display}/{route}: unreadable answer {body[:120]!r}",
                                           secrets)) from None
            what = f"HTTP {status}: {_error_message(body)}" if status is not None else body.decode("utf-8", "replace")
            if (status is None or status in _RETRY) and attempt <= self.retries:
                await asyncio.sleep(random.uniform(0, min(30.0, self.backoff_s * 2 ** (attempt - 1))))
                continue
            raise BatchError(scrub(f"{method} {self.display}/{route} failed: {what}", secrets), status)

    async def upload(self, data: bytes, filename: str) -> str:
        """Upload a batch input file; return its file id."""
        def form() -> aiohttp.FormData:
            f = aiohttp.FormData()
            f.add_field("purpose", "batch")
            f.add_field("file", data, filename=filename, content_type="application/jsonl")
            return f

        out = await self._request("POST", "files", data=form)
        return str(out["id"])

    async def create(self, file_id: str, window: str, metadata: dict[str, str]) -> dict[str, Any]:
        endpoint = "/chat/completions" if self.azure else "/v1/chat/completions"
        return dict(await self._request("POST", "batches", json_body={
            "input_file_id": file_id, "endpoint": endpoint, "completion_window": window, "metadata": metadata}))

    async def get(self, batch_id: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"batches/{batch_id}"))

    async def find(self, nonce: str, file_id: str | None, max_pages: int = 20) -> dict[str, Any] | None:
        """The batch created for this submission (its metadata nonce, or its input file), if any."""
        after: str | None = None
        for _ in range(max_pages):
            params = {"limit": "100", **({"after": after} if after else {})}
            page = await self._request("GET", "batches", params=params)
            for b in page.get("data") or ():
                if (b.get("metadata") or {}).get("medvlm_nonce") == nonce or (
                        file_id is not None and b.get("input_file_id") == file_id):
                    return dict(b)
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page["data"][-1]["id"]
        return None

    async def content(self, file_id: str) -> bytes:
        return bytes(await self._request("GET", f"files/{file_id}/content", raw=True))
