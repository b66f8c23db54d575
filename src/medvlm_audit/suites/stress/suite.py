"""The stress suite behind the one Suite interface: options, its one stage, tidy scoring, analysis and the
embedded default (the phantom MCQ set and the MCQ reference answerers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from medvlm_audit.demo_options import DemoOption
from medvlm_audit.errors import ConfigError
from medvlm_audit.registry import check_known
from medvlm_audit.store import RunStore
from medvlm_audit.suites.base import Stage, Suite, SuiteResult
from medvlm_audit.suites.stress.conditions import (
    CONDITIONS,
    DEFAULT_CONDITIONS,
    DEFAULT_T4_VARIANT,
    T4Variant,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from medvlm_audit.columns import Columns
    from medvlm_audit.readers.tasks import ReaderTask


class StressRunOptions(BaseModel):
    """The stress suite's run options (flat keys of a run config)."""

    model_config = ConfigDict(extra="forbid")

    #: T1-T6 conditions (default: all of them)
    conditions: list[str] = list(DEFAULT_CONDITIONS)
    #: T4's replaced:k options: replaced, then shown in T3's order (the paper and the authors' files), or in place
    t4_variant: T4Variant = DEFAULT_T4_VARIANT
    #: the prompts: the authors' released system prompt and answer instruction, verbatim ("paper"), or the
    #: project's earlier wording ("project"); see medvlm_audit.suites.stress.prompts
    prompt_protocol: Literal["paper", "project"] = "paper"
    #: an item's image file that does not exist: the run fails before anything is written, naming the item, field
    #: and path ("raise"), or the conditions showing that image are skipped and listed as exclusions ("exclude")
    on_missing: Literal["raise", "exclude"] = "raise"

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        check_known("stress condition", v, CONDITIONS)
        return v or list(DEFAULT_CONDITIONS)


REFERENCE_KINDS = ("first_option", "text_prior", "image_reader")


#: columns of the exported stress table (one row per model x item x condition x repeat)
TIDY_COLUMNS: tuple[str, ...] = (
    "run_id", "probe_set", "model", "modality", "item_id", "benchmark", "condition", "test", "sample_index",
    "key", "image_sha256", "n_options", "gold", "options", "required", "needs_image", "with_image", "t4_variant",
    "answer_text", "status", "parsed", "via", "correct", "latency_s", "error_kind", "error_message",
)


def tidy_stress(store: Any) -> pd.DataFrame:
    """The scored stress table of a run store (errored calls score as ``no_response``; not-asked rows dropped)."""
    from medvlm_audit.export import raw_table
    from medvlm_audit.suites.stress.scoring import score_stress

    raw = raw_table(store)
    raw = raw[raw["error_kind"].isna() | (raw["error_kind"] != "not_asked")].copy()
    raw.loc[raw["error_kind"].notna(), "answer_text"] = None
    scored = score_stress(raw)
    for c in TIDY_COLUMNS:
        if c not in scored.columns:
            scored[c] = None
    out = scored[list(TIDY_COLUMNS)].reset_index(drop=True)
    out["options"] = [json.dumps(list(o), ensure_ascii=False) for o in out["options"]]
    return out


