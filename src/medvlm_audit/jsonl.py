"""Streaming JSONL input (corpora, item files) at any file size: one line in memory at a time, a per-line size
limit, and errors that name the file and the line (not UTF-8, not JSON, not an object, too long).

The limit is :data:`DEFAULT_MAX_LINE_BYTES` (16 MiB; a report or an item is a few kB), or the environment
variable ``MEDVLM_MAX_LINE_BYTES`` where a legitimate line is longer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medvlm_audit.errors import AuditError

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
LIMIT_ENV = "MEDVLM_MAX_LINE_BYTES"


def max_line_bytes() -> int:
    """The per-line limit: ``MEDVLM_MAX_LINE_BYTES`` (a positive integer) or :data:`DEFAULT_MAX_LINE_BYTES`."""
    raw = os.environ.get(LIMIT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_LINE_BYTES
    try:
        v = int(raw)
    except ValueError:
        v = 0
    if v <= 0:
        raise AuditError(f"{LIMIT_ENV}={raw!r}: must be a positive whole number of bytes")
    return v


def json_error_where(e: json.JSONDecodeError, line: str) -> str:
    r"""What is wrong with one JSONL line and where, by the column in the line itself: a line cut short is said
    to end early at its last column (the decoder places that error after the line's newline, at "column 1").

    >>> import json
    >>> line = '{"id": "x", "text": "a report",\n'
    >>> try:
    ...     json.loads(line)
    ... except json.JSONDecodeError as e:
    ...     print(json_error_where(e, line))
    Expecting property name enclosed in double quotes after column 31: the line ends there (cut short?)
    >>> bad = '{"id": x}'
    >>> try:
    ...     json.loads(bad)
    ... except json.JSONDecodeError as e:
    ...     print(json_error_where(e, bad))
    Expecting value at column 8
    """
    body = line.rstrip("\r\n")
    end = len(body.rstrip())
    if e.pos >= end:  # nothing but the newline (or spaces) after where it stopped: the line is cut short
        return f"{e.msg} after column {end}: the line ends there (cut short?)"
    return f"{e.msg} at column {e.pos - body.rfind(chr(10), 0, e.pos)}"


def iter_jsonl(path: str | Path, *, error: type[Exception] = AuditError, what: str = "file",
               limit: int | None = None, unit: str | None = None, hint: str = ""
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a UTF-8 JSONL file, streamed. Errors are ``error``
    with one line naming the file and the line (``FILE:LINE``, or ``FILE, row N`` with ``unit="row"``)."""
    p = Path(path)

    def at(k: int) -> str:
        return f"{p}:{k}" if unit is None else f"{p}, {unit} {k}"

    limit = max_line_bytes() if limit is None else limit
    try:
        fh = p.open("rb")
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror or e})") from None
    with fh:
        n = 0
        while True:
            try:
                line = fh.readline(limit + 1)
            except OSError as e:
                raise error(f"{at(n + 1)}: cannot read the {what} ({e.strerror or e})") from None
            if not line:
                return
            n += 1
            if len(line) > limit and not (len(line) == limit + 1 and line.endswith(b"\n")):
                raise error(f"{at(n)}: longer than {limit:,} bytes (a {what} line is one JSON object; "
                            f"split it, or set {LIMIT_ENV} to allow longer lines)")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{at(n)}: not UTF-8 (byte {e.start}: {line[e.start:e.start + 1]!r}); "
                            f"the {what} must be UTF-8 JSONL") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise error(f"{at(n)}: not valid JSON ({json_error_where(e, text)})") from None
            if not isinstance(obj, dict):
                raise error(f"{at(n)}: expected a JSON object{hint}, got {type(obj).__name__}")
            yield n, obj
