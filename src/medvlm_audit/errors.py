"""Errors that name what was wrong: the case, the file, the field."""

from __future__ import annotations


class AuditError(Exception):
    """Base class for user-facing errors (the CLI prints the message, no traceback)."""


class ProbeSetError(AuditError):
    """A probe set or one of its cases is invalid."""


class ConfigError(AuditError):
    """A run config is unreadable or invalid."""


class ImageError(AuditError):
    """An image is missing or cannot be decoded."""


class EndpointError(AuditError):
    """A model endpoint is unreachable or refuses the client (connection refused, 401, 403, 404)."""


class StoreError(AuditError):
    """The run store cannot be read or written (locked, disk full, read-only). ``cause`` is the short reason."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message


class StoreLockedError(StoreError):
    """Another process held the run store's write lock for longer than the bounded wait."""


class RunLockedError(AuditError):
    """Another `run` process holds the run directory."""


_OS_HINTS = {
    28: "free some space, then run the command again",  # ENOSPC
    122: "free some space (disk quota exceeded), then run the command again",  # EDQUOT
    30: "the file system is read-only: write to another folder (--out / run_dir)",  # EROFS
    13: "check the folder's permissions or write to another folder",  # EACCES
    1: "check the folder's permissions or write to another folder",  # EPERM
}


def describe_os_error(e: OSError) -> str:
    """One line naming the path and the cause of a file-system error (disk full, read-only, permission denied),
    with what to do; nothing of a command's outputs is half-written (atomic writes) and a run resumes."""
    cause = e.strerror or str(e)
    where = e.filename if e.filename is not None else None
    text = f"cannot write {where}: {cause}" if where is not None else f"{cause}"
    if e.filename2 is not None:
        text += f" (and {e.filename2})"
    hint = _OS_HINTS.get(e.errno or -1)
    return f"{text}; {hint}" if hint else text
