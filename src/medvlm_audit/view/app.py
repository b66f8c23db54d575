"""The local run explorer (Starlette + Jinja2, server-rendered, one small script; the reader app's stack and rules).

Routes, all under a random access token that is printed in the URL at start:
  GET /v/{token}/                  the trials of the run, filtered (model, condition, category, flipped, parsed,
                                   and the suite's own filters such as finding, resolution, phrasing)
  GET /v/{token}/case/{k}[?model=] case k: every condition side by side for one model (images, question, raw
                                   answer, parsed value, confidence, flip), grouped by setting
  GET /v/{token}/img/{sha256}      the image whose pixel hash is sha256, rendered in memory from its source file
                                   through the run's recipe and checked against the hash (PNG; never written)
  GET /static/{name}               view.css, view.js (a fixed list)

Security: the token is compared in constant time and anything else answers 404; no value from the request reaches
the disk (cases are found by index, images by exact hash lookup, filters by exact match against known values);
Jinja2 autoescapes every text (model answers included); pages carry a strict Content-Security-Policy (scripts and
styles from the app only), no-referrer (the token is in the URL), nosniff, no framing, no caching; only localhost
Host headers are accepted. The run store is opened read-only.
"""

from __future__ import annotations

import hmac
import math
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from medvlm_audit.cache import LRU
from medvlm_audit.security_headers import SecurityHeaders
from medvlm_audit.view.data import RunView

__all__ = ["create_app"]

PAGE_ROWS = 200
_STATIC = {"view.css": "text/css; charset=utf-8", "view.js": "text/javascript; charset=utf-8"}
_SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
}
LOCAL_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]", "testserver"]


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("medvlm_audit.view", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined)


def _not_found() -> Response:
    return PlainTextResponse("Not found", status_code=404)


def highlight(text: str, phrases: list[str], cls: str) -> Markup:
    """``text`` escaped, with every occurrence of each phrase (case-insensitive) wrapped in ``<mark class=cls>``
    (``cls`` comes from this module, never from the request)."""
    spans: list[tuple[int, int]] = []
    low = text.lower()
    for p in phrases:
        p = p.strip().lower()
        start = 0
        while p and (i := low.find(p, start)) >= 0:
            spans.append((i, i + len(p)))
            start = i + len(p)
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = Markup(""), 0
    for a, b in merged:
        out += escape(text[pos:a]) + Markup(f'<mark class="{cls}">') + escape(text[a:b]) + Markup("</mark>")
        pos = b
    return out + escape(text[pos:])


_TERM_CLASSES = {"erasure", "new_bias", "bias_flip", "preservation"}


def highlight_words(text: str, words: dict[str, tuple[str, bool]]) -> Markup:
    """``text`` escaped, each whole word of ``words`` (case-insensitive) marked with its category's class (from a
    fixed list) and ``ungated`` when only the ungated rule classed it."""
    import re

    wanted = {w.lower(): v for w, v in words.items() if v[0] in _TERM_CLASSES}
    out, pos = Markup(""), 0
    for m in re.finditer(r"[A-Za-z][A-Za-z'-]*", text):
        hit = wanted.get(m.group(0).lower())
        if hit is None:
            continue
        cat, gated = hit
        cls = f"term {cat}" + ("" if gated else " ungated")
        out += escape(text[pos:m.start()]) + Markup(f'<mark class="{cls}" title="{escape(cat.replace("_", " "))}'
                                                    f'{"" if gated else " (ungated)"}">') + escape(m.group(0)) + Markup("</mark>")
        pos = m.end()
    return out + escape(text[pos:])


def added_lines(text: str, base: str) -> list[str]:
    """The lines of ``text`` that the base condition's text does not have (e.g. an injected cue sentence)."""
    have = {line.strip() for line in base.splitlines()}
    return [line.strip() for line in text.splitlines() if line.strip() and line.strip() not in have]


def _options(raw: Any, gold: Any, chosen: Any) -> list[dict[str, Any]] | None:
    """A trial's options as shown to the model, lettered A, B, ..., with the gold and the chosen one flagged."""
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, list | tuple) or not raw:
        return None
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [{"letter": letters[i], "text": str(o), "gold": str(gold) == letters[i], "chosen": str(chosen) == letters[i]}
            for i, o in enumerate(raw[:26])]


def _present(v: Any) -> str | None:
    """A cell's text, or None where the cell is empty (None, NaN, blank): a trial without an error has none.

    >>> [_present(v) for v in (None, float("nan"), "", "  ", "HTTP 500: boom")]
    [None, None, None, None, 'HTTP 500: boom']
    """
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    s = str(v).strip()
    return s or None


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{float(v):.3f}"


