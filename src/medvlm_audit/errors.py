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


class StoreError(AuditError):
    """The run store cannot be read or written (locked, disk full, read-only). ``cause`` is the short reason."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message


class StoreLockedError(StoreError):
    """Another process held the run store's write lock for longer than the bounded wait."""


class RunLockedError(AuditError):
    """Another `run` process holds the run directory."""
