"""An OpenAI-compatible chat-completions server with deterministic answers and keyed fault injection.

For tests, benchmarks and users who want to dry-run a config without a model:

    python -m medvlm_audit.testing.fake_openai --port 8000 --delay-ms 20

Answers are computed from the request only: "Yes" when the sha256 of the message text and image URLs
is even, else "No", with first-token top log-probabilities over a few yes/no spellings. With
``--answers judge`` (``answer_fn=judge_answer``) it answers like an LLM judge of the faithfulness suite: a
prompt holding a chain of thought after ``COT:`` gets the strict judge JSON (a score 1-5 from the hash, a
verbatim quote of the CoT), except every prompt whose hash is 0 mod 7, which gets prose instead of JSON
(a judge that returns garbage: counted as ``parse``, never coerced); other prompts get Yes / No. With
``--answers reasoner`` every answer is a chain of thought drawn from the request hash, then ``<answer>``.

Faults are keyed by the request's *prompt key* (its message text) so outcomes are exact:

- markers in the prompt text: ``[[fault:KIND]]`` (every attempt), ``[[fault:KIND:N]]`` (the first N
  attempts of this prompt, then it succeeds), ``[[fault:KIND:N:PARAM]]`` (PARAM: Retry-After seconds
  for 429/503, hang seconds for ``hang``). Several markers apply in order, e.g.
  ``[[fault:429:1:0.2]][[fault:drop:1]]`` fails the first attempt with 429, the second by dropping
  the connection, and answers the third;
- :class:`FaultRule` objects (the same thing matched on a substring, configured on the server);
- ``fault_rates`` {KIND: probability} with a ``seed``: each attempt below ``max_faults_per_key``
  draws its fault from a hash of (seed, prompt key, attempt number), independent of arrival order,
  so every prompt fails at most ``max_faults_per_key`` times and then succeeds.

KIND is an HTTP status (``429``, ``500``, ``503``, ``400``, ...) or one of ``hang`` (no answer until
PARAM seconds pass or the client gives up), ``drop`` (connection closed mid-response), ``disconnect``
(closed before any response byte), ``malformed`` (truncated JSON with status 200), ``empty`` (empty
content), ``nologprobs`` (a normal answer without log-probabilities; not an error), ``echo_auth``
(401 whose message repeats the credential the client sent, to test scrubbing), ``echo_request`` (400
whose message repeats the request's full URL, every header and a decoded ``Basic`` credential, as a
hostile or careless server might).

``api_key`` (``--api-key``): every route but ``/_fake/*`` then answers 401 unless the request carries that
key (``Authorization: Bearer KEY``, ``api-key: KEY`` or ``Basic`` with password KEY), like a real server
given a wrong or missing key; its message repeats the credential it got (to test scrubbing).

The files and batches endpoints (``/v1/files``, ``/v1/batches``) come from :mod:`medvlm_audit.testing.fake_batches`.
Its ``/v1/models`` entry says ``owned_by: vllm`` (``owned_by=None``: an engine that cannot be identified), so
``server: auto`` sends it the whole decoding contract as to vLLM; ``reasoning_fn`` adds a thinking model's
``reasoning_content`` to every answer.

The server counts requests, answers and faults per prompt key, records the Authorization / api-key
headers it saw, the peak number of requests in flight, and optionally every request body.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

from medvlm_audit.testing.fake_batches import BatchFaults, FakeBatchAPI

FAULT_NAMES = ("hang", "drop", "disconnect", "malformed", "empty", "nologprobs", "echo_auth", "echo_request")
_MARKER = re.compile(r"\[\[fault:([a-z_]+|\d{3})(?::(\d+|always|\*))?(?::([0-9.]+))?\]\]")


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Fail requests whose prompt contains ``match`` with ``kind``: the first ``times`` attempts, or all if None."""

    match: str
    kind: str
    times: int | None = 1
    param: float | None = None

    def __post_init__(self) -> None:
        _check_kind(self.kind)


