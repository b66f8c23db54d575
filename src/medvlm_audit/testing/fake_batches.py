"""The OpenAI files and batches endpoints for the fake server: every batch path of the harness is tested offline.

Mounted by :class:`~medvlm_audit.testing.fake_openai.FakeOpenAIServer` (``/v1/files``, ``/v1/batches`` and their
Azure twins under ``/openai/``). A batch's lines are answered by the server's own chat logic (the same body gets
the same answer as online), lazily: when the batch is read ``delay_s`` seconds or more after its creation it is
finished at once. :class:`BatchFaults` injects the provider's failure modes:

- ``expire_after``: the batch ends ``expired`` after answering this many lines; every other line goes to the
  error file with code ``batch_expired`` (as OpenAI does when its 24 h window closes);
- ``fail_match`` / ``fail_every`` / ``fail_status``: a line whose body contains ``fail_match``, and every
  ``fail_every``-th line, gets an error response with that HTTP status in the error file;
- ``drop_every``: partial output: every n-th line is in neither file;
- ``failed``: the whole batch fails validation (status ``failed``, no output file).

The server counts uploads, created batches and polls (:class:`BatchStats`): a resumed run that polls its old
batch instead of submitting a new one shows ``created == 1``.

The offline runner standing in for vLLM's ``run_batch`` is :mod:`medvlm_audit.testing.run_batch`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: answers one request body with a chat completion (the fake server's own chat logic)
Complete = Callable[[dict[str, Any]], dict[str, Any]]

TERMINAL = ("completed", "failed", "expired", "cancelled")


@dataclass
class BatchFaults:
    """How the fake provider finishes a batch (see the module docstring)."""

    delay_s: float = 0.0
    expire_after: int | None = None
    fail_match: str = "[[batch:fail]]"
    fail_status: int = 400
    fail_every: int = 0
    drop_every: int = 0
    failed: bool = False


@dataclass
class BatchStats:
    uploads: int = 0
    created: int = 0
    polls: int = 0
    lists: int = 0
    lines: int = 0

    def as_json(self) -> dict[str, int]:
        return {"uploads": self.uploads, "created": self.created, "polls": self.polls, "lists": self.lists,
                "lines": self.lines}


def _error_line(custom_id: str, n: int, status: int, message: str) -> dict[str, Any]:
    return {"id": f"batch_req_{n:06d}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": f"req_{n:06d}",
                         "body": {"error": {"message": message, "type": "invalid_request_error", "code": status}}},
            "error": None}


def answer_lines(lines: Iterable[dict[str, Any]], complete: Complete, faults: BatchFaults | None = None,
                 prefix: str = "batch_req") -> tuple[list[dict], list[dict], str]:
    """Answer request lines with ``complete``: (output lines, error lines, final status) under ``faults``."""
    f = faults or BatchFaults()
    out: list[dict] = []
    err: list[dict] = []
    if f.failed:
        return out, err, "failed"
    status = "completed"
    for n, line in enumerate(lines, 1):
        cid = str(line.get("custom_id"))
        body = line.get("body") or {}
        if f.drop_every and n % f.drop_every == 0:
            continue
        if f.expire_after is not None and n > f.expire_after:
            status = "expired"
            err.append({"id": f"{prefix}_{n:06d}", "custom_id": cid, "response": None,
                        "error": {"code": "batch_expired",
                                  "message": "This request could not be executed before the completion window expired."}})
            continue
        if (f.fail_every and n % f.fail_every == 0) or (f.fail_match and f.fail_match in json.dumps(body)):
            err.append(_error_line(cid, n, f.fail_status, f"injected batch line failure {f.fail_status}"))
            continue
        out.append({"id": f"{prefix}_{n:06d}", "custom_id": cid,
                    "response": {"status_code": 200, "request_id": f"req_{n:06d}", "body": complete(body)},
                    "error": None})
    return out, err, status


def _jsonl(rows: Sequence[dict]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows)


class FakeBatchAPI:
    """Files and batches state of one fake server."""

    def __init__(self, complete: Complete, faults: BatchFaults | None = None) -> None:
        self.complete = complete
        self.faults = faults or BatchFaults()
        self.stats = BatchStats()
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:04d}{hashlib.sha1(f'{prefix}{self._n}{time.time()}'.encode()).hexdigest()[:8]}"

    def mount(self, app: web.Application) -> None:
        for root in ("/v1", "/openai"):
            app.router.add_post(f"{root}/files", self._upload)
            app.router.add_get(f"{root}/files/{{fid}}", self._file)
            app.router.add_get(f"{root}/files/{{fid}}/content", self._content)
            app.router.add_post(f"{root}/batches", self._create)
            app.router.add_get(f"{root}/batches", self._list)
            app.router.add_get(f"{root}/batches/{{bid}}", self._get)
            app.router.add_post(f"{root}/batches/{{bid}}/cancel", self._cancel)
        app.router.add_get("/_fake/batches", self._stats)

    # -- files -----------------------------------------------------------------------------------
    def add_file(self, data: bytes, purpose: str, filename: str = "file.jsonl") -> dict[str, Any]:
        fid = self._id("file")
        meta = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": filename, "purpose": purpose, "status": "processed"}
        self.files[fid] = meta
        self.contents[fid] = data
        return meta

    async def _upload(self, request: web.Request) -> web.Response:
        reader = await request.multipart()
        purpose, data, filename = "", b"", "file.jsonl"
        async for part in reader:
            if part.name == "purpose":
                purpose = (await part.read()).decode()
            elif part.name == "file":
                filename = part.filename or filename
                data = bytes(await part.read())
        if purpose != "batch" or not data:
            return web.json_response({"error": {"message": "need purpose=batch and a non-empty file"}}, status=400)
        self.stats.uploads += 1
        return web.json_response(self.add_file(data, purpose, filename))

    async def _file(self, request: web.Request) -> web.Response:
        meta = self.files.get(request.match_info["fid"])
        if meta is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.json_response(meta)

    async def _content(self, request: web.Request) -> web.Response:
        data = self.contents.get(request.match_info["fid"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # -- batches ---------------------------------------------------------------------------------
    async def _create(self, request: web.Request) -> web.Response:
        req = await request.json()
        fid = req.get("input_file_id")
        if fid not in self.contents:
            return web.json_response({"error": {"message": f"no input file {fid!r}"}}, status=400)
        if req.get("endpoint") not in ("/v1/chat/completions", "/chat/completions"):
            return web.json_response({"error": {"message": "endpoint must be /v1/chat/completions"}}, status=400)
        n = sum(1 for line in self.contents[fid].splitlines() if line.strip())
        self.stats.created += 1
        bid = self._id("batch")
        now = int(time.time())
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": req["endpoint"], "input_file_id": fid,
            "completion_window": req.get("completion_window", "24h"), "status": "validating",
            "output_file_id": None, "error_file_id": None, "created_at": now, "_created": time.monotonic(),
            "in_progress_at": None, "completed_at": None, "expired_at": None, "failed_at": None, "errors": None,
            "request_counts": {"total": n, "completed": 0, "failed": 0}, "metadata": req.get("metadata") or {},
        }
        return web.json_response(self._public(self.batches[bid]))

    def _advance(self, b: dict[str, Any]) -> None:
        if b["status"] in TERMINAL:
            return
        if time.monotonic() - b["_created"] < self.faults.delay_s:
            b["status"] = "in_progress"
            b["in_progress_at"] = b["in_progress_at"] or int(time.time())
            return
        lines = [json.loads(x) for x in self.contents[b["input_file_id"]].splitlines() if x.strip()]
        self.stats.lines += len(lines)
        out, err, status = answer_lines(lines, self.complete, self.faults)
        now = int(time.time())
        if status == "failed":
            b.update(status="failed", failed_at=now, errors={"object": "list", "data": [
                {"code": "invalid_request", "message": "injected batch validation failure", "line": 1}]})
            return
        if out:
            b["output_file_id"] = self.add_file(_jsonl(out), "batch_output", "output.jsonl")["id"]
        if err:
            b["error_file_id"] = self.add_file(_jsonl(err), "batch_output", "errors.jsonl")["id"]
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        b["status"] = status
        b["completed_at" if status == "completed" else "expired_at"] = now

    @staticmethod
    def _public(b: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in b.items() if not k.startswith("_")}

    async def _get(self, request: web.Request) -> web.Response:
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        self.stats.polls += 1
        self._advance(b)
        return web.json_response(self._public(b))

    async def _list(self, request: web.Request) -> web.Response:
        self.stats.lists += 1
        items = sorted(self.batches.values(), key=lambda b: b["_created"], reverse=True)
        after = request.query.get("after")
        if after:
            ids = [b["id"] for b in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        limit = int(request.query.get("limit", 20))
        page = items[:limit]
        return web.json_response({"object": "list", "data": [self._public(b) for b in page],
                                  "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})

    async def _cancel(self, request: web.Request) -> web.Response:
        b = self.batches.get(request.match_info["bid"])
        if b is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        if b["status"] not in TERMINAL:
            b["status"] = "cancelled"
        return web.json_response(self._public(b))

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.as_json())
