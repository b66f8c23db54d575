"""Chat-completions client for OpenAI-compatible endpoints: vLLM, OpenAI, Azure OpenAI, Ollama, llama.cpp, LM Studio.

One shared aiohttp session per event loop; at most ``max_concurrency`` requests in flight, spread over
several base URLs by least outstanding requests. Transient failures (429, 408, 500/502/503/504,
timeouts, dropped connections, malformed JSON) are retried with exponential backoff
and full jitter, honouring ``Retry-After``; permanent ones (other 4xx) are not. An empty completion (a 200 whose
content is empty, finish_reason not "length") is asked again at once, at most :data:`EMPTY_RETRIES` times: the
server answered, so backing off does not help, and a model that answers nothing answers nothing again; it is then
recorded as an error of kind ``empty`` (counted in the model's error rate; ``--retry-errors`` asks it again). A failed input comes
back as a :class:`Response` with ``error`` set, never as an exception.

:meth:`OpenAIChatModel.check_endpoints` asks every base URL a cheap ``GET /models`` before a run, so a dead
port or a refused key fails at once; during a run a circuit breaker stops asking after
``circuit_breaker`` consecutive connection or authentication failures (the inputs it did not ask come
back with error kind ``not_asked``, which the runner does not store, so a rerun asks them).

The API key is read from the environment variable ``api_key_env`` at request time. It is never stored
on the object and is scrubbed from every message this module returns.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import email.utils
import functools
import ipaddress
import json
import math
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _json_string  # json.dumps' own escaping (ensure_ascii)
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit, urlunsplit

import numpy as np
from yarl import URL

from medvlm_audit.cache import LRU
from medvlm_audit.errors import ConfigError
from medvlm_audit.lazy_tls import import_aiohttp
from medvlm_audit.models.base import (
    NOT_ASKED,
    Decoding,
    ErrorInfo,
    ImageData,
    Message,
    Modality,
    Model,
    ModelInput,
    Response,
)
from medvlm_audit.models.encoding import data_url_bytes
from medvlm_audit.models.flavours import FLAVOURS, UNKNOWN, implies_reasoning, request_fields
from medvlm_audit.models.flavours import check as check_flavour
from medvlm_audit.models.flavours import effective as effective_decoding
from medvlm_audit.models.flavours import max_tokens_field as resolve_max_tokens_field

aiohttp = import_aiohttp()  # its TLS contexts get their CA certificates at the first https request

ApiStyle = Literal["openai", "azure"]

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: an empty completion is asked again at once at most this many times (within ``max_retries``), then recorded
EMPTY_RETRIES = 2
DEFAULT_AZURE_API_VERSION = "2024-10-21"
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
_SECRETISH = re.compile(
    r"(?i)(bearer\s+)[^\s\"',;]+|(basic\s+)[A-Za-z0-9+/]{6,}={0,2}|\bsk-[A-Za-z0-9_\-*.]{6,}")
_LONG_SECRET = 8  # a secret this long is removed wherever it appears; a shorter one only as a whole token


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta seconds or an HTTP date); None if absent/invalid."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    try:
        secs = float(v)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(v)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:  # "-0000": HTTP dates are GMT
            when = when.replace(tzinfo=datetime.UTC)
        secs = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(secs):
        return None
    return max(0.0, secs)


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """Remove credentials from a message: the given secrets (whatever their length: from 8 characters on
    wherever they appear, shorter ones where they stand as a token, not inside a longer word), ``Bearer ...``
    and ``Basic ...`` values and ``sk-...`` keys.

    >>> scrub('{"Authorization": "Basic dXNlcjpwdw=="} url=/v1?key=ab1&x=2 ab12', ["ab1"])
    '{"Authorization": "Basic [REDACTED]"} url=/v1?key=[REDACTED]&x=2 ab12'
    """
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(s) >= _LONG_SECRET:
            text = text.replace(s, "[REDACTED]")
        elif s in text:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", "[REDACTED]", text)
    return _SECRETISH.sub(lambda m: (m.group(1) or m.group(2) or "") + "[REDACTED]", text)


def url_credentials(url: str) -> list[str]:
    """Every credential a client sends because of a base URL: the password, ``user:password`` raw and as the
    base64 of a Basic header, each query value; each as written in the URL and decoded."""
    parts, u = urlsplit(url), URL(url)
    out: list[str] = []
    if parts.password is not None:
        for user, pw in {(parts.username or "", parts.password), (u.user or "", u.password or "")}:
            pair = f"{user}:{pw}"
            out += [pw, pair]
            for enc in ("latin-1", "utf-8"):
                try:
                    out.append(base64.b64encode(pair.encode(enc)).decode("ascii"))
                except UnicodeEncodeError:
                    pass
    for key, value in parse_qsl(parts.query, keep_blank_values=False):
        out += [value, quote(value, safe=""), quote_plus(value)]
    out += [v for v in u.query.values() if v]
    return [s for s in dict.fromkeys(out) if s]


def redact_url(url: str) -> str:
    """The URL without user info and query (either may carry a key), for repr and messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class _Endpoint:
    __slots__ = ("base", "consecutive", "cooldown_until", "display", "down", "inflight", "rate_limited", "sent",
                 "url")

    def __init__(self, url: URL, display: str, base: URL | None = None) -> None:
        self.url = url
        self.base = base if base is not None else url
        self.display = display
        self.inflight = 0
        self.cooldown_until = 0.0
        self.rate_limited = False  # the cooldown is a 429's Retry-After (wait it out), not a failed connection
        self.consecutive = 0  # connection / auth failures in a row at this endpoint
        self.down = False  # past the circuit breaker's count: the model stops when every endpoint is down
        self.sent = 0


