"""Benchmark: render the grounding report of the paper-sized analysis in one process (target: <= 15 s, issue 3).

The analysis is ``analyse_grounding`` of the paper-sized synthetic run (``suites.grounding.synthetic.paper_sized_run``:
9 models x 2,575 cases, B = 10,000; computed once, not timed). Then, per repeat:
  1. every figure built and drawn as inline SVG, one by one in this process (per-figure seconds),
  2. the same figures drawn as 110-dpi PNG (Agg raster, base64): the in-script baseline of the SVG path,
  3. ``write_report`` end to end (figures in forked workers while the tables render, the files written),
with wall and CPU seconds (CPU of this process plus its forked figure workers). The end-to-end
``medvlm-audit report`` of the same run (store read, scoring, analysis, imports) is ``bench_report_cli.py``.

Run: PYTHONPATH=src python benchmarks/bench_report.py [--repeats 3] [--out DIR] [--B 10000]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (the forked figure workers)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _time(fn: Any) -> tuple[float, float, Any]:
    """(wall s, CPU s, result) of fn()."""
    t, c = time.perf_counter(), _cpu()
    out = fn()
    return time.perf_counter() - t, _cpu() - c, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=None, help="keep the written report here")
    args = ap.parse_args()

    from medvlm_audit.report import figure_to_html, write_report
    from medvlm_audit.report.figures import figure_title
    from medvlm_audit.report.parallel import warm_up
    from medvlm_audit.suites.grounding.analysis import analyse_grounding
    from medvlm_audit.suites.grounding.figures import figure_builders
    from medvlm_audit.suites.grounding.suite import GroundingSuite, grounding_result
    from medvlm_audit.suites.grounding.synthetic import paper_sized_run

    t_an, _, analysis = _time(lambda: analyse_grounding(paper_sized_run(), B=args.B))
    print(f"analysis (not timed below): {t_an:.1f} s; {analysis.metrics['model'].nunique()} models, "
          f"{len(analysis.metrics):,} metric rows, {len(analysis.comparisons):,} comparisons, "
          f"{len(analysis.threshold_sweep):,} sweep rows; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    warm_up()
    [figure_to_html(b(), number=i) for i, b in enumerate(figure_builders(analysis), 1)]  # first-draw caches

    svg, svg_cpu, png, total, total_cpu = [], [], [], [], []
    per_fig: dict[str, float] = {}
    html_bytes = 0
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), _cpu()
        for i, build in enumerate(figure_builders(analysis), 1):
            t = time.perf_counter()
            fig = build()
            figure_to_html(fig, number=i)
            per_fig[f"{i} {figure_title(fig)}"] = time.perf_counter() - t
        svg.append(time.perf_counter() - t0)
        svg_cpu.append(_cpu() - c0)
        png.append(_time(lambda: [figure_to_html(b(), fmt="png") for b in figure_builders(analysis)])[0])
        with tempfile.TemporaryDirectory() as tmp:
            out = args.out or Path(tmp)
            w, c, page = _time(lambda out=out: write_report(grounding_result(analysis), out, suite="grounding",
                                                            title="bench", run_info={"run_id": "bench-run"},
                                                            parquet_tables=GroundingSuite.parquet_tables))
            html_bytes = Path(page).stat().st_size
        total.append(w)
        total_cpu.append(c)
    med = statistics.median
    print(f"figures: {len(per_fig)}; report.html {html_bytes / 1e6:.2f} MB")
    print("per-figure build + SVG (last repeat, s): " + ", ".join(f"{k} {v:.2f}" for k, v in per_fig.items()))
    print(f"figures, build + SVG, one process  {med(svg):6.2f} s wall, {med(svg_cpu):5.2f} s CPU "
          f"(median of {args.repeats})")
    print(f"figures, build + PNG baseline      {med(png):6.2f} s wall  (110 dpi, base64)")
    print(f"write_report end to end            {med(total):6.2f} s wall, {med(total_cpu):5.2f} s CPU "
          f"(figures in forked workers, tables, files)  target <= 15 s: {'PASS' if med(total) <= 15 else 'FAIL'}")
    print(f"ratio SVG / PNG: {med(svg) / med(png):.2f}; load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
