"""What the run explorer shows, read once from a run folder and never written: the tidy results table with a flip
mark per trial, the cases, each model's category from the report, and the image recipes behind every pixel hash.

The suite that made the run (named in its store) says, through its ``view`` mapping, which column holds the item,
which condition flips are measured against, which columns make two trials comparable (e.g. resolution, phrasing,
sample), the filters and the columns shown; a suite without one is shown with generic defaults (no flips).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from medvlm_audit.errors import AuditError
from medvlm_audit.images import ImageRecipe, SourceCache
from medvlm_audit.store import STORE_FILE, RunStore

__all__ = ["RunSuite", "RunView", "ViewSpec", "load_run"]

_TRI = ("any", "yes", "no")


@dataclass(frozen=True)
class ViewSpec:
    item: str = "case_id"
    base_condition: str | None = None
    condition_order: tuple[str, ...] = ()
    setting: tuple[str, ...] = ("sample_index",)
    default_setting: dict[str, Any] = field(default_factory=dict)
    filters: tuple[str, ...] = ()
    answer: str = "parsed"
    unparsed: Any = None
    labels: dict[str, dict[Any, str]] = field(default_factory=dict)
    case_fields: tuple[str, ...] = ()
    trial_fields: tuple[str, ...] = ()
    category_table: str | None = None
    category_column: str = "category"
    #: which rows of the tidy table are trials (e.g. {"stage": "answer"}); the others may be judgements
    row_filter: dict[str, Any] = field(default_factory=dict)
    #: a column that already holds the suite's own flip (bool), used instead of comparing with the base
    flip_column: str | None = None
    #: a column that is True when the answer could not be parsed (instead of ``answer == unparsed``)
    unparsed_column: str | None = None
    #: what the raw answer is called on the case page (e.g. "chain of thought")
    text_label: str = "raw answer"
    #: the columns listed in the trials table beside model, case and condition; the ground-truth column
    list_columns: tuple[str, ...] = ("finding",)
    truth: str | None = "label"
    #: second-stage rows that judge a trial: {"filter": {...}, "model": col, "condition": col, "judge": col,
    #: "axis": col, "score": col, "status": col}; their JSON answer's "quotes" are highlighted in the trial's text
    judgements: dict[str, str] | None = None
    #: the tidy table's names for the condition and the raw text, when they differ ("strategy", "report")
    condition_column: str | None = None
    text_column: str | None = None
    #: a column naming each trial's reference text, and the suite module that supplies the texts and the words
    #: to mark (``reference_texts(run_dir)``, ``marked_terms(run_dir)``; see suites/reports/view.py)
    reference_column: str | None = None
    support: str | None = None
    #: flips compare this column with the base condition's (default: ``answer``; e.g. "correct" when the options
    #: are re-lettered between conditions); the answer counts as parsed when ``parsed_status`` = {column: value}
    flip_on: str | None = None
    parsed_status: dict[str, str] | None = None
    #: multiple-choice items: the column holding each trial's options (a JSON list, lettered A, B, ...) and the
    #: gold letter's column, shown per condition with the gold and the chosen option marked
    options_column: str | None = None
    gold_column: str | None = None
    #: what a column is called on the pages where its name would mislead (e.g. {"confidence": "P(yes)"})
    titles: dict[str, str] = field(default_factory=dict)

    def title(self, column: str) -> str:
        return self.titles.get(column, column)

    @classmethod
    def of(cls, raw: dict[str, Any] | None, columns: list[str]) -> ViewSpec:
        raw = dict(raw or {})
        if not raw:
            item = next((c for c in ("case_id", "item_id", "image_id", "id") if c in columns), columns[0])
            return cls(item=item, setting=tuple(c for c in ("sample_index",) if c in columns))
        tup = {k: tuple(raw[k]) for k in ("condition_order", "setting", "filters", "case_fields", "trial_fields",
                                          "list_columns") if k in raw}
        return cls(**{**raw, **tup})


def _label(spec: ViewSpec, col: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    labels = spec.labels.get(col, {})
    for k, lab in labels.items():
        try:
            if v == k or (isinstance(v, int | float | np.integer | np.floating) and float(v) == float(k)):
                return lab
        except (TypeError, ValueError):
            continue
    if isinstance(v, float | np.floating):
        return f"{float(v):.3g}"
    return str(v)


@dataclass
class RunView:
    run_dir: Path
    suite: str
    spec: ViewSpec
    rows: pd.DataFrame  # the tidy table + row_id, case_idx, flip (1.0 / 0.0 / NaN), is_parsed, category
    cases: list[tuple[str, str]]  # (probe_set, item) by case index
    categories: dict[str, str]  # model -> category (first probe set)
    recipes: dict[str, str]  # pixel sha256 -> recipe key (JSON)
    filter_values: dict[str, list[str]]
    judged: pd.DataFrame | None = None  # second-stage rows (judgements of a trial), when the suite has them
    references: dict[str, str] = field(default_factory=dict)  # reference text by id (suite support)
    terms: dict[tuple[str, str], dict[str, tuple[str, bool]]] = field(default_factory=dict)  # words to mark
    sources: SourceCache = field(default_factory=lambda: SourceCache(16))
    #: the run folder as the run recorded it (its config's ``run_dir``: relative to the working directory it was
    #: started from, or absolute); image sources are looked for where they lie relative to it
    recorded_run_dir: str | None = None

    # ------------------------------------------------------------------ filtering

    def filter(self, query: dict[str, str]) -> tuple[pd.DataFrame, dict[str, str], list[str]]:
        """Rows kept by the query's filters. Only exact values listed in :attr:`filter_values` apply; anything
        else is ignored and named in the returned notes (nothing from the query is used as a path or a code)."""
        df = self.rows
        applied: dict[str, str] = {}
        notes: list[str] = []
        for name, known in self.filter_values.items():
            v = query.get(name)
            if v is None:
                v = self._default(name)
            if v in (None, "", "any"):
                continue
            if v not in known:
                notes.append(f"unknown {name} {v!r} ignored")
                continue
            applied[name] = v
            if name in ("flipped", "parsed"):
                col = "flip" if name == "flipped" else "is_parsed"
                df = df[df[col] == (1.0 if v == "yes" else 0.0)]
            else:
                df = df[df[name].astype(str) == v]
        return df, applied, notes

    def _default(self, name: str) -> str | None:
        v = self.spec.default_setting.get(name)
        return None if v is None else str(v)

    # ------------------------------------------------------------------ one case

    def case_rows(self, case_idx: int) -> pd.DataFrame:
        return self.rows[self.rows["case_idx"] == case_idx]

    def questions(self, keys: list[str]) -> dict[str, str]:
        """The text each request's chat messages held (user turns), by request key, from the store (read-only)."""
        keys = [k for k in dict.fromkeys(keys) if isinstance(k, str) and k]
        if not keys:
            return {}
        out: dict[str, str] = {}
        with RunStore.open_dir(self.run_dir, readonly=True) as store:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                df = store.frame(f"SELECT key, input FROM requests WHERE key IN ({','.join('?' * len(chunk))})",
                                 chunk)
                for k, inp in zip(df["key"], df["input"]):
                    try:
                        msgs = json.loads(inp).get("messages") or []
                    except (ValueError, AttributeError):
                        continue
                    pairs = [(m[0], m[1]) if isinstance(m, list | tuple) and len(m) > 1 else ("", m) for m in msgs]
                    user = [_text(c) for role, c in pairs if role == "user"] or [_text(c) for _, c in pairs]
                    out[k] = "\n\n".join(t for t in user if t)
        return out

    def label(self, col: str, v: Any) -> str:
        return _label(self.spec, col, v)

    def judgements_for(self, row: Any) -> list[dict[str, Any]]:
        """The judgements of one trial (judge, axis, score, status, rationale, quotes), from the second stage."""
        j, spec = self.judged, self.spec.judgements
        if j is None or spec is None or not len(j):
            return []
        get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
        mine = j[(j[spec["model"]].astype(str) == str(get("model")))
                 & (j[spec["condition"]].astype(str) == str(get("condition")))
                 & (j[self.spec.item].astype(str) == str(get(self.spec.item)))]
        if "probe_set" in j.columns:
            mine = mine[mine["probe_set"].astype(str) == str(get("probe_set"))]
        out = []
        for r in mine.itertuples(index=False):
            d = r._asdict()
            quotes: list[str] = []
            rationale = ""
            try:
                parsed = json.loads(d.get("answer_text") or "")
                if isinstance(parsed, dict):
                    quotes = [q for q in parsed.get("quotes") or [] if isinstance(q, str) and q.strip()]
                    rationale = str(parsed.get("rationale") or "")
            except (TypeError, ValueError):
                pass
            out.append({"judge": str(d.get(spec.get("judge", "model"), "")), "axis": str(d.get(spec["axis"], "")),
                        "score": _label(self.spec, "", d.get(spec["score"])),
                        "status": str(d.get(spec["status"], "")), "rationale": rationale, "quotes": quotes})
        return sorted(out, key=lambda x: (x["axis"], x["judge"]))

    # ------------------------------------------------------------------ pixels

    def render(self, sha: str) -> tuple[np.ndarray, bool]:
        """The pixels of the image whose hash is ``sha``, rendered from its source file through the run's recipe,
        and whether they hash to ``sha`` (False: the source changed since the run). KeyError for an unknown
        hash."""
        from medvlm_audit.models.base import pixel_sha256

        key = self.recipes[sha]
        source, _size, _mtime, mode, ops = json.loads(key)
        first: tuple[np.ndarray, bool] | None = None
        candidates = self.source_candidates(str(source))
        for path in candidates:  # the first whose pixels are the model's; else the first that exists
            if not Path(path).is_file():
                continue
            px = ImageRecipe(path, tuple((n, p) for n, p in ops), str(mode)).render(self.sources)
            if pixel_sha256(px) == sha:
                return px, True
            first = first or (px, False)
        if first is not None:
            return first
        px = ImageRecipe(str(source), tuple((n, p) for n, p in ops), str(mode)).render(self.sources)  # its error
        return px, pixel_sha256(px) == sha

    def source_candidates(self, source: str) -> list[str]:
        """Where a recorded image source may be now: at the same place relative to the run folder shown (the
        run moved with its files, or was started from another working directory with a relative ``--run-dir``),
        then as recorded."""
        out: list[str] = []
        rec = self.recorded_run_dir
        if rec and os.path.isabs(rec) == os.path.isabs(source):
            rel = os.path.relpath(os.path.normpath(source), os.path.normpath(rec))
            out.append(os.path.normpath(os.path.join(os.path.abspath(self.run_dir), rel)))
        if source not in out:
            out.append(source)
        return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _read_results(run_dir: Path, suite: Any = None) -> pd.DataFrame:
    """The run's tidy table: results.parquet (or results.csv); where neither is there (a read-only copy, an
    export never written), the table `export` would write, built in memory from the run store through the
    suite's tidy (its Parquet bytes read back, so the dtypes are the file's); nothing is written."""
    pq, csv = run_dir / "results.parquet", run_dir / "results.csv"
    if pq.is_file():
        return pd.read_parquet(pq)
    if csv.is_file():
        return pd.read_csv(csv)
    if callable(getattr(suite, "tidy", None)):
        return results_in_memory(run_dir, suite)
    raise AuditError(f"{run_dir}: no results table (results.parquet); write it with `medvlm-audit export {run_dir}`")