class _DataUrlCache:
    """LRU of images' data URLs (ASCII bytes, ``data:image/png;base64,...``) keyed by pixel hash, bounded in
    bytes: one image is often asked with several prompts (and a swap partner is another case's original
    image). Render workers hand them over framed (``prime_image``), so neither the encoding nor the base64
    runs on the event loop; an image not handed over is encoded by :meth:`get`."""

    def __init__(self, max_bytes: int, fmt: str, png_level: int) -> None:
        self.max_bytes = max_bytes
        self.fmt = fmt
        self.png_level = png_level
        self._lru = LRU(max_bytes=max_bytes)

    @property
    def size(self) -> int:
        return self._lru.nbytes

    def peek(self, image: ImageData) -> bytes | None:
        """The image's data URL when kept."""
        return self._lru.peek(image.sha256)

    def put(self, key: str, url: bytes) -> None:
        self._lru.put(key, url)

    def get(self, image: ImageData) -> bytes:
        """The image's data URL (ASCII bytes), encoding its pixels when they are not kept."""
        key = image.sha256
        url = self._lru.get(key)
        if url is None:
            url = data_url_bytes(image.pixels, self.fmt, self.png_level)
            self.put(key, url)
        return url


class _Failure:
    __slots__ = ("kind", "message", "retry_after", "status", "transient")

    def __init__(self, kind: str, message: str, transient: bool, retry_after: float | None = None,
                 status: int | None = None) -> None:
        self.kind = kind
        self.message = message
        self.transient = transient
        self.retry_after = retry_after
        self.status = status

    @property
    def unreachable(self) -> bool:
        """A failure the circuit breaker counts: no connection, or the server refuses our credentials."""
        return self.kind == "connection" or self.status in (401, 403)