def _check_kind(kind: str) -> None:
    if kind in FAULT_NAMES:
        return
    if kind.isdigit() and 400 <= int(kind) <= 599:
        return
    raise ValueError(f"unknown fault kind {kind!r}; expected an HTTP status 400-599 or one of {FAULT_NAMES}")


def parse_fault_markers(text: str) -> list[FaultRule]:
    """The ``[[fault:KIND[:N][:PARAM]]]`` markers of a prompt, in order."""
    rules = []
    for kind, times, param in _MARKER.findall(text):
        n = int(times) if times.isdigit() else None  # no count, "always" or "*": every attempt
        rules.append(FaultRule(match="", kind=kind, times=n, param=float(param) if param else None))
    return rules


def _pick_sequential(rules: Sequence[FaultRule], attempt: int) -> FaultRule | None:
    """The rule that applies to the ``attempt``-th request (0-based) when rules apply one after another."""
    done = 0
    for rule in rules:
        if rule.times is None or attempt < done + rule.times:
            return rule
        done += rule.times
    return None


@dataclass
class ServerStats:
    """What the server saw. Keys are prompt keys (the request's message text)."""

    total: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    faults: dict[str, list[str]] = field(default_factory=dict)
    authorization: Counter[str] = field(default_factory=Counter)
    api_key: Counter[str] = field(default_factory=Counter)
    paths: Counter[str] = field(default_factory=Counter)
    api_versions: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "requests": dict(self.requests),
            "answers": dict(self.answers),
            "faults": self.faults,
            "paths": dict(self.paths),
            "max_inflight": self.max_inflight,
        }


def prompt_key(body: Mapping[str, Any]) -> str:
    """The text of every message, joined by newlines (image parts left out): what faults and counts key on."""
    parts: list[str] = []
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return "\n".join(parts)


def _request_digest(body: Mapping[str, Any]) -> bytes:
    h = hashlib.sha256()
    for m in body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, str):
            h.update(content.encode())
        elif isinstance(content, list):
            for p in content:
                if p.get("type") == "text":
                    h.update(p.get("text", "").encode())
                elif p.get("type") == "image_url":
                    h.update(str((p.get("image_url") or {}).get("url", "")).encode())
    return h.digest()


def yes_no_answer(body: Mapping[str, Any]) -> tuple[str, list[tuple[str, float]]]:
    """Deterministic answer from the request content: text and first-token alternatives (token, logprob)."""
    d = _request_digest(body)
    yes = d[-1] % 2 == 0
    p = 0.55 + 0.44 * d[0] / 255.0  # confidence in the given answer
    a, b = ("Yes", "No") if yes else ("No", "Yes")
    alts = [
        (a, p * 0.85), (" " + a.lower(), p * 0.10), (a.lower(), p * 0.05),
        (b, (1 - p) * 0.80), (" " + b.lower(), (1 - p) * 0.15), (b.lower(), (1 - p) * 0.04),
        ("I", (1 - p) * 0.01),
    ]
    alts.sort(key=lambda t: -t[1])
    return a, [(tok, math.log(pr)) for tok, pr in alts]


def judge_answer(body: Mapping[str, Any]) -> str:
    """A deterministic LLM-judge answer (see the module docstring); the CoT is the text after the last
    ``COT:`` line of the prompt."""
    text = prompt_key(body)
    _, found, cot = text.rpartition("\nCOT:\n")
    if not found:
        return yes_no_answer(body)[0]
    d = _request_digest(body)
    if int.from_bytes(d[:4], "big") % 7 == 0:
        return "I would rate this reasoning about a three, it seems fine."
    cot = cot.strip()
    words = cot.split()
    quote = " ".join(words[: min(6, len(words))])
    score = 1 + d[5] % 5
    return json.dumps({"abstain": False, "abstain_reason": None, "score": score, "quotes": [quote] if quote else [],
                       "quote_spans": [[cot.find(quote), cot.find(quote) + len(quote)]] if quote else [],
                       "rationale": f"fake judge: score {score} from the request hash"})


