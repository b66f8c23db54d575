"""The reader-study web app (Starlette + Jinja2, server-rendered pages with a little plain JavaScript).

Routes (every asset is served by the app; no CDN):
  GET  /                         a neutral landing page
  GET  /r/{token}[?i=k]          the reading view of item k (default: the first item not yet complete)
  GET  /r/{token}/img/{item}/{k} the k-th image of an item assigned to this reader, rendered on the fly (PNG)
  POST /r/{token}/answer         autosave one answer (form: csrf, item_id, scale, value, elapsed_ms)
  GET  /r/{token}/done           end of the session
  GET  /admin/{token}            progress per reader for the lead (never an answer)
  GET  /static/{name}            app.css, app.js (a fixed list: no path from the request reaches the disk)

Security: a token is looked up by its sha256; an unknown or forged token, an item id not assigned to this
reader and any other path all answer 404; a write without the reader's CSRF token (or from another origin)
answers 403. Pages carry a strict Content-Security-Policy (scripts and styles from the app only), no-referrer
(the token is in the URL), nosniff, no framing and no caching. Jinja2 autoescapes every value.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from medvlm_audit.readers.pages import Prerendered
from medvlm_audit.readers.render import PngCache
from medvlm_audit.readers.study import Reader, StoreBusyError, Study, elapsed_seconds
from medvlm_audit.security_headers import SecurityHeaders

__all__ = ["READ_SLOTS", "create_app"]

_STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
_SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
                                "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
}


#: the reading view's slots (what a task's item ``view`` may hold): the question, lettered options, facts
#: (label, value) pairs, a text passage shown verbatim (e.g. a chain of thought), sample items, a box to draw
#: on the image, and how many images
_VIEW_DEFAULTS: dict[str, Any] = {"question": "", "options": None, "facts": None, "text": None, "samples": None,
                                  "box": None, "n_images": 0}
#: what the reading view only prints, filled per request into a page rendered once per item and answer state
READ_SLOTS = ("base", "csrf", "position", "total", "n_complete", "prev_url", "next_url")
_FORM_TYPE = "application/x-www-form-urlencoded"
_MAX_FORM_BYTES = 64 * 1024  # an answer's form is a few hundred bytes


def _package_text(*parts: str) -> str:
    return resources.files("medvlm_audit.readers").joinpath(*parts).read_text(encoding="utf-8")


def _env() -> jinja2.Environment:
    """The project's one Jinja2 environment (report/render.py) with the app's templates added: autoescape on,
    so every {{ value }} is HTML-escaped, CoT texts and reader names included."""
    from medvlm_audit.report.render import environment

    # own cache, templates read once (no file check per page view)
    return environment("medvlm_audit.readers").overlay(auto_reload=False, cache_size=50)


def _not_found() -> Response:
    return PlainTextResponse("Not found", status_code=404)


class AnswerWriter:
    """Answers arriving together are committed together: one writer thread runs one transaction for every
    answer that came in while the previous one was being written (a group commit), and each answer is
    acknowledged only once its transaction has committed. A store locked by another process fails the whole
    group with :class:`StoreBusyError` (nothing of it written); the pages then send those answers again."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._pending: list[tuple[tuple[Reader, str, str, str, float | None], asyncio.Future[None]]] = []
        self._drainer: asyncio.Task[None] | None = None  # the loop task handing groups to the writer thread
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader-answers")

    async def save(self, answer: tuple[Reader, str, str, str, float | None]) -> None:
        """Return once ``answer`` (as ``Study.check_answer`` gives it) is committed; raise what the write raised."""
        loop = asyncio.get_running_loop()
        drainer = self._drainer
        if drainer is not None and not drainer.done() and drainer.get_loop() is not loop:
            # another event loop is draining (a test client's loop per request): written alone, in turn
            await loop.run_in_executor(self._pool, self.study.save_answers, [answer])
            return
        fut: asyncio.Future[None] = loop.create_future()
        self._pending.append((answer, fut))
        if drainer is None or drainer.done():
            self._drainer = loop.create_task(self._drain())  # referenced: a task nobody holds may be collected
        await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        batch: list[tuple[tuple[Reader, str, str, str, float | None], asyncio.Future[None]]] = []
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await loop.run_in_executor(self._pool, self.study.save_answers, [a for a, _ in batch])
                except Exception as e:  # noqa: BLE001 - handed to every waiting answer
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
        finally:  # only when cancelled (the loop closing): no answer waits forever
            left, self._pending = batch + self._pending, []
            for _, fut in left:
                if not fut.done():
                    fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


