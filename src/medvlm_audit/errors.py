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