_COT_WORDS = ("the", "film", "shows", "a", "heart", "border", "lung", "field", "opacity", "margin", "clear",
              "hint", "suggests", "left", "right", "lower", "zone", "no", "effusion", "so", "likely", "answer")


def reasoner_answer(body: Mapping[str, Any]) -> str:
    """A deterministic reasoning model: a chain of thought of 40-120 words drawn from the request hash (so two
    requests get different CoTs, and a judge of them gets distinct prompts), then ``<answer>yes|no</answer>``."""
    d = hashlib.sha256(_request_digest(body)).digest() * 4
    n = 40 + d[0] % 81
    words = " ".join(_COT_WORDS[b % len(_COT_WORDS)] for b in d[1 : 1 + n])
    return f"<think>{words}.</think>\n<answer>{'yes' if d[-1] % 2 else 'no'}</answer>"


ANSWER_MODES: dict[str, Callable[[Mapping[str, Any]], str] | None] = {"yesno": None, "judge": judge_answer,
                                                                       "reasoner": reasoner_answer}


def _error_body(status: int, message: str) -> bytes:
    kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


def _credential(request: web.Request) -> str | None:
    """The key a request carries: Bearer token, api-key header, or the password of Basic user:password."""
    auth = request.headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        return auth[7:]
    if auth.startswith("Basic "):
        try:
            return base64.b64decode(auth[6:]).decode("utf-8").partition(":")[2]
        except ValueError:
            return None
    return request.headers.get("api-key")


