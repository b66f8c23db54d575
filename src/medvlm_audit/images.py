"""Image loading, the registry of pure image operations (resize, box fill, and what suites add: overlays,
crops) and :class:`ImageRecipe` (a source file plus the ops that make a model image).

Operations are pure functions of (pixels, recorded parameters); source files are only read.
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from medvlm_audit.boxes import IntBox
from medvlm_audit.cache import LRU
from medvlm_audit.errors import ImageError
from medvlm_audit.registry import Registry


def load_image(path: str | Path, mode: str = "L") -> np.ndarray:
    """Decode an image file to uint8 grayscale ("L") or RGB; a clear ImageError names a missing or corrupt file."""
    p = Path(path)
    if not p.exists():
        raise ImageError(f"image file {p} does not exist")
    if p.suffix.lower() in (".dcm", ".dicom"):
        try:
            gray = load_dicom_gray(p)
        except Exception as e:
            raise ImageError(f"image file {p} cannot be decoded as DICOM ({e})") from e
        return gray if mode == "L" else np.repeat(gray[..., None], 3, axis=2)
    try:
        with Image.open(p) as im:
            _check_pixel_count(im.size, p)
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(im, dtype=np.float64)
                lo, hi = float(arr.min()), float(arr.max())
                arr = (arr - lo) / (hi - lo or 1.0) * 255.0
                arr8 = np.ascontiguousarray(arr.round().astype(np.uint8))
                return arr8 if mode == "L" else np.repeat(arr8[..., None], 3, axis=2)
            return np.asarray(im.convert(mode), dtype=np.uint8).copy()
    except Image.DecompressionBombError as e:
        raise ImageError(f"image file {p} is too large to decode safely, a possible decompression bomb ({e})") from e
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"image file {p} cannot be decoded ({e})") from e


def _check_pixel_count(size: tuple[int, int], p: Path) -> None:
    """Refuse an image above PIL's decompression-bomb limit (2 x ``Image.MAX_IMAGE_PIXELS``; none if unset) before
    its pixels are decoded: a small file can declare billions of pixels."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit and size[0] * size[1] > 2 * limit:
        raise ImageError(f"image file {p} declares {size[0]} x {size[1]} pixels, above the decompression-bomb limit "
                         f"of {2 * limit:,} (a possible decompression bomb)")


