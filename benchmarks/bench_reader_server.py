"""Reader-app load test: simulated readers against the reader server and against a bare Starlette app.

    .venv/bin/python benchmarks/bench_reader_server.py [--readers 50] [--seconds 15] [--lock-s 10]

A finding-presence study (a small grounding demo run, 20 boxed cases -> 60 items per reader, one token per
reader). Each simulated reader loops: GET its reading page, GET the item's image, POST an answer with its
CSRF token (the page's own mix), and answers 503-busy with a retry after the server's Retry-After (1 s); while an answer waits, the reader
browses on (one answer in flight per reader). Both servers
run under uvicorn in their own process (h11, asyncio loop), one after the other, same client:
(a) a bare Starlette app answering the same three routes with fixed bytes (the same page HTML and PNG) and
    parsing the same form, no database, no templates; (a2) the same with the reader app's two middlewares
    (its six security headers on every response and the Host check), to tell their cost apart;
(b) the reader server (``medvlm_audit.readers.app``), a fresh copy of the study.
Reported: requests/s, p50 / p99 latency per route, server CPU-ms per request (the server process's CPU
seconds from /proc), and the number of answers stored against the number acknowledged.
Then (c): the reader server again while another process holds the study's write lock for ``--lock-s``
seconds: the slowest page during the lock, 503s, and whether every acknowledged answer is stored.
Targets (issue 23 / 22): (b) >= 0.5 x (a) requests/s, p99 < 300 ms at 50 readers on an idle machine, every
answer stored; under the lock every page < 1 s and no answer lost.

Where the time goes: ``--routes N`` first drives each app in its own process through a small in-process ASGI
caller (no HTTP server, no sockets, no client sharing the CPU), one request at a time, every reader's page,
image and answer N times after two warm passes over all her items, and prints the process CPU per route
(threads included). ``BENCH_PROFILE=FILE`` writes a cProfile of each server's event-loop thread to FILE.bare
and FILE.reader.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--serve" not in sys.argv and "--routes-of" not in sys.argv:  # a server takes its source from PYTHONPATH
    sys.path.insert(0, str(ROOT / "src"))


def bare_app(page: bytes, png: bytes, secure: bool = False):
    """The bare app; ``secure``: with the reader app's two middlewares (its security headers on every response,
    the Host check), so the cost of those is told apart from the app's own work."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    async def read(request: Request) -> Response:
        return HTMLResponse(page)

    async def image(request: Request) -> Response:
        return Response(png, media_type="image/png")

    async def answer(request: Request) -> Response:
        form = await request.form()
        return JSONResponse({"ok": bool(form.get("csrf")), "complete": True, "saved_at": time.time()})

    middleware = []
    if secure:
        from starlette.middleware import Middleware
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        from medvlm_audit.readers.app import _SECURITY_HEADERS
        from medvlm_audit.security_headers import SecurityHeaders

        middleware = [Middleware(SecurityHeaders, headers=_SECURITY_HEADERS),
                      Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "::1", "[::1]"])]
    return Starlette(routes=[Route("/r/{token}", read), Route("/r/{token}/img/{item_id}/{k}", image),
                             Route("/r/{token}/answer", answer, methods=["POST"])], middleware=middleware)


def serve(kind: str, study_dir: str, port: int, page_file: str = "", png_file: str = "") -> None:
    import uvicorn

    if kind in ("bare", "bare-secure"):
        app = bare_app(Path(page_file).read_bytes(), Path(png_file).read_bytes(), secure=kind == "bare-secure")
    else:
        from medvlm_audit.readers.app import create_app

        app = create_app(study_dir)
    prof = os.environ.get("BENCH_PROFILE")  # a cProfile of the server's event-loop thread, per server kind
    if prof:
        import cProfile
        import signal

        profiler = cProfile.Profile()

        def dump(*_: object) -> None:  # uvicorn re-raises the SIGTERM it caught once it has shut down
            profiler.disable()
            profiler.dump_stats(f"{prof}.{kind}")
            os._exit(0)

        signal.signal(signal.SIGTERM, dump)
        profiler.enable()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="h11", loop="asyncio")