class _Pngs:
    """Encoded PNGs by pixel hash (in memory, bounded), with whether the pixels matched the stored hash."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.lru = LRU(max_bytes=64 * 2**20)

    def get(self, sha: str) -> tuple[bytes, bool]:
        hit = self.lru.get(sha)
        if hit is not None:
            return hit[0], hit[1] == b"1"
        from medvlm_audit.readers.render import encode_png

        px, ok = self.view.render(sha)
        data = encode_png(px)
        self.lru.put(sha, (data, b"1" if ok else b"0"))
        return data, ok


def create_app(view: RunView, token: str, *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The explorer of one run folder, read by :func:`~medvlm_audit.view.data.load_run`; every page lives under
    ``/v/{token}/``."""
    if not token or len(token) < 16:
        raise ValueError("the access token must be at least 16 characters")
    env = _env()
    pngs = _Pngs(view)
    static = {n: resources.files("medvlm_audit.view").joinpath("static", n).read_bytes() for n in _STATIC}
    spec = view.spec
    base = f"/v/{token}"

    def authorised(request: Request) -> bool:
        return hmac.compare_digest(str(request.path_params.get("token", "")).encode(), token.encode())

    def page(name: str, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(base=base, run=str(view.run_dir), suite=view.suite, **ctx))

    def trial_dict(r: Any) -> dict[str, Any]:
        d = r._asdict() if hasattr(r, "_asdict") else dict(r)
        flip = d.get("flip")
        return {
            "row": d,
            "model": str(d.get("model", "")),
            "condition": str(d.get("condition", "")),
            "setting": ", ".join(f"{c} {d.get(c)}" for c in spec.setting if c in d and c != "sample_index"
                                 or (c == "sample_index" and d.get(c) not in (0, None))),
            "answer": view.label(spec.answer, d.get(spec.answer)) if spec.answer in d else None,
            "unparsed": d.get("is_parsed") == 0.0,
            "flip": None if flip is None or (isinstance(flip, float) and math.isnan(flip)) else bool(flip),
            "fields": [(c if c == "parsed" else spec.title(c), view.label(c, d.get(c)) if c != "confidence"
                        else _num(d.get(c))) for c in spec.trial_fields if c in d],
        }

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return _not_found()
        return Response(static[name], media_type=_STATIC[name])

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    async def index(request: Request) -> Response:
        if not authorised(request):
            return _not_found()
        q = {k: v for k, v in request.query_params.items()}
        df, applied, notes = view.filter(q)
        page_raw = q.get("page", "1")
        pg = int(page_raw) if page_raw.isdigit() and int(page_raw) >= 1 else 1
        n = len(df)
        n_pages = max(1, math.ceil(n / PAGE_ROWS))
        pg = min(pg, n_pages)
        part = df.iloc[(pg - 1) * PAGE_ROWS: pg * PAGE_ROWS]
        cols = [c for c in spec.list_columns if c in df.columns]
        rows = []
        has_truth = bool(spec.truth) and spec.truth in df.columns
        for r in part.itertuples(index=False):
            t = trial_dict(r)
            t["case_idx"] = int(r.case_idx)
            t["item"] = str(getattr(r, spec.item))
            t["extra"] = [str(getattr(r, c)) for c in cols]
            t["label"] = view.label(spec.truth, getattr(r, spec.truth, None)) if has_truth else ""
            t["confidence"] = _num(getattr(r, "confidence", None)) if "confidence" in df.columns else ""
            rows.append(t)
        filters = [{"name": k, "values": v, "chosen": applied.get(k, "any")} for k, v in view.filter_values.items()]

        def page_url(p: int) -> str:
            return f"{base}/?{urlencode({**applied, **{k: 'any' for k in view.filter_values if k not in applied}, 'page': p})}"

        return page("index.html", title=f"{view.run_dir.name}: trials", filters=filters, rows=rows, n=n, page=pg,
                    n_pages=n_pages, notes=notes, extra_cols=cols, has_label=has_truth,
                    has_conf="confidence" in df.columns, conf_title=spec.title("confidence"),
                    has_flip="flipped" in view.filter_values,
                    has_answer=spec.answer in df.columns,
                    base_condition=spec.base_condition or "",
                    prev_url=page_url(pg - 1) if pg > 1 else "", next_url=page_url(pg + 1) if pg < n_pages else "",
                    categories=view.categories)

    async def case(request: Request) -> Response:
        if not authorised(request):
            return _not_found()
        k_raw = request.path_params["k"]
        if not k_raw.isdigit() or int(k_raw) >= len(view.cases):
            return _not_found()
        k = int(k_raw)
        rows = view.case_rows(k)
        models = sorted({str(m) for m in rows["model"]}) if "model" in rows.columns else [""]
        model = request.query_params.get("model")
        if model not in models:
            model = models[0]
        mine = rows[rows["model"].astype(str) == model] if "model" in rows.columns else rows
        questions = view.questions([str(x) for x in mine.get("key", [])])
        order = {c: i for i, c in enumerate(spec.condition_order)}
        setting_cols = [c for c in spec.setting if c in mine.columns]
        groups: dict[tuple, list[dict[str, Any]]] = {}
        default = tuple(str(spec.default_setting.get(c, "")) for c in setting_cols)
        base_q: dict[tuple, str] = {}
        for r in mine.itertuples(index=False):
            if spec.base_condition and str(getattr(r, "condition", "")) == spec.base_condition:
                base_q[tuple(str(getattr(r, c)) for c in setting_cols)] = questions.get(str(getattr(r, "key", "")), "")
        for r in mine.sort_values(by=["condition"] if "condition" in mine.columns else [spec.item],
                                  key=lambda s: s.map(lambda c: (order.get(c, len(order)), str(c)))).itertuples(index=False):
            t = trial_dict(r)
            sha = getattr(r, "image_sha256", None)
            t["image"] = None
            if isinstance(sha, str) and sha in view.recipes:
                try:
                    _, ok = pngs.get(sha)
                    t["image"] = {"url": f"{base}/img/{sha}", "ok": ok, "sha": sha[:12], "error": ""}
                except Exception as e:  # noqa: BLE001 - a missing or unreadable source is shown, not raised
                    t["image"] = {"url": "", "ok": False, "sha": sha[:12], "error": str(e)}
            gk = tuple(str(getattr(r, c)) for c in setting_cols)
            q = questions.get(str(getattr(r, "key", "")), "")
            cue = added_lines(q, base_q[gk]) if gk in base_q and str(getattr(r, "condition", "")) != spec.base_condition else []
            t["question"] = highlight(q, cue, "cue")
            t["cue"] = bool(cue)
            t["judgements"] = view.judgements_for(r)
            raw = getattr(r, "answer_text", None)
            terms = view.terms.get((str(getattr(r, "model", "")), str(getattr(r, "condition", ""))), {})
            if not isinstance(raw, str):
                t["text"] = ""
            elif terms:
                t["text"] = highlight_words(raw, terms)
            else:
                t["text"] = highlight(raw, [x for j in t["judgements"] for x in j["quotes"]], "quote")
            ref_id = getattr(r, spec.reference_column, None) if spec.reference_column else None
            ref = view.references.get(str(ref_id)) if ref_id is not None else None
            t["reference"] = highlight_words(ref, terms) if isinstance(ref, str) else None
            t["error"] = _present(getattr(r, "error_message", None))
            t["options"] = _options(getattr(r, spec.options_column, None) if spec.options_column else None,
                                    getattr(r, spec.gold_column, None) if spec.gold_column else None,
                                    getattr(r, spec.answer, None))
            groups.setdefault(gk, []).append(t)
        ordered = sorted(groups, key=lambda g: (g != default, g))
        group_list = [{"title": ", ".join(f"{c} {v}" for c, v in zip(setting_cols, g)
                                          if not (c == "sample_index" and v == "0")) or "trials",
                       "trials": groups[g]} for g in ordered]
        first = rows.iloc[0]
        facts = [(c, view.label(c, first.get(c))) for c in spec.case_fields if c in rows.columns]
        probe_set, item = view.cases[k]
        return page("case.html", title=f"{item}: {model}", item=item, probe_set=probe_set, facts=facts,
                    model=model, models=[{"name": m, "url": f"{base}/case/{k}?{urlencode({'model': m})}",
                                          "category": view.categories.get(m, "")} for m in models],
                    category=view.categories.get(model, ""), groups=group_list,
                    prev_url=f"{base}/case/{k - 1}?{urlencode({'model': model})}" if k > 0 else "",
                    next_url=f"{base}/case/{k + 1}?{urlencode({'model': model})}" if k + 1 < len(view.cases) else "",
                    base_condition=spec.base_condition or "", text_label=spec.text_label,
                    has_terms=bool(view.terms))

    async def image(request: Request) -> Response:
        if not authorised(request):
            return _not_found()
        sha = request.path_params["sha"]
        if sha not in view.recipes:  # exact lookup among the run's own images: nothing from the URL is a path
            return _not_found()
        try:
            data, ok = pngs.get(sha)
        except Exception:  # noqa: BLE001
            return PlainTextResponse("the source image cannot be read", status_code=410)
        if not ok:
            return PlainTextResponse("the source file changed since the run: these are not the pixels the model saw",
                                     status_code=409)
        return Response(data, media_type="image/png")

    routes = [
        Route("/static/{name}", static_file),
        Route("/favicon.ico", favicon),
        Route("/v/{token}/", index),
        Route("/v/{token}/case/{k}", case),
        Route("/v/{token}/img/{sha}", image),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _not_found()

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("Method not allowed", status_code=405)

    app = Starlette(routes=routes,
                    middleware=[Middleware(SecurityHeaders, headers=_SECURITY_HEADERS),
                                Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOCAL_HOSTS)],
                    exception_handlers={404: not_found, 405: method_not_allowed})
    app.state.view = view
    return app
