"""The OpenAI batch JSONL format: request lines out, output and error lines back.

A request line is ``{"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions", "body": BODY}`` where KEY
is the input's content key in the run store and BODY is exactly what the online client sends
(:meth:`~medvlm_audit.models.openai_compat.OpenAIChatModel.request_body`). An output line, from OpenAI's output
or error file or from vLLM's ``run_batch``, is ``{"custom_id", "response": {"status_code", "body"}, "error"}``;
:func:`parse_output_line` turns it into the same :class:`~medvlm_audit.models.base.Response` the online client
returns for that body (log-probabilities included), or a Response carrying the error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.models.base import ErrorInfo, Model, ModelInput, Response

#: OpenAI's limits per batch input file (https://platform.openai.com/docs/guides/batch): 50,000 requests, 200 MB
MAX_LINES = 50_000
MAX_BYTES = 200 * 1000 * 1000
CHAT_URL = "/v1/chat/completions"
#: error kind of a request the provider did not run before its completion window closed
EXPIRED = "batch_expired"
#: error kind of a request line the provider refused without an HTTP status, or a batch that failed as a whole
BATCH_ERROR = "batch_error"


class BatchError(AuditError):
    """A batch could not be written, submitted, read or ingested (``status``: the provider's HTTP status, if any)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def served_model(model: Model) -> Any:
    """The OpenAI-compatible client under any wrappers (text-only, batch), or a ConfigError naming the model."""
    m: Any = model
    while not hasattr(m, "request_body") and getattr(m, "inner", None) is not None:
        m = m.inner
    if not hasattr(m, "request_body"):
        raise ConfigError(f"model {model.name!r}: batch requests need an OpenAI-compatible model (backend openai)")
    return m


def request_line(model: Model, key: str, inp: ModelInput) -> bytes:
    """One request line (with its newline) for a prepared input of ``model``."""
    served = served_model(model)
    body = served.request_body(inp)
    url = CHAT_URL
    if getattr(served, "api_style", "openai") == "azure":  # Azure's batch lines name the deployment in the body
        body = {"model": served.model, **body}
        url = "/chat/completions"
    line = {"custom_id": key, "method": "POST", "url": url, "body": body}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def chunks(lines: Iterable[tuple[str, bytes]], max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES
           ) -> Iterator[list[tuple[str, bytes]]]:
    """(key, line) pairs grouped into files within the provider's limits (lines and bytes)."""
    if max_lines < 1 or max_bytes < 1:
        raise ConfigError("batch limits must be positive (max_lines >= 1, max_bytes >= 1)")
    part: list[tuple[str, bytes]] = []
    size = 0
    for key, line in lines:
        check_size(key, line, max_bytes)
        if part and (len(part) >= max_lines or size + len(line) > max_bytes):
            yield part
            part, size = [], 0
        part.append((key, line))
        size += len(line)
    if part:
        yield part


def check_size(key: str, line: bytes, max_bytes: int) -> None:
    """Refuse a single request larger than a batch file may be."""
    if len(line) > max_bytes:
        raise BatchError(f"request {key[:12]} is {len(line):,} bytes, more than a batch file may hold "
                         f"({max_bytes:,}); lower the image resolution or ask it online")


def part_paths(out: Path, n: int) -> list[Path]:
    """The file names of ``n`` parts: ``out`` itself when one, else ``stem-001.jsonl``, ``stem-002.jsonl`` ..."""
    if n == 1:
        return [out]
    return [out.with_name(f"{out.stem}-{i:03d}{out.suffix or '.jsonl'}") for i in range(1, n + 1)]


def _kind(status: int) -> str:
    return "http_429" if status == 429 else ("http_5xx" if status >= 500 else "http_4xx")


def _message(obj: Any, limit: int = 300) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("message", obj))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:limit]
    return str(obj)[:limit]


def parse_output_line(obj: Any, where: str) -> tuple[str, Response]:
    """(custom_id, Response) of one output or error line; a line that is not a batch result raises BatchError."""
    from medvlm_audit.models.openai_compat import RETRYABLE_STATUS, _Failure, _parse_completion

    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
        raise BatchError(f"{where}: not a batch output line (no custom_id)")
    cid = obj["custom_id"]
    resp = obj.get("response")
    err = obj.get("error")
    status = resp.get("status_code") if isinstance(resp, dict) else None
    body = resp.get("body") if isinstance(resp, dict) else None
    if status == 200 and isinstance(body, dict) and not err:
        parsed = _parse_completion(json.dumps(body).encode(), None, where)  # type: ignore[arg-type]
        if isinstance(parsed, _Failure):
            return cid, Response(None, error=ErrorInfo(parsed.kind, parsed.message, 1, parsed.transient))
        return cid, Response(parsed.text, parsed.top_logprobs, parsed.finish_reason, parsed.prompt_tokens,
                             parsed.completion_tokens, None)
    if isinstance(err, dict) and err.get("code") == EXPIRED:
        return cid, Response(None, error=ErrorInfo(EXPIRED, f"{where}: the provider's completion window expired "
                                                            "before this request ran", 1, True))
    if isinstance(status, int) and status >= 400:
        msg = _message(body if body is not None else err)
        return cid, Response(None, error=ErrorInfo(_kind(status), f"HTTP {status} in {where}: {msg}", 1,
                                                   status in RETRYABLE_STATUS))
    if err is not None:
        code = err.get("code") if isinstance(err, dict) else None
        return cid, Response(None, error=ErrorInfo(BATCH_ERROR, f"{where}: {code or 'error'}: {_message(err)}", 1,
                                                   False))
    raise BatchError(f"{where}: batch line {cid[:12]} has neither a response nor an error")


def read_output(data: bytes, where: str) -> Iterator[tuple[str, Response]]:
    """Every (custom_id, Response) of an output / error file's bytes; a bad line raises BatchError naming it."""
    for i, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise BatchError(f"{where} line {i}: not JSON ({e})") from None
        yield parse_output_line(obj, f"{where} line {i}")