def check_image_header(path: str | Path) -> None:
    """Cheap readability check (file exists, its header decodes; PNG chunk CRCs verified), no pixel decode.

    The runner calls it on every source before any model call; the full decode (and the builders' image
    checks) catch damage inside the pixel data."""
    p = Path(path)
    if not p.exists():
        raise ImageError(f"image file {p} does not exist")
    try:
        if p.suffix.lower() in (".dcm", ".dicom"):
            import pydicom

            pydicom.dcmread(str(p), stop_before_pixels=True)
            return
        with open(p, "rb") as fh:
            if fh.read(len(_PNG_SIGNATURE)) == _PNG_SIGNATURE:
                data = _PNG_SIGNATURE + fh.read()
                _check_png_chunks(data)  # every chunk's CRC: truncated or altered files
                _check_pixel_count((int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")), p)
                return
        with Image.open(p):  # other formats: the header only (a full-size JPEG is not read whole here)
            pass
    except ImageError:
        raise
    except Exception as e:
        raise ImageError(f"image file {p} cannot be decoded ({e})") from e


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png_chunks(data: bytes) -> None:
    """Walk a PNG's chunks: IHDR first, each CRC right, IEND reached before the data ends."""
    view = memoryview(data)
    pos, first = 8, True
    while pos + 12 <= len(data):
        length = int.from_bytes(view[pos : pos + 4], "big")
        tag = bytes(view[pos + 4 : pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise ValueError(f"chunk {tag!r} runs past the end of the file (truncated)")
        if zlib.crc32(view[pos + 4 : pos + 8 + length]) != int.from_bytes(view[end - 4 : end], "big"):
            raise ValueError(f"chunk {tag!r} fails its CRC check")
        if first and tag != b"IHDR":
            raise ValueError("the first chunk is not IHDR")
        if tag == b"IEND":
            return
        pos, first = end, False
    raise ValueError("no IEND chunk (truncated)")


def load_gray(path: str | Path) -> np.ndarray:
    """Decode an image file to uint8 grayscale."""
    return load_image(path, "L")


def resize(pixels: np.ndarray, res: int) -> np.ndarray:
    """Bilinear resize to res x res (the paper's working resolution is 224)."""
    if pixels.shape[0] == res and pixels.shape[1] == res:
        return pixels
    im = Image.fromarray(pixels)
    return np.asarray(im.resize((res, res), Image.Resampling.BILINEAR), dtype=np.uint8)


def fill_box(pixels: np.ndarray, box: IntBox, value: int = 0) -> np.ndarray:
    """Copy of ``pixels`` with the xyxy box filled (black by default)."""
    out = pixels.copy()
    x0, y0, x1, y1 = box
    out[y0:y1, x0:x1] = value
    return out


class SourceCache:
    """Thread-safe LRU of decoded (and resized) source images, so a case's conditions decode and resize its
    file once: original, target mask and irrelevant mask share one resized base."""

    def __init__(self, max_items: int = 64) -> None:
        self.max_items = max_items
        self._lru = LRU(max_items=max_items)
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}  # single flight: one thread decodes a key, others wait

    def get(self, path: str | Path, mode: str = "L", resolution: int | None = None) -> np.ndarray:
        key = f"{mode}:{resolution}:{path}"
        hit = self._lru.get(key)
        if hit is not None:
            return hit
        with self._lock:
            flight = self._loading.setdefault(key, threading.Lock())
        with flight:
            hit = self._lru.get(key)  # another thread may have finished it while we waited
            if hit is not None:
                return hit
            try:
                if resolution is None:
                    arr = load_image(path, mode)
                else:
                    arr = resize(self.get(path, mode, None), resolution)
                arr.setflags(write=False)
                self._lru.put(key, arr)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
        return arr


class PixelCache:
    """Thread-safe LRU of rendered model images (and their encoded forms) under a byte budget: planning
    renders every image once to hash it, and execution reuses those pixels instead of decoding again."""

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._lru = LRU(max_bytes=max_bytes)

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes

    def get(self, key: object) -> np.ndarray | bytes | None:
        return self._lru.get(key)  # type: ignore[arg-type]

    def put(self, key: object, arr: np.ndarray | bytes) -> None:
        self._lru.put(key, arr)  # type: ignore[arg-type]

    def discard(self, key: object) -> None:
        self._lru.pop(key)  # type: ignore[arg-type]


#: the image operations a recipe may name: name -> pure function ``op(pixels, **params) -> pixels`` (or a
#: ``"module:attr"`` string imported on first use). Built in: ``resize`` (size) and ``fill_box`` (box, value);
#: a suite registers its own (the faithfulness overlays) when it loads, or from the module that defines them.
IMAGE_OPS = Registry("image operation")


def register_image_op(name: str, op: Any, *, replace: bool = False) -> None:
    """Register a pure image operation ``op(pixels: np.ndarray, **params) -> np.ndarray`` under ``name``."""
    IMAGE_OPS.register(name, op, replace=replace)


def _op_resize(pixels: np.ndarray, size: int) -> np.ndarray:
    return resize(pixels, int(size))


def _op_fill_box(pixels: np.ndarray, box: Sequence[int], value: int = 0) -> np.ndarray:
    x0, y0, x1, y1 = (int(v) for v in box)
    return fill_box(pixels, (x0, y0, x1, y1), value)


register_image_op("resize", _op_resize)
register_image_op("fill_box", _op_fill_box)

Params = tuple[tuple[str, Any], ...]
Op = tuple[str, Params]


def _freeze(v: Any) -> Any:
    """A hashable, JSON-like form of an op parameter (lists -> tuples, dicts -> sorted (key, value) pairs)."""
    if isinstance(v, dict):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


def _normalise_ops(ops: Iterable[Any]) -> tuple[Op, ...]:
    out: list[Op] = []
    for op in ops:
        try:
            name, params = op
        except (TypeError, ValueError):
            raise ImageError(f"an image operation must be (name, params), got {op!r}") from None
        if isinstance(params, dict):
            items = params.items()
        else:
            items = tuple(params or ())
        norm = (str(name), tuple(sorted((str(k), _freeze(v)) for k, v in items)))
        # one shared tuple per distinct op: a plan of many recipes repeats the same resize (memory per trial)
        out.append(_OPS.setdefault(norm, norm) if len(_OPS) < 50_000 else norm)
    return tuple(out)


_OPS: dict[Op, Op] = {}


@dataclass(frozen=True, slots=True)
class ImageRecipe:
    """How to make one model image: a source file decoded in ``mode``, then ``ops`` applied in order.

    ``ops`` is a tuple of (operation name, parameters) over :data:`IMAGE_OPS` (parameters given as a dict or
    as (key, value) pairs; they are stored sorted and frozen, so a recipe is hashable). Every op's name and
    parameters are part of the recipe's :meth:`cache_key`, and rendering is a pure function of the file and
    the ops: a new kind of image (an overlay, a crop) is a new registered op, not a branch in a condition.

    >>> r = ImageRecipe.standard("a.png", resolution=224, fill=(0, 0, 10, 10))
    >>> r.ops
    (('resize', (('size', 224),)), ('fill_box', (('box', (0, 0, 10, 10)), ('value', 0))))
    """

    source: str
    ops: tuple[Op, ...] = ()
    mode: str = "L"  # "L" grayscale (radiographs) or "RGB"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", _normalise_ops(self.ops))

    @classmethod
    def standard(cls, source: str, resolution: int | None = None, fill: IntBox | None = None,
                 mode: str = "L") -> ImageRecipe:
        """The common recipe: decode, bilinear resize to ``resolution`` x ``resolution`` (None: native size),
        then an optional black box (in output pixels)."""
        ops: list[tuple[str, dict[str, Any]]] = []
        if resolution is not None:
            ops.append(("resize", {"size": int(resolution)}))
        if fill is not None:
            ops.append(("fill_box", {"box": [int(v) for v in fill], "value": 0}))
        return cls(source, tuple(ops), mode)

    def param(self, op: str, key: str, default: Any = None) -> Any:
        """A parameter of the first op named ``op`` (e.g. ``param("fill_box", "box")``), or ``default``."""
        for name, params in self.ops:
            if name == op:
                return dict(params).get(key, default)
        return default

    @property
    def resolution(self) -> int | None:
        """The output size set by a ``resize`` op (None: native)."""
        return self.param("resize", "size")

    @property
    def fill(self) -> IntBox | None:
        """The box of a ``fill_box`` op (None when there is none)."""
        box = self.param("fill_box", "box")
        return None if box is None else tuple(int(v) for v in box)  # type: ignore[return-value]

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready record ``{path, mode, ops: [[name, {params}], ...]}`` (:meth:`from_record` inverts it)."""
        return {"path": self.source, "mode": self.mode,
                "ops": [[name, {k: _thaw(v) for k, v in params}] for name, params in self.ops]}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> ImageRecipe:
        """Inverse of :meth:`to_record`; also reads the older ``{path, resolution, fill, mode}`` form."""
        mode = str(rec.get("mode") or "L")
        if "ops" in rec:
            return cls(str(rec["path"]), tuple((n, p) for n, p in rec["ops"]), mode)
        fill = rec.get("fill")
        return cls.standard(str(rec["path"]), rec.get("resolution"),
                            tuple(int(v) for v in fill) if fill else None, mode)  # type: ignore[arg-type]

    def cache_key(self, stat: tuple[int, int] | None = None) -> str:
        """Identifies the output pixels: the file (path, size, mtime), the decode mode and every op with its
        parameters. ``stat``: the file's (size, mtime_ns) when the caller has it (:meth:`file_stat`)."""
        size, mtime_ns = stat if stat is not None else self.file_stat()
        return json.dumps([self.source, size, mtime_ns, self.mode, self.to_record()["ops"]], sort_keys=True)

    def file_stat(self) -> tuple[int, int]:
        """The source file's (size, mtime_ns), the file part of :meth:`cache_key`; ImageError when it is missing."""
        try:
            st = os.stat(self.source)
        except OSError as e:
            raise ImageError(f"image file {self.source} does not exist") from e
        return st.st_size, st.st_mtime_ns

    def render(self, cache: SourceCache | None = None) -> np.ndarray:
        """Decode (once per file and size, through ``cache``) and apply the ops in order."""
        cache = cache or _DEFAULT_CACHE
        ops = self.ops
        if ops and ops[0][0] == "resize":  # the cache shares one decode and one resize per file
            out = cache.get(self.source, self.mode, int(dict(ops[0][1])["size"]))
            ops = ops[1:]
        else:
            out = cache.get(self.source, self.mode, None)
        for name, params in ops:
            fn = IMAGE_OPS.load(name, f"image {self.source}")
            try:
                out = fn(out, **{k: _thaw(v) for k, v in params})
            except (TypeError, ValueError) as e:
                raise ImageError(f"image {self.source}: operation {name}({dict(params)}) failed: {e}") from e
        return out


_DEFAULT_CACHE = SourceCache(8)


def read_image_header(path: Path, full_decode: bool = False) -> tuple[int, int]:
    """(width, height) of an image file (JPEG/PNG via Pillow, DICOM via pydicom); raises on a bad file."""
    suffix = path.suffix.lower()
    if suffix in (".dcm", ".dicom"):
        try:
            import pydicom
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImageError(f"{path}: reading DICOM needs pydicom (pip install pydicom)") from e
        ds = pydicom.dcmread(str(path), stop_before_pixels=not full_decode)
        if full_decode:
            _ = ds.pixel_array
        return int(ds.Columns), int(ds.Rows)
    from PIL import Image

    with Image.open(path) as im:
        size = im.size
        if full_decode:
            im.load()
        else:
            im.verify()
    return int(size[0]), int(size[1])


def load_dicom_gray(path: str | Path) -> np.ndarray:
    """Decode a DICOM radiograph to uint8 grayscale (MONOCHROME1 inverted, min-max windowed)."""
    import pydicom

    ds = pydicom.dcmread(str(path))
    arr = ds.pixel_array.astype(np.float64)
    if getattr(ds, "PhotometricInterpretation", "") == "MONOCHROME1":
        arr = arr.max() - arr
    lo, hi = float(arr.min()), float(arr.max())
    return np.ascontiguousarray(((arr - lo) / (hi - lo or 1.0) * 255.0).round().astype(np.uint8))
