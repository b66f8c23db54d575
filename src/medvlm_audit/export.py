"""Tidy export of a run: one row per model x case x condition x sample, with the scored answer.

:func:`raw_table` joins the store's trials with answers, models and case metadata (suite-agnostic); each suite
scores it into its tidy table (``Suite.tidy``, dispatched by :func:`medvlm_audit.api.tidy`); :func:`export_table`
writes Parquet and CSV atomically. The columns are documented in docs/tidy-schema.md.

:func:`raw_columns` is :func:`raw_table` without pandas (plain column lists, each with the dtype pandas would give
it), for a suite's ``tidy_columns``; :func:`export_columns` writes such a table as the same bytes (issue 23: the
run path of an HTTP-model run imports no pandas).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvlm_audit.atomic import write_files_atomic
from medvlm_audit.columns import Columns, infer_dtype
from medvlm_audit.store import RunStore

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

CASE_COLUMNS = ("kind", "finding", "label", "source", "patient_id", "study_id", "age", "sex", "view", "split")


def _raw_sql(store: RunStore) -> str:
    # absent from runs written before they existed
    details = store.has_table("answer_details") and store.has_table("effective_decodings")
    return f"""
        SELECT t.model, m.modality, t.probe_set, t.case_id, t.condition, t.sample_index, t.key, t.image_sha256,
               t.payload, r.text AS answer_text, r.top_logprobs, r.finish_reason, r.latency_s,
               r.error_kind, r.error_message, i.parsed AS imported_parsed, i.confidence AS imported_confidence,
               {"e.decoding AS effective_decoding, d.reasoning" if details else
                "NULL AS effective_decoding, NULL AS reasoning"}
        FROM trials t
        JOIN models m ON m.name = t.model
        LEFT JOIN responses r ON r.key = t.key
        LEFT JOIN imported i ON i.key = t.key
        {"LEFT JOIN answer_details d ON d.key = t.key LEFT JOIN effective_decodings e ON e.id = d.effective"
         if details else ""}
        ORDER BY t.model, t.probe_set, t.case_id, t.condition, t.sample_index
        """


def raw_table(store: RunStore, *, case_fields: tuple[str, ...] = (), imported: bool = False) -> pd.DataFrame:
    """Trials joined with answers, models and case metadata (answers not yet scored): the engine's trial columns,
    the shared case vocabulary (``CASE_COLUMNS``) and ``case_order`` (the probe set's own row order), plus the
    fields of the stored case rows a suite asks for in ``case_fields`` (None where a row lacks one), plus
    ``imported_parsed`` / ``imported_confidence`` when ``imported`` (answers imported from released result files,
    which the engine stores beside the asked ones). Every table has ``effective_decoding`` (the decoding the engine
    ran, as stored with the answer) and ``reasoning`` (a reasoning model's text), None where not stored."""
    import numpy as np
    import pandas as pd

    df = store.frame(_raw_sql(store))
    missing = df["answer_text"].isna() & df["error_kind"].isna() & df["imported_parsed"].isna()
    df.loc[missing, "error_kind"] = "not_asked"
    if not imported:
        df = df.drop(columns=["imported_parsed", "imported_confidence"])
    df["top_logprobs"] = [json.loads(x) if isinstance(x, str) else None for x in df["top_logprobs"]]
    cases = store.frame("SELECT probe_set, case_id, row FROM cases ORDER BY rowid")
    rows = [json.loads(r) for r in cases["row"]]
    meta = pd.DataFrame(rows)
    meta.insert(0, "probe_set", cases["probe_set"].to_numpy())
    meta["case_order"] = np.arange(len(meta))  # the probe set's own row order (index mode resamples in it)
    extra = [c for c in case_fields if c not in CASE_COLUMNS]
    for col in (*CASE_COLUMNS, *extra):
        if col not in meta:
            meta[col] = None
    keep = ["probe_set", "case_id", *CASE_COLUMNS, *extra, "case_order"]
    df = df.merge(meta[keep], on=["probe_set", "case_id"], how="left")
    df["age"] = pd.to_numeric(df["age"], errors="coerce").astype(float)
    run_id = store.meta().get("run_id", store.path.parent.name)
    df.insert(0, "run_id", run_id)
    return df


def raw_columns(store: RunStore, *, case_fields: tuple[str, ...] = (), imported: bool = False) -> Columns | None:
    """:func:`raw_table` as plain columns, each with the dtype pandas gives it there (None for a column whose
    values it does not mirror, e.g. ``top_logprobs``, parsed JSON); None for the whole table where the pandas
    table could differ in more than a column's dtype (no trials, a trial whose case row is missing, a case field
    it reads that some case rows lack, a run id that is not text): the caller then builds it with
    :func:`raw_table`."""
    names, rows = store.rows(_raw_sql(store))
    if not rows:
        return None
    data: dict[str, list[Any]] = {n: list(v) for n, v in zip(names, zip(*rows))}
    dtypes: dict[str, str | None] = {n: infer_dtype(v) for n, v in data.items()}
    ek = data["error_kind"]
    for i, (text, imp) in enumerate(zip(data["answer_text"], data["imported_parsed"])):
        if text is None and ek[i] is None and imp is None:
            ek[i] = "not_asked"  # an object column stays object, a text column text
    if not imported:
        del data["imported_parsed"], data["imported_confidence"]
    data["top_logprobs"] = [json.loads(x) if isinstance(x, str) else None for x in data["top_logprobs"]]
    dtypes["top_logprobs"] = None
    _, case_rows = store.rows("SELECT probe_set, case_id, row FROM cases ORDER BY rowid")
    metas = [json.loads(r) for _, _, r in case_rows]
    where = {}
    for i, (ps, cid, _) in enumerate(case_rows):
        if (ps, cid) in where:
            return None
        where[(ps, cid)] = i
    at = [where.get(k) for k in zip(data["probe_set"], data["case_id"])]
    if None in at:
        return None  # the left join would leave NaN in every case column
    extra = [c for c in case_fields if c not in CASE_COLUMNS]
    for col in (*CASE_COLUMNS, *extra):
        present = sum(col in m for m in metas)
        if present and present < len(metas):
            return None  # pandas fills a field some rows lack with NaN (probe sets of different builders)
        if present:
            vals = [m[col] for m in metas]
            dtype = infer_dtype(vals)
        else:
            vals, dtype = [None] * len(metas), "object"
        data[col] = [vals[i] for i in at]  # type: ignore[index]
        dtypes[col] = dtype
    data["case_order"], dtypes["case_order"] = list(at), "int64"  # type: ignore[arg-type]
    age, dt = data["age"], dtypes["age"]
    if dt not in ("float64", "int64", "object"):
        return None
    data["age"], dtypes["age"] = [None if v is None else float(v) for v in age], "float64"
    run_id = store.meta().get("run_id", store.path.parent.name)
    if not isinstance(run_id, str):
        return None
    out = Columns()
    out.add("run_id", [run_id] * len(rows), "str")
    for n, v in data.items():
        out.data[n], out.dtypes[n] = v, dtypes[n]  # type: ignore[assignment]
    return out


def export_columns(cols: Columns, out: Path) -> tuple[Path, Path]:
    """:func:`export_table` of a table built without pandas: the same two files, byte for byte."""
    from medvlm_audit.columns import csv_bytes, parquet_bytes

    write_files_atomic(out, [("results.parquet", parquet_bytes(cols)), ("results.csv", csv_bytes(cols))])
    return out / "results.parquet", out / "results.csv"


def expand_payload(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a raw table with its JSON ``payload`` column (suite-specific trial fields) expanded into columns;
    columns already present win."""
    import pandas as pd

    df = df.copy()
    if "payload" in df.columns:
        pl = [json.loads(p) if isinstance(p, str) else (p or {}) for p in df["payload"]]
        extra = pd.DataFrame(pl, index=df.index)
        for c in extra.columns:
            if c not in df.columns:
                df[c] = extra[c]
        df = df.drop(columns=["payload"])
    return df


def export_table(df: pd.DataFrame, out: Path) -> tuple[Path, Path]:
    """Write a tidy table as results.parquet and results.csv in ``out`` (atomically); returns both paths."""
    from medvlm_audit.atomic import csv_bytes, parquet_bytes

    write_files_atomic(out, [("results.parquet", parquet_bytes(df)), ("results.csv", csv_bytes(df))])
    return out / "results.parquet", out / "results.csv"
