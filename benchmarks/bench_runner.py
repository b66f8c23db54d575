"""Harness overhead: the full runner against a bare aiohttp loop, same fake server (20 ms), same requests.

    .venv/bin/python benchmarks/bench_runner.py [--cases 800] [--concurrency 32] [--delay-ms 20]

(a) bare asyncio + aiohttp loop posting the pre-built JSON bodies of every distinct input;
(b) medvlm_audit.runner.execute on a fresh run store, end to end: planning the suite, checking every source
    file, decoding, transforming and hashing every image (in worker threads, overlapping the requests), keying,
    PNG-encoding per request, HTTP, parsing, and one SQLite commit per answer.
(e) (a) plus the image work any client does (render, PNG, base64 in 2 threads); (f) (e) as a durable client: each
    answer committed to SQLite as it arrives (the run store's settings, one writer thread);
(d) (b) for a second model added to the same run (image hashes stored).
Both against the ideal concurrency / delay. Target: (b) >= 0.80 x (a). The image-intervention rate per core
is measured by ``benchmarks/bench_interventions.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_http_client import AnswerWriter, bare_aiohttp_loop

from medvlm_audit.images import ImageRecipe, SourceCache
from medvlm_audit.models.base import Decoding
from medvlm_audit.models.encoding import data_url_bytes
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.runner import ModelWork, _materialise, execute, hash_images
from medvlm_audit.store import RunStore
from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
from medvlm_audit.testing.fake_openai import FakeServerProcess


def cpu_now(server_pid: int) -> tuple[float, float]:
    """(CPU seconds of this process, its threads and its reaped children, e.g. render workers; CPU seconds of the
    server process from /proc): a round's CPU is the difference of two readings."""
    import resource

    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        fields = Path(f"/proc/{server_pid}/stat").read_text().rsplit(")", 1)[1].split()
        server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        server = float("nan")
    return time.process_time() + ch.ru_utime + ch.ru_stime, server


def timed(server_pid: int, fn, *args, **kw):
    """fn(...)'s result and the CPU seconds (client, server) it took."""
    c0, s0 = cpu_now(server_pid)
    out = fn(*args, **kw)
    c1, s1 = cpu_now(server_pid)
    return out, (c1 - c0, s1 - s0)


def make_probeset(folder: Path, n: int, size: int = 512):
    """n cases on size x size radiograph-like PNG sources with boxes and swap partners."""
    from conftest import make_tiny_probeset  # 64x64; rebuild bigger images in place

    ps = make_tiny_probeset(folder, n=n)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[:size, :size].astype(np.float32)
    base = 110 + 50 * np.sin(x / 40.0) * np.cos(y / 55.0)
    from PIL import Image

    for i in range(n):
        px = np.clip(base + rng.normal(0, 6, (size, size)) + (i % 50), 0, 255).astype(np.uint8)
        Image.fromarray(px).save(folder / "images" / f"img{i:03d}.png", compress_level=1)
    return ps