def tidy_stress_columns(store: Any) -> Columns | None:
    """:func:`tidy_stress` without pandas (the run's end-of-run export, issue 23): the same table as plain columns
    with the dtypes pandas gives them there, so that the files are the same bytes (tests/test_lean_run_path.py
    checks it against :func:`tidy_stress`); None where it does not mirror the pandas table (see
    :func:`medvlm_audit.export.raw_columns`; trials without a payload or with payloads of other fields)."""
    import math

    from medvlm_audit.columns import Columns, infer_dtype
    from medvlm_audit.export import raw_columns
    from medvlm_audit.scorers.option import parse_option

    raw = raw_columns(store)
    if raw is None:
        return None
    d, dt = raw.data, raw.dtypes
    keep = [i for i, e in enumerate(d["error_kind"]) if e != "not_asked"]
    if not keep:
        return None
    payloads = [d["payload"][i] for i in keep]
    if not all(isinstance(p, str) for p in payloads):
        return None
    pl = [json.loads(p) for p in payloads]
    if not all(isinstance(p, dict) for p in pl) or len({tuple(p) for p in pl}) != 1:
        return None  # pandas fills a field some payloads lack with NaN
    fields = list(pl[0])
    if not {"item_id", "required", "options", "gold", "n_options", "benchmark"} <= set(fields):
        return None  # normalize_tidy derives these
    extra = {f: [p[f] for p in pl] for f in fields if f not in d}
    edt = {f: infer_dtype(v) for f, v in extra.items() if f != "options"}
    col = {n: [d[n][i] for i in keep] for n in d if n != "payload"}
    failed = [e is not None for e in col["error_kind"]]
    texts = [None if f else t for t, f in zip(col["answer_text"], failed)]
    opts = [tuple(o) if isinstance(o, (list, tuple)) else None for o in extra["options"]]
    if None in opts or not all(isinstance(x, str) for o in opts for x in o):  # type: ignore[union-attr]
        return None
    if edt.get("required") != "bool":
        return None  # fillna(False).astype(bool) of anything else
    memo: dict[tuple[Any, tuple[str, ...]], Any] = {}
    status, letter, via = [], [], []
    for t, o in zip(texts, opts):
        parsed = memo.get((t, o))
        if parsed is None:
            parsed = memo[(t, o)] = parse_option(t, o)
        status.append(parsed.status)
        letter.append(parsed.letter)
        via.append(parsed.via)
    gold = extra["gold"]
    correct = []
    for i, st in enumerate(status):
        if st == "answer":
            correct.append(float(letter[i] is not None and letter[i] == gold[i]))
        elif st in ("abstain", "unparsed", "refusal"):
            correct.append(0.0)
        else:
            correct.append(math.nan)
    made: dict[str, tuple[list[Any], str | None]] = {
        "answer_text": (texts, dt["answer_text"]),
        "options": ([json.dumps(list(o), ensure_ascii=False) for o in opts], "str"),  # type: ignore[arg-type]
        "required": (extra["required"], "bool"),
        "status": (status, infer_dtype(status)), "parsed": (letter, infer_dtype(letter)),
        "via": (via, infer_dtype(via)), "correct": (correct, "float64"),
    }
    out = Columns()
    for c in TIDY_COLUMNS:
        if c in made:
            vals, dtype = made[c]
        elif c in col:
            vals, dtype = col[c], dt[c]
        elif c in extra:
            vals, dtype = extra[c], edt[c]
        else:
            vals, dtype = [None] * len(keep), "object"
        if dtype is None or (dtype == "object" and any(v is not None and not isinstance(v, str) for v in vals)):
            return None
        out.add(c, vals, dtype)
    return out


def plan_skips(store: Any) -> pd.DataFrame:
    """The run's planning exclusions (probe_set, case_id, condition, reason) from the store's skipped table."""
    return store.frame("SELECT probe_set, case_id, condition, reason FROM skipped ORDER BY probe_set, case_id, "
                       "condition")


def report_stress(store: Any, out_dir: str | Path, *, run_info: dict[str, Any] | None = None,
                  B: int = 10_000) -> Path:
    """Score and analyse a stress run store and write its report (what ``medvlm-audit report`` does for a
    stress run, through the one report writer)."""
    from medvlm_audit.report import write_report
    from medvlm_audit.suites.stress.analysis import analyse_stress
    from medvlm_audit.suites.stress.sections import stress_result

    scored = tidy_stress(store)
    res = analyse_stress(scored, B=B, seed=0, plan_skips=plan_skips(store))
    title = f"Stress audit: {(run_info or {}).get('run_id', Path(out_dir).parent.name)}"
    probe_set = ",".join(sorted(scored["probe_set"].dropna().astype(str).unique())) or "stress"
    return write_report(stress_result(res, probe_set), out_dir, suite="stress", title=title, run_info=run_info,
                        parquet_tables=True)


