"""Benchmark: what the report's figure rule costs (report.figures.information: count the data marks, and since
issue 24 read every value to find a figure where nothing varies), against drawing the same figures as inline
SVG (figure_to_html), in the same process, on the figures of the grounding embedded default's report (5
reference models; --n-cases cases, run here in a temporary folder).

Prints CPU and wall milliseconds per report (all figures; best of --repeats) for: panel_marks alone (the rule
before issue 24), panel_values (the values read for the "nothing varies" rule), information() (the whole rule),
and figure_to_html (drawing), with the rule's share of drawing.

Run: PYTHONPATH=src .venv/bin/python benchmarks/bench_figure_rule.py [--repeats 5] [--n-cases 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.report.figures import figure_title, information, panel_marks, panel_values
from medvlm_audit.report.html import figure_to_html
from medvlm_audit.suites.grounding.analysis import analyse_grounding
from medvlm_audit.suites.grounding.embedded import run_demo
from medvlm_audit.suites.grounding.figures import build_figures


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    best_cpu, best_wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        best_cpu, best_wall = min(best_cpu, time.process_time() - c0), min(best_wall, time.perf_counter() - w0)
    return best_cpu * 1e3, best_wall * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n-cases", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = run_demo(Path(tmp), n_cases=args.n_cases, n_train=900, progress=False, log=lambda *_: None).run_dir
        tidy = pd.read_parquet(run / "results.parquet")
    figs = build_figures(analyse_grounding(tidy, B=200))
    print(f"load average {os.getloadavg()[0]:.1f}; {len(figs)} figures")
    runs = {
        "panel_marks (rule before issue 24)": lambda: [panel_marks(ax) for f in figs for ax in f.axes],
        "panel_values (values read)": lambda: [panel_values(ax) for f in figs for ax in f.axes],
        "information() (whole rule)": lambda: [information(f) for f in figs],
        "figure_to_html (drawing, baseline)": lambda: [figure_to_html(f, title=figure_title(f)) for f in figs],
    }
    got = {name: _best(fn, args.repeats) for name, fn in runs.items()}
    for name, (cpu, wall) in got.items():
        print(f"{name:38s} cpu {cpu:8.1f} ms  wall {wall:8.1f} ms")
    rule, draw = got["information() (whole rule)"][0], got["figure_to_html (drawing, baseline)"][0]
    print(f"rule / drawing (CPU): {rule / draw:.4f}")
    print("levels:", [information(f)[0] for f in figs])


if __name__ == "__main__":
    main()