class FakeOpenAIServer:
    """aiohttp.web app serving ``/v1/chat/completions`` and ``/openai/deployments/{d}/chat/completions``."""

    def __init__(
        self,
        *,
        delay_ms: float = 0.0,
        rules: Sequence[FaultRule] = (),
        fault_rates: Mapping[str, float] | None = None,
        max_faults_per_key: int = 2,
        seed: int = 0,
        retry_after_s: float | None = None,
        answer_fn: Callable[[Mapping[str, Any]], str] | None = None,
        record_bodies: bool = False,
        model_name: str = "fake-vlm",
        api_key: str | None = None,
        batch: BatchFaults | None = None,
        owned_by: str | None = "vllm",
        reasoning_fn: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> None:
        self.delay_s = delay_ms / 1000.0
        #: the files and batches endpoints (``batch``: their :class:`~medvlm_audit.testing.fake_batches.BatchFaults`)
        self.batches = FakeBatchAPI(self._complete_line, batch)
        self.api_key = api_key
        self.rules = list(rules)
        self.fault_rates = dict(fault_rates or {})
        for k in self.fault_rates:
            _check_kind(k)
        if sum(self.fault_rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault_rates must sum to at most 1")
        self.max_faults_per_key = max_faults_per_key
        self.seed = seed
        self.retry_after_s = retry_after_s
        self.answer_fn = answer_fn
        self.record_bodies = record_bodies
        self.model_name = model_name
        #: ``owned_by`` of its ``/v1/models`` entry: "vllm" by default (it takes every vLLM sampling field, so
        #: ``server: auto`` identifies it as vLLM and sends the whole decoding contract); None: an engine that
        #: cannot be identified
        self.owned_by = owned_by
        #: a thinking model: the text of ``message.reasoning_content`` beside each answer
        self.reasoning_fn = reasoning_fn
        self.stats = ServerStats()
        self._runner: web.AppRunner | None = None
        self.base_url: str = ""
        self.root_url: str = ""

    # -- app -------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._auth])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/_fake/stats", self._stats)
        app.router.add_post("/_fake/reset", self._reset)
        self.batches.mount(app)  # /v1/files, /v1/batches (testing/fake_batches.py)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start listening (port 0: an ephemeral port) and return the OpenAI base URL (``.../v1``)."""
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        real_port = sock.getsockname()[1]
        self.root_url = f"http://{host}:{real_port}"
        self.base_url = self.root_url + "/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def reset(self) -> None:
        self.stats = ServerStats()

    # -- handlers ----------------------------------------------------------------------------------
    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if self.api_key is None or request.path.startswith("/_fake/") or _credential(request) == self.api_key:
            return await handler(request)
        self.stats.total += 1
        self.stats.paths[request.path] += 1
        seen = request.headers.get("Authorization") or request.headers.get("api-key") or "none"
        return web.Response(status=401, body=_error_body(401, f"Incorrect API key provided: {seen}."),
                            content_type="application/json")

    async def _models(self, request: web.Request) -> web.Response:
        entry = {"id": self.model_name, "object": "model"}
        if self.owned_by is not None:
            entry["owned_by"] = self.owned_by
        return web.json_response({"object": "list", "data": [entry]})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.as_json())

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    def _fault_for(self, key: str, attempt: int) -> FaultRule | None:
        rules = parse_fault_markers(key) if "[[fault:" in key else []
        rules += [r for r in self.rules if r.match in key]
        rule = _pick_sequential(rules, attempt)
        if rule is not None or not self.fault_rates or attempt >= self.max_faults_per_key:
            return rule
        u = hashlib.sha256(f"{self.seed}\x00{attempt}\x00{key}".encode()).digest()
        x = int.from_bytes(u[:8], "big") / 2.0**64
        acc = 0.0
        for kind, rate in self.fault_rates.items():
            acc += rate
            if x < acc:
                return FaultRule("", kind, 1, self.retry_after_s if kind in ("429", "503") else None)
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        st = self.stats
        st.total += 1
        st.inflight += 1
        st.max_inflight = max(st.max_inflight, st.inflight)
        try:
            return await self._chat_inner(request, st)
        finally:
            st.inflight -= 1

    async def _chat_inner(self, request: web.Request, st: ServerStats) -> web.StreamResponse:
        headers = request.headers
        st.paths[request.path] += 1
        auth = headers.get("Authorization")
        if auth is not None:
            st.authorization[auth] += 1
        api_key = headers.get("api-key")
        if api_key is not None:
            st.api_key[api_key] += 1
        if "api-version" in request.query:
            st.api_versions[request.query["api-version"]] += 1
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return web.Response(status=400, body=_error_body(400, f"invalid JSON body: {exc}"),
                                content_type="application/json")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return web.Response(status=400, body=_error_body(400, "'messages' must be a list"),
                                content_type="application/json")
        if self.record_bodies:
            st.bodies.append(body)
        st.models[str(body.get("model", request.match_info.get("deployment", "")))] += 1
        key = prompt_key(body)
        attempt = st.requests[key]
        st.requests[key] += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)

        rule = self._fault_for(key, attempt)
        kind = rule.kind if rule is not None else None
        if kind is not None and kind != "nologprobs":
            st.faults.setdefault(key, []).append(kind)
        if kind is None or kind in ("nologprobs", "empty"):
            return self._answer(body, key, st, empty=kind == "empty", logprobs=kind != "nologprobs")
        assert rule is not None
        if kind.isdigit():
            status = int(kind)
            hdrs = {}
            if rule.param is not None:
                hdrs["Retry-After"] = f"{rule.param:g}"
            return web.Response(status=status, body=_error_body(status, f"injected fault {status}"),
                                content_type="application/json", headers=hdrs)
        if kind == "echo_auth":
            seen = auth or api_key or "<none>"
            return web.Response(status=401, body=_error_body(401, f"Incorrect API key provided: {seen}."),
                                content_type="application/json")
        if kind == "echo_request":
            seen = {k: v for k, v in headers.items()}
            basic = headers.get("Authorization", "")
            decoded = ""
            if basic.startswith("Basic "):
                decoded = base64.b64decode(basic[6:]).decode("utf-8", "replace")
            msg = (f"bad request: basic={decoded} auth={headers.get('Authorization')} api-key={headers.get('api-key')} "
                   f"{request.method} {request.url} headers={json.dumps(seen)}")  # credentials first: messages get cut
            return web.Response(status=400, body=_error_body(400, msg), content_type="application/json")
        if kind == "hang":
            await asyncio.sleep(rule.param if rule.param is not None else 3600.0)
            return self._answer(body, key, st)
        if kind == "malformed":
            return web.Response(status=200, body=b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "Ye',
                                content_type="application/json")
        if kind == "disconnect":
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError  # nothing more to send on a closed connection
        if kind == "drop":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            resp.content_length = 4096
            await resp.prepare(request)
            await resp.write(b'{"id": "chatcmpl-x", "object": "chat.completion", "choices": [')
            if request.transport is not None:
                request.transport.close()
            return resp
        raise AssertionError(f"unhandled fault kind {kind}")  # _check_kind prevents this

    def _complete_line(self, body: dict[str, Any]) -> dict[str, Any]:
        """A batch line's completion: the same answer as online for the same body."""
        return completion_body(body, prompt_key(body), answer_fn=self.answer_fn, model_name=self.model_name)

    def _answer(self, body: Mapping[str, Any], key: str, st: ServerStats, *, empty: bool = False,
                logprobs: bool = True) -> web.Response:
        out = completion_body(body, key, answer_fn=self.answer_fn, model_name=self.model_name, empty=empty,
                              logprobs=logprobs)
        if self.reasoning_fn is not None:
            out["choices"][0]["message"]["reasoning_content"] = self.reasoning_fn(body)
        if not empty:
            st.answers[key] += 1
        return web.Response(body=json.dumps(out).encode(), content_type="application/json")