class StressSuite(Suite):
    """Paper 003: multiple-choice stress tests T1-T6 and the robustness score."""

    name: ClassVar[str] = "stress"
    #: ``demo --set`` options of the embedded default: none
    embedded_options: ClassVar[dict[str, DemoOption]] = {}
    title: ClassVar[str] = "Stress audit"
    Options: ClassVar[type[BaseModel]] = StressRunOptions
    backends: ClassVar[dict[str, str]] = {
        "stress_reference": "medvlm_audit.suites.stress.reference:build_stress_reference"}
    #: the stress tables are written as CSV and Parquet
    parquet_tables: ClassVar[bool] = True

    #: what the run explorer (`medvlm-audit view`) shows: per condition the options as the model saw them (gold
    #: re-lettered) with the chosen one, the raw answer and whether correctness changed from the original
    view: ClassVar[dict[str, Any]] = {
        "item": "item_id", "base_condition": "original", "flip_on": "correct", "answer": "parsed",
        "parsed_status": {"status": "answer"},
        "condition_order": ["original", "no_image", "reordered", "reordered+no_image", "unknown", "unknown+no_image",
                            "replaced:1", "replaced:2", "replaced:3", "replaced:4", "substitution", "cot"],
        "setting": ["sample_index"], "filters": ["benchmark", "test"], "list_columns": ["benchmark", "test"],
        "truth": "gold", "case_fields": ["benchmark", "required", "n_options"],
        "trial_fields": ["status", "correct", "via"], "labels": {"correct": {1: "yes", 0: "no"}},
        "options_column": "options", "gold_column": "gold",
    }

    def stages(self) -> Sequence[Stage]:
        from medvlm_audit.suites.stress.plan import plan_stage

        return (Stage("answer", plan_stage),)

    def reader_tasks(self) -> Sequence[ReaderTask]:
        from medvlm_audit.suites.stress.readers import READER_TASKS

        return READER_TASKS

    def embedded_config(self, out: Path, *, log: Callable[[str], Any] = print, **flags: Any) -> dict[str, Any]:
        """The phantom MCQ set (built into OUT/phantom_mcq when the run plans) and the three answerers."""
        if flags:
            raise ConfigError(f"the stress default takes no option(s) {sorted(flags)}")
        return {
            "suite": "stress",
            "run_dir": str(out),
            "probe_sets": ["phantom"],
            "models": [{"name": k.replace("_", "-"), "backend": "stress_reference", "kind": k}
                       for k in REFERENCE_KINDS],
        }

    def tidy(self, store: RunStore) -> pd.DataFrame:
        return tidy_stress(store)

    def tidy_columns(self, store: RunStore) -> Columns | None:
        return tidy_stress_columns(store)

    def parse_rate_lines(self, results_parquet: Path) -> Sequence[str]:
        """The analysis's not-assessable rule and denominators (:func:`~.analysis.parse_rate_lines`): refusals
        are parsed where the image was removed, the rates are over the trials with a response, and a model that
        chose an option in under half the trials of every condition has no usable answer. A scored table (what
        a run exports) is read with pyarrow (:mod:`~.parse_rates`: a run's path imports no pandas)."""
        import pyarrow.parquet as pq

        from medvlm_audit.suites.stress.parse_rates import NEEDED, parse_rate_lines_of

        try:
            names = set(pq.read_schema(results_parquet).names)
            if {"status", "parsed", "correct", *NEEDED} <= names:
                table = pq.ParquetFile(results_parquet).read(columns=list(NEEDED))
                return parse_rate_lines_of({c: table.column(c).to_pylist() for c in NEEDED}) or []
        except (OSError, ValueError):
            return []
        import pandas as pd

        from medvlm_audit.suites.stress.analysis import parse_rate_lines

        try:
            tidy = pd.read_parquet(results_parquet)
        except (OSError, ValueError):
            return []
        if not {"model", "condition"} <= set(tidy.columns):
            return []
        try:
            return parse_rate_lines(tidy)  # scores the table first when it is not (no status column)
        except (KeyError, ValueError):
            return []

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, *, B: int = 10_000, seed: int = 0,
                skipped: pd.DataFrame | None = None, fmt: str = "svg", designed: dict[str, str] | None = None,
                **unused: Any) -> SuiteResult:
        from medvlm_audit.suites.stress.analysis import analyse_stress
        from medvlm_audit.suites.stress.sections import stress_result

        res = analyse_stress(tidy, B=B, seed=seed, plan_skips=skipped)
        probe_set = ",".join(sorted(tidy["probe_set"].dropna().astype(str).unique())) or "stress"
        return stress_result(res, probe_set, fmt=fmt, designed=designed)

