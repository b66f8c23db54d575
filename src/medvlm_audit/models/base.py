"""What a model sees (ModelInput) and returns (Response), and the small async Model interface.

A model can only see its ModelInput: pixels, chat messages and decoding parameters. Never the
case id, the label, the condition name or the dataset.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Modality = Literal["multimodal", "text_only", "vision_only"]


class ImageData:
    """Final pixels handed to a model (uint8, HxW grayscale or HxWx3 RGB) and their sha256.

    ``pixels`` may be made on first access by ``load`` (the runner does this when a model was already
    given the image encoded, so the pixels are usually never needed in the process that asks)."""

    __slots__ = ("_load", "_pixels", "sha256")

    def __init__(self, pixels: np.ndarray | None, sha256: str, load: Callable[[], np.ndarray] | None = None) -> None:
        if pixels is None and load is None:
            raise ValueError("ImageData needs pixels or a loader")
        self._pixels = pixels
        self._load = load
        self.sha256 = sha256

    @property
    def pixels(self) -> np.ndarray:
        if self._pixels is None:
            assert self._load is not None
            self._pixels = self._load()
        return self._pixels

    def __repr__(self) -> str:
        shape = None if self._pixels is None else self._pixels.shape
        return f"ImageData(sha256={self.sha256[:12]}, shape={shape})"

    @classmethod
    def from_array(cls, pixels: np.ndarray) -> ImageData:
        arr = np.ascontiguousarray(pixels, dtype=np.uint8)
        return cls(arr, pixel_sha256(arr))


def pixel_sha256(pixels: np.ndarray) -> str:
    """sha256 over shape and raw bytes, so the hash names exactly these pixels."""
    h = hashlib.sha256()
    h.update(repr(tuple(pixels.shape)).encode())
    h.update(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Decoding:
    """Every field that changes the token distribution (DESIGN.md "Serving engines and decoding").

    A backend sends all of them, with the neutral value where a strategy does not use one, so neither a
    server's defaults nor a model's ``generation_config.json`` can fill a gap: ``top_k`` None or 0 = disabled,
    ``min_p`` 0 = disabled, ``repetition_penalty`` 1 and ``presence_penalty`` / ``frequency_penalty`` 0 = no
    penalty, ``num_beams`` 1 = no beam search, ``stop`` () = no stop strings, ``temperature`` 0 = greedy.
    ``logprobs``/``top_logprobs`` ask for first-token log-probabilities (not a sampling field).
    """

    max_new_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    num_beams: int = 1
    seed: int | None = None
    logprobs: bool = True
    top_logprobs: int = 20
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Ranges (a NaN or infinite temperature, a billion beams): one named line where the config is read."""
        t, p = self.temperature, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 <= t <= 100:
            raise ValueError(f"temperature must be a finite number in [0, 100], got {t!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0 < p <= 1:
            raise ValueError(f"top_p must be a finite number in (0, 1], got {p!r}")
        for f, lo, hi in (("max_new_tokens", 1, 10_000_000), ("num_beams", 1, 256), ("top_logprobs", 0, 10_000)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{f} must be an integer in [{lo}, {hi}], got {v!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or not 1 <= self.top_k <= 10_000_000):
            raise ValueError(f"top_k must be empty or an integer >= 1, got {self.top_k!r}")

    def as_dict(self) -> dict[str, Any]:
        """Every field, except the later ones (min_p, penalties, stop) at their neutral value: the cache key of
        an input asked before they existed stays the same (their neutral value is what those runs meant)."""
        out = {f: getattr(self, f) for f in _KEYED_ALWAYS}
        for f, neutral in _KEYED_IF_SET.items():
            v = getattr(self, f)
            if v != neutral:
                out[f] = list(v) if isinstance(v, tuple) else v
        return out

    def sampling(self) -> dict[str, Any]:
        """The contract's sampling fields with neutral values made explicit (top_k 0 = disabled): what a
        strategy means, to compare with what an engine was asked (:func:`medvlm_audit.models.flavours.effective`)."""
        return {"max_new_tokens": self.max_new_tokens, "temperature": float(self.temperature),
                "top_p": float(self.top_p), "top_k": int(self.top_k or 0), "min_p": float(self.min_p),
                "repetition_penalty": float(self.repetition_penalty),
                "presence_penalty": float(self.presence_penalty),
                "frequency_penalty": float(self.frequency_penalty), "num_beams": int(self.num_beams),
                "seed": self.seed, "stop": list(self.stop)}


_KEYED_ALWAYS = ("max_new_tokens", "temperature", "top_p", "top_k", "num_beams", "seed", "logprobs", "top_logprobs")
_KEYED_IF_SET: dict[str, Any] = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                                 "frequency_penalty": 0.0, "stop": ()}


# validated as a run-config field (``decoding:`` of a run or a model): unknown keys are errors
Decoding.__pydantic_config__ = {"extra": "forbid"}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ModelInput:
    """Exactly what a model sees. Images belong to the first user message."""

    messages: tuple[Message, ...]
    images: tuple[ImageData, ...] = ()
    decoding: Decoding = field(default_factory=Decoding)
    sample_index: int = 0

    @property
    def prompt(self) -> str:
        """Concatenated user text (what simple models read)."""
        return "\n".join(m.content for m in self.messages if m.role == "user")

    def without_images(self) -> ModelInput:
        return ModelInput(self.messages, (), self.decoding, self.sample_index)

    def describe(self) -> dict[str, Any]:
        """JSON-able description with image hashes instead of pixels (what the store keeps)."""
        return {
            "messages": [[m.role, m.content] for m in self.messages],
            "images": [im.sha256 for im in self.images],
            "decoding": self.decoding.as_dict(),
            "sample_index": self.sample_index,
        }


def input_key(identity: dict[str, Any], inp: ModelInput, description: dict[str, Any] | None = None) -> str:
    """Content-hash cache key: model identity + every component of the input (image pixel hashes, not paths).

    ``description`` may pass ``inp.describe()`` when the caller already has it."""
    desc = description if description is not None else inp.describe()
    payload = json.dumps({"model": identity, "input": desc}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


#: error kind of an input a client gave up on before asking it (e.g. its circuit breaker stopped the model):
#: the runner counts it but does not store it, so a rerun asks the input again
NOT_ASKED = "not_asked"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    kind: str  # http_4xx, http_429, http_5xx, timeout, connection, malformed, empty, model, other, not_asked
    message: str
    attempts: int = 1
    transient: bool = False


@dataclass(frozen=True, slots=True)
class Response:
    """Raw model output. ``top_logprobs`` are the first generated token's alternatives, (token, logprob)."""

    text: str | None
    top_logprobs: tuple[tuple[str, float], ...] | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    error: ErrorInfo | None = None
    #: what the engine was asked, in the contract's field names (the sent body's sampling fields read as the
    #: engine reads them, and the server's echo where it returns one); None for in-process models that do not say
    effective: dict[str, Any] | None = None
    #: the model's reasoning text (``reasoning_content`` / ``reasoning``), stored beside the answer
    reasoning: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Model:
    """Async model adapter. Subclasses set ``name``/``modality`` and implement ``generate``.

    ``batch_size`` inputs are passed per ``generate`` call and at most ``max_concurrency`` calls are
    in flight at once (an HTTP client: 1 and 32; a local GPU model: 16 and 1).
    """

    name: str = "model"
    modality: Modality = "multimodal"
    batch_size: int = 1
    max_concurrency: int = 1
    #: for a reference model with known behaviour: that behaviour in its suite's words (e.g. "uses_image"),
    #: recorded in the run store beside the identity (never in the cache key) so reports can show designed
    #: beside observed; None for real models
    designed: str | None = None

    def identity(self) -> dict[str, Any]:
        """Everything that changes answers: backend, model id, revision, endpoint model name."""
        return {"backend": type(self).__name__, "name": self.name}

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        raise NotImplementedError

    def image_encoder(self) -> Callable[[np.ndarray], bytes] | None:
        """A picklable pure function from final pixels to the image bytes this model puts in its requests (e.g.
        the ASCII data URL of the PNG, base64 included), or None.

        The runner may run it in its render workers (beside the event loop) and hand the bytes back
        through :meth:`prime_image`, so request building neither encodes nor frames on the event loop."""
        return None

    def prime_image(self, sha256: str, encoded: bytes) -> None:
        """Accept an image encoded elsewhere by :meth:`image_encoder` (ignored by default)."""

    def prepare(self, inp: ModelInput) -> ModelInput:
        """Reduce an input to what this model can see (text-only models drop images) before keying."""
        return inp.without_images() if self.modality == "text_only" else inp

    async def aclose(self) -> None:
        return None


class LocalModel(Model):
    """A synchronous, in-process model: implement ``predict`` on a batch; it runs in a worker thread."""

    batch_size = 16
    max_concurrency = 1

    def predict(self, inputs: Sequence[ModelInput]) -> list[Response]:
        raise NotImplementedError

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        return await asyncio.to_thread(self.predict, list(inputs))


class TextOnly(Model):
    """Wraps any model and drops the image: the paper's text-only baseline.

    Its identity is the inner model's: the image is dropped before keying (:meth:`prepare`), so every input it
    sends is byte-identical to the inner model's own no-image request for the same question and decoding, and
    the runner asks such a request once for both (the wrapper reuses the served model's ``no_image`` answers).
    Keys still differ wherever the inputs differ: the inner model's image conditions keep their pixels."""

    modality: Modality = "text_only"

    def __init__(self, inner: Model, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or f"{inner.name}[text-only]"
        self.batch_size = inner.batch_size
        self.max_concurrency = inner.max_concurrency

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def prepare(self, inp: ModelInput) -> ModelInput:
        """The inner model's preparation of the image-free input (what it would send for a no-image trial)."""
        return self.inner.prepare(inp.without_images())

    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        return await self.inner.generate([i.without_images() for i in inputs])

    async def aclose(self) -> None:
        await self.inner.aclose()