async def _asgi(app, method: str, path: str, query: bytes = b"", body: bytes = b"",
                headers: tuple = ()) -> tuple[int, bytes]:
    """One request through an ASGI app, in process: (status, body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    out: list[dict] = []

    async def send(message: dict) -> None:
        out.append(message)

    await app(scope, receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


def routes(kind: str, study_dir: str, tokens_file: str, page_file: str, png_file: str, rounds: str) -> None:
    """Process CPU per route of one app, driven in process (``--routes``); prints one JSON line."""
    from urllib.parse import urlencode

    if kind == "bare":
        app = bare_app(Path(page_file).read_bytes(), Path(png_file).read_bytes())
    else:
        from medvlm_audit.readers.app import create_app

        app = create_app(study_dir)
    tokens = json.loads(Path(tokens_file).read_text())
    real = None if kind == "bare" else app
    cpu = {"page": 0.0, "image": 0.0, "answer": 0.0}

    async def triple(tok: str, k: int) -> None:
        t0 = time.process_time()
        st, page = await _asgi(app, "GET", f"/r/{tok}", f"i={k}".encode())
        t1 = time.process_time()
        assert st == 200, st
        if real is None:  # the bare app's fixed page: ids from the real one are not needed
            item, csrf = "x", "x"
        else:
            item = page.split(b'data-item="', 1)[1].split(b'"', 1)[0].decode()
            csrf = page.split(b'data-csrf="', 1)[1].split(b'"', 1)[0].decode()
        t1b = time.process_time()
        st, _ = await _asgi(app, "GET", f"/r/{tok}/img/{item}/0")
        t2 = time.process_time()
        assert st == 200, st
        body = urlencode({"csrf": csrf, "item_id": item, "scale": "answer", "value": "yes" if k % 2 else "no",
                          "elapsed_ms": "1500"}).encode()
        t2b = time.process_time()
        st, r = await _asgi(app, "POST", f"/r/{tok}/answer", body=body, headers=(
            (b"content-type", b"application/x-www-form-urlencoded"), (b"content-length", str(len(body)).encode())))
        t3 = time.process_time()
        assert st == 200, (st, r)
        cpu["page"] += t1 - t0
        cpu["image"] += t2 - t1b
        cpu["answer"] += t3 - t2b

    async def main() -> None:
        for _ in range(2):  # every image made, every page shape seen
            for tok in tokens:
                for k in range(1, 61):
                    await triple(tok, k)
        for key in cpu:
            cpu[key] = 0.0
        for r in range(int(rounds)):
            for tok in tokens:
                await triple(tok, r % 60 + 1)

    asyncio.run(main())
    n = int(rounds) * len(tokens)
    print(json.dumps({k: 1e6 * v / n for k, v in cpu.items()}), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, *args: str, src: Path = ROOT / "src") -> None:
        self.port = _free_port()
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", args[0], args[1], str(self.port), *args[2:]],
                                     env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


async def load(url: str, tokens: list[str], seconds: float, lock: tuple[str, float, float] | None = None) -> dict:
    """Readers loop page -> image -> answer for ``seconds``; ``lock``: (store, start after s, hold s)."""
    import aiohttp

    lat: dict[str, list[tuple[float, float]]] = {"page": [], "image": [], "answer": []}  # (start, seconds)
    acked: dict[tuple[str, str], str] = {}
    busy = 0
    t_start = time.perf_counter()
    stop_at = t_start + seconds
    lock_proc: subprocess.Popen | None = None

    async def reader(session: aiohttp.ClientSession, tok: str) -> None:
        nonlocal busy
        k = 0
        csrf = ""
        posting: list[asyncio.Future] = []
        while time.perf_counter() < stop_at:
            k = k % 60 + 1
            t0 = time.perf_counter()
            async with session.get(f"{url}/r/{tok}?i={k}") as r:
                page = await r.text()
                assert r.status == 200, r.status
            lat["page"].append((t0 - t_start, time.perf_counter() - t0))
            item = page.split('data-item="', 1)[1].split('"', 1)[0]
            csrf = csrf or page.split('data-csrf="', 1)[1].split('"', 1)[0]
            t0 = time.perf_counter()
            async with session.get(f"{url}/r/{tok}/img/{item}/0") as r:
                await r.read()
                assert r.status == 200, r.status
            lat["image"].append((t0 - t_start, time.perf_counter() - t0))
            value = "yes" if (k + len(tok)) % 2 else "no"
            if posting:  # the reader waits for her answer; if the store is busy she browses on meanwhile
                await asyncio.wait(posting, timeout=0.3)
                posting[:] = [p for p in posting if not p.done()]
            if not posting:  # one answer in flight per reader (the page retries it until it is saved)
                posting.append(asyncio.ensure_future(post(session, tok, csrf, item, value)))
        await asyncio.gather(*posting)

    async def post(session: aiohttp.ClientSession, tok: str, csrf: str, item: str, value: str) -> None:
        nonlocal busy
        while True:
            t0 = time.perf_counter()
            async with session.post(f"{url}/r/{tok}/answer", headers={"X-CSRF-Token": csrf},
                                    data={"csrf": csrf, "item_id": item, "scale": "answer", "value": value,
                                          "elapsed_ms": "1500"}) as r:
                await r.read()
                status = r.status
            lat["answer"].append((t0 - t_start, time.perf_counter() - t0))
            if status == 200:
                acked[(tok, item)] = value
                break
            assert status == 503, status
            busy += 1
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))

    async def hold_lock() -> None:
        nonlocal lock_proc
        store, after, hold = lock  # type: ignore[misc]
        await asyncio.sleep(after)
        code = ("import sqlite3, sys, time\ncon = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                "con.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\ntime.sleep(float(sys.argv[2]))\n"
                "con.execute('COMMIT')\n")
        lock_proc = subprocess.Popen([sys.executable, "-c", code, store, str(hold)], stdout=subprocess.PIPE, text=True)
        await asyncio.get_running_loop().run_in_executor(None, lock_proc.stdout.readline)
        lat["lock_window"] = [(time.perf_counter() - t_start, hold)]

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        jobs = [reader(session, t) for t in tokens]
        if lock:
            jobs.append(hold_lock())
        await asyncio.gather(*jobs)
    if lock_proc is not None:
        lock_proc.wait(timeout=60)
    elapsed = time.perf_counter() - t_start
    return {"lat": lat, "acked": acked, "busy": busy, "elapsed": elapsed}


def summarise(name: str, res: dict, cpu_s: float) -> dict:
    lat = res["lat"]
    n = sum(len(lat[k]) for k in ("page", "image", "answer"))
    rps = n / res["elapsed"]
    out = {"rps": rps, "cpu_ms": 1000 * cpu_s / n, "n": n}
    parts = []
    for k in ("page", "image", "answer"):
        xs = sorted(x for _, x in lat[k])
        p50, p99 = xs[len(xs) // 2], xs[min(len(xs) - 1, int(0.99 * len(xs)))]
        out[f"{k}_p99"] = p99
        parts.append(f"{k} p50 {1000 * p50:.0f} / p99 {1000 * p99:.0f} ms")
    allx = sorted(x for k in ("page", "image", "answer") for _, x in lat[k])
    out["p99"] = allx[min(len(allx) - 1, int(0.99 * len(allx)))]
    print(f"{name}: {rps:7.1f} requests/s, server CPU {out['cpu_ms']:.2f} ms/request, all p99 "
          f"{1000 * out['p99']:.0f} ms ({'; '.join(parts)}); {n} requests", flush=True)
    return out


def stored_answers(study_dir: Path) -> dict[tuple[str, str], str]:
    from medvlm_audit.readers.study import hash_token

    con = sqlite3.connect(study_dir / "study.sqlite")
    by_hash = {h: rid for rid, h in con.execute("SELECT reader_id, token_hash FROM readers")}
    rows = con.execute("SELECT reader_id, item_id, value FROM answers").fetchall()
    con.close()
    return {(rid, item): v for rid, item, v in rows}, by_hash, hash_token


def check_stored(study_dir: Path, acked: dict) -> tuple[int, int]:
    got, by_hash, hash_token = stored_answers(study_dir)
    ok = sum(got.get((by_hash[hash_token(tok)], item)) == v for (tok, item), v in acked.items())
    return ok, len(acked)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--routes-of":
        routes(*sys.argv[2:8])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--readers", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--lock-s", type=float, default=10.0)
    ap.add_argument("--routes", type=int, default=0, metavar="N",
                    help="first: process CPU per route of each app driven in process (no HTTP), N rounds of 10 readers")
    ap.add_argument("--before-src", type=Path, default=None,
                    help="also run the reader server from this source tree (e.g. an export of the previous commit's "
                         "src/), side by side: (b0)")
    args = ap.parse_args()
    from medvlm_audit import api
    from medvlm_audit.readers.study import create_study

    print(f"load before: {os.getloadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_reader_"))
    run = api.demo("grounding", tmp / "demo", progress=False, log=lambda *_: None, with_report=False,
                   n_cases=60, n_train=300).run_dir
    names = [f"reader{i:02d}" for i in range(args.readers)]
    res = create_study(run, "finding-presence", 20, names, out=tmp / "study0", boxed_only=True)
    tokens = [res["tokens"][n] for n in names]

    def fresh(i: int) -> Path:
        d = tmp / f"study{i + 1}"
        shutil.copytree(tmp / "study0", d)
        return d

    # the bare app serves a real page and image of the study, as fixed bytes
    from starlette.testclient import TestClient

    from medvlm_audit.readers.app import create_app

    c = TestClient(create_app(fresh(0)), base_url="http://127.0.0.1")
    page = c.get(f"/r/{tokens[0]}?i=1").content
    item = page.split(b'data-item="', 1)[1].split(b'"', 1)[0].decode()
    png = c.get(f"/r/{tokens[0]}/img/{item}/0").content
    (tmp / "page.html").write_bytes(page)
    (tmp / "img.png").write_bytes(png)

    if args.routes:
        (tmp / "tokens.json").write_text(json.dumps(tokens[:10]))
        print(f"process CPU per request, in process (no HTTP server; threads included), {args.routes} rounds x "
              f"{len(tokens[:10])} readers:", flush=True)
        by = {}
        for name, kind, src, i in (("(a) bare Starlette", "bare", ROOT / "src", 4), ("(b) reader server", "reader", ROOT / "src", 5),
                                   ("(b0) reader server before", "reader", args.before_src, 6)):
            if src is None:
                continue
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--routes-of", kind, str(fresh(i)),
                                  str(tmp / "tokens.json"), str(tmp / "page.html"), str(tmp / "img.png"),
                                  str(args.routes)], env={**os.environ, "PYTHONPATH": str(src)}, check=True,
                                 capture_output=True, text=True).stdout
            by[name] = json.loads(out.strip().splitlines()[-1])
            us = by[name]
            print(f"  {name:28s} page {us['page']:6.1f} us, image {us['image']:6.1f} us, answer {us['answer']:6.1f} us; "
                  f"mean {sum(us.values()) / 3:6.1f} us/request", flush=True)

    results = {}
    runs = [("(a) bare Starlette", ("bare", "", str(tmp / "page.html"), str(tmp / "img.png")), ROOT / "src"),
            ("(a2) bare + security headers", ("bare-secure", "", str(tmp / "page.html"), str(tmp / "img.png")),
             ROOT / "src"),
            ("(b) reader server", ("reader", str(fresh(1))), ROOT / "src")]
    if args.before_src:
        runs.append(("(b0) reader server before", ("reader", str(fresh(3))), args.before_src))
    for name, srv_args, src in runs:
        srv = Server(*srv_args, src=src)
        try:
            c0 = _cpu_s(srv.proc.pid)
            r = asyncio.run(load(srv.url, tokens, args.seconds))
            results[name] = summarise(name, r, _cpu_s(srv.proc.pid) - c0)
        finally:
            srv.stop()
        if srv_args[0] == "reader":
            ok, n = check_stored(Path(srv_args[1]), r["acked"])
            print(f"    answers stored: {ok} of {n} acknowledged (latest value per reader and item)", flush=True)
    a, b = results["(a) bare Starlette"], results["(b) reader server"]
    a2 = results["(a2) bare + security headers"]
    print(f"(a2) bare + security headers: server CPU per request {a2['cpu_ms'] / a['cpu_ms']:.2f}x the bare app's "
          "(the reader app's security headers and Host check alone)", flush=True)
    for key in ("(b) reader server", "(b0) reader server before"):
        if key in results:
            b = results[key]
            print(f"{key}: ratio to (a) requests/s {b['rps'] / a['rps']:.2f} (target >= 0.5); server CPU per request "
                  f"{b['cpu_ms'] / a['cpu_ms']:.1f}x the bare app's, {b['cpu_ms'] / a2['cpu_ms']:.1f}x (a2)'s; "
                  f"p99 {1000 * b['p99']:.0f} ms (target < 300)", flush=True)

    if args.lock_s > 0:
        d = fresh(2)
        srv = Server("reader", str(d))
        try:
            c0 = _cpu_s(srv.proc.pid)
            r = asyncio.run(load(srv.url, tokens, args.lock_s + 6, (str(d / "study.sqlite"), 2.0, args.lock_s)))
            summarise("(c) reader server, store locked", r, _cpu_s(srv.proc.pid) - c0)
        finally:
            srv.stop()
        (t_lock, hold), = r["lat"]["lock_window"]
        during = [x for k in ("page", "image") for t, x in r["lat"][k] if t_lock <= t <= t_lock + hold]
        ok, n = check_stored(d, r["acked"])
        print(f"    while another process held the write lock ({hold:g} s): {len(during)} pages and images, slowest "
              f"{1000 * max(during):.0f} ms (target < 1000); {r['busy']} answers answered 503-busy and were "
              f"retried; answers stored: {ok} of {n} acknowledged", flush=True)
    print(f"load after: {os.getloadavg()}")
    print(json.dumps({k: {kk: round(vv, 4) for kk, vv in v.items()} for k, v in results.items()}))


if __name__ == "__main__":
    main()