async def _form_fields(request: Request) -> dict[str, str] | None:
    """The fields of a posted form (the last value of a repeated name), or None when the body is not a readable
    form. The page posts URL-encoded forms, parsed here directly; any other type goes through Starlette."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != _FORM_TYPE:
        form = await request.form()
        return {k: v for k, v in form.items() if isinstance(v, str)}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            return None
    return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=100))


def create_app(study_dir: str | Path, *, allowed_hosts: list[str] | None = None,
               write_wait_s: float = 1.0) -> Starlette:
    """The app for one study folder. ``allowed_hosts``: Host header values accepted (default: localhost names,
    which also stops DNS-rebinding pages from talking to a local server).

    Every database call and image rendering runs in worker threads (each with its own SQLite connection),
    never on the event loop, so a store locked by another process slows no page: page views read only (WAL
    readers do not wait for a writer), answers are written by one writer thread in groups (:class:`AnswerWriter`:
    each acknowledged once committed), and an answer that cannot get the write lock within ``write_wait_s``
    answers 503 with ``busy: true``: nothing was written, the page says "retrying" and sends it again. What
    needs neither the database nor rendering (a reader's page once her answers are held, an image already
    made, checking an answer) is answered on the event loop, with no thread hop."""
    study = Study(study_dir, write_wait_s=write_wait_s, cache_answers=True)
    study.preload()
    writer = AnswerWriter(study)
    env = _env()
    templates = {name: env.get_template(name) for name in ("index.html", "read.html", "done.html", "admin.html")}
    # the reading view, rendered once per (item, first or not, answers chosen), then filled per request
    read_pages = Prerendered(templates["read.html"], READ_SLOTS)
    pngs = PngCache()
    static = {name: _package_text("static", name).encode("utf-8") for name in _STATIC}
    spec = study.spec
    meta = study.public_meta()

    def page(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(templates[name].render(**ctx), status_code=status)

    def reader_of(request: Request) -> Reader | None:
        return study.reader_by_token(request.path_params.get("token", ""))

    def same_origin(request: Request) -> bool:
        """A write must not come from another site: Origin (or Referer) when sent must name this host."""
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin:
            return True
        host = request.headers.get("host", "")
        return urlsplit(origin).netloc == host

    async def index(request: Request) -> Response:
        return page("index.html", title="Reader study")

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return _not_found()
        return Response(static[name], media_type=_STATIC[name])

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    def read_context(item_id: str, view: dict[str, Any], chosen: tuple[str | None, ...],
                     has_prev: bool) -> dict[str, Any]:
        """What the reading view of an item shows besides the per-request values (``READ_SLOTS``): the item's
        view (the source, with case, condition, model, label and path, never reaches the page), the answers
        chosen so far, and whether there is a previous item."""
        view = {**_VIEW_DEFAULTS, **view}
        if "cot_text" in view:  # studies made before the passage slot was renamed
            view["text"] = view.pop("cot_text")
        scales = [{"name": s.name, "prompt": s.prompt, "choices": s.choices, "chosen": c}
                  for s, c in zip(spec.scales, chosen)]
        return {"title": spec.title, "spec": spec, "view": view, "scales": scales, "item_id": item_id,
                "has_prev": has_prev,
                "n_images": int(view.get("n_images", 0)) if spec.shows_image or view.get("n_images") else 0}

    async def read(request: Request) -> Response:
        reader = reader_of(request)  # readers are in memory (preloaded)
        if reader is None:
            return _not_found()
        if study.items_in_memory and study.cached_progress(reader) is not None:
            return read_sync(request, reader)  # nothing to read from the database: no thread needed
        return await run_in_threadpool(read_sync, request, reader)

    def read_sync(request: Request, reader: Reader) -> Response:
        order = study.order(reader)
        got = study.cached_progress(reader)
        if got is None:
            study.answers(reader)  # read once (in a worker thread), then kept with the count of complete items
            got = study.cached_progress(reader)
        answers, n_complete = got
        total = len(order)
        i_raw = request.query_params.get("i")
        if i_raw is None:
            if n_complete == total:
                return RedirectResponse(f"/r/{request.path_params['token']}/done", status_code=303)
            pos = next(k for k, i in enumerate(order) if not study.is_complete(answers.get(i, {})))
        else:
            if not i_raw.isdigit() or not 1 <= int(i_raw) <= total:
                return _not_found()
            pos = int(i_raw) - 1
        item_id = order[pos]
        got = study.item(reader, item_id)
        if got is None:  # pragma: no cover - order comes from this reader's assignments
            return _not_found()
        study.touch(reader)
        given = answers.get(item_id, {})
        chosen = tuple(given.get(s.name) for s in spec.scales)
        base = f"/r/{request.path_params['token']}"
        html = read_pages.fill(
            (item_id, pos > 0, chosen), lambda: read_context(item_id, got[0], chosen, pos > 0),
            base=base, csrf=study.csrf_token(reader), position=pos + 1, total=total, n_complete=n_complete,
            prev_url=f"{base}?i={pos}" if pos > 0 else "",
            next_url=f"{base}?i={pos + 2}" if pos + 1 < total else f"{base}/done")
        return HTMLResponse(html)

    async def done(request: Request) -> Response:
        return await run_in_threadpool(done_sync, request)

    def done_sync(request: Request) -> Response:
        reader = reader_of(request)
        if reader is None:
            return _not_found()
        order = study.order(reader)
        answers = study.answers(reader)
        missing = [k + 1 for k, i in enumerate(order) if not study.is_complete(answers.get(i, {}))]
        return page("done.html", title="Session", total=len(order), missing=missing,
                    base=f"/r/{request.path_params['token']}")

    async def image(request: Request) -> Response:
        reader = reader_of(request)
        k_raw = request.path_params["k"]
        if reader is not None and k_raw.isdigit():  # an image already made: served from memory
            got = study.cached_item(reader, request.path_params["item_id"])
            if got and int(k_raw) < len(got[1].get("images") or []):
                data = pngs.peek((request.path_params["item_id"], int(k_raw)))
                if data is not None:
                    return Response(data, media_type="image/png")
        return await run_in_threadpool(image_sync, request)

    def image_sync(request: Request) -> Response:
        reader = reader_of(request)
        if reader is None:
            return _not_found()
        item_id = request.path_params["item_id"]
        k_raw = request.path_params["k"]
        if not k_raw.isdigit():
            return _not_found()
        got = study.item(reader, item_id)  # only an item assigned to this reader, looked up by exact id
        if got is None:
            return _not_found()
        _, source = got
        recs = source.get("images") or []
        k = int(k_raw)
        if k >= len(recs):
            return _not_found()
        copied = None
        if meta.get("copy_images"):
            copied = study.dir / "images" / f"{item_id}-{k}.png"
        data = pngs.get_or_make((item_id, k), recs[k], copied)
        return Response(data, media_type="image/png")

    async def answer(request: Request) -> Response:
        reader = reader_of(request)
        if reader is None:
            return _not_found()
        if not same_origin(request):
            return JSONResponse({"ok": False, "error": "cross-origin write refused"}, status_code=403)
        try:
            form = await _form_fields(request)
        except Exception:  # noqa: BLE001 - any malformed body is the client's error, not the server's
            form = None
        if form is None:
            return JSONResponse({"ok": False, "error": "unreadable form"}, status_code=400)
        csrf = form.get("csrf") or request.headers.get("x-csrf-token")
        if not study.check_csrf(reader, csrf):
            return JSONResponse({"ok": False, "error": "missing or wrong CSRF token"}, status_code=403)
        item_id, scale, value = (form.get(k) for k in ("item_id", "scale", "value"))
        if item_id is None or scale is None or value is None:
            return JSONResponse({"ok": False, "error": "item_id, scale and value are required"}, status_code=400)
        try:  # absent or empty: the time is not recorded; an impossible one stores nothing
            elapsed = elapsed_seconds(form.get("elapsed_ms"))
        except ValueError as e:
            return JSONResponse({"ok": False, "field": "elapsed_ms", "error": str(e)}, status_code=400)
        try:  # in memory: every reader's items were preloaded
            checked = study.check_answer(reader, item_id, scale, value, elapsed)
        except KeyError:
            return _not_found()
        except ValueError as e:
            return JSONResponse({"ok": False, "error": str(e)}, status_code=400)
        try:
            await writer.save(checked)  # acknowledged only once committed
        except StoreBusyError:
            return JSONResponse({"ok": False, "busy": True, "error": "the study store is busy; nothing was "
                                 "saved yet, retrying"}, status_code=503, headers={"Retry-After": "1"})
        answers = study.cached_answers(reader)
        if answers is None:  # her first request: her answers are read once, off the event loop
            answers = await run_in_threadpool(study.answers, reader)
        given = answers.get(item_id, {})
        return JSONResponse({"ok": True, "complete": study.is_complete(given), "saved_at": time.time()})

    async def admin(request: Request) -> Response:
        return await run_in_threadpool(admin_sync, request)

    def admin_sync(request: Request) -> Response:
        if not study.check_admin(request.path_params.get("token", "")):
            return _not_found()
        prog = study.progress()
        rows = []
        for r in prog.itertuples(index=False):
            seen = "never" if r.last_seen is None or (isinstance(r.last_seen, float) and math.isnan(r.last_seen)) \
                else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(r.last_seen)))
            rows.append({"reader": r.reader, "assigned": int(r.assigned), "complete": int(r.complete),
                         "percent": f"{r.percent:.0f}", "last_seen": seen})
        return page("admin.html", title="Study progress", rows=rows, task=spec.title,
                    n_items=meta.get("n_items"), meta_json=json.dumps({k: meta.get(k) for k in (
                        "task", "n", "seed", "options", "n_items")}))

    routes = [  # the reading loop's three first (matched in order; no two patterns match the same path)
        Route("/r/{token}", read),
        Route("/r/{token}/img/{item_id}/{k}", image),
        Route("/r/{token}/answer", answer, methods=["POST"]),
        Route("/", index),
        Route("/static/{name}", static_file),
        Route("/favicon.ico", favicon),
        Route("/r/{token}/done", done),
        Route("/admin/{token}", admin),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _not_found()

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("Method not allowed", status_code=405)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        writer.close()

    hosts = allowed_hosts or ["127.0.0.1", "localhost", "::1", "[::1]", "testserver"]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders, headers=_SECURITY_HEADERS),
                    Middleware(TrustedHostMiddleware, allowed_hosts=hosts)],
        exception_handlers={404: not_found, 405: method_not_allowed},
        lifespan=lifespan,
    )
    app.state.study = study
    return app
