"""Benchmark: the fixed cost of one ``medvlm-audit run`` invocation (issue 23: <= 0.6 CPU-s), with no shell tools.

What ``benchmarks/before_after.sh REF fixed`` measures, as one Python script that needs neither git nor
``/usr/bin/time`` (so it runs on a bare machine with ``PYTHONPATH=src``): a grounding config of ``--cases`` tiny
phantom cases (5 conditions) run against the fake OpenAI-compatible server (20 ms per answer, its own process) as
a fresh ``python -m medvlm_audit run CFG --no-progress --no-report`` process, from this tree and, with
``--before SRC``, from another source tree, alternately. Each process's wall time, CPU (user + system of the
process and its render workers, from ``wait4``) and peak RSS; the first repeat of each side writes its bytecode
and is not counted. The fixed cost is the smallest size's CPU; the margin is the CPU per extra case between the
two sizes.

    PYTHONPATH=src python benchmarks/bench_fixed_cost.py [--before OLD/src] [--cases 12 600] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def build_probesets(root: Path, sizes: list[int]) -> dict[int, Path]:
    sys.path.insert(0, str(HERE / "tests"))
    from conftest import make_tiny_probeset  # the tests' phantom probe set, in the real layout

    out = {}
    for n in sizes:
        folder = root / f"d{n}"
        if not (folder / "probeset").exists():
            make_tiny_probeset(folder, n=n)
        out[n] = folder / "probeset"
    return out


def start_server(src: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    p = subprocess.Popen([sys.executable, "-m", "medvlm_audit.testing.fake_openai", "--port", "0", "--delay-ms", "20"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = p.stdout.readline().strip() if p.stdout else ""
    if not url.startswith("http"):
        p.kill()
        raise SystemExit(f"the fake server did not start (printed {url!r})")
    return p, url


def run_once(src: Path, cfg: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one ``python -m medvlm_audit run`` from source tree ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "medvlm_audit", "run", str(cfg), "--no-progress", "--no-report"],
                         env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"run from {src} failed:\n{err[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="the baseline's src/ folder (run alternately)")
    ap.add_argument("--cases", type=int, nargs="+", default=[12, 600])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, help="folder for probe sets and runs (default: a temporary one)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="fixed_cost."))
    sizes = sorted(args.cases)
    probesets = build_probesets(work, sizes)
    sides = [("after", HERE / "src")] + ([("before", args.before.resolve())] if args.before else [])
    server, url = start_server(HERE / "src")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()}; fake server {url}")
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    try:
        for rep in range(args.repeats + 1):
            for name, src in (sides if rep % 2 == 0 else sides[::-1]):
                for n in sizes:
                    if rep == 0 and n != sizes[0]:
                        continue
                    cfg = work / f"c-{name}-{n}-{rep}.yaml"
                    cfg.write_text(
                        f"suite: grounding\nprobe_sets: [{probesets[n]}]\nrun_dir: {work / f'run-{name}-{n}-{rep}'}\n"
                        "conditions: [original, swap, target_mask, irrelevant_mask, no_image]\n"
                        f"models: [{{name: vlm, backend: openai, model: fake-vlm, base_urls: [{url}], "
                        "max_concurrency: 32}]\n")
                    wall, cpu, rss = run_once(src, cfg)
                    if rep == 0:
                        continue  # writes this side's bytecode
                    results.setdefault((name, n), []).append((wall, cpu, rss))
                    print(f"{name:6s} {n:5d} cases, repeat {rep}: {wall:6.2f} s wall, {cpu:5.2f} s CPU, {rss:5.0f} MB "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.kill()
    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v),
               max(r for _, _, r in v)) for k, v in results.items()}
    for name, _ in sides:
        small = med[(name, sizes[0])]
        line = f"{name:6s}: fixed cost (median CPU of {sizes[0]} cases) {small[1]:.2f} CPU-s, wall {small[0]:.2f} s"
        if len(sizes) > 1:
            big = med[(name, sizes[-1])]
            line += f"; margin {(big[1] - small[1]) / (sizes[-1] - sizes[0]) * 1000:.2f} CPU-ms per case"
        print(line + f"; peak RSS {max(med[(name, n)][2] for n in sizes):.0f} MB")
    if args.before:
        a, b = med[("after", sizes[0])], med[("before", sizes[0])]
        print(f"ratio after / before, {sizes[0]} cases: CPU {a[1] / b[1]:.2f}, wall {a[0] / b[0]:.2f}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