def results_in_memory(run_dir: Path, suite: Any) -> pd.DataFrame:
    """The results table `export` writes, built from the run store (opened read-only) without writing a file."""
    import io

    with RunStore.open_dir(run_dir, readonly=True) as store:
        tidy_columns = getattr(suite, "tidy_columns", None)
        cols = tidy_columns(store) if callable(tidy_columns) else None
        if cols is not None:
            from medvlm_audit.columns import parquet_bytes as column_parquet

            data = column_parquet(cols)
        else:
            from medvlm_audit.atomic import parquet_bytes

            data = parquet_bytes(suite.tidy(store))
    return pd.read_parquet(io.BytesIO(data))


def _flips(df: pd.DataFrame, spec: ViewSpec) -> pd.Series:
    """1.0 when a trial's parsed answer differs from the base condition's in the same model, item and setting,
    0.0 when it is the same, NaN for the base trial itself or when either answer is unparsed or missing."""
    col = spec.flip_on or spec.answer
    if spec.base_condition is None or "condition" not in df.columns or col not in df.columns:
        return pd.Series(np.nan, index=df.index)
    keys = [c for c in ("model", "probe_set", spec.item, *spec.setting) if c in df.columns]
    base = df[df["condition"] == spec.base_condition][[*keys, col]].rename(columns={col: "_base"})
    base = base.drop_duplicates(keys)
    merged = df[[*keys, col, "condition"]].merge(base, on=keys, how="left")
    merged.index = df.index
    a, b = merged[col], merged["_base"]
    ok = a.notna() & b.notna() & (merged["condition"] != spec.base_condition)
    if spec.unparsed is not None and not spec.flip_on:
        ok &= (a != spec.unparsed) & (b != spec.unparsed)
    return pd.Series(np.where(ok, (a != b).astype(float), np.nan), index=df.index)


