"""Helpers for a reader task's sampler: a stratified seeded sample, opaque item ids, the run's stored items and
tidy table, and the checks that name a missing column or file (:class:`~medvlm_audit.readers.tasks.StudyError`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.readers.tasks import StudyError

__all__ = ["item_id", "need_columns", "resolver", "run_items", "run_results", "stratified", "text_or_none"]


def stratified(df: pd.DataFrame, strata: list[str], n: int, rng: np.random.Generator) -> pd.DataFrame:
    """A sample of n rows spread as evenly as possible over the strata (round robin over a seeded stratum order,
    seeded random rows within each stratum)."""
    if n >= len(df):
        return df
    if not strata:
        return df.iloc[np.sort(rng.permutation(len(df))[:n])]
    groups = {k: g.index.to_numpy() for k, g in df.groupby(strata, dropna=False, sort=True)}
    keys = list(groups)
    perm = {k: rng.permutation(groups[k]) for k in keys}
    order = [keys[i] for i in rng.permutation(len(keys))]
    take: dict[Any, int] = {k: 0 for k in keys}
    got = 0
    while got < n:
        progressed = False
        for k in order:
            if got >= n:
                break
            if take[k] < len(perm[k]):
                take[k] += 1
                got += 1
                progressed = True
        if not progressed:
            break
    idx = np.concatenate([perm[k][: take[k]] for k in keys if take[k]])
    return df.loc[sorted(idx)]


def item_id(seed: int, *parts: Any) -> str:
    """An opaque item id (it appears in image URLs, so it must not name the case or the condition)."""
    h = hashlib.sha256(json.dumps([seed, *[str(p) for p in parts]]).encode()).hexdigest()
    return "i" + h[:12]


def run_items(run_dir: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """(probe_set, case_id) -> stored case row, and probe_set -> recorded path, from the run store."""
    from medvlm_audit.store import STORE_FILE, RunStore

    if not (run_dir / STORE_FILE).exists():
        raise StudyError(f"{run_dir}: no run store ({STORE_FILE}) found")
    with RunStore.open_dir(run_dir) as store:
        cases = store.frame("SELECT probe_set, case_id, row FROM cases")
        sets = store.frame("SELECT name, path FROM probe_sets")
    rows = {(str(p), str(c)): json.loads(r) for p, c, r in cases.itertuples(index=False, name=None)}
    return rows, {str(a): str(b or "") for a, b in sets.itertuples(index=False, name=None)}


def resolver(set_path: str):
    """path -> absolute path, relative paths resolved against the probe set's recorded folder."""
    base = Path(set_path) if set_path else None
    if base is not None and base.suffix and not base.is_dir():
        base = base.parent

    def resolve(p: str | None) -> str | None:
        if p is None:
            return None
        pp = Path(p)
        if not pp.is_absolute():
            if base is None:
                raise StudyError(f"image path {p!r} is relative and the run records no folder to resolve it against")
            pp = base / pp
        return str(pp.resolve())

    return resolve


def run_results(run_dir: Path) -> pd.DataFrame:
    p = run_dir / "results.parquet"
    if not p.exists():
        raise StudyError(f"{p}: the run's tidy table is missing; run `medvlm-audit run` (or `export`) first")
    return pd.read_parquet(p)


def need_columns(df: pd.DataFrame, cols: Sequence[str], where: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise StudyError(f"{where}: missing column(s) {missing}; has {list(df.columns)}")


def text_or_none(v: Any) -> str | None:
    """``str(v)``, or None for None and NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(v)

