"""Replica health: one dead replica of four against three healthy ones, same client, same inputs.

    .venv/bin/python benchmarks/bench_replicas.py [--n 1500] [--concurrency 24] [--delay-ms 20] [--rounds 3]

Four fake OpenAI servers, each in its own process with a fixed delay. Per round, in alternation:
(a) three healthy base URLs; (b) the same three plus a fourth whose port nothing listens on (dead from the
start); (c) four live replicas, one killed (SIGKILL) once a third of the answers are in. Reported: median wall
time and client CPU time, the ratio to (a), answers lost (inputs not answered), inputs errored, and the requests
each endpoint drew. Target (issue 20): (b) and (c) at most 1.3x (a), no answer lost, no input errored.
Before the fix a dead replica had 0 requests in flight and won least-outstanding selection: it drew 46% of the
attempts and a run took 4.8x as long.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medvlm_audit.models.base import Decoding, Message, ModelInput
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.testing.fake_openai import spawn_fake_server


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def _run(urls: list[str], n: int, concurrency: int, kill=None) -> dict:
    model = OpenAIChatModel("m", "fake-vlm", urls, max_concurrency=concurrency, max_retries=6,
                            backoff_base_s=0.5, backoff_max_s=30.0, timeout_s=30.0)
    inputs = [ModelInput((Message("user", f"Is there an effusion? case {i}"),), (), Decoding(max_new_tokens=1))
              for i in range(n)]
    done = 0
    killer = None

    async def one(inp: ModelInput):
        nonlocal done
        r = (await model.generate([inp]))[0]
        done += 1
        return r

    if kill is not None:
        async def watch() -> None:
            while done < n // 3:
                await asyncio.sleep(0.005)
            kill()
        killer = asyncio.ensure_future(watch())
    sem = asyncio.Semaphore(concurrency)

    async def bounded(inp: ModelInput):
        async with sem:
            return await one(inp)

    c0, t0 = _cpu(), time.perf_counter()
    out = await asyncio.gather(*(bounded(i) for i in inputs))
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if killer is not None:
        await killer
    await model.aclose()
    return {"wall": wall, "cpu": cpu, "lost": sum(r.text is None for r in out),
            "errored": sum(r.error is not None for r in out), "counts": list(model.endpoint_counts.values())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=24)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"load: {os.getloadavg()}  n={a.n} concurrency={a.concurrency} delay={a.delay_ms} ms")
    results: dict[str, list[dict]] = {"a": [], "b": [], "c": []}
    for r in range(a.rounds):
        servers = [spawn_fake_server(a.delay_ms) for _ in range(4)]
        try:
            urls = [s.base_url for s in servers]
            results["a"].append(asyncio.run(_run(urls[:3], a.n, a.concurrency)))
            results["b"].append(asyncio.run(_run([*urls[:3], _dead_url()], a.n, a.concurrency)))
            victim = servers[3].proc
            assert victim is not None
            results["c"].append(asyncio.run(_run(urls, a.n, a.concurrency, kill=victim.kill)))
        finally:
            for s in servers:
                s.stop()
        print(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]['wall']:.2f}s" for k, v in results.items()), flush=True)
    base = statistics.median(x["wall"] for x in results["a"])
    names = {"a": "3 healthy replicas", "b": "3 healthy + 1 dead from the start",
             "c": "4 replicas, 1 killed after a third"}
    print("| case | wall s (median) | client CPU s | x (a) | lost | errored | requests per endpoint (last round) |")
    print("|---|---|---|---|---|---|---|")
    for k, rs in results.items():
        wall = statistics.median(x["wall"] for x in rs)
        cpu = statistics.median(x["cpu"] for x in rs)
        print(f"| ({k}) {names[k]} | {wall:.2f} | {cpu:.2f} | {wall / base:.2f} | {sum(x['lost'] for x in rs)} | "
              f"{sum(x['errored'] for x in rs)} | {rs[-1]['counts']} |")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
