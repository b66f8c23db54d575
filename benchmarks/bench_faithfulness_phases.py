"""Where the faithfulness judge stage's CPU goes, phase by phase, at the margin (issue 23).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_faithfulness_phases.py [--src TREE/src] [--reps 2]

The same runs as ``bench_faithfulness.py`` (one OpenAI-compatible subject against the fake server in ``--answers
reasoner`` mode, one judge against a second one in ``--answers judge`` mode, 12 and 36 phantom items, concurrency
32, 20 ms), in one process: for each size the answer-stage invocation, then the judge-stage invocation, whose CPU
(``time.process_time``) is split by wrapping the functions it calls: planning each stage, keying (``admit``), the
plan's store rows, the answers' commits, the HTTP bodies, ``runner.execute`` of each stage, the store totals, the
tidy and the export, and the garbage collector's time by generation (``gc.callbacks``). The margin of each phase is
(CPU at 36 items - CPU at 12) / (judge requests at 36 - at 12), the median over ``--reps``. ``--src`` measures
another tree (e.g. ``git archive REF src | tar -x -C /tmp/old``) with this script, for a before/after in one
invocation. A phase not wrapped in a tree (a function it does not have) is left out.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=str(ROOT / "src"), help="the tree's src folder to measure")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, args.src)
    import medvlm_audit
    import medvlm_audit.models.openai_compat as oc
    import medvlm_audit.store as st
    from medvlm_audit import api, runner
    from medvlm_audit.suites.faithfulness import plan as fplan
    from medvlm_audit.suites.faithfulness import suite as fsuite
    from medvlm_audit.suites.faithfulness.embedded import build_phantom_vqa
    from medvlm_audit.testing.fake_openai import FakeServerProcess

    print(f"code: {Path(medvlm_audit.__file__).parent}; load {os.getloadavg()}", flush=True)
    acc: dict[str, float] = {}

    def wrap(owner: Any, name: str, label: str, is_async: bool = False) -> None:
        real = getattr(owner, name, None)
        if real is None:
            return
        if is_async:
            async def f(*a: Any, **k: Any) -> Any:
                c = time.process_time()
                try:
                    return await real(*a, **k)
                finally:
                    key = f"{label}[{acc.get('_stage', 0):.0f}]"
                    acc[key] = acc.get(key, 0) + time.process_time() - c
                    acc["_stage"] = acc.get("_stage", 0) + 1
        else:
            def f(*a: Any, **k: Any) -> Any:
                c = time.process_time()
                try:
                    return real(*a, **k)
                finally:
                    acc[label] = acc.get(label, 0) + time.process_time() - c
        setattr(owner, name, f)

    wrap(api, "execute", "execute", is_async=True)
    wrap(api, "tidy_store", "tidy")
    wrap(api, "export_table", "export_table")
    wrap(api, "export", "export (tidy + files)")
    wrap(fsuite, "tidy_faithfulness", "tidy (faithfulness)")
    wrap(st.RunStore, "model_totals", "store totals")
    wrap(st.RunStore, "put_responses", "answer commits")
    wrap(st.RunStore, "add_plan_rows", "plan rows (store)")
    wrap(runner.ModelWork, "admit", "keying (admit)")
    wrap(oc.OpenAIChatModel, "encode_payload", "HTTP bodies")
    wrap(fplan, "plan_answer_stage", "plan answer stage")
    wrap(fplan, "plan_judge_stage", "plan judge stage")
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started["t"] = time.process_time()
        elif "t" in started:
            key = f"gc gen{info['generation']}"
            acc[key] = acc.get(key, 0) + time.process_time() - started.pop("t")

    gc.callbacks.append(on_gc)
    tmp = Path(tempfile.mkdtemp(prefix="bench_faith_phases_"))
    subj = FakeServerProcess(20.0, ["--answers", "reasoner"])
    jud = FakeServerProcess(20.0, ["--answers", "judge"])
    su, ju = subj.start(), jud.start()
    build_phantom_vqa(tmp / "items", n_items=36)
    lines = (tmp / "items" / "items.jsonl").read_text().splitlines(keepends=True)
    res: dict[int, list[dict[str, float]]] = {12: [], 36: []}
    try:
        for rep in range(args.reps):
            for n in (12, 36):
                (tmp / "items" / f"i{n}.jsonl").write_text("".join(lines[:n]))
                cfg: dict[str, Any] = {
                    "suite": "faithfulness", "run_dir": str(tmp / f"run{rep}_{n}"), "render_in": "threads",
                    "probe_sets": [str(tmp / "items" / f"i{n}.jsonl")], "judges": [],
                    "models": [{"name": "subject", "backend": "openai", "model": "fake-reasoner", "base_urls": [su],
                                "max_concurrency": 32}]}
                api.run(cfg, progress=False)
                cfg["judges"] = [{"name": "judge", "backend": "openai", "model": "fake-judge", "base_urls": [ju],
                                  "max_concurrency": 32}]
                acc.clear()
                c = time.process_time()
                r = api.run(cfg, progress=False)
                acc["TOTAL (judge-stage invocation)"] = time.process_time() - c
                acc["_asked"] = sum(v.get("asked", 0) for v in r.summary.per_model.values())
                res[n].append(dict(acc))
    finally:
        subj.stop()
        jud.stop()
    keys = [k for k in dict.fromkeys(k for r in res[36] + res[12] for k in r) if not k.startswith("_")]
    for k in sorted(keys, key=lambda k: (k.startswith("TOTAL"), k)):
        m = [(b.get(k, 0) - a.get(k, 0)) / (b["_asked"] - a["_asked"]) * 1000 for a, b in zip(res[12], res[36])]
        lo = statistics.median(x.get(k, 0) for x in res[12]) * 1000
        hi = statistics.median(x.get(k, 0) for x in res[36]) * 1000
        print(f"{k:>32}: 12 items {lo:7.1f} ms, 36 items {hi:7.1f} ms; margin {statistics.median(m):.3f} CPU-ms "
              f"per judge request", flush=True)
    print(f"judge requests: {res[12][0]['_asked']:.0f} / {res[36][0]['_asked']:.0f}; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
