"""Batch paths against online, on the phantom probe set and the fake server (in a separate process).

    python benchmarks/bench_batch.py --n-cases 200

Phases, each timed (wall and this process's CPU seconds, children included): the online run (baseline), the
same run with batch: true (export, upload, create, poll, download, commit), and the offline path (export ->
testing.run_batch -> ingest). Checks that all three stores hold the same answers.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(label: str, fn, rows: list) -> None:
    t0, c0 = time.perf_counter(), cpu()
    fn()
    rows.append((label, time.perf_counter() - t0, cpu() - c0))


def answers(run_dir: Path) -> list:
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return sorted(db.execute("SELECT key, text, top_logprobs, error_kind FROM responses").fetchall())
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-cases", type=int, default=200)
    ap.add_argument("--keep", default=None, help="work folder (default: a temporary one, removed)")
    args = ap.parse_args()
    from medvlm_audit import api
    from medvlm_audit.batch import offline
    from medvlm_audit.testing.fake_openai import FakeServerProcess
    from medvlm_audit.testing.run_batch import run_batch

    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-batch-"))
    ph = work / "phantom"
    if not (ph / "probeset").exists():
        subprocess.run([sys.executable, "-m", "medvlm_audit", "build", "phantom", "--out", str(ph),
                        "--n-cases", str(args.n_cases), "--n-train", "60"], check=True, capture_output=True)
    rows: list = []
    with FakeServerProcess(extra_args=["--batch-delay-s", "0.5"]) as srv:
        def cfg(name: str, batch: bool) -> dict:
            m = {"backend": "openai", "model": "fake-vlm", "base_urls": [srv.base_url]}
            if batch:
                m.update(batch=True, batch_poll_s=0.1)
            shutil.rmtree(work / name, ignore_errors=True)
            return {"suite": "grounding", "probe_sets": [str(ph / "probeset")], "run_dir": str(work / name), "resolutions": [224, 512],
                    "models": [{"name": "vlm", **m}, {"name": "vlm-text", **m, "text_only": True}]}

        timed("online run (baseline)", lambda: api.run(cfg("online", False), progress=False), rows)
        timed("run with batch: true", lambda: api.run(cfg("batched", True), progress=False), rows)
        c = cfg("offline", False)
        (work / "offline.yaml").write_text(yaml.safe_dump(c))
        out: dict = {}
        timed("batch export --dry-run", lambda: out.setdefault("dry", offline.dry_run(work / "offline.yaml")), rows)
        timed("batch export", lambda: out.setdefault("paths", offline.export(work / "offline.yaml", "vlm",
                                                                              work / "vlm.jsonl")), rows)
        timed("offline runner (testing.run_batch)",
              lambda: [run_batch(p, p.with_suffix(".out.jsonl")) for p in out["paths"][0]], rows)
        timed("batch ingest", lambda: offline.ingest(work / "offline.yaml",
                                                     [p.with_suffix(".out.jsonl") for p in out["paths"][0]]), rows)
        timed("batch ingest again (no-op)", lambda: offline.ingest(work / "offline",
                                                                   [p.with_suffix(".out.jsonl") for p in out["paths"][0]]), rows)
    ref = answers(work / "online")
    same = answers(work / "batched") == ref and answers(work / "offline") == ref
    base = rows[0][1]
    print(f"{len(ref)} distinct inputs; {out['paths'][1]} exported in {len(out['paths'][0])} file(s) "
          f"({sum(p.stat().st_size for p in out['paths'][0]) / 1e6:.1f} MB); same answers in all three stores: {same}")
    print(f"load: {os.getloadavg()[0]:.2f} (1 min)")
    print("| phase | wall s | CPU s | wall / online |\n|---|---|---|---|")
    for label, wall, c in rows:
        print(f"| {label} | {wall:.2f} | {c:.2f} | {wall / base:.2f} |")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