def bare_loop_with_images(url: str, jobs: list[tuple[ImageRecipe, bytes, bytes]], concurrency: int,
                          workers: int = 2, png_level: int = 0, persist: Path | None = None) -> float:
    """(e) the bare loop plus only the image work any client must do: each body's image rendered from its
    source file (one decode per source, box fill) and PNG + base64 encoded in worker threads, fed to the
    same 32 aiohttp workers. No hashing, keying, parsing of log-probabilities or store.

    ``persist`` (a new SQLite file): (f), the same loop as a durable client, each answer committed as it arrives
    (:class:`AnswerWriter`) under the body's index as its key, with its text, log-probabilities, finish reason,
    token counts and latency read off the response."""

    async def go() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Queue = asyncio.Queue()
        by_source: dict[str, list[tuple[ImageRecipe, bytes, bytes]]] = {}
        for j in jobs:
            by_source.setdefault(j[0].source, []).append(j)
        cache = SourceCache(64)

        def render(group: list[tuple[ImageRecipe, bytes, bytes]]) -> list[bytes]:
            return [head + data_url_bytes(r.render(cache), "png", png_level) + tail for r, head, tail in group]

        def deliver(fut: asyncio.Future) -> None:
            for body in fut.result():
                ready.put_nowait(body)

        ok = 0
        headers = {"Content-Type": "application/json"}
        t0 = time.perf_counter()
        writer = AnswerWriter(persist) if persist is not None else None
        with ThreadPoolExecutor(workers) as pool:
            for g in by_source.values():
                loop.run_in_executor(pool, render, g).add_done_callback(deliver)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
                left = len(jobs)

                async def worker() -> None:
                    nonlocal ok, left
                    while left > 0:
                        left -= 1
                        i = left
                        body = await ready.get()
                        t = time.perf_counter()
                        async with session.post(url, data=body, headers=headers) as resp:
                            data = json.loads(await resp.read())
                            choice = data["choices"][0]
                            ok += resp.status == 200 and bool(choice["message"]["content"])
                            if writer is not None:
                                lp, usage = choice.get("logprobs"), data.get("usage") or {}
                                writer.put((str(i), choice["message"]["content"],
                                            json.dumps(lp) if lp is not None else None, choice.get("finish_reason"),
                                            usage.get("prompt_tokens"), usage.get("completion_tokens"),
                                            time.perf_counter() - t))

                await asyncio.gather(*(worker() for _ in range(concurrency)))
        stored = writer.close() if writer is not None else ok
        if stored != ok:
            raise RuntimeError(f"bare durable loop: {stored} of {ok} answers stored")
        return time.perf_counter() - t0, ok

    elapsed, ok = asyncio.run(go())
    if ok != len(jobs):
        raise RuntimeError(f"bare loop with images: only {ok} of {len(jobs)} answered")
    return ok / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=800)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--source-size", type=int, default=512,
                    help="source image size: 512 (decode + resize every source) or 224 (already at working size)")
    ap.add_argument("--margin-cases", type=int, default=0,
                    help="also run (a), (e) and (b) on a probe set of this many cases, alternately with the main size, "
                         "and print the CPU per answer at the margin (the slope between the two sizes)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    ps = make_probeset(tmp / "data", args.cases, args.source_size)
    opts = GroundingOptions(conditions=("original", "swap", "target_mask", "irrelevant_mask"))
    srv = FakeServerProcess(args.delay_ms)
    base_url = srv.start()
    try:
        ideal = args.concurrency / (args.delay_ms / 1000)
        dec = Decoding(max_new_tokens=8, top_logprobs=5)
        url = base_url.rstrip("/") + "/chat/completions"

        def prepare(ps_, name: str) -> tuple[list[bytes], list[tuple[ImageRecipe, bytes, bytes]]]:
            """The exact bodies the runner sends (for the bare loop) and (recipe, body head, body tail) for (e)."""
            store_ = RunStore(tmp / f"probe-{name}.sqlite")
            plan_ = plan_grounding([ps_], opts)
            model = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=args.concurrency)
            hashes = hash_images(store_, plan_.trials, SourceCache(256))
            _, _, pending = ModelWork(model, dec, set()).admit(plan_.trials, hashes)
            cache = SourceCache(256)
            bodies_ = [json.dumps(model.build_body(_materialise(i, r, cache))).encode() for _, i, r in pending]
            jobs_ = []
            for _, i, r in pending:
                head, _, tail = json.dumps(model._body(i, ["@IMAGE@"])).encode().partition(b"@IMAGE@")
                jobs_.append((r[0], head, tail))
            store_.close()
            return bodies_, jobs_

        bodies, jobs = prepare(ps, "main")
        bare, harness, first, planned, second, with_images, durable = [], [], [], [], [], [], []
        cpu: dict[str, list[tuple[float, float]]] = {"a": [], "b": [], "e": [], "d": [], "f": []}
        pid = srv.pid
        for rnd in range(args.rounds):
            r, c = timed(pid, bare_aiohttp_loop, url, bodies, args.concurrency)
            bare.append(r)
            cpu["a"].append(c)
            r, c = timed(pid, bare_loop_with_images, url, jobs, args.concurrency)
            with_images.append(r)
            cpu["e"].append(c)
            r, c = timed(pid, bare_loop_with_images, url, jobs, args.concurrency, persist=tmp / f"bare{rnd}.sqlite")
            durable.append(r)
            cpu["f"].append(c)
            store = RunStore(tmp / f"run{rnd}.sqlite")
            m = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=args.concurrency)
            t0 = time.perf_counter()
            summary, c = timed(pid, lambda st=store, m=m: asyncio.run(execute(st, plan_grounding([ps], opts), [m],
                                                                                dec, progress=False)))
            el = time.perf_counter() - t0
            cpu["b"].append(c)
            asked = summary.per_model["bench"]["asked"]
            assert asked == len(bodies) and summary.per_model["bench"]["errors"] == 0
            harness.append(asked / el)
            first.append(summary.first_input_s)
            planned.append(summary.plan_s)
            # a second model added to the same run: image hashes are already in the store, so planning only keys
            m2 = OpenAIChatModel("bench2", "fake-vlm-2", base_url, max_concurrency=args.concurrency)
            t0 = time.perf_counter()
            s2, c = timed(pid, lambda st=store, m=m2: asyncio.run(execute(st, plan_grounding([ps], opts), [m],
                                                                           dec, progress=False)))
            second.append(s2.per_model["bench2"]["asked"] / (time.perf_counter() - t0))
            cpu["d"].append(c)
            store.close()
        b, h, e = float(np.median(bare)), float(np.median(harness)), float(np.median(with_images))
        d = float(np.median(second))
        f = float(np.median(durable))
        print(f"distinct inputs per run: {len(bodies)} ({args.cases} cases x 4 image conditions, deduplicated); "
              f"sources {args.source_size}x{args.source_size} PNG")
        print(f"ideal ({args.concurrency} / {args.delay_ms:.0f} ms):      {ideal:8.0f} answers/s")
        print(f"(a) bare aiohttp loop:           {b:8.0f} answers/s  ({b / ideal:.0%} of ideal)  rounds {[round(x) for x in bare]}")
        print(f"(b) runner, end to end:          {h:8.0f} answers/s  ({h / ideal:.0%} of ideal)  rounds {[round(x) for x in harness]}")
        print(f"ratio (b)/(a):                   {h / b:8.2f}   (target >= 0.80)")
        print(f"    first input queued after {np.median(first):.3f} s; every image hashed and every trial keyed after "
              f"{np.median(planned):.3f} s (overlapping the requests); whole run {len(bodies) / h:.3f} s")
        print(f"(e) bare loop + rendering and encoding each image (2 threads): {e:8.0f} answers/s  ratio (e)/(a) "
              f"{e / b:.2f}; runner / (e) = {h / e:.2f}  rounds {[round(x) for x in with_images]}")
        print(f"(f) (e) as a durable client (each answer committed to SQLite as it arrives, WAL, one writer thread): "
              f"{f:8.0f} answers/s  ratio (f)/(a) {f / b:.2f}; runner / (f) = {h / f:.2f}  rounds "
              f"{[round(x) for x in durable]}")
        print(f"(d) runner, end to end, image hashes already stored (another model added to the run): {d:8.0f} "
              f"answers/s  ratio (d)/(a) {d / b:.2f}")
        n = len(bodies)
        for k, name in (("a", "bare loop"), ("e", "bare loop + images"), ("f", "(e), durable"), ("b", "runner"),
                        ("d", "runner, 2nd model")):
            cl = float(np.median([c for c, _ in cpu[k]])) / n * 1000
            sv = float(np.median([s_ for _, s_ in cpu[k]])) / n * 1000
            print(f"    CPU-ms per answer ({k}) {name:20s}: client {cl:5.2f} (render workers included), server {sv:5.2f}")
        if args.margin_cases:
            small = make_probeset(tmp / "small", args.margin_cases, args.source_size)
            sb, sj = prepare(small, "small")
            sc: dict[str, list[float]] = {"a": [], "e": [], "f": [], "b": []}
            for rnd in range(args.rounds):
                sc["a"].append(timed(pid, bare_aiohttp_loop, url, sb, args.concurrency)[1][0])
                sc["e"].append(timed(pid, bare_loop_with_images, url, sj, args.concurrency)[1][0])
                sc["f"].append(timed(pid, bare_loop_with_images, url, sj, args.concurrency,
                                     persist=tmp / f"bare-small{rnd}.sqlite")[1][0])
                st = RunStore(tmp / f"small{rnd}.sqlite")
                m = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=args.concurrency)
                sc["b"].append(timed(pid, lambda st=st, m=m: asyncio.run(execute(
                    st, plan_grounding([small], opts), [m], dec, progress=False)))[1][0])
                st.close()
            dn = len(bodies) - len(sb)
            slope = {k: (float(np.median([c for c, _ in cpu[k]])) - float(np.median(sc[k]))) / dn * 1000
                     for k in ("a", "e", "f", "b")}
            print(f"    at the margin ({len(sb)} -> {len(bodies)} answers), client CPU-ms per answer: (a) "
                  f"{slope['a']:.3f}, (e) {slope['e']:.3f}, (f) {slope['f']:.3f}, (b) {slope['b']:.3f}; (b)/(a) "
                  f"{slope['b'] / slope['a']:.2f}, (b)/(e) {slope['b'] / slope['e']:.2f} (target <= 1.2), (b)/(f) "
                  f"{slope['b'] / slope['f']:.2f}")
        print(f"    client CPU ratio (b)/(a) {np.median([c for c, _ in cpu['b']]) / np.median([c for c, _ in cpu['a']]):.2f}"
              f", (b)/(e) {np.median([c for c, _ in cpu['b']]) / np.median([c for c, _ in cpu['e']]):.2f}; "
              f"load {os.getloadavg()[0]:.1f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
