"""The cases behind the verdicts, for the report: per model and condition, how many answers flipped against the
base condition and the first few of them (ids and answers, no pixels), with how to open them in
`medvlm-audit view`. Suite-agnostic: it reads the run through the suite's ``view`` mapping like the explorer."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.view.data import RunSuite, RunView, load_run

__all__ = ["cases_section", "driving_cases"]

MAX_CASES = 3


def driving_cases(view: RunView, max_cases: int = MAX_CASES) -> pd.DataFrame:
    """One row per model x condition with at least one flip, in the default setting: flipped, compared, and the
    first ``max_cases`` flipped cases as ``id (base answer -> answer)``."""
    df, _, _ = view.filter({})  # the default setting (e.g. 224 px, default phrasing)
    spec = view.spec
    cols = ["model", "condition", "flipped", "compared", "cases"]
    if "flip" not in df.columns or df["flip"].notna().sum() == 0 or spec.base_condition is None:
        return pd.DataFrame(columns=cols)
    keys = [c for c in ("model", "probe_set", spec.item, *spec.setting) if c in df.columns]
    base = df[df["condition"] == spec.base_condition].drop_duplicates(keys).set_index(keys)
    rows = []
    for (model, cond), g in df[df["flip"].notna()].groupby(["model", "condition"], sort=True):
        flipped = g[g["flip"] == 1.0]
        if flipped.empty:
            continue
        shown = []
        col = spec.flip_on or spec.answer  # what changed (e.g. correctness, when options are re-lettered)
        for r in flipped.head(max_cases).itertuples(index=False):
            k = tuple(getattr(r, c) for c in keys)
            before = view.label(col, base.loc[k, col]) if k in base.index and col in base.columns else "?"
            after = view.label(col, getattr(r, col, None))
            shown.append(f"{getattr(r, spec.item)} ({before} → {after})")
        more = len(flipped) - len(shown)
        rows.append({"model": str(model), "condition": str(cond), "flipped": len(flipped), "compared": len(g),
                     "cases": ", ".join(shown) + (f", +{more}" if more > 0 else "")})
    return pd.DataFrame(rows, columns=cols)


def cases_section(run_dir: str | Path, suite: RunSuite) -> Any | None:
    """A report section listing the flipped cases per model and condition (None when the suite has no flips);
    ``suite`` is the suite that made the run (``Suite.cases_section`` passes itself)."""
    from medvlm_audit.report.html import escape, table_to_html
    from medvlm_audit.report.sections import Section

    view = load_run(run_dir, suite)
    table = driving_cases(view)
    if table.empty:
        return None
    cmd = f"medvlm-audit view {shlex.quote(str(run_dir))}"
    what = view.spec.flip_on or "answer"
    intro = (f"<p>Which answers changed, so the verdicts can be checked case by case: per model and condition, "
             f"the answers that differ from the same model's answer under <b>{escape(view.spec.base_condition)}</b> "
             f"(cases: the first {MAX_CASES} by id with the {escape(what)} before → after, then how many more; "
             "default setting only). To see "
             f"one with its images, question and raw answer, run <code>{escape(cmd)}</code> and filter "
             "<i>model</i>, <i>condition</i> and <i>flipped = yes</i>.</p>")
    return Section("Cases behind the verdicts", intro + table_to_html(table, table_id="driving-cases-table"),
                   "driving-cases")
