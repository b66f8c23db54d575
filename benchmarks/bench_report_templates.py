"""Benchmark: tables rendered through the Jinja2 templates (report/templates/macros.html) against the string
builder they replaced (issue 19, item 7), in the same process.

The baseline is a verbatim copy of the pre-template ``table_to_html`` loop (f-strings and html.escape per cell).
Both render the same DataFrame (numbers, text with characters to escape, long notes); the script checks that the
two outputs have the same text and tags once the quote entities are made equal, then prints wall and CPU
seconds (best of --repeats) and the ratio.

Run: .venv/bin/python benchmarks/bench_report_templates.py [--rows 5000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import html as _html
import math
import os
import re
import time

import numpy as np
import pandas as pd

from medvlm_audit.report.html import _default_cell, table_to_html
from medvlm_audit.report.render import environment


def _escape(value: object) -> str:
    return _html.escape(str(value), quote=True)


def strings_table(df: pd.DataFrame) -> str:
    """The pre-template table builder (report/html.py before issue 19), no formatters or trusted columns."""
    out: list[str] = ['<div class="tblwrap"><table class="tbl"', ">", "<thead><tr>"]
    out.extend(f"<th>{_escape(c)}</th>" for c in df.columns)
    out.append("</tr></thead><tbody>")
    for values in df.itertuples(index=False, name=None):
        out.append("<tr>")
        for value in values:
            text = _default_cell(value)
            if text is None or (isinstance(text, float) and math.isnan(text)):
                text = "—"
            cell = _escape(text)
            long = len(re.sub(r"<[^>]+>", "", cell)) > 48
            out.append(f'<td class="long">{cell}</td>' if long else f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _best(fn, repeats: int) -> tuple[float, float, str]:
    runs = []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        runs.append((time.perf_counter() - t0, time.process_time() - c0))
    return min(r[0] for r in runs), min(r[1] for r in runs), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    df = pd.DataFrame({f"c{i}": rng.normal(size=args.rows) for i in range(8)})
    df["name"] = [f"model <{i}> & 'x'" for i in range(args.rows)]
    df["note"] = ["a long note that wraps " * 3] * args.rows
    environment()  # load jinja2 and compile the macros once (a report does this once)
    table_to_html(df.head(2))
    w_old, c_old, old = _best(lambda: strings_table(df), args.repeats)
    w_new, c_new, new = _best(lambda: table_to_html(df), args.repeats)
    same = old.replace("&#x27;", "&#39;").replace("&quot;", "&#34;") == new
    print(f"load average {os.getloadavg()[0]:.1f}; table {args.rows:,} rows x {df.shape[1]} columns; "
          f"outputs equal up to quote entities: {same}")
    print(f"strings (before)   {w_old:.3f} s wall  {c_old:.3f} s CPU  {len(old):,} chars")
    print(f"templates (now)    {w_new:.3f} s wall  {c_new:.3f} s CPU  {len(new):,} chars")
    print(f"ratio templates / strings: {w_new / w_old:.2f} wall, {c_new / c_old:.2f} CPU")


if __name__ == "__main__":
    main()