class OpenAIChatModel(Model):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint (or several replicas of it).

    ``base_urls`` include the API prefix, as the OpenAI SDK takes them (``http://host:8000/v1``); for
    ``api_style="azure"`` they are the resource root (``https://NAME.openai.azure.com``) and ``model``
    is the deployment name. ``seed`` is sent as ``decoding.seed + sample_index`` so repeated samples
    differ yet stay reproducible. PNG images are lossless at every ``png_level``; the default (None)
    stores them uncompressed when every endpoint is on this machine (CPU is the bottleneck there) and
    uses zlib level 1 otherwise (bandwidth matters). ``encode_in_thread`` moves image encoding off the
    event loop, which pays on clients with idle cores. ``circuit_breaker``: stop asking after this many
    consecutive connection or 401/403 failures (attempts, retries included; 0 = never stop).
    """

    batch_size = 1

    def __init__(
        self,
        name: str,
        model: str,
        base_urls: Sequence[str] | str,
        api_key_env: str | None = None,
        api_style: ApiStyle = "openai",
        azure_api_version: str | None = None,
        max_concurrency: int = 32,
        timeout_s: float = 60.0,
        max_retries: int = 6,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        image_format: Literal["png", "jpeg"] = "png",
        extra_body: Mapping[str, Any] | None = None,
        revision: str | None = None,
        *,
        modality: Modality = "multimodal",
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        retry_after_max_s: float = 300.0,
        png_level: int | None = None,
        encode_in_thread: bool = False,
        image_cache_mb: float = 64.0,
        circuit_breaker: int = 10,
        server: str = "auto",
        reasoning: bool | None = None,
        reasoning_effort: str | None = None,
    ) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ConfigError(f"model {name!r}: base_urls is empty")
        if api_style not in ("openai", "azure"):
            raise ConfigError(f"model {name!r}: api_style must be 'openai' or 'azure', got {api_style!r}")
        if image_format not in ("png", "jpeg"):
            raise ConfigError(f"model {name!r}: image_format must be 'png' or 'jpeg', got {image_format!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ConfigError(f"model {name!r}: need max_concurrency >= 1, max_retries >= 0 and timeout_s > 0")
        if circuit_breaker < 0:
            raise ConfigError(f"model {name!r}: circuit_breaker must be >= 0 (0 = never stop), got {circuit_breaker}")
        if png_level is None:  # same machine: bandwidth is free and the CPU is shared with the server
            png_level = 0 if all(_is_loopback(u) for u in urls) else 1
        if not 0 <= png_level <= 9:
            raise ConfigError(f"model {name!r}: png_level must be 0-9, got {png_level}")
        if max_tokens_field not in (None, "max_tokens", "max_completion_tokens"):
            raise ConfigError(f"model {name!r}: max_tokens_field must be 'max_tokens' or 'max_completion_tokens'")
        if api_key_env and any(urlsplit(u).username for u in urls):
            raise ConfigError(f"model {name!r}: a base URL carries user:password and api_key_env is set; use one")
        self.name = name
        self.model = model
        self.modality = modality
        self.api_key_env = api_key_env
        self.api_style: ApiStyle = api_style
        self.azure_api_version = azure_api_version or DEFAULT_AZURE_API_VERSION
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.retry_after_max_s = float(retry_after_max_s)
        self.image_format = image_format
        self.png_level = int(png_level)
        self.encode_in_thread = bool(encode_in_thread)
        self.extra_body = dict(extra_body or {})
        self.revision = revision
        self.max_tokens_field = max_tokens_field
        if server not in FLAVOURS:
            raise ConfigError(f"model {name!r}: server must be one of {', '.join(FLAVOURS)}, got {server!r}")
        if server == "azure" and api_style == "openai":
            self.api_style = api_style = "azure"
        if reasoning_effort is not None and reasoning_effort not in ("minimal", "low", "medium", "high"):
            raise ConfigError(f"model {name!r}: reasoning_effort must be minimal, low, medium or high, "
                              f"got {reasoning_effort!r}")
        self.server = server
        #: the engine the requests are built for: the configured flavour, or what :meth:`identify_server` found
        #: for ``auto`` ('unknown' until then: only the fields every engine takes are sent)
        self.flavour = server if server != "auto" else ("azure" if api_style == "azure" else UNKNOWN)
        #: a reasoning model: declared, or implied by a known family name (o-series, GPT-5, DeepSeek-R1, QwQ)
        self.reasoning = bool(implies_reasoning(model) if reasoning is None else reasoning)
        self.reasoning_effort = reasoning_effort
        self._checked: dict[Decoding, str | None] = {}
        # URL user info and query values may be credentials: scrubbed from every message
        self._url_secrets = [c for u in urls for c in url_credentials(u)]
        self._endpoints = [_Endpoint(self._chat_url(u), redact_url(u), URL(u)) for u in urls]
        self.circuit_breaker = int(circuit_breaker)
        self._consecutive = 0  # the longest run of connection / auth failures at one endpoint (for messages)
        self._tripped: str | None = None  # why the breaker stopped this model
        self._rr = 0
        self._rng = random.Random()
        self._images = _DataUrlCache(int(image_cache_mb * 2**20), image_format, self.png_level)
        self._placeholder = f"@medvlm-image-{os.urandom(8).hex()}-"
        self._templates: dict[tuple, tuple[bytes, ...]] = {}
        self._effective: dict[tuple, dict[str, Any]] = {}
        self._echoed: dict[tuple, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._sem: asyncio.Semaphore | None = None
        self._timeout = aiohttp.ClientTimeout(total=self.timeout_s)

    # -- description ---------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """Backend, model id, revision and API style; plus image format and extra body when they change answers.

        Base URLs are not identity (replicas serve the same model) and no credential ever is.
        """
        ident: dict[str, Any] = {"backend": "openai", "model": self.model, "revision": self.revision,
                                 "api_style": self.api_style}
        if self.image_format != "png":
            ident["image_format"] = self.image_format  # lossy encoding changes the pixels the model sees
        if self.extra_body:
            ident["extra_body"] = json.loads(json.dumps(self.extra_body, sort_keys=True, default=str))
        if self.reasoning:  # a thinking model's requests differ (no logprobs; on OpenAI no sampling fields)
            ident["reasoning"] = True
        if self.reasoning_effort:
            ident["reasoning_effort"] = self.reasoning_effort
        return ident

    def __repr__(self) -> str:
        urls = [e.display for e in self._endpoints]
        return (f"OpenAIChatModel(name={self.name!r}, model={self.model!r}, base_urls={urls!r}, "
                f"api_style={self.api_style!r}, api_key_env={self.api_key_env!r}, "
                f"max_concurrency={self.max_concurrency})")

    @property
    def endpoint_counts(self) -> dict[str, int]:
        """Requests sent per base URL (redacted) since construction: to check load spreading."""
        return {e.display: e.sent for e in self._endpoints}

    def _chat_url(self, base: str) -> URL:
        """The full chat-completions URL for a base URL (its query, if any, is kept)."""
        u = URL(base)
        path = u.path.rstrip("/")
        if self.api_style == "azure":
            path = f"{path}/openai/deployments/{self.model}/chat/completions"
            return u.with_path(path).with_query(u.query).update_query({"api-version": self.azure_api_version})
        if not path.endswith("/chat/completions"):
            path += "/chat/completions"
        return u.with_path(path).with_query(u.query)

    # -- request building ----------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"model {self.name!r}: environment variable {self.api_key_env} is not set or empty")
        return key

    def check_credentials(self) -> None:
        """Raise ConfigError (naming the variable, never its value) if ``api_key_env`` is set but empty or unset.

        For a runner to fail before planning rather than record one error per input."""
        self._api_key()

    def _headers(self, key: str | None) -> dict[str, str]:
        if key is None:
            return _JSON_HEADERS
        h = dict(_JSON_HEADERS)
        if self.api_style == "azure":
            h["api-key"] = key
        else:
            h["Authorization"] = f"Bearer {key}"
        return h

    def image_encoder(self) -> Callable[[np.ndarray], bytes] | None:
        """The image as this client splices it into a request: its data URL (ASCII bytes of the base64 PNG or
        JPEG), so the runner's render workers do the encoding and the base64 beside the event loop."""
        if self.modality == "text_only":
            return None
        return functools.partial(data_url_bytes, fmt=self.image_format, png_level=self.png_level)

    def prime_image(self, sha256: str, encoded: bytes) -> None:
        self._images.put(sha256, encoded)

    def _images_of(self, inp: ModelInput) -> tuple[ImageData, ...]:
        return inp.images if self.modality != "text_only" else ()

    def request_body(self, inp: ModelInput) -> dict[str, Any]:
        """Exactly the JSON body the online path sends for one input (the decoding contract applied for this
        model's server flavour; images as data URLs before the text of the first user message). The batch
        path (:mod:`medvlm_audit.batch`) writes the same body as its request lines' ``body``. Raises ConfigError when the flavour cannot run the input's decoding."""
        problem = self._decoding_problem(inp.decoding)
        if problem is not None:
            raise ConfigError(problem)
        urls = [self._images.get(im).decode("ascii") for im in self._images_of(inp)]
        return self._body(inp, urls)

    build_body = request_body  # the earlier name

    def encode_payload(self, inp: ModelInput) -> bytes:
        """The exact request bytes: ``build_body`` serialised, with the (already JSON-safe) base64 image
        URLs spliced in after serialisation so the JSON encoder never scans them, and each message text
        JSON-escaped once and spliced in the same way. The serialised body around them is cached per (roles,
        decoding, sample, image count): many inputs share it, even when every prompt differs (a judge stage)."""
        images = self._images_of(inp)
        if not all(type(m.content) is str for m in inp.messages):  # not plain texts: serialised whole
            sig: tuple = (inp.messages, inp.decoding, inp.sample_index, len(images), False)
        else:
            sig = (tuple(m.role for m in inp.messages), inp.decoding, inp.sample_index, len(images), True)
        parts = self._templates.get(sig)
        if parts is None:
            parts = self._template(inp, len(images), sig[-1])
            if len(self._templates) >= 4096:
                self._templates.clear()
            self._templates[sig] = parts
        out: list[bytes] = []
        for kind, v in parts:
            out.append(v if kind == 0 else _json_string(inp.messages[v].content).encode() if kind == 1
                       else self._images.get(images[v]))
        return b"".join(out)

    def _template(self, inp: ModelInput, n_images: int, text_slots: bool = True) -> tuple[tuple[int, Any], ...]:
        """The body's JSON as parts: (0, literal bytes), (1, message index: its JSON-escaped text, quotes
        included, goes here), (2, image index: its data URL goes here)."""
        marks = [f"{self._placeholder}{i}" for i in range(n_images)]
        msgs = inp.messages
        if text_slots:
            msgs = tuple(Message(m.role, f"{self._placeholder}t{i}") for i, m in enumerate(msgs))
        no_pixels = ModelInput(msgs, (), inp.decoding, inp.sample_index)
        text = json.dumps(self._body(no_pixels, marks), separators=(",", ":"))
        ph = re.escape(self._placeholder)
        parts: list[tuple[int, Any]] = []
        texts, images, pos = [], [], 0
        for m in re.finditer(rf'"{ph}t(\d+)"|{ph}(\d+)', text):
            parts.append((0, text[pos:m.start()].encode()))
            if m.group(1) is not None:
                texts.append(int(m.group(1)))
                parts.append((1, texts[-1]))
            else:
                images.append(int(m.group(2)))
                parts.append((2, images[-1]))
            pos = m.end()
        parts.append((0, text[pos:].encode()))
        if sorted(texts) != (list(range(len(msgs))) if text_slots else []) or images != list(range(n_images)):
            # cannot happen: the placeholder is a random nonce the encoder leaves intact
            raise AssertionError("placeholder lost in JSON encoding")
        return tuple(parts)

    def _body(self, inp: ModelInput, image_urls: Sequence[str]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        placed = not image_urls
        for m in inp.messages:
            if not placed and m.role == "user":
                parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in image_urls]
                parts.append({"type": "text", "text": m.content})
                messages.append({"role": "user", "content": parts})
                placed = True
            else:
                messages.append({"role": m.role, "content": m.content})
        if not placed:  # no user message at all: the images form one
            messages.append({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": u}} for u in image_urls]})
        body: dict[str, Any] = {}
        if self.api_style == "openai":
            body["model"] = self.model
        body["messages"] = messages
        body.update(request_fields(
            self.flavour, inp.decoding, inp.sample_index, reasoning=self.reasoning,
            max_tokens_field=resolve_max_tokens_field(self.flavour, self.reasoning, self.max_tokens_field),
            reasoning_effort=self.reasoning_effort))
        if self.extra_body:
            body.update(self.extra_body)
        return body

    def _with_echo(self, eff: dict[str, Any], echo: dict[str, Any]) -> dict[str, Any]:
        """``eff`` with the server's ``echo`` beside it: one dict per (decoding sent, echo), shared by the answers
        that have both alike (the store serialises an effective decoding once per dict object)."""
        try:
            k = (id(eff), tuple((f, type(v), v) for f, v in echo.items()))  # 1 and 1.0 and True kept apart
            hit = self._echoed.get(k)
        except TypeError:  # an echoed value that is not hashable (a list): not shared
            return {**eff, "echo": echo}
        if hit is None or hit[0] is not eff:  # the entry holds ``eff``, so its id is not reused while cached
            if len(self._echoed) >= 1024:
                self._echoed.clear()
            hit = self._echoed[k] = (eff, {**eff, "echo": echo})
        return hit[1]

    def effective(self, inp: ModelInput) -> dict[str, Any]:
        """What the engine is asked for this input, in the contract's field names (read off the sent body as
        this flavour's engine reads it; None where a field is left to the server), plus the flavour."""
        key = (inp.decoding, inp.sample_index)
        hit = self._effective.get(key)
        if hit is None:
            body = self._body(ModelInput((), (), inp.decoding, inp.sample_index), ())
            hit = effective_decoding(self.flavour, body, reasoning=self.reasoning)
            hit["server"] = self.flavour
            if len(self._effective) >= 4096:
                self._effective.clear()
            self._effective[key] = hit
        return hit

    # -- decoding capabilities ------------------------------------------------------------------------
    def check_decoding(self, d: Decoding) -> None:
        """Raise ConfigError before a run when this model's server flavour cannot run exactly ``d`` (see
        :mod:`medvlm_audit.models.flavours`): e.g. top-k, min-p or beams on ``server: openai``, or on ``auto``
        when the engine could not be identified. The message names the option to set."""
        problem = self._decoding_problem(d)
        if problem is not None:
            raise ConfigError(problem)

    def _decoding_problem(self, d: Decoding) -> str | None:
        if d not in self._checked:
            try:
                check_flavour(self.flavour, d, reasoning=self.reasoning, configured=self.server)
                self._checked[d] = None
            except ConfigError as e:
                self._checked[d] = f"model {self.name!r}: {e}"
        return self._checked[d]

    async def identify_server(self, timeout_s: float = 10.0) -> str:
        """For ``server: auto``: identify the engine behind the first base URL that answers (``GET /models``
        ``owned_by`` and extra fields, then ``GET /api/version`` for Ollama and ``GET /info`` for TGI) and
        build requests for it. Returns the flavour ('unknown' when nothing identifies it)."""
        if self.server != "auto" or self.flavour != UNKNOWN:
            return self.flavour
        key = self._api_key()
        headers = {k: v for k, v in self._headers(key).items() if k != "Content-Type"}
        timeout = aiohttp.ClientTimeout(total=min(self.timeout_s, timeout_s))

        async def get(session: aiohttp.ClientSession, url: URL) -> Any:
            try:
                async with session.get(url, headers=headers) as resp:
                    if resp.status >= 400:
                        return None
                    return json.loads(await resp.read())
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
                return None

        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                                         timeout=timeout) as session:
            for ep in self._endpoints:
                base = ep.base
                models = await get(session, base.with_path(base.path.rstrip("/") + "/models").with_query(base.query))
                found = flavour_from_models(models, str(base))
                if found is None and models is not None:
                    root = base.with_path("/").with_query(base.query)
                    if isinstance(await get(session, root / "api" / "version"), dict):
                        found = "ollama"
                    else:
                        info = await get(session, root / "info")
                        if isinstance(info, dict) and "model_id" in info and (
                                "max_total_tokens" in info or "router" in info):
                            found = "tgi"
                if models is not None or found is not None:
                    if found:
                        self.flavour = found
                        self._checked.clear()
                        self._templates.clear()
                        self._effective.clear()
                        self._echoed.clear()
                    break
        return self.flavour

    # -- session -------------------------------------------------------------------------------------
    def _ensure_session(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_concurrency + 8, limit_per_host=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                timeout=self._timeout,
            )
            self._sem = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        assert self._sem is not None
        return self._session, self._sem

    async def aclose(self) -> None:
        """Close the shared HTTP session (call from the loop that used it)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
        self._sem = None
        self._loop = None

    # -- generation ----------------------------------------------------------------------------------
    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        """Answer every input (any number, at most ``max_concurrency`` requests in flight); order preserved.

        Raises ConfigError only when the API key variable is missing; per-input failures come back as
        responses with ``error`` set.
        """
        self._api_key()  # fail fast, naming the variable, before any request
        n = len(inputs)
        if n == 0:
            return []
        self._ensure_session()
        if n == 1:
            return [await self._one(inputs[0])]
        out: list[Response | None] = [None] * n
        indices = iter(range(n))

        async def worker() -> None:
            for i in indices:
                out[i] = await self._one(inputs[i])

        await asyncio.gather(*(worker() for _ in range(min(n, self.max_concurrency))))
        return out  # type: ignore[return-value]

    def _pick(self) -> _Endpoint:
        """Least outstanding requests; ties go round robin; endpoints cooling down (after a 429 or a failed
        connection) come last, so a dead replica is only probed as its cooldown ends."""
        eps = self._endpoints
        n = len(eps)
        if n == 1:
            return eps[0]
        start = self._rr
        self._rr = (start + 1) % n
        best = eps[start]
        now = -1.0
        for j in range(1, n):
            e = eps[(start + j) % n]
            if e.cooldown_until or best.cooldown_until:
                if now < 0:
                    now = time.monotonic()
                e_cool, b_cool = e.cooldown_until > now, best.cooldown_until > now
                if e_cool != b_cool:
                    if b_cool:
                        best = e
                    continue
            if e.inflight < best.inflight:
                best = e
        return best

    async def _one(self, inp: ModelInput) -> Response:
        secrets: list[str] = list(self._url_secrets)
        try:
            key = self._api_key()
            if key:
                secrets.append(key)
            problem = self._decoding_problem(inp.decoding)
            if problem is not None:  # never send a request that would not run the decoding asked for
                return Response(text=None, error=ErrorInfo("other", problem, 1, False))
            if self.encode_in_thread and any(self._images.peek(im) is None for im in self._images_of(inp)):
                payload = await asyncio.to_thread(self.encode_payload, inp)
            else:
                payload = self.encode_payload(inp)
            headers = self._headers(key)
            attempt = 0
            while True:
                if self._tripped is not None:
                    return Response(text=None, error=ErrorInfo(NOT_ASKED, scrub(self._tripped, secrets), attempt, True))
                attempt += 1
                result = await self._attempt(payload, headers)
                if isinstance(result, Response):
                    eff = self.effective(inp)
                    if result.effective:  # the server's echo of what it ran, beside what was sent
                        eff = self._with_echo(eff, result.effective)
                    return dataclasses.replace(result, effective=eff)
                fail = result
                limit = min(self.max_retries, EMPTY_RETRIES) if fail.kind == "empty" else self.max_retries
                if not fail.transient or attempt > limit:
                    return Response(text=None, error=ErrorInfo(
                        fail.kind, scrub(fail.message, secrets), attempt, fail.transient))
                if fail.kind != "empty" and not (fail.kind == "connection" and self._healthy_endpoint()):
                    # one replica's failed connection is that replica's: retry at once on a healthy one
                    await asyncio.sleep(self._backoff(attempt, fail.retry_after))
                key = self._api_key()  # keys can rotate between attempts
                if key and key not in secrets:
                    secrets.append(key)
                headers = self._headers(key)
        except ConfigError as exc:
            return Response(text=None, error=ErrorInfo("other", str(exc), 1, False))
        except Exception as exc:  # noqa: BLE001 - never raise for one input; record what happened
            return Response(text=None, error=ErrorInfo(
                "other", scrub(f"{type(exc).__name__}: {exc}", secrets), 1, False))

    def _healthy_endpoint(self) -> bool:
        """Whether some endpoint is neither cooling down nor down (a retry can go there at once)."""
        if len(self._endpoints) == 1:
            return False
        now = time.monotonic()
        return any(not e.down and e.cooldown_until <= now for e in self._endpoints)

    def _breaker(self, result: Response | _Failure, ep: _Endpoint) -> None:
        """Per endpoint: count consecutive connection / auth failures, cool a failed connection's endpoint down
        (exponential backoff, so selection skips it while others answer) and mark it down after
        ``circuit_breaker`` of them in a row; the model stops only when every endpoint is down. Any other
        outcome (an answer, a 429, a 5xx...) shows the server is there and resets its count."""
        if not isinstance(result, _Failure) or not result.unreachable:
            if not isinstance(result, _Failure) or result.kind != "timeout":
                ep.consecutive = 0
                ep.down = False
            return
        ep.consecutive += 1
        self._consecutive = max(self._consecutive, ep.consecutive)
        if result.kind == "connection" and len(self._endpoints) > 1:
            pause = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** min(ep.consecutive - 1, 16))
            ep.cooldown_until = max(ep.cooldown_until, time.monotonic() + pause)
            ep.rate_limited = False
        if self.circuit_breaker and ep.consecutive >= self.circuit_breaker:
            ep.down = True
        if (self.circuit_breaker and self._tripped is None and all(e.down for e in self._endpoints)):
            many = "" if len(self._endpoints) == 1 else f" at each of its {len(self._endpoints)} endpoints"
            self._tripped = (f"not asked: model {self.name!r} stopped after {self.circuit_breaker} consecutive "
                             f"connection/authentication failures{many} (circuit_breaker={self.circuit_breaker}); "
                             f"last: {result.message}")

    @property
    def stopped(self) -> str | None:
        """Why the circuit breaker stopped this model, or None."""
        return self._tripped

    def _secrets(self, key: str | None) -> list[str]:
        return [*self._url_secrets, key] if key else list(self._url_secrets)

    async def check_endpoints(self, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
        """Ask every base URL a cheap ``GET /models`` (Azure: ``/openai/models``) with this model's credentials.

        Returns (problems, warnings), each naming the redacted URL, the HTTP status and the server's message
        (credentials scrubbed). A failed connection (refused, dropped) is retried twice before it counts.
        Problems, which no retry fixes: no connection, 401, 403, or 404 on both ``/models`` and the chat route.
        Warnings (the run goes on; the retries handle them): a timeout, 429, 5xx. With several base URLs, one
        that cannot be reached while another answers is a warning, not a problem: it starts the run down
        (selection skips it; it is probed again as its cooldown ends)."""
        key = self._api_key()
        headers = {k: v for k, v in self._headers(key).items() if k != "Content-Type"}
        secrets = self._secrets(key)
        timeout = aiohttp.ClientTimeout(total=min(self.timeout_s, timeout_s))
        problems: list[str] = []
        warnings: list[str] = []
        unreachable: list[tuple[_Endpoint, str]] = []
        answered: list[_Endpoint] = []  # endpoints that gave an HTTP answer

        async def fetch(session: aiohttp.ClientSession, method: str, url: URL) -> tuple[int, bytes]:
            async with session.request(method, url, headers=headers,
                                       data=b"{}" if method == "POST" else None) as resp:
                return resp.status, await resp.read()

        async def one(session: aiohttp.ClientSession, ep: _Endpoint) -> None:
            where = f"model {self.name!r} at {ep.display}"
            if self.api_style == "azure":
                url = ep.base.with_path(ep.base.path.rstrip("/") + "/openai/models").with_query(
                    ep.base.query).update_query({"api-version": self.azure_api_version})
            else:
                url = ep.base.with_path(ep.base.path.rstrip("/") + "/models").with_query(ep.base.query)
            for attempt in range(3):
                try:
                    status, raw = await fetch(session, "GET", url)
                    if status in (404, 405):  # no model list here: does the chat route exist? ({} is a cheap 400)
                        status, raw = await fetch(session, "POST", ep.url)
                    break
                except TimeoutError:
                    warnings.append(f"{where}: no answer to GET /models within {timeout.total:g} s")
                    return
                except (aiohttp.ClientError, OSError) as exc:
                    if attempt < 2:  # a dropped response or a server still starting: ask again
                        await asyncio.sleep(0.5 * 2 ** attempt)
                        continue
                    unreachable.append((ep, scrub(f"{where}: cannot connect ({type(exc).__name__}: {exc})",
                                                  secrets)))
                    return
            if status < 400 or status in (400, 422) or status in RETRYABLE_STATUS:
                answered.append(ep)
            if status < 400:
                return
            text = scrub(f"{where}: HTTP {status}: {_error_message(raw, 200)}", secrets)
            if status in (401, 403):
                problems.append(text + ("" if key or self.api_key_env else
                                        " (no API key configured: set api_key_env)"))
            elif status == 404:
                problems.append(text + " (neither GET /models nor POST /chat/completions exists here: "
                                "is the base URL right? OpenAI-style base URLs usually end in /v1)")
            elif status in RETRYABLE_STATUS or status not in (400, 422):
                warnings.append(text)

        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                                         timeout=timeout) as session:
            await asyncio.gather(*(one(session, ep) for ep in self._endpoints))
        if unreachable and answered:  # another replica answers: start without the unreachable ones
            for ep, text in unreachable:
                ep.down = True
                ep.consecutive = max(ep.consecutive, 1)
                ep.cooldown_until = time.monotonic() + self.backoff_max_s
                warnings.append(f"{text}; the run starts without it (probed again after {self.backoff_max_s:g} s)")
        else:
            problems += [text for _, text in unreachable]
        return problems, warnings

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Full jitter: uniform(0, min(max, base * 2**(attempt-1))), but never less than Retry-After."""
        cap = min(self.backoff_max_s, self.backoff_base_s * (2.0 ** (attempt - 1)))
        delay = self._rng.uniform(0.0, cap)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.retry_after_max_s))
        return delay

    async def _attempt(self, payload: bytes, headers: Mapping[str, str]) -> Response | _Failure:
        """One request to the endpoint :meth:`_pick` chooses; its outcome feeds that endpoint's health."""
        picked: list[_Endpoint] = []
        result = await self._attempt_at(payload, headers, picked)
        if picked:
            self._breaker(result, picked[0])
        return result

    async def _attempt_at(self, payload: bytes, headers: Mapping[str, str],
                          picked: list[_Endpoint]) -> Response | _Failure:
        session, sem = self._ensure_session()
        async with sem:
            ep = self._pick()
            picked.append(ep)
            if ep.cooldown_until:
                wait = ep.cooldown_until - time.monotonic()
                if wait > 0 and ep.rate_limited:  # every endpoint is rate limited: wait rather than collect a 429
                    await asyncio.sleep(wait)
                elif wait <= 0:
                    ep.cooldown_until = 0.0
            ep.inflight += 1
            ep.sent += 1
            retry_after: float | None = None
            t0 = time.perf_counter()
            try:
                async with session.post(ep.url, data=payload, headers=headers) as resp:
                    status = resp.status
                    raw = await resp.read()
                    if status >= 400:
                        ra_ms = parse_retry_after(resp.headers.get("retry-after-ms"))  # Azure's extension
                        retry_after = (ra_ms / 1000.0 if ra_ms is not None
                                       else parse_retry_after(resp.headers.get("Retry-After")))
            except TimeoutError:
                return _Failure("timeout", f"no complete answer from {ep.display} within {self.timeout_s:g} s", True)
            except (aiohttp.ClientError, OSError) as exc:
                return _Failure("connection", f"{type(exc).__name__} from {ep.display}: {exc}", True)
            finally:
                ep.inflight -= 1
            latency = time.perf_counter() - t0
        if status >= 400:
            if status == 429 and retry_after:
                ep.cooldown_until = max(ep.cooldown_until, time.monotonic() + min(retry_after, self.retry_after_max_s))
                ep.rate_limited = True
            kind = "http_429" if status == 429 else ("http_5xx" if status >= 500 else "http_4xx")
            return _Failure(kind, f"HTTP {status} from {ep.display}: {_error_message(raw)}",
                            status in RETRYABLE_STATUS, retry_after, status)
        return _parse_completion(raw, latency, ep.display)


def flavour_from_models(models: Any, base_url: str = "") -> str | None:
    """The engine a ``GET /models`` answer names, or None: ``owned_by`` 'vllm', 'sglang', 'llamacpp'; OpenAI's
    owners ('openai', 'system', 'openai-internal') or api.openai.com; ``transformers serve`` lists a ``status``
    object per model (not an OpenAI field)."""
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        return None
    for m in models["data"]:
        if not isinstance(m, dict):
            continue
        owner = str(m.get("owned_by") or "").lower()
        if owner in ("vllm", "sglang", "llamacpp"):
            return owner
        if isinstance(m.get("status"), dict) and "value" in m["status"]:
            return "transformers"
        if owner in ("openai", "system", "openai-internal") or "api.openai.com" in base_url:
            return "openai"
    return None


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _error_message(raw: bytes, limit: int = 300) -> str:
    """The server's error message (OpenAI ``{"error": {"message": ...}}`` or the raw text), shortened."""
    try:
        data = json.loads(raw)
        if isinstance(data, dict):
            err = data.get("error", data.get("detail", data.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                text = str(err)
                return text[:limit]
    except ValueError:
        pass
    return raw[:limit].decode("utf-8", "replace")


def _parse_completion(raw: bytes, latency: float, where: str) -> Response | _Failure:
    """A Response from a 200 body; malformed or empty bodies are (transient) failures."""
    try:
        data = json.loads(raw)
        choice = data["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return _Failure("malformed", f"unreadable completion from {where}: {raw[:120]!r}", True)
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    finish = choice.get("finish_reason")
    if content is None or not str(content).strip():
        refusal = message.get("refusal")
        if refusal:
            content = str(refusal)
        elif finish == "length":  # the token budget ran out before any answer: retrying will not help
            return _Failure("empty", f"empty answer from {where}: max tokens reached before any content", False)
        else:
            return _Failure("empty", f"empty answer from {where} (finish_reason={finish})", True)
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if isinstance(reasoning, list):
        reasoning = "".join(p.get("text", "") for p in reasoning if isinstance(p, dict))
    reasoning = str(reasoning) if reasoning else None
    top: tuple[tuple[str, float], ...] | None = None
    lp = choice.get("logprobs")
    if isinstance(lp, dict):
        tokens = lp.get("content")
        if isinstance(tokens, list) and tokens and isinstance(tokens[0], dict):
            first = tokens[0]
            try:
                alts = first.get("top_logprobs")
                if alts:
                    top = tuple((str(a["token"]), float(a["logprob"])) for a in alts)
                elif "token" in first and "logprob" in first:
                    top = ((str(first["token"]), float(first["logprob"])),)
            except (KeyError, TypeError, ValueError):
                top = None
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    return Response(
        text=str(content),
        top_logprobs=top,
        finish_reason=finish,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_s=latency,
        effective=_echo(data),
        reasoning=reasoning,
    )


#: fields a server may echo at the top level of a completion (what it ran, or which build ran it)
_ECHO = ("model", "system_fingerprint", "service_tier", "temperature", "top_p", "top_k", "min_p",
         "repetition_penalty", "seed", "reasoning_effort")


def _echo(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    echo = {k: data[k] for k in _ECHO if data.get(k) is not None}
    return echo or None
