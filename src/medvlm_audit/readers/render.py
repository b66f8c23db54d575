"""Render a study item's image on request: the same recipe and pure image operations as the run
(:class:`~medvlm_audit.images.ImageRecipe`: decode, then e.g. bilinear resize and black box fill), from the
source file recorded in the study. Nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medvlm_audit.cache import LRU
from medvlm_audit.images import ImageRecipe, SourceCache

__all__ = ["PngCache", "encode_png", "render_pixels"]

_SOURCES = SourceCache(16)


def render_pixels(rec: dict[str, Any]) -> np.ndarray:
    """Pixels of one recorded image recipe (``ImageRecipe.to_record``: {path, mode, ops}; the older {path,
    resolution, fill, mode} form of studies made before the image-operations registry is read too)."""
    return ImageRecipe.from_record(rec).render(_SOURCES)


def encode_png(pixels: np.ndarray) -> bytes:
    """The reading view's image bytes (the project's one PNG encoder)."""
    from medvlm_audit.models.encoding import encode_png as _encode

    return _encode(pixels, level=3)


class PngCache:
    """A small thread-safe LRU of encoded PNGs keyed by (item id, image index)."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._lru = LRU(max_bytes=max_bytes)

    def peek(self, key: tuple[str, int]) -> bytes | None:
        return self._lru.get(key)

    def get_or_make(self, key: tuple[str, int], rec: dict[str, Any], copied: Path | None = None) -> bytes:
        hit = self._lru.get(key)
        if hit is not None:
            return hit
        data = copied.read_bytes() if copied is not None else encode_png(render_pixels(rec))
        self._lru.put(key, data)
        return data
