"""Compare two runs' outputs for equality (the suite-seam move was checked with this): the tidy results, the
report's metrics / comparisons / categories and summary.json of a grounding run, the tidy results and the
robustness table of a stress run, or a faithfulness run's verdicts (``faithfulness_verdicts.csv``). Column
order and added columns may differ; every shared column must be equal.

    python benchmarks/compare_outputs.py BEFORE_RUN_DIR AFTER_RUN_DIR [--atol X]

Exit 0 when equal, 1 with the first differences listed otherwise. ``--atol X`` accepts numeric cells within X of
each other (default 0: exact). The reports suite's BERTScore rows run a float32 encoder on several threads and
move by ~1e-9 between two runs of the same code; compare them with ``--atol 1e-8``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: columns that legitimately differ between two runs of the same config (ids, timings, absolute paths)
VOLATILE = {"run_id", "latency_s", "elapsed_s", "plan_s", "first_input_s"}


def _frame(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, keep_default_na=False)


ATOL = 0.0


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, name: str, sort_by: list[str] | None = None) -> list[str]:
    """Differences between two tables: missing columns in ``b``, row counts, then cell values (shared columns)."""
    out = []
    missing = [c for c in a.columns if c not in b.columns]
    if missing:
        out.append(f"{name}: columns missing after: {missing}")
    if len(a) != len(b):
        return [*out, f"{name}: {len(a)} rows before, {len(b)} after"]
    cols = [c for c in a.columns if c in b.columns and c not in VOLATILE]
    if sort_by:
        keys = [k for k in sort_by if k in cols]
        a = a.sort_values(keys, kind="stable").reset_index(drop=True)
        b = b.sort_values(keys, kind="stable").reset_index(drop=True)
    for c in cols:
        both_null = (a[c].isna() & b[c].isna()).to_numpy()
        x, y = a[c].astype(str).to_numpy(), b[c].astype(str).to_numpy()
        differ = (x != y) & ~both_null
        if ATOL > 0 and differ.any():
            fa = pd.to_numeric(a[c], errors="coerce").to_numpy(dtype=float)
            fb = pd.to_numeric(b[c], errors="coerce").to_numpy(dtype=float)
            differ &= ~(np.abs(fa - fb) <= ATOL)  # nan (not numeric) stays a difference
        bad = differ.nonzero()[0]
        if len(bad):
            i = bad[0]
            out.append(f"{name}.{c}: {len(bad)} cell(s) differ, first at row {i}: {x[i]!r} != {y[i]!r}")
    return out


def _summary(path: Path) -> dict:
    d = json.loads(path.read_text())
    d.pop("report", None)
    d.pop("run_ids", None)  # a new run gets a new id
    return d


def compare_runs(before: Path, after: Path) -> list[str]:
    diffs: list[str] = []
    keys = ["model", "probe_set", "case_id", "item_id", "condition", "resolution", "prompt_variant", "sample_index"]
    diffs += compare_frames(_frame(before / "results.parquet"), _frame(after / "results.parquet"), "results", keys)
    rb, ra = before / "report", after / "report"
    for name, sort in (("metrics.csv", ["probe_set", "model", "metric", "subset"]),
                       ("comparisons.csv", ["family", "metric", "subset", "model_a", "model_b"]),
                       ("categories.csv", ["probe_set", "model"]),
                       ("stress_robustness.csv", ["model", "component"]),
                       ("stress_accuracy.csv", ["model", "condition"]),
                       ("stress_changes.csv", ["model", "test", "perturbed"]),
                       ("faithfulness_verdicts.csv", ["model"])):
        if (rb / name).exists():
            if not (ra / name).exists():
                diffs.append(f"{name}: missing after")
                continue
            diffs += compare_frames(_frame(rb / name), _frame(ra / name), name, sort)
    if (rb / "summary.json").exists():
        sb, sa = _summary(rb / "summary.json"), _summary(ra / "summary.json")
        for k in sb:
            if json.dumps(sb[k], sort_keys=True) != json.dumps(sa.get(k), sort_keys=True):
                diffs.append(f"summary.json[{k!r}] differs")
    return diffs


if __name__ == "__main__":
    args = sys.argv[1:]
    if "-h" in args or "--help" in args or len([a for a in args if not a.startswith("-")]) < 2:
        print(__doc__)
        sys.exit(0 if "-h" in args or "--help" in args else 2)
    if "--atol" in args:
        i = args.index("--atol")
        ATOL = float(args[i + 1])
        del args[i:i + 2]
    d = compare_runs(Path(args[0]), Path(args[1]))
    print("\n".join(d) if d else "equal")
    sys.exit(1 if d else 0)