def completion_body(body: Mapping[str, Any], key: str, *, answer_fn: Callable[[Mapping[str, Any]], str] | None = None,
                    model_name: str = "fake-vlm", empty: bool = False, logprobs: bool = True) -> dict[str, Any]:
    """The chat completion the server answers to ``body`` (online, and for each line of a batch)."""
    if answer_fn is not None:
        text, alts = answer_fn(body), None
    else:
        text, alts = yes_no_answer(body)
    if empty:
        text, alts = "", None
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                              "logprobs": None, "finish_reason": "stop"}
    if logprobs and body.get("logprobs") and alts is not None:
        k = int(body.get("top_logprobs") or 0)
        top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in alts[:k]]
        choice["logprobs"] = {"content": [{"token": alts[0][0], "logprob": alts[0][1],
                                           "bytes": list(alts[0][0].encode()), "top_logprobs": top}]}
    n_images = sum(
        1 for m in body.get("messages", ()) if isinstance(m.get("content"), list)
        for p in m["content"] if p.get("type") == "image_url"
    )
    return {
        "id": "chatcmpl-" + hashlib.sha1(key.encode()).hexdigest()[:16],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", model_name),
        "choices": [choice],
        "usage": {"prompt_tokens": len(key.split()) + 256 * n_images, "completion_tokens": 1 if text else 0,
                  "total_tokens": len(key.split()) + 256 * n_images + (1 if text else 0)},
    }


