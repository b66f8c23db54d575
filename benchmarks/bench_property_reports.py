"""Cost of one property-test example (issue 22) against the baseline: the report of the unedited small run.

    PYTHONPATH=src python benchmarks/bench_property_reports.py [suite ...] [--examples N]

Per suite, in one invocation: builds the small run of ``tests/test_property_reports.py``, times ``api.report`` of
it three times (the baseline), then N Hypothesis examples (edit the store, report, check), and prints wall and
CPU seconds per report for both and their ratio. CPU seconds are the figure to compare on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _examples(base: Path, edited: Path, examples: int) -> int:
    """Run ``examples`` property examples on the run ``base``; returns how many ran."""
    from hypothesis import HealthCheck, given, settings
    from test_property_reports import B

    from medvlm_audit.testing.answers import apply_edit, check_report, report_of, store_edits, store_shape

    n = [0]

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(store_edits(store_shape(base / "run.sqlite")))
    def prop(edit: object) -> None:
        n[0] += 1
        check_report(report_of(apply_edit(base, edit, edited), B=B))

    prop()
    return n[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("suites", nargs="*", default=["faithfulness", "stress", "grounding", "reports"])
    ap.add_argument("--examples", type=int, default=20)
    args = ap.parse_args()
    from test_property_reports import B, _config

    from medvlm_audit import api
    from medvlm_audit.testing.answers import report_of

    print(f"load: {os.getloadavg()}")
    for suite in args.suites:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "base").mkdir()
            base = api.run(_config(suite, Path(tmp) / "base" / "run"), progress=False).run_dir
            report_of(base, B=B, out=Path(tmp) / "warm")  # imports and caches, not timed
            w0, c0 = time.perf_counter(), time.process_time()
            for i in range(3):
                report_of(base, B=B, out=Path(tmp) / f"baseline{i}")
            bw, bc = (time.perf_counter() - w0) / 3, (time.process_time() - c0) / 3
            w0, c0 = time.perf_counter(), time.process_time()
            n = _examples(base, Path(tmp) / "edited", args.examples)
            pw, pc = (time.perf_counter() - w0) / n, (time.process_time() - c0) / n
            print(f"{suite:13s} baseline report {bw:6.2f} s wall {bc:6.2f} s CPU | property example ({n}) "
                  f"{pw:6.2f} s wall {pc:6.2f} s CPU | ratio CPU {pc / bc:5.2f} | 200 examples ~ {200 * pc:5.0f} s CPU")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
