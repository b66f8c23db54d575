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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvlm_audit.atomic import write_files_atomic
from medvlm_audit.columns import Columns, infer_dtype
from medvlm_audit.store import RunStore

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

CASE_COLUMNS = ("kind", "finding", "label", "source", "patient_id", "study_id", "age", "sex", "view", "split")

#: the models whose trials :func:`raw_table` and :func:`raw_columns` read (None: every model); set only in the
#: forked readers of :func:`tidy_by_model`, each of which reads one group of models
_ONLY_MODELS: tuple[str, ...] | None = None


def _raw_sql(store: RunStore) -> str:
    """The raw table's query; its parameters are ``_ONLY_MODELS`` (or none)."""
    # absent from runs written before they existed
    details = store.has_table("answer_details") and store.has_table("effective_decodings")
    only = f"WHERE t.model IN ({', '.join('?' * len(_ONLY_MODELS))})" if _ONLY_MODELS is not None else ""
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
        {only}
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

    df = store.frame(_raw_sql(store), _ONLY_MODELS or ())
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
    names, rows = store.rows(_raw_sql(store), _ONLY_MODELS or ())
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


def model_groups(store: RunStore, parts: int) -> list[tuple[str, ...]]:
    """The run's models with trials, in the order the raw table sorts them, as at most ``parts`` runs of
    consecutive models holding about equal numbers of trials.

    >>> import tempfile
    >>> from pathlib import Path
    >>> store = RunStore(Path(tempfile.mkdtemp()) / "run.sqlite")
    >>> for m in "abc":
    ...     store.add_model(m, "multimodal", {})
    >>> store.add_trials([(m, "p", f"c{i}", "original", 0, f"{m}{i}", None, None) for m in "abc" for i in range(3)])
    >>> model_groups(store, 2), model_groups(store, 5)
    ([('a', 'b'), ('c',)], [('a',), ('b',), ('c',)])
    """
    counts = store.db.execute("SELECT model, COUNT(*) FROM trials GROUP BY model ORDER BY model").fetchall()
    total, k = sum(n for _, n in counts), max(1, min(parts, len(counts)))
    groups: list[tuple[str, ...]] = []
    group: list[str] = []
    done = 0
    for model, n in counts:
        # a model goes to the next group where more than half of its trials lie beyond this group's share
        if group and (2 * done + n) * k > 2 * total * (len(groups) + 1):
            groups.append(tuple(group))
            group = []
        group.append(model)
        done += n
    if group:
        groups.append(tuple(group))
    return groups


#: :func:`tidy_parts`: forked readers only with at least this many usable cores (on fewer, the parent's imports
#: beside them leave no core free, and the fork, the pickling and the concatenation would only add CPU)
TIDY_PARTS_MIN_CPUS = 4

#: and at most this many (each fork is a copy of a process that has imported pandas; a part's fixed cost, the
#: case rows and pandas' per-call overhead, is ~0.03 CPU-s: the paper-sized run's 9 models read one per part in
#: 0.08-0.10 CPU-s each, two in 0.15)
TIDY_PARTS_MAX = 12


def tidy_parts() -> int:
    """How many forked readers :func:`tidy_by_model` may use here: every usable core but one (the report's own
    process imports meanwhile), at most ``TIDY_PARTS_MAX``; 0 below ``TIDY_PARTS_MIN_CPUS`` cores."""
    from medvlm_audit.cpus import usable_cpus

    cpus = usable_cpus()
    return 0 if cpus < TIDY_PARTS_MIN_CPUS else min(cpus - 1, TIDY_PARTS_MAX)


def _tidy_part(tidy: Callable[[RunStore], pd.DataFrame], run_dir: str, models: tuple[str, ...]) -> pd.DataFrame:
    """One forked reader of :func:`tidy_by_model`: the tidy table of these models' trials alone."""
    global _ONLY_MODELS
    _ONLY_MODELS = models
    with RunStore.open_dir(run_dir, readonly=True) as store:
        return tidy(store)


def tidy_by_model(tidy: Callable[[RunStore], pd.DataFrame], run_dir: str | Path, parts: int) -> pd.DataFrame | None:
    """``tidy`` (a suite's ``tidy``, row-wise per model: ``Suite.tidy_by_model``) of the run store in ``run_dir``,
    read in up to ``parts`` forked processes, each reading and scoring the trials of some consecutive models, then
    put together in order: the same table as ``tidy(store)``, in a fraction of the wall (issue 23: the paper-sized
    report's table read). None where there is nothing to split (one model, ``parts`` < 2, no ``fork``) or where
    the parts do not have the same columns and dtypes (a column one part infers as text and another as all
    missing): the caller then reads it whole."""
    import multiprocessing

    import pandas as pd

    from medvlm_audit.report.parallel import map_forked

    if parts < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None  # the parts would run one after another in this process: slower than one read
    with RunStore.open_dir(run_dir, readonly=True) as store:
        if store._copy_dir is not None:  # read-only media with a pending WAL: each reader would copy the store
            return None
        groups = model_groups(store, parts)
    if len(groups) < 2:
        return None
    jobs = [lambda g=g: _tidy_part(tidy, str(run_dir), g) for g in groups]
    tables = map_forked(jobs, workers=len(groups), warm=False)()
    first = tables[0]
    if any(list(t.columns) != list(first.columns) or not t.dtypes.equals(first.dtypes) for t in tables[1:]):
        return None
    return pd.concat(tables, ignore_index=True)


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
