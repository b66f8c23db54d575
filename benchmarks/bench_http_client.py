"""HTTP client throughput: OpenAIChatModel.generate against a bare aiohttp loop, same server, same bodies.

    .venv/bin/python benchmarks/bench_http_client.py [--n 3000] [--concurrency 32] [--delay-ms 20] [--rounds 3]

The fake OpenAI server runs in a separate process (so client and server do not share an event loop)
with a fixed delay; the ideal rate is concurrency / delay (32 / 0.020 s = 1,600 answers/s).
(a) the bare loop posts pre-serialised JSON bodies (the exact bodies the model would send, 224x224
images included); (b) the model builds every body itself, encoding each image to a PNG data URL per
request (every input has its own image, so no encoding cache helps). Rounds alternate a/b and the
median is reported, with the client process's CPU time per answer (robust when the machine is
shared). Run once per PNG level: the default (auto: stored on loopback) and level 1 (compressed).
Target: (b)/(a) >= 0.80.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from medvlm_audit.models.base import Decoding, ImageData, Message, ModelInput
from medvlm_audit.models.encoding import data_url
from medvlm_audit.models.openai_compat import OpenAIChatModel
from medvlm_audit.testing.fake_openai import spawn_fake_server


class AnswerWriter:
    """A bare durable client's store (``bench_runner.py``'s (f), ``bench_faithfulness.py``'s durable loop): one
    SQLite file in WAL mode with ``synchronous=NORMAL`` (the run store's settings) and one writer thread; each
    answer is handed over as it arrives and committed at once, with every answer that arrived while the previous
    commit ran, in one transaction (the runner's rule). A row per answer with the run store's ``responses``
    columns (key, text, log-probabilities as JSON, finish reason, token counts, latency) and, where given, the
    request it answers (its key and the text that describes it, as the run store's ``requests`` row)."""

    def __init__(self, path: Path) -> None:
        import queue
        import sqlite3
        import threading

        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE responses(key TEXT PRIMARY KEY, text TEXT, top_logprobs TEXT, "
                        "finish_reason TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, "
                        "created_at REAL NOT NULL)")
        self.db.execute("CREATE TABLE requests(key TEXT PRIMARY KEY, input TEXT NOT NULL)")
        self._q: Any = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def put(self, answer: tuple, request: str | None = None) -> None:
        """Hand over an answer row (without its time, added at commit) and the request's description."""
        self._q.put((answer, request))

    def _write(self) -> None:
        from queue import Empty

        while True:
            items = [self._q.get()]
            while True:
                try:
                    items.append(self._q.get_nowait())
                except Empty:
                    break
            got = [i for i in items if i is not None]
            now = time.time()
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO requests VALUES(?, ?)",
                                [(a[0], r) for a, r in got if r is not None])
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                                [(*a, now) for a, _ in got])
            self.db.execute("COMMIT")
            if len(got) < len(items):
                return

    def close(self) -> int:
        """Commit what is handed over, end the thread; the number of answers stored."""
        self._q.put(None)
        self._thread.join()
        n = self.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        self.db.close()
        return n


async def _bare(url: str, bodies: Sequence[bytes], concurrency: int) -> tuple[float, int]:
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    ok = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        it = iter(bodies)

        async def worker() -> None:
            nonlocal ok
            for body in it:
                async with session.post(url, data=body, headers=headers) as resp:
                    data = json.loads(await resp.read())
                    if resp.status == 200 and data["choices"][0]["message"]["content"]:
                        ok += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return elapsed, ok


def bare_aiohttp_loop(url: str, bodies: Sequence[bytes], concurrency: int) -> float:
    """Answers per second of the simplest correct client: ``concurrency`` workers over one aiohttp session
    posting ``bodies`` (pre-serialised JSON) to the full chat-completions ``url``. The baseline to beat."""
    elapsed, ok = asyncio.run(_bare(url, bodies, concurrency))
    if ok != len(bodies):
        raise RuntimeError(f"bare loop: only {ok} of {len(bodies)} requests answered")
    return ok / elapsed


def model_rate(base_url: str, inputs: Sequence[ModelInput], concurrency: int, **model_kw: Any) -> float:
    """Answers per second of OpenAIChatModel.generate over ``inputs`` (a fresh model: cold image cache)."""

    async def go() -> float:
        model = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=concurrency, **model_kw)
        try:
            t0 = time.perf_counter()
            responses = await model.generate(inputs)
            elapsed = time.perf_counter() - t0
        finally:
            await model.aclose()
        bad = [r.error for r in responses if not r.ok]
        if bad:
            raise RuntimeError(f"model: {len(bad)} failed, first: {bad[0]}")
        return len(responses) / elapsed

    return asyncio.run(go())