def _categories(run_dir: Path, table: str | None, column: str = "category") -> dict[str, str]:
    if not table:
        return {}
    f = run_dir / "report" / f"{table}.csv"
    if not f.is_file():
        return {}
    try:
        df = pd.read_csv(f)
    except Exception:  # noqa: BLE001 - a damaged extra table only loses the category filter
        return {}
    if not {"model", column} <= set(df.columns):
        return {}
    return {str(m): str(c) for m, c in zip(df["model"], df[column]) if isinstance(c, str)}


class RunSuite(Protocol):
    """What the explorer reads of the suite that made a run: its name and its ``view`` mapping (a
    :class:`~medvlm_audit.suites.base.Suite` is one; its ``tidy`` / ``tidy_columns``, where it has them, build the
    results table in memory for a run folder without one)."""

    name: str
    view: dict[str, Any]


def load_run(run_dir: str | Path, suite: RunSuite) -> RunView:
    """Read a run folder for the explorer (the store opened read-only; nothing is written). ``suite`` is the
    suite that made the run, given by the caller (``api.suite_of_run(run_dir)``; a suite's own report passes
    itself), so the explorer never looks a suite up."""
    run = Path(run_dir)
    if not (run / STORE_FILE).is_file():
        raise AuditError(f"{run}: no run store ({STORE_FILE}); give a run folder (the one holding {STORE_FILE})")
    suite_name = suite.name
    df = _read_results(run, suite).reset_index(drop=True)
    spec = ViewSpec.of(suite.view, list(df.columns))
    if spec.item not in df.columns:
        raise AuditError(f"{run}: the results table has no {spec.item!r} column")
    if spec.condition_column and spec.condition_column in df.columns:
        df["condition"] = df[spec.condition_column].astype(str)
    if spec.text_column and spec.text_column in df.columns:
        df["answer_text"] = df[spec.text_column]
    if "key" not in df.columns or "image_sha256" not in df.columns:
        df = _with_store_keys(run, df, spec)
    judged = None
    if spec.judgements:
        judged = df[_matches(df, spec.judgements.get("filter") or {})].reset_index(drop=True)  # type: ignore[arg-type]
    if spec.row_filter:
        df = df[_matches(df, spec.row_filter)].reset_index(drop=True)
    df["row_id"] = np.arange(len(df))
    pairs = list(zip(df.get("probe_set", pd.Series("", index=df.index)).astype(str), df[spec.item].astype(str)))
    cases = sorted(set(pairs))
    index = {c: i for i, c in enumerate(cases)}
    df["case_idx"] = [index[p] for p in pairs]
    if spec.flip_column and spec.flip_column in df.columns:
        df["flip"] = [np.nan if v is None or pd.isna(v) else float(bool(v)) for v in df[spec.flip_column]]
    else:
        df["flip"] = _flips(df, spec)
    if spec.parsed_status and all(c in df.columns for c in spec.parsed_status):
        ok = pd.Series(True, index=df.index)
        for c, v in spec.parsed_status.items():
            ok &= df[c].astype(str) == str(v)
        df["is_parsed"] = ok.astype(float)
    elif spec.unparsed_column and spec.unparsed_column in df.columns:
        df["is_parsed"] = [np.nan if v is None or pd.isna(v) else float(not bool(v)) for v in df[spec.unparsed_column]]
    elif spec.answer in df.columns:
        ans = df[spec.answer]
        parsed = ans.notna() & ((ans != spec.unparsed) if spec.unparsed is not None else True)
        df["is_parsed"] = parsed.astype(float)
    else:
        df["is_parsed"] = np.nan
    categories = _categories(run, spec.category_table, spec.category_column)
    df["category"] = [categories.get(m, "") for m in df["model"].astype(str)] if "model" in df.columns else ""
    with RunStore.open_dir(run, readonly=True) as store:
        recipes = {sha: key for key, sha in store.image_hashes().items()}
        config = store.meta().get("config")
        recorded = config.get("run_dir") if isinstance(config, dict) else None
    fv: dict[str, list[str]] = {}
    for col in ("model", "condition", *spec.filters):
        if col in df.columns and col not in fv:
            fv[col] = sorted({str(v) for v in df[col].dropna()}, key=_natural)
    if categories:
        fv["category"] = sorted(set(categories.values()))
    if spec.base_condition is not None or spec.flip_column:
        fv["flipped"] = list(_TRI)
    if spec.answer in df.columns or spec.unparsed_column or spec.parsed_status:
        fv["parsed"] = list(_TRI)
    view = RunView(run, suite_name, spec, df, cases, categories, recipes, fv, judged,
                   recorded_run_dir=str(recorded) if isinstance(recorded, str) and recorded else None)
    if spec.support:  # a module the suite itself names (never a value from a request)
        import importlib

        mod = importlib.import_module(spec.support)
        view.references = mod.reference_texts(run) if spec.reference_column else {}
        view.terms = mod.marked_terms(run)
    return view


def _with_store_keys(run: Path, df: pd.DataFrame, spec: ViewSpec) -> pd.DataFrame:
    """The request key and pixel hash of each trial from the store, when the tidy table does not carry them."""
    need = ["model", "probe_set", spec.item, "condition", "sample_index"]
    if not all(c in df.columns for c in need):
        return df
    with RunStore.open_dir(run, readonly=True) as store:
        t = store.frame("SELECT model, probe_set, case_id, condition, sample_index, key, image_sha256 FROM trials")
    t = t.rename(columns={"case_id": spec.item})
    keep = [c for c in ("key", "image_sha256") if c not in df.columns]
    for c in need:
        t[c] = t[c].astype(str)
    left = df.assign(**{f"_{c}": df[c].astype(str) for c in need})
    merged = left.merge(t[[*need, *keep]].rename(columns={c: f"_{c}" for c in need}), on=[f"_{c}" for c in need],
                        how="left")
    return merged.drop(columns=[f"_{c}" for c in need])


def _matches(df: pd.DataFrame, cond: dict[str, Any]) -> pd.Series:
    keep = pd.Series(True, index=df.index)
    for col, v in cond.items():
        keep &= df[col].astype(str) == str(v) if col in df.columns else False
    return keep


def _natural(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)
