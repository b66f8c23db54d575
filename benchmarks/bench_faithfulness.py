"""Faithfulness request path: CPU per request at the margin of the answer stage and the judge stage, against a
bare aiohttp loop posting bodies of the same kind to the same server.

    .venv/bin/python benchmarks/bench_faithfulness.py [--small 12] [--large 36] [--concurrency 32] [--delay-ms 20]
        [--render-in threads|processes|auto] [--rounds 1]

One OpenAI-compatible subject against the fake server in ``--answers reasoner`` mode (a chain of thought drawn
from the request hash, so every answer differs and so does every judge prompt: a realistic judge load), one
OpenAI-compatible judge against a second fake server in ``--answers judge`` mode. The phantom VQA items are
built once, before any timing, and each size reads the first N of them from the item file. For each size a
child process runs the faithfulness suite twice on one run folder: first without judges (the answer
stage only), then with the judge (the answer stage asks nothing again; the judge stage asks). Its CPU seconds
around each ``api.run`` (planning, rendering, HTTP, store, export; imports excluded) and the requests asked
are printed, and the CPU spent inside ``runner.execute`` alone (the request path: keying, rendering and
encoding images in the render workers, HTTP, store; without planning, scoring and the export); the margin is
(CPU large - CPU small) / (requests large - requests small), which removes the fixed cost of an invocation.
Both sizes render in the same way (``--render-in``, default threads: ``auto`` renders the small run in threads
and the large one in a process pool, whose start then lands in the margin).

Two baselines, each in the same invocation against the same servers, with the same concurrency:
* the bare loop: pre-built stage-1-like bodies (a 224x224 PNG data URL and a 600-character prompt) and
  judge-like bodies (a 3,000-character prompt), posted; nothing built in the timed part;
* the bare loop building each body (like for like): the large run's own distinct requests, the answer stage's
  cue overlay rendered from its source file and PNG + base64 encoded in two worker threads (as
  ``bench_runner.py``'s (e)), the judge stage's real prompts JSON-encoded; no keying, store or scoring;
* the same as a durable client: each answer committed to SQLite as it arrives, with the request it answers
  (``bench_runner.py``'s (f)): what any client that keeps its answers through a crash pays on top.
Target (issue 23): each stage <= 1.3x the bare loop's CPU per request at the margin. ``--rounds`` repeats both
sizes and both baselines and prints the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def child(run_dir: str, items: str, subject_url: str, judge_url: str, concurrency: int, out: str,
          render_in: str = "threads", jobs_out: str = "") -> None:
    from medvlm_audit import api

    subject = {"name": "subject", "backend": "openai", "model": "fake-reasoner", "base_urls": [subject_url],
               "max_concurrency": concurrency}
    judge = {"name": "judge", "backend": "openai", "model": "fake-judge", "base_urls": [judge_url],
             "max_concurrency": concurrency}
    cfg = {"suite": "faithfulness", "run_dir": run_dir, "probe_sets": [items], "models": [subject], "judges": [],
           "render_in": render_in}
    res = {}
    in_execute = [0.0]
    real = api.execute

    async def timed(*a, **k):  # the request path alone: runner.execute (render workers included)
        c0 = _cpu()
        try:
            return await real(*a, **k)
        finally:
            in_execute[0] += _cpu() - c0

    api.execute = timed
    for stage, judges in (("answer", []), ("judge", [judge])):
        cfg["judges"] = judges
        in_execute[0] = 0.0
        c0, t0 = _cpu(), time.perf_counter()
        r = api.run(cfg, progress=False)
        res[stage] = {"cpu_s": _cpu() - c0, "wall_s": time.perf_counter() - t0, "execute_cpu_s": in_execute[0],
                      "asked": sum(v.get("asked", 0) for v in r.summary.per_model.values())}
    Path(out).write_text(json.dumps(res))
    if jobs_out:
        Path(jobs_out).write_bytes(pickle.dumps(request_jobs(cfg, judge)))


def request_jobs(cfg: dict, judge: dict) -> dict[str, list]:
    """The distinct requests of both stages as the runner would send them, for the like-for-like baselines:
    answer stage, (image recipe, JSON before the image URL, JSON after it) per request; judge stage, the
    body as a dict (encoded inside the timed loop)."""
    from medvlm_audit import api
    from medvlm_audit.models.registry import load_model
    from medvlm_audit.runner import ModelWork
    from medvlm_audit.store import RunStore
    from medvlm_audit.suites.base import StageContext

    rc, suite, opts = api.resolve_config({**cfg, "judges": [judge]})
    ctx = StageContext(rc, opts, Path(rc.run_dir))
    answer, judge_stage = suite.stages()
    out: dict[str, list] = {"answer": [], "judge": []}
    with RunStore.open_dir(rc.run_dir, readonly=True) as store:
        hashes = {r: str(i) for i, r in enumerate({r for t in answer.plan(ctx).trials for r in t.images})}
        for stage, kind in ((answer, "answer"), (judge_stage, "judge")):
            ctx.store = store
            plan = stage.plan(ctx)
            model = load_model(stage.models(ctx)[0])
            _, _, pending = ModelWork(model, rc.decoding, set()).admit(plan.trials, hashes)
            for _, inp, recipes in pending:
                if kind == "judge":
                    out[kind].append(model._body(inp, []))
                    continue
                head, _, tail = json.dumps(model._body(inp, ["@IMAGE@"] * len(recipes)),
                                           separators=(",", ":")).encode().partition(b"@IMAGE@")
                out[kind].append((recipes[0] if recipes else None, head, tail))
    return out


async def _bare(url: str, bodies: list[bytes], concurrency: int) -> None:
    import aiohttp

    it = iter(bodies)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
        async def worker() -> None:
            for b in it:
                async with s.post(url, data=b, headers={"Content-Type": "application/json"}) as r:
                    json.loads(await r.read())["choices"][0]["message"]["content"]

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def bare_cpu_per_request(url: str, kind: str, n: int, concurrency: int) -> float:
    import numpy as np

    from medvlm_audit.models.encoding import data_url

    rng = np.random.default_rng(0)
    bodies = []
    for i in range(n):
        text = f"[{i}] " + " ".join(rng.choice(["lung", "heart", "cue", "hint", "answer", "the"], 120))
        if kind == "answer":
            url_ = data_url(rng.integers(0, 255, (224, 224), dtype=np.uint8), "png", 0)
            content = [{"type": "image_url", "image_url": {"url": url_}}, {"type": "text", "text": text[:600]}]
        else:
            content = (text * 6)[:3000] + "\nCOT:\n" + text
        bodies.append(json.dumps({"model": "m", "messages": [{"role": "user", "content": content}],
                                  "max_tokens": 512, "temperature": 0}).encode())
    c0 = _cpu()
    asyncio.run(_bare(url.rstrip("/") + "/chat/completions", bodies, concurrency))
    return (_cpu() - c0) / n


async def _bare_building(url: str, jobs: list, kind: str, concurrency: int, workers: int = 2,
                         persist: Path | None = None) -> None:
    """The bare loop plus only the work any client must do to build each body: the answer stage's cue overlay
    rendered from its source file and PNG + base64 encoded (worker threads, as ``bench_runner.py``'s (e)),
    the judge stage's body JSON-encoded. No keying, store, or parsing beyond the answer text.

    ``persist`` (a new SQLite file): the same loop as a durable client (``bench_runner.py``'s (f)): each answer
    committed as it arrives with the request it answers (the judge's body, the answer stage's body without its
    image), as the run store keeps both."""
    from concurrent.futures import ThreadPoolExecutor

    import aiohttp
    from bench_http_client import AnswerWriter

    from medvlm_audit.images import SourceCache
    from medvlm_audit.models.encoding import data_url_bytes

    loop = asyncio.get_running_loop()
    ready: asyncio.Queue = asyncio.Queue()
    cache = SourceCache(64)
    headers = {"Content-Type": "application/json"}
    writer = AnswerWriter(persist) if persist is not None else None

    def render(group: list) -> list[tuple[bytes, bytes | None]]:
        # the body, and for the durable client its description: the body without the image
        return [(head + (data_url_bytes(r.render(cache), "png", 0) + tail if r is not None else b""),
                 head + tail if writer is not None else None) for r, head, tail in group]

    with ThreadPoolExecutor(workers) as pool:
        if kind == "answer":
            by_source: dict = {}
            for j in jobs:
                by_source.setdefault(j[0].source if j[0] is not None else None, []).append(j)
            for g in by_source.values():
                loop.run_in_executor(pool, render, g).add_done_callback(
                    lambda f: [ready.put_nowait(b) for b in f.result()])
        else:
            for body in jobs:
                ready.put_nowait((body, None))
        left = len(jobs)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
            async def worker() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    i = left
                    b, desc = await ready.get()
                    if isinstance(b, dict):
                        b = desc = json.dumps(b, separators=(",", ":")).encode()
                    t = time.perf_counter()
                    async with s.post(url, data=b, headers=headers) as r:
                        data = json.loads(await r.read())
                        choice = data["choices"][0]
                        text = choice["message"]["content"]
                        if writer is not None:
                            usage = data.get("usage") or {}
                            writer.put((str(i), text, None, choice.get("finish_reason"), usage.get("prompt_tokens"),
                                        usage.get("completion_tokens"), time.perf_counter() - t), desc.decode())

            await asyncio.gather(*(worker() for _ in range(concurrency)))
    if writer is not None and writer.close() != len(jobs):
        raise RuntimeError("bare durable loop: not every answer stored")


def building_cpu_per_request(url: str, jobs: list, kind: str, concurrency: int, persist: Path | None = None
                             ) -> float:
    c0 = _cpu()
    asyncio.run(_bare_building(url.rstrip("/") + "/chat/completions", jobs, kind, concurrency, persist=persist))
    return (_cpu() - c0) / len(jobs)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6], int(sys.argv[6]), *sys.argv[7:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=12)
    ap.add_argument("--large", type=int, default=36)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--render-in", default="threads", choices=["threads", "processes", "auto"],
                    help="the runs' render_in, the same for both sizes (auto: threads under 64 images, else a "
                         "process pool, which puts the pool's start in the margin)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat both sizes and both baselines; medians reported")
    args = ap.parse_args()
    import numpy as np

    from medvlm_audit.testing.fake_openai import FakeServerProcess

    print(f"load before: {os.getloadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_faith_"))
    subj = FakeServerProcess(args.delay_ms, ["--answers", "reasoner"])
    jud = FakeServerProcess(args.delay_ms, ["--answers", "judge"])
    su, ju = subj.start(), jud.start()
    # the phantom items are built once here, so the runs' CPU is the request path, not item generation
    from medvlm_audit.suites.faithfulness.embedded import build_phantom_vqa

    build_phantom_vqa(tmp / "items", n_items=args.large)
    lines = (tmp / "items" / "items.jsonl").read_text().splitlines(keepends=True)
    for n in (args.small, args.large):
        (tmp / "items" / f"items{n}.jsonl").write_text("".join(lines[:n]))
    try:
        rows: dict[str, list[tuple[float, float, float, float, float]]] = {"answer": [], "judge": []}
        for rnd in range(args.rounds):  # each round: fresh runs of both sizes, then both baselines
            res = {}
            for n in (args.small, args.large):
                out = tmp / f"r{rnd}-{n}.json"
                subprocess.run([sys.executable, __file__, "--child", str(tmp / f"run{rnd}-{n}"),
                                str(tmp / "items" / f"items{n}.jsonl"), su, ju,
                                str(args.concurrency), str(out), args.render_in,
                                str(tmp / "jobs.pickle") if n == args.large else ""], check=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
                res[n] = json.loads(out.read_text())
                for stage, r in res[n].items():
                    print(f"round {rnd}: {n:>4} items, {stage:>6} stage: {r['asked']:>5} requests, CPU "
                          f"{r['cpu_s']:6.2f} s (in runner.execute {r['execute_cpu_s']:.2f} s), wall "
                          f"{r['wall_s']:6.2f} s", flush=True)
            bare = {"answer": bare_cpu_per_request(su, "answer", 1500, args.concurrency),
                    "judge": bare_cpu_per_request(ju, "judge", 1500, args.concurrency)}
            jobs = pickle.loads((tmp / "jobs.pickle").read_bytes())
            building = {"answer": building_cpu_per_request(su, jobs["answer"], "answer", args.concurrency),
                        "judge": building_cpu_per_request(ju, jobs["judge"], "judge", args.concurrency)}
            durable = {stage: building_cpu_per_request(url, jobs[stage], stage, args.concurrency,
                                                       persist=tmp / f"durable-{rnd}-{stage}.sqlite")
                       for stage, url in (("answer", su), ("judge", ju))}
            for stage in ("answer", "judge"):
                s, l_ = res[args.small][stage], res[args.large][stage]
                dn = l_["asked"] - s["asked"]
                margin = (l_["cpu_s"] - s["cpu_s"]) / dn if dn > 0 else float("nan")
                m_exec = (l_["execute_cpu_s"] - s["execute_cpu_s"]) / dn if dn > 0 else float("nan")
                rows[stage].append((margin, m_exec, bare[stage], building[stage], durable[stage]))
                print(f"round {rnd}: {stage} stage: {1000 * margin:.2f} CPU-ms per request at the margin, whole "
                      f"invocation ({dn} requests), {1000 * m_exec:.2f} in runner.execute alone; bare loop "
                      f"{1000 * bare[stage]:.2f} CPU-ms; ratios {margin / bare[stage]:.2f} / "
                      f"{m_exec / bare[stage]:.2f}; fixed cost of the small invocation "
                      f"{s['cpu_s'] - margin * s['asked']:.2f} CPU-s", flush=True)
                print(f"    like for like, the bare loop building each body ({len(jobs[stage])} distinct requests "
                      f"of the large run{', overlay rendered and PNG-encoded' if stage == 'answer' else ', JSON-encoded'}"
                      f"): {1000 * building[stage]:.2f} CPU-ms; ratios {margin / building[stage]:.2f} / "
                      f"{m_exec / building[stage]:.2f}; as a durable client {1000 * durable[stage]:.2f} CPU-ms; "
                      f"ratios {margin / durable[stage]:.2f} / {m_exec / durable[stage]:.2f}", flush=True)
        for stage in ("answer", "judge"):
            m, e, b, w, d = (float(np.median([r[i] for r in rows[stage]])) for i in range(5))
            print(f"median of {args.rounds} round(s), {stage} stage: margin {1000 * m:.2f} CPU-ms per request (whole "
                  f"invocation), {1000 * e:.2f} in runner.execute; bare loop {1000 * b:.2f}, building each body "
                  f"{1000 * w:.2f}; ratios to the bare loop {m / b:.2f} / {e / b:.2f}, to the body-building loop "
                  f"{m / w:.2f} / {e / w:.2f} (target <= 1.3); durable body-building loop {1000 * d:.2f}, ratios "
                  f"{m / d:.2f} / {e / d:.2f}", flush=True)
    finally:
        subj.stop()
        jud.stop()
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