def make_inputs(n: int, size: int = 224, seed: int = 0) -> list[ModelInput]:
    """n inputs with distinct smooth-noise grayscale images (radiograph-like texture) and prompts."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:size, :size].astype(np.float32)
    base = 110 + 50 * np.sin(x / 23.0) * np.cos(y / 31.0)
    out = []
    for i in range(n):
        noise = rng.normal(0, 4, (size, size)).astype(np.float32)
        px = np.clip(base + noise + (i % 40), 0, 255).astype(np.uint8)
        out.append(ModelInput(
            (Message("user", f"Is there evidence of a pleural effusion in this radiograph? (item {i})"),),
            (ImageData.from_array(px),),
            Decoding(max_new_tokens=8, logprobs=True, top_logprobs=5),
        ))
    return out


def encoding_costs(images: Sequence[np.ndarray]) -> dict[str, float]:
    """Milliseconds per image to build the data URL, for grayscale and RGB, PNG levels 0/1 and JPEG."""
    out = {}
    for space, imgs in (("gray", list(images)), ("RGB", [np.repeat(im[:, :, None], 3, axis=2) for im in images])):
        for label, fmt, level in (("png0", "png", 0), ("png1", "png", 1), ("jpeg", "jpeg", 1)):
            t0 = time.perf_counter()
            for im in imgs:
                data_url(im, fmt, png_level=level)
            out[f"{space} {label}"] = (time.perf_counter() - t0) / len(imgs) * 1e3
    return out


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _proc_cpu(pid: int) -> float:
    """CPU seconds used so far by another process (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _timed(f: Any, server_pid: int) -> tuple[float, float, float]:
    """(answers/s, client CPU s, server CPU s) of one run."""
    c0, s0 = _cpu(), _proc_cpu(server_pid)
    rate = f()
    return rate, _cpu() - c0, _proc_cpu(server_pid) - s0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--png-levels", default="auto,1", help="comma list: auto (the default) and/or 0-9")
    args = ap.parse_args()

    inputs = make_inputs(args.n)
    enc = encoding_costs([i.images[0].pixels for i in inputs[:300]])

    ideal = args.concurrency / (args.delay_ms / 1000.0)
    proc = spawn_fake_server(args.delay_ms)
    base_url = proc.base_url
    lines = []
    try:
        for spec in args.png_levels.split(","):
            level = None if spec == "auto" else int(spec)
            builder = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=args.concurrency,
                                      png_level=level)
            bodies = [builder.encode_payload(i) for i in inputs]  # exactly what the model sends
            url = str(builder._endpoints[0].url)
            mean_kb = sum(map(len, bodies)) / len(bodies) / 1024
            bare_aiohttp_loop(url, bodies[:200], args.concurrency)  # warm-up
            model_rate(base_url, inputs[:200], args.concurrency, png_level=level)
            bare, mod = [], []
            for _ in range(args.rounds):
                bare.append(_timed(lambda u=url, bs=bodies: bare_aiohttp_loop(u, bs, args.concurrency), proc.pid))
                mod.append(_timed(lambda lv=level: model_rate(base_url, inputs, args.concurrency, png_level=lv),
                                  proc.pid))
            name = f"png_level={spec}" + (f" (= {builder.png_level} here)" if spec == "auto" else "")
            lines.append(f"-- {name}: body {mean_kb:.1f} KiB")
            med = {}
            for label, runs in (("(a) bare aiohttp loop       ", bare), ("(b) OpenAIChatModel.generate", mod)):
                r = statistics.median(x[0] for x in runs)
                cc = statistics.median(x[1] for x in runs) / args.n * 1e3
                sc = statistics.median(x[2] for x in runs) / args.n * 1e3
                med[label[:3]] = r
                lines.append(f"{label}: {r:7.1f} answers/s ({r / ideal:5.1%} of ideal {ideal:,.0f}/s); CPU ms/answer "
                             f"client {cc:.3f}, server {sc:.3f}; runs {', '.join(f'{x[0]:.0f}' for x in runs)}")
            lines.append(f"ratio (b)/(a): {med['(b)'] / med['(a)']:.3f}  (target >= 0.80)")
    finally:
        proc.stop()
    print(f"requests per run: {args.n}, concurrency {args.concurrency}, server delay {args.delay_ms:g} ms "
          f"(separate process), 224x224 grayscale image per request, rounds {args.rounds} (median)")
    print("data URL encoding, ms per 224x224 image: " + ", ".join(f"{k} {v:.3f}" for k, v in enc.items()))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