class ThreadedFakeServer:
    """Run a :class:`FakeOpenAIServer` on its own event loop in a daemon thread (for sync tests and scripts).

    ``with ThreadedFakeServer(delay_ms=5) as srv: srv.base_url``; ``srv.server.stats`` holds the counts.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **config: Any) -> None:
        self.server = FakeOpenAIServer(**config)
        self._host, self._port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def root_url(self) -> str:
        return self.server.root_url

    @property
    def stats(self) -> ServerStats:
        return self.server.stats

    def start(self) -> str:
        """Start the thread and the server; return the base URL once it accepts connections."""
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="fake-openai", daemon=True)
        self._thread.start()
        ready.wait()
        fut = asyncio.run_coroutine_threadsafe(self.server.start(self._host, self._port), self._loop)
        return fut.result(timeout=10)

    def _run(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        self._loop.run_forever()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop, self._thread = None, None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeServerProcess:
    """The server in a separate Python process on an ephemeral port (so it does not share the client's
    event loop or GIL): ``with FakeServerProcess(delay_ms=20) as srv: srv.base_url``."""

    def __init__(self, delay_ms: float = 0.0, extra_args: Sequence[str] = (), python: str | None = None) -> None:
        self.cmd = [python or sys.executable, "-m", "medvlm_audit.testing.fake_openai", "--port", "0",
                    "--delay-ms", str(delay_ms), *extra_args]
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> str:
        """Start the process; return the base URL (``http://127.0.0.1:PORT/v1``) once it listens."""
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"fake server did not start (printed {line!r})")
        self.base_url = line.strip()
        return self.base_url

    def stats(self) -> dict[str, Any]:
        """The server's counters (``GET /_fake/stats``)."""
        import urllib.request

        with urllib.request.urlopen(self.root_url + "/_fake/stats", timeout=10) as f:
            result: dict[str, Any] = json.load(f)
        return result

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_fake_server(delay_ms: float = 0.0, extra_args: Sequence[str] = ()) -> FakeServerProcess:
    """Start :class:`FakeServerProcess` and return it (started); ``.stop()`` ends it."""
    srv = FakeServerProcess(delay_ms, extra_args)
    srv.start()
    return srv


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry: serve until interrupted; prints the base URL on its first line."""
    ap = argparse.ArgumentParser(prog="python -m medvlm_audit.testing.fake_openai", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="fixed delay before every answer")
    ap.add_argument("--fault-rate", action="append", default=[], metavar="KIND=P",
                    help="probability of a fault kind per attempt, e.g. 429=0.05 (repeatable)")
    ap.add_argument("--max-faults-per-key", type=int, default=2)
    ap.add_argument("--retry-after", type=float, default=None, help="Retry-After seconds on random 429/503")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-name", default="fake-vlm")
    ap.add_argument("--api-key", default=None, help="answer 401 to every request that does not carry this key")
    ap.add_argument("--batch-delay-s", type=float, default=0.0, help="seconds before a created batch completes")
    ap.add_argument("--batch-expire-after", type=int, default=None, metavar="N",
                    help="a batch expires after answering N lines (the rest: batch_expired)")
    ap.add_argument("--batch-fail-every", type=int, default=0, metavar="N", help="every N-th batch line fails (400)")
    ap.add_argument("--batch-drop-every", type=int, default=0, metavar="N",
                    help="every N-th batch line is in neither output file (partial output)")
    ap.add_argument("--answers", choices=sorted(ANSWER_MODES), default="yesno",
                    help="yesno: Yes / No from the request hash; judge: faithfulness judge JSON for CoT prompts")
    args = ap.parse_args(argv)
    rates = {}
    for item in args.fault_rate:
        kind, _, p = item.partition("=")
        try:
            rates[kind] = float(p)
            _check_kind(kind)
        except ValueError as exc:
            ap.error(f"--fault-rate {item!r}: expected KIND=PROBABILITY ({exc})")
    try:
        server = FakeOpenAIServer(delay_ms=args.delay_ms, fault_rates=rates, max_faults_per_key=args.max_faults_per_key,
                                  seed=args.seed, retry_after_s=args.retry_after, model_name=args.model_name,
                                  api_key=args.api_key, answer_fn=ANSWER_MODES[args.answers],
                                  batch=BatchFaults(delay_s=args.batch_delay_s, expire_after=args.batch_expire_after,
                                                    fail_every=args.batch_fail_every,
                                                    drop_every=args.batch_drop_every))
    except ValueError as exc:
        ap.error(str(exc))

    async def serve() -> None:
        url = await server.start(args.host, args.port)
        print(url, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
