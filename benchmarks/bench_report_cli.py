"""Benchmark: `medvlm-audit report` of the paper-sized grounding run, end to end (issue 23 item 5: <= 2 s, <= 350 MB).

Builds a run store holding the paper-sized synthetic run (``suites.grounding.synthetic.paper_sized_run``: 9 models x
2,575 cases, original and swap on every case, both masks on the 700 boxed cases, a 99-case 512 px probe and a
100-case prompt probe; 66,114 trials; answers and confidences stored as imported answers, as `import-results`
stores the paper's released files), then runs ``python -m medvlm_audit report RUN --out DIR`` (B = 10,000) as a
fresh process: store reading, scoring, analysis, figures, HTML and every table. With ``--before SRC`` the same
command runs from another source tree (e.g. a ``git archive`` of the baseline commit) alternately with this one,
so a loaded machine slows both alike; the figures are the median wall, the CPU seconds (user + system of the
child, from ``wait4``) and the peak RSS of each, and the before/after ratios. The written metrics.csv,
comparisons.csv and categories.csv of the two trees are compared cell by cell.

    PYTHONPATH=src python benchmarks/bench_report_cli.py [--repeats 3] [--before /tmp/old/src] [--run DIR] [--stages]
        [--cores 16] [--syscalls]

``--stages`` adds, per tree, the CPU seconds of each stage split into the main thread, the resampling kernels'
threads and the forked figure workers, and from them the wall the report would take on 2 idle cores, and on
``--cores`` (16) idle cores its critical path: the main thread's CPU per stage plus the waits more cores cannot
remove (the table read in forked parts where the tree does so, the slowest figure), at this machine's speed.
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


def build_run(run_dir: Path) -> int:
    """Write the paper-sized synthetic run into a new run store at ``run_dir``; returns the number of trials."""
    import numpy as np

    from medvlm_audit.store import STORE_FILE, RunStore
    from medvlm_audit.suites.grounding.synthetic import paper_sized_run

    tidy = paper_sized_run()
    case_cols = ["case_id", "kind", "finding", "label", "source", "patient_id", "study_id", "sex", "view", "split",
                 "age", "has_box", "ibox_overlaps"]
    cases = tidy[case_cols].drop_duplicates("case_id").sort_values("case_id").reset_index(drop=True)
    box = cases.pop("has_box").to_numpy(bool)
    for c, v in (("x0", 10.0), ("y0", 10.0), ("x1", 60.0), ("y1", 60.0)):
        cases[f"tbox_{c}"] = np.where(box, v, np.nan)
    store = RunStore(run_dir / STORE_FILE)
    store.set_meta(run_id=run_dir.name, suite="grounding", imported_from="paper_sized_run", started_at=time.time(),
                   seeds={"construction": 42, "resampling": 0})
    store.add_probe_set("mimic", "synthetic", "paper-sized", cases, {"builder": "bench_report_cli"})
    for model, modality in dict(zip(tidy["model"], tidy["modality"])).items():
        store.add_model(model, modality, {"synthetic": model})
    cond = tidy["condition"].astype(str)
    cond = cond.where(tidy["resolution"] == 224, cond + "@" + tidy["resolution"].astype(str))
    cond = cond.where(tidy["prompt_variant"] == "default", cond + "|prompt=" + tidy["prompt_variant"].astype(str))
    keys = tidy["key"].astype(str).tolist()
    store.add_trials(list(zip(tidy["model"], tidy["probe_set"], tidy["case_id"], cond, [0] * len(tidy), keys,
                              [None] * len(tidy), [None] * len(tidy))))
    with store.transaction():
        store.db.executemany("INSERT OR REPLACE INTO responses(key, text, attempts, created_at) VALUES(?, ?, 1, 0)",
                             list(zip(keys, tidy["answer_text"].astype(str))))
    conf = [None if c != c else float(c) for c in tidy["confidence"]]
    store.add_imported(list(zip(keys, tidy["parsed"].astype(int).tolist(), conf)))
    store.close()
    return len(tidy)


def run_report(src: Path, run_dir: Path, out: Path, B: int) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one ``python -m medvlm_audit report`` from source tree ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "medvlm_audit", "report", str(run_dir), "--out", str(out), "--B", str(B)],
                         env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"report from {src} failed ({p.returncode}):\n{err[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def read_path(run_dir: Path, cores: int) -> dict:
    """The prepared process's table read as it would run on ``cores`` idle cores, from CPU seconds measured here
    one part after another: one whole read + scoring, or (a tree with ``export.tidy_by_model``, as many forked
    readers as it would start there) the slowest part with its pickling, the parts' unpickling and concatenation,
    and the start and collection of that many forked workers doing nothing (wall); then the table pickled across."""
    import pickle

    from medvlm_audit import export as E
    from medvlm_audit.store import RunStore
    from medvlm_audit.suites.grounding import suite as GS

    t = time.thread_time()
    whole = GS.tidy_grounding(RunStore(run_dir / "run.sqlite"))
    got = {"whole": time.thread_time() - t}
    t = time.thread_time()
    pickled = pickle.dumps(whole, protocol=pickle.HIGHEST_PROTOCOL)
    got["dumps"] = time.thread_time() - t
    n = min(cores - 1, getattr(E, "TIDY_PARTS_MAX", 0))
    if not hasattr(E, "tidy_by_model") or cores < getattr(E, "TIDY_PARTS_MIN_CPUS", 1) or n < 2:
        return got
    import pandas as pd

    from medvlm_audit.report.parallel import map_forked

    with RunStore.open_dir(run_dir, readonly=True) as store:
        groups = E.model_groups(store, n)
    part, tables, loads = 0.0, [], 0.0
    for g in groups:
        t = time.thread_time()
        b = pickle.dumps(E._tidy_part(GS.tidy_grounding, str(run_dir), g), protocol=pickle.HIGHEST_PROTOCOL)
        part = max(part, time.thread_time() - t)
        t = time.thread_time()
        tables.append(pickle.loads(b))
        loads += time.thread_time() - t
    E._ONLY_MODELS = None
    t = time.thread_time()
    pd.concat(tables, ignore_index=True)
    concat = time.thread_time() - t
    w = time.perf_counter()
    map_forked([lambda: None] * len(groups), workers=len(groups), warm=False)()
    forks = time.perf_counter() - w
    del pickled
    got.update(parts=len(groups), part=part, loads=loads, concat=concat, forks=forks)
    return got


def slowest_figure(an: object) -> float:
    """CPU seconds of the report's slowest figure (built and drawn as SVG here, one after another, after the
    figure machinery's warm-up): on many cores the sections take at least that long. 0 where the tree lacks the
    functions."""
    try:
        from medvlm_audit.report.parallel import warm_up
        from medvlm_audit.suites.grounding.figures import figure_builders
        from medvlm_audit.suites.grounding.sections import _figure_html
    except ImportError:
        return 0.0
    worst = 0.0
    try:  # an older tree whose figure code differs: no figure bound (the estimate then uses the workers' CPU)
        warm_up()
        for i, build in enumerate(figure_builders(an), 1):
            took = []
            for _ in range(2):  # the lesser of two draws: one figure's CPU swings by a third on a loaded machine
                t = time.thread_time()
                _figure_html(i, build, "svg")
                took.append(time.thread_time() - t)
            worst = max(worst, min(took))
    except Exception as e:  # noqa: BLE001
        print(f"slowest figure not measured: {e!r}", file=sys.stderr)
    return worst


def child_stages(run_dir: Path, B: int, many: int = 16) -> None:
    """The report's stages in this process (imports, store read + scoring, analysis, sections with figures, the
    files), each as CPU seconds of the main thread, of this process's other threads (the resampling kernels) and
    of forked children (figure workers); one JSON line. Runs against whichever source tree PYTHONPATH names."""
    import importlib
    import json
    import resource

    def children() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    out: list[dict] = []
    last = [time.thread_time(), time.process_time(), children(), time.perf_counter()]
    start_main = last[0]

    def lap(name: str) -> None:
        t, p, c, w = time.thread_time(), time.process_time(), children(), time.perf_counter()
        out.append({"stage": name, "main": t - last[0], "threads": (p - last[1]) - (t - last[0]),
                    "children": c - last[2], "wall": w - last[3]})
        last[:] = [t, p, c, w]

    import pandas  # noqa: F401

    import medvlm_audit.cli as C
    try:  # a tree whose report forks a prepared process (report.parallel, as its CLI does)
        from medvlm_audit.report import parallel as P
    except ImportError:
        P = None
    if hasattr(C, "_prepare_report"):
        C._prepare_report(run_dir)  # it reads the run's table while this process imports
    at_fork = time.thread_time()
    from medvlm_audit import api  # noqa: F401
    from medvlm_audit.report import write_report
    from medvlm_audit.store import RunStore
    from medvlm_audit.suites.grounding import analysis as A
    from medvlm_audit.suites.grounding import suite as GS
    lap("imports")
    if P is not None and hasattr(P, "prepare"):
        P.prepare(GS.GroundingSuite.report_modules)  # a no-op where one is prepared already

    def prepared_cpu() -> float:
        """CPU seconds of the prepared process so far (0 where there is none)."""
        if P is None or not getattr(P, "_PREPARED", None):
            return 0.0
        with open(f"/proc/{P._PREPARED[0]}/stat") as f:
            ticks = f.read().rsplit(")", 1)[1].split()
        # its own CPU and that of its children reaped so far (the forked readers of a table read in parts)
        return sum(int(x) for x in ticks[11:15]) / os.sysconf("SC_CLK_TCK")

    tidy = P.take_first(P.run_key(run_dir)) if P is not None and hasattr(P, "take_first") else None
    read_elsewhere = tidy is not None
    if tidy is None:
        tidy = GS.tidy_grounding(RunStore(run_dir / "run.sqlite"))
    lap("store read + scoring")
    an = A.analyse_grounding(tidy, B=B)
    lap("analysis")
    prepared = prepared_cpu()
    res = GS.grounding_result(an)  # figures (in worker processes where the tree has them) and tables
    lap("sections (figures, tables)")
    with tempfile.TemporaryDirectory() as tmp:
        write_report(res, Path(tmp), suite="grounding", title="bench", run_info={},
                     parquet_tables=GS.GroundingSuite.parquet_tables)
    lap("page + files")
    read = 0.0
    if prepared and read_elsewhere:  # the read's CPU, measured here once more (the prepared process reads, sends
        t = time.thread_time()  # the table from a thread and goes on to import: its CPU is not split there)
        GS.tidy_grounding(RunStore(run_dir / "run.sqlite"))
        read = min(prepared, time.thread_time() - t)
    if prepared:  # reaped in the sections stage: its CPU before that is shown apart
        out[-2]["children"] -= prepared
        if read:
            out.append({"stage": "prepared: read + scoring", "children": read, "beside": "imports"})
        out.append({"stage": "prepared: imports, warm-up", "children": prepared - read, "beside": "analysis"})
    out[0]["after_fork"] = start_main + out[0]["main"] - at_fork  # the imports beside the prepared process's read
    try:
        threads = getattr(importlib.import_module("medvlm_audit.stats.kernels"), "_MAX_WORKERS", 2)
    except ImportError:
        threads = 2
    caps = {"threads": threads, "workers": getattr(P, "MAX_WORKERS", 1) if P is not None else 1}
    print(json.dumps({"stages": out, "read": read_path(run_dir, many), "caps": caps,
                      "slowest_figure": slowest_figure(an)}))


def stages(src: Path, run_dir: Path, B: int, cores: int, many: int) -> tuple[float, float]:
    """Print one tree's stage table; returns the estimated wall on ``cores`` and on ``many`` idle cores.

    On ``cores`` (this machine's 2): per stage max(main + threads / cores, children / cores) (the main thread
    waits while the kernels' threads run; forked workers run while the parent renders or waits), summed; plus,
    where the tree forks a prepared process at the start, its table read beyond the imports it runs beside, and
    its own imports shared over the cores (they run beside the analysis).

    On ``many`` (an idle 16-core machine; at this machine's speed per core): the critical path, i.e. the
    main-thread CPU of each stage plus the waits more cores cannot remove: the imports; the wait for the table
    (the prepared process's read path, :func:`read_path`, beyond the imports after the fork); the unpickling; the
    analysis, max(main + threads / T, children / W) with the tree's caps T threads and W worker processes; the
    prepared process's imports only where they outlast the analysis; the sections, max(main, children / W, the
    slowest figure's CPU); the page."""
    import json

    env = dict(os.environ, PYTHONPATH=str(src))
    p = subprocess.run([sys.executable, __file__, "--child-stages", str(run_dir), "--B", str(B),
                        "--cores", str(many)], env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True,
                       check=False)
    if p.returncode:
        raise SystemExit(f"stages from {src} failed:\n{p.stderr[-3000:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    est = 0.0
    by = {st["stage"]: st for st in got["stages"]}
    for st in got["stages"]:
        if "beside" in st:
            continue
        e = max(st["main"] + st["threads"] / cores, st["children"] / cores)
        est += e
        print(f"    {st['stage']:28s} main {st['main']:5.2f}  threads {st['threads']:5.2f}  children "
              f"{st['children']:5.2f}  CPU-s; wall {st['wall']:5.2f} s; on {cores} idle cores ~{e:5.2f} s")
    for st in got["stages"]:
        if "beside" not in st:
            continue
        # the prepared process (forked at the start) works beside a stage of this one: beside the imports (one
        # thread) on a core of its own, so only what exceeds them counts (this process waits for the table in
        # the store-read stage); beside the analysis (every core busy) its CPU counts shared over the cores
        b = by[st["beside"]]
        e = (max(0.0, st["children"] - b["main"] - b["threads"]) if st["beside"] == "imports"
             else st["children"] / cores)
        est += e
        print(f"    {st['stage']:28s} {st['children']:5.2f} CPU-s in the prepared process, beside the "
              f"{st['beside']}; on {cores} idle cores ~{e:5.2f} s more")
    # the critical path on `many` idle cores
    r, caps = got["read"], got["caps"]
    T, W = min(many, caps["threads"]), min(many, caps["workers"])
    imp, store, an, sec, page = (by[k] for k in ("imports", "store read + scoring", "analysis",
                                                 "sections (figures, tables)", "page + files"))
    prepared = "prepared: imports, warm-up" in by
    if "parts" in r:
        path = r["forks"] + r["part"] + r["loads"] + r["concat"] + r["dumps"]
        how = (f"{r['parts']} forked readers: slowest part {r['part']:.2f} + their start {r['forks']:.2f} (wall) + "
               f"unpickling {r['loads']:.2f} + concatenation {r['concat']:.2f} + pickling {r['dumps']:.2f}")
    else:
        path = r["whole"] + r["dumps"]
        how = f"one read {r['whole']:.2f} + pickling {r['dumps']:.2f}"
    # without a prepared process the read is this process's own (the store stage's main-thread CPU below)
    wait = max(0.0, path - imp["after_fork"]) if prepared else 0.0
    a = max(an["main"] + an["threads"] / T, an["children"] / W)
    prep = max(0.0, by["prepared: imports, warm-up"]["children"] - a) if prepared else 0.0
    sections = max(sec["main"], sec["children"] / W, got["slowest_figure"])
    parts = [("imports", imp["main"]), ("wait for the table", wait), ("store stage (unpickling it)" if prepared else "store read + scoring", store["main"]),
             ("analysis", a), ("prepared imports beyond it", prep), ("sections", sections), ("page", page["main"])]
    crit = sum(v for _, v in parts)
    print(f"    on {many} idle cores (critical path, CPU at this machine's speed): table read path {path:.2f} s "
          f"({how}) beside {imp['after_fork']:.2f} s of imports; "
          + " + ".join(f"{k} {v:.2f}" for k, v in parts) + f" = {crit:.2f} s (slowest figure "
          f"{got['slowest_figure']:.2f} CPU-s)")
    return est, crit


def syscalls(src: Path, run_dir: Path, out: Path, B: int) -> str:
    """The system calls of one report from ``src`` and its children, counted by ``strace -f -c`` (where installed;
    gVisor, the lent 16-core machines' sandbox, has none): the total, the reads of the store's pages (pread64) and
    the process starts (clone)."""
    import shutil

    if not shutil.which("strace"):
        return "no strace here"
    with tempfile.NamedTemporaryFile(suffix=".strace") as log:
        env = dict(os.environ, PYTHONPATH=str(src))
        p = subprocess.run(["strace", "-f", "-c", "-o", log.name, sys.executable, "-m", "medvlm_audit", "report",
                            str(run_dir), "--out", str(out), "--B", str(B)], env=env, cwd=tempfile.gettempdir(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        if p.returncode:
            return f"strace failed ({p.returncode})"
        calls = {}
        for line in Path(log.name).read_text().splitlines():
            f = line.split()
            if len(f) >= 5 and f[-1] != "syscall" and f[3].isdigit():
                calls[f[-1]] = int(f[3])
    return (f"{calls.get('total', 0):,} system calls, pread64 {calls.get('pread64', 0):,}, "
            f"clone {calls.get('clone', 0) + calls.get('clone3', 0):,}")


def compare(a: Path, b: Path) -> list[str]:
    import pandas as pd

    out = []
    for name in ("metrics.csv", "comparisons.csv", "categories.csv"):
        x = pd.read_csv(a / name, keep_default_na=False)
        y = pd.read_csv(b / name, keep_default_na=False)
        if list(x.columns) != list(y.columns) or not x.equals(y):
            out.append(name)
    if (a / "summary.json").read_text() != (b / "summary.json").read_text():
        out.append("summary.json")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--before", type=Path, default=None, help="the baseline's src/ folder (run alternately)")
    ap.add_argument("--run", type=Path, default=None, help="reuse (or build once into) this run folder")
    ap.add_argument("--stages", action="store_true",
                    help="also the per-stage CPU split of each tree and its estimated wall on 2 idle cores")
    ap.add_argument("--cores", type=int, default=16,
                    help="with --stages: also estimate the wall on this many idle cores (default 16)")
    ap.add_argument("--syscalls", action="store_true",
                    help="also count each tree's system calls in one report (strace -f -c, where installed)")
    ap.add_argument("--child-stages", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_stages:
        child_stages(args.child_stages, args.B, args.cores)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_report_cli_"))
    run_dir = args.run or tmp / "paper-sized"
    if not (run_dir / "run.sqlite").exists() and not any(run_dir.glob("*.sqlite")):
        t = time.perf_counter()
        n = build_run(run_dir)
        print(f"built the paper-sized run store: {n:,} trials in {time.perf_counter() - t:.1f} s -> {run_dir}")
    here = Path(__file__).resolve().parents[1] / "src"
    sides = [("after", here)] + ([("before", args.before)] if args.before else [])
    import numpy as np

    print(f"B = {args.B}; Python {sys.version.split()[0]}, numpy {np.__version__}; {os.cpu_count()} cores; "
          f"load before: {os.getloadavg()}")
    res: dict[str, list[tuple[float, float, float]]] = {s: [] for s, _ in sides}
    for i in range(args.repeats):
        for side, src in (sides if i % 2 == 0 else sides[::-1]):
            res[side].append(run_report(src, run_dir, tmp / side, args.B))
            w, c, m = res[side][-1]
            print(f"  {side:6s} repeat {i + 1}: {w:5.2f} s wall, {c:5.2f} s CPU, {m:4.0f} MB peak RSS "
                  f"(load {os.getloadavg()[0]:.1f})")
    med = {s: [statistics.median(x[j] for x in v) for j in range(3)] for s, v in res.items() if v}
    for s, (w, c, m) in med.items():
        print(f"{s:6s}: median {w:.2f} s wall (best {min(x[0] for x in res[s]):.2f} s), {c:.2f} s CPU, "
              f"{m:.0f} MB peak RSS")
    if args.before and args.repeats:
        (wa, ca, _), (wb, cb, _) = med["after"], med["before"]
        diff = compare(tmp / "before", tmp / "after")
        print(f"ratio after / before: wall {wa / wb:.2f}, CPU {ca / cb:.2f}, peak RSS {med['after'][2] / med['before'][2]:.2f}; "
              f"outputs {'equal' if not diff else 'DIFFER: ' + ', '.join(diff)}")
    if args.stages:
        for side, src in sides:
            print(f"{side}: stages (in one process; load {os.getloadavg()[0]:.1f})")
            two, many = stages(src, run_dir, args.B, 2, args.cores)
            print(f"{side}: estimated wall on 2 idle cores ~{two:.2f} s, on {args.cores} idle cores ~{many:.2f} s")
    if args.syscalls:
        for side, src in sides:
            print(f"{side}: {syscalls(src, run_dir, tmp / (side + '-strace'), args.B)}")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
