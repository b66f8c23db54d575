"""Render a study item's image on request: the same recipe and pure image operations as the run
(:class:`~medvlm_audit.images.ImageRecipe`: decode, then e.g. bilinear resize and black box fill), from the
source file recorded in the study. Nothing is written."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from medvlm_audit.images import ImageRecipe, SourceCache

__all__ = ["PngCache", "encode_png", "render_pixels"]

_SOURCES = SourceCache(16)


def render_pixels(rec: dict[str, Any]) -> np.ndarray:
    """Pixels of one recorded image recipe (``ImageRecipe.to_record``: {path, mode, ops}; the older {path,
    resolution, fill, mode} form of studies made before the image-operations registry is read too)."""
    return ImageRecipe.from_record(rec).render(_SOURCES)


def encode_png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, format="PNG", compress_level=3)
    return buf.getvalue()


class PngCache:
    """A small thread-safe LRU of encoded PNGs keyed by (item id, image index)."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get_or_make(self, key: tuple[str, int], rec: dict[str, Any], copied: Path | None = None) -> bytes:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        data = copied.read_bytes() if copied is not None else encode_png(render_pixels(rec))
        with self._lock:
            self._d[key] = data
            self._size += len(data)
            while self._size > self.max_bytes and len(self._d) > 1:
                _, old = self._d.popitem(last=False)
                self._size -= len(old)
        return data
