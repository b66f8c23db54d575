"""Memory at scale: peak RSS and CPU per trial of a small and a 10x larger grounding run, same fake server.

    .venv/bin/python benchmarks/bench_scale.py [--small 1000] [--large 10000] [--delay-ms 20] [--concurrency 32]

Each size runs in its own child process (so its peak RSS is its own): a probe set of N cases on 64x64 PNG
sources (boxes, swap partners), 5 grounding conditions (original, swap, target_mask, irrelevant_mask,
no_image) -> about 5 N trials and 4 N + N/2 distinct requests for one OpenAI-compatible model, against the fake
server in a third process (``--delay-ms`` per answer, so the model is slower than the renderer, as a real one
is). The child reports its peak RSS (``ru_maxrss``), the largest of its render workers', its CPU seconds
(itself and its workers) and wall. Target (issue 23): peak RSS of the large run <= 1.2x the small run's and
<= 600 MB; memory depends on concurrency and image size, not on the number of trials.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

CONDITIONS = ("original", "swap", "target_mask", "irrelevant_mask", "no_image")


def child(folder: Path, base_url: str, concurrency: int, out: Path) -> None:
    from medvlm_audit.models.base import Decoding
    from medvlm_audit.models.openai_compat import OpenAIChatModel
    from medvlm_audit.runner import execute
    from medvlm_audit.store import RunStore
    from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding
    try:
        from medvlm_audit.suites.grounding.probeset import ProbeSet
    except ImportError:  # a baseline checkout from before the house move (before_after.sh REF)
        from medvlm_audit.probeset import ProbeSet

    samples: list[tuple[float, int]] = []  # (s, RSS MB) every 0.5 s
    stop = threading.Event()

    def sample() -> None:
        t0 = time.perf_counter()
        while not stop.wait(0.5):
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
            samples.append((round(time.perf_counter() - t0, 1), rss))

    threading.Thread(target=sample, daemon=True).start()
    c0 = os.times()
    t0 = time.perf_counter()
    ps = ProbeSet.load(folder / "probeset")
    plan = plan_grounding([ps], GroundingOptions(conditions=CONDITIONS))
    store = RunStore(folder / "run.sqlite")
    model = OpenAIChatModel("bench", "fake-vlm", base_url, max_concurrency=concurrency)
    summary = asyncio.run(execute(store, plan, [model], Decoding(max_new_tokens=8, top_logprobs=5), progress=False))
    wall = time.perf_counter() - t0
    stop.set()
    c1 = os.times()
    pm = summary.per_model["bench"]
    assert pm["errors"] == 0 and pm["asked"] == pm["distinct_inputs"], pm
    out.write_text(json.dumps({
        "trials": summary.n_trials, "asked": pm["asked"], "wall_s": wall,
        "cpu_self_s": (c1.user - c0.user) + (c1.system - c0.system),
        "cpu_children_s": (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "children_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "rss_samples": samples[:: max(1, len(samples) // 12)],
    }))


def run_size(n: int, tmp: Path, base_url: str, concurrency: int) -> dict:
    from conftest import make_tiny_probeset

    folder = tmp / f"n{n}"
    make_tiny_probeset(folder, n=n)
    out = folder / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, __file__, "--child", str(folder), base_url, str(concurrency), str(out)],
                   check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    args = ap.parse_args()
    from medvlm_audit.testing.fake_openai import FakeServerProcess

    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    srv = FakeServerProcess(args.delay_ms)
    base_url = srv.start()
    res = {}
    try:
        for n in (args.small, args.large):
            r = res[n] = run_size(n, tmp, base_url, args.concurrency)
            cpu = r["cpu_self_s"] + r["cpu_children_s"]
            print(f"{n:>6} cases: {r['trials']:>6} trials, {r['asked']:>6} requests, wall {r['wall_s']:6.1f} s, "
                  f"CPU {cpu:6.1f} s (runner {r['cpu_self_s']:.1f} + render workers {r['cpu_children_s']:.1f}), "
                  f"CPU per trial {1000 * cpu / r['trials']:.2f} ms, peak RSS {r['peak_rss_mb']:.0f} MB "
                  f"(largest render worker {r['children_peak_rss_mb']:.0f} MB)", flush=True)
            print(f"        RSS over time (s, MB): {r['rss_samples']}", flush=True)
    finally:
        srv.stop()
    s, l_ = res[args.small], res[args.large]
    print(f"peak RSS ratio large/small: {l_['peak_rss_mb'] / s['peak_rss_mb']:.2f} (target <= 1.2); "
          f"large run {l_['peak_rss_mb']:.0f} MB (target <= 600)")
    cs = (s["cpu_self_s"] + s["cpu_children_s"]) / s["trials"]
    cl = (l_["cpu_self_s"] + l_["cpu_children_s"]) / l_["trials"]
    print(f"CPU per trial ratio large/small: {cl / cs:.2f}")
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
