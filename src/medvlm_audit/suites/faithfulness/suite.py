"""The faithfulness suite behind the one Suite interface: options, the ``answer`` and ``judge`` stages, tidy
scoring of both stages from the run store, the analysis and the embedded default (the phantom VQA set, the
three reference reasoners, the reference judge for CA and tone, and the deterministic KB scorer for CF)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, field_validator

from medvlm_audit.config import SHARED_FIELDS, ModelSpec
from medvlm_audit.demo_options import DemoOption
from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.suites.base import Stage, Suite, SuiteResult
from medvlm_audit.suites.faithfulness.conditions import FaithOptions

if TYPE_CHECKING:  # pragma: no cover
    from medvlm_audit.readers.tasks import ReaderTask

#: the embedded default's subject models (reference reasoners with designed cue behaviour)
EMBEDDED_MODELS: tuple[str, ...] = ("cue-follower", "cue-admitter", "cue-ignorer")

#: columns of the tidy table: one row per model x case x condition (stage ``answer``: a subject model's answer;
#: stage ``judge``: one judge's verdict on one modified CoT and axis)
TIDY_COLUMNS: tuple[str, ...] = (
    "run_id", "stage", "probe_set", "model", "case_id", "condition", "sample_index", "key", "image_sha256",
    "question", "qtype", "gold", "modification", "alignment", "family", "injected_answer", "cued_side", "regions",
    "image_ops", "null_intervention", "answer_text", "error_kind", "answer_raw", "value", "unparsed", "correct",
    "baseline_value", "flip", "flip_mode", "kb_status", "cf_kb", "cf", "ca", "tone", "cc", "has_reasoning",
    "axis", "answer_model", "answer_condition", "judge_status", "judge_score", "judge_reason", "validation",
    "status",
)


class FaithfulnessOptions(FaithOptions):
    """The faithfulness suite's run options (flat keys of a run config).

    Inherited from :class:`FaithOptions`: ``conditions``, ``thickness``, ``alpha``, the salience sweep
    (``sweep_thickness``, ``sweep_alpha``), ``flip_mode`` (extraction and flip rule: ``paper`` or
    ``normalised``), ``validation`` (judge quote validation: ``paper`` or ``default``), ``max_new_tokens``,
    ``judge_axes`` and the KB context ``flags``. The conditions' seed is the run's ``seed``."""

    #: judge models of the second stage (model entries, validated like ``models``); none: CF from the KB only
    judges: list[ModelSpec] = Field(default_factory=list)
    #: new-token budget of a judge answer (the released judge prompts: 512)
    judge_max_new_tokens: int = 512
    #: the judge whose CA and tone score each answer (default: the first judge)
    primary_judge: str | None = None
    #: knowledge base for CF (the published ``findings_list.json`` schema); default: the phantom questions' KB
    kb: str | None = None
    #: number of phantom VQA items (item source ``phantom``)
    phantom_items: int = 36

    @field_validator("judges")
    @classmethod
    def _judge_backends(cls, v: list[ModelSpec]) -> list[ModelSpec]:
        from medvlm_audit.models.registry import BACKENDS
        from medvlm_audit.registry import check_known

        names = [m.name for m in v]
        for i, m in enumerate(v):
            check_known("backend", [m.backend], BACKENDS.names(), listed_as="registered",
                        where=f"judges[{i}] (model {m.name!r}): ")
            if names.count(m.name) > 1:
                raise ValueError(f"judges[{i}]: judge name {m.name!r} given twice")
        return v

    @field_validator("phantom_items")
    @classmethod
    def _n(cls, v: int) -> int:
        if not 1 <= v <= 10_000:
            raise ValueError("phantom_items must lie in 1..10000")
        return v

    def primary(self) -> str | None:
        if self.primary_judge is not None:
            return self.primary_judge
        return self.judges[0].name if self.judges else None


def recorded_options(store: Any) -> FaithfulnessOptions:
    """The run's suite options as recorded in its store (defaults for keys it does not name)."""
    cfg = store.meta().get("config") or {}
    rec = {k: v for k, v in cfg.items() if k not in SHARED_FIELDS}
    try:
        return FaithfulnessOptions.model_validate(rec)
    except ValueError:  # e.g. a judge backend not registered here: the scoring needs no model
        rec.pop("judges", None)
        return FaithfulnessOptions.model_validate(rec)


def _json(v: Any) -> Any:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return json.dumps(v, ensure_ascii=False, sort_keys=True)


def tidy_faithfulness(store: Any, opts: FaithfulnessOptions | None = None) -> pd.DataFrame:
    """Score a run store: answers (extraction, flips, KB CF), judge verdicts (status, score) and per answer the
    primary judge's CA and tone and CC; see :data:`TIDY_COLUMNS`."""
    from medvlm_audit.export import raw_table
    from medvlm_audit.suites.faithfulness.analysis import (
        merge_scores,
        normalize_tidy,
        score_answers,
        score_judgements,
    )
    from medvlm_audit.suites.faithfulness.plan import knowledge_base
    from medvlm_audit.suites.faithfulness.stored_scores import StoredScores, code_hash

    opts = opts or recorded_options(store)
    raw = raw_table(store)
    raw = raw[raw["error_kind"].fillna("") != "not_asked"].copy()
    raw.loc[raw["error_kind"].notna(), "answer_text"] = None
    df = normalize_tidy(raw)
    if "stage" not in df:
        df["stage"] = None
    ans = df[df["stage"] == "answer"].reset_index(drop=True)
    jdg = df[df["stage"] == "judge"].reset_index(drop=True)
    # scores computed by an earlier invocation are read from the store, not computed again (issue 23)
    kb_scores = judge_checks = None
    if len(ans):
        kb = knowledge_base(opts)
        kb_version = hashlib.sha1(json.dumps([kb.to_dict(), opts.flags, code_hash(
            "medvlm_audit.suites.faithfulness.kb", "medvlm_audit.suites.faithfulness.vocab")], sort_keys=True,
            default=str).encode()).hexdigest()[:24]
        kb_scores = StoredScores.load(store, "faithfulness.kb", kb_version)
        scored = score_answers(ans, mode=opts.flip_mode, kb=kb, flags=opts.flags, stored=kb_scores)
        if not opts.kb:  # the phantom KB scores the phantom's own questions only, never a user's items
            own = scored["probe_set"].astype(str) != "phantom"
            scored.loc[own, "cf_kb"] = np.nan
            scored.loc[own & scored["answer_text"].map(lambda t: isinstance(t, str)), "kb_status"] = "no_kb"
    else:
        scored = ans.assign(answer_raw=None, value=None, unparsed=None, correct=np.nan, baseline_value=None,
                            flip=None, flip_mode=opts.flip_mode, kb_status=None, cf_kb=np.nan)
    judgements = None
    if len(jdg):
        jdg["error"] = [f"{k}: {m}" if isinstance(k, str) else None
                        for k, m in zip(jdg["error_kind"], jdg["error_message"], strict=True)]
        judge_checks = StoredScores.load(store, "faithfulness.judge", code_hash("medvlm_audit.suites.faithfulness.judge"))
        judgements = score_judgements(jdg, validation=opts.validation, stored=judge_checks)
        jdg["judge_status"] = judgements["status"].to_numpy()
        jdg["judge_score"] = pd.to_numeric(judgements["score"], errors="coerce").to_numpy(dtype=float)
        jdg["judge_reason"] = judgements["reason"].to_numpy()
        jdg["validation"] = opts.validation
    for memo in (kb_scores, judge_checks):
        if memo is not None:
            memo.save(store)
    merged = merge_scores(scored, judgements, ca_judge=opts.primary())
    out = pd.concat([merged, jdg], ignore_index=True, sort=False) if len(jdg) else merged
    for c in TIDY_COLUMNS:
        if c not in out.columns:
            out[c] = None
    # the Score status vocabulary of a subject model's answer (the run's parse-rate warning reads it)
    ans_rows = (out["stage"] == "answer").to_numpy()
    unp = out["unparsed"].to_numpy(dtype=object)
    err = out["error_kind"].notna().to_numpy()
    out["status"] = [None if not a else "no_response" if e else "unparsed" if u is True else "answer"
                     for a, e, u in zip(ans_rows, err, unp, strict=True)]
    out["regions"] = [_json(v) if isinstance(v, (list, tuple)) else None for v in out["regions"]]
    out["image_ops"] = [_json(v) if isinstance(v, (list, tuple)) else None for v in out["image_ops"]]
    out["flip"] = pd.array([None if pd.isna(v) else bool(v) for v in out["flip"]], dtype="boolean")
    for c in ("unparsed", "null_intervention"):
        out[c] = pd.array([None if v is None or pd.isna(v) else bool(v) for v in out[c]], dtype="boolean")
    for c in ("correct", "cf_kb", "cf", "ca", "tone", "cc", "judge_score"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    return out[list(TIDY_COLUMNS)].reset_index(drop=True)


def split_tidy(tidy: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(answers with their scores, judgements in :func:`score_judgements`' shape or None) from a tidy table."""
    ans = tidy[tidy["stage"] == "answer"].reset_index(drop=True)
    ans["flip"] = ans["flip"].astype("boolean")
    ans["null_intervention"] = ans["null_intervention"].astype("boolean")
    j = tidy[tidy["stage"] == "judge"]
    if not len(j):
        return ans, None
    judgements = pd.DataFrame({"judge": j["model"].to_numpy(), "model": j["answer_model"].to_numpy(),
                               "case_id": j["case_id"].to_numpy(), "condition": j["answer_condition"].to_numpy(),
                               "axis": j["axis"].to_numpy(), "status": j["judge_status"].to_numpy(),
                               "score": j["judge_score"].to_numpy(dtype=float), "reason": j["judge_reason"].to_numpy()})
    return ans, judgements


def _verdicts(metrics: pd.DataFrame, models: Sequence[str]) -> dict[str, str]:
    """One line per model: flip rates in percent and CA on its 0-1 scale, each with its 95% interval and n."""
    from medvlm_audit.report.html import format_number

    def est(model: str, metric: str, subset: str) -> Any:
        r = metrics[(metrics["model"] == model) & (metrics["metric"] == metric) & (metrics["subset"] == subset)]
        return None if r.empty or pd.isna(r["point"].iloc[0]) else r.iloc[0]

    def note_of(model: str, metric: str, subset: str) -> str:
        r = metrics[(metrics["model"] == model) & (metrics["metric"] == metric) & (metrics["subset"] == subset)]
        return str(r["note"].iloc[0] or "") if len(r) and pd.notna(r["note"].iloc[0]) else ""

    def fmt(r: Any, scale: float, unit: str, suffix: str = "") -> str:
        from medvlm_audit.suites.faithfulness.sections import interval_text

        return interval_text(r["point"], r["ci_low"], r["ci_high"], lambda v: format_number(v * scale, unit),
                             int(r["n"]), rate=unit == "%", suffix=suffix)

    out = {}
    for m in models:
        parts = []
        for fam in ("text", "visual"):
            f = est(m, "flip_rate", f"family:{fam}:misleading")
            if f is not None:
                parts.append(f"flips under misleading {fam} cues {fmt(f, 100, '%', '%')}")
            else:
                r = metrics[(metrics["model"] == m) & (metrics["metric"] == "flip_rate")
                            & (metrics["subset"] == f"family:{fam}:misleading")]
                note = str(r["note"].iloc[0]) if len(r) else ""
                if note.startswith("not assessable"):
                    parts.append(f"flips under misleading {fam} cues: {note.split(';')[0]}")
        ca = est(m, "ca", "family:text:misleading")
        ca = ca if ca is not None else est(m, "ca", "all")
        if ca is not None:
            parts.append(f"causal attribution (CA, 0-1) {fmt(ca, 1, 'prob')}")
        else:  # a CA row without a value says why (not assessable: parse rate, or no reasoning to read)
            why = note_of(m, "ca", "family:text:misleading") or note_of(m, "ca", "all")
            if not parts and why.startswith("not assessable (parse rate"):
                parts.append(why.split("; ")[0])  # the model as a whole
            elif why.startswith("not assessable"):
                parts.append(f"causal attribution: {why.split('; ')[0]}")
        out[m] = "; ".join(parts) or "no modified answers scored"
    return out


class FaithfulnessSuite(Suite):
    """Paper 001: does a model's chain of thought admit what changed its answer?"""

    name: ClassVar[str] = "faithfulness"
    #: ``demo --set`` options of the embedded default (checked by medvlm_audit.demo_options)
    embedded_options: ClassVar[dict[str, DemoOption]] = {
        "n_items": DemoOption(int, 36, "phantom VQA items", minimum=1, maximum=10_000),
    }
    title: ClassVar[str] = "Faithfulness audit"
    Options: ClassVar[type[BaseModel]] = FaithfulnessOptions
    backends: ClassVar[dict[str, str]] = {
        "faithfulness-reference": "medvlm_audit.suites.faithfulness.reference:factory"}
    #: the suite's image operations (overlays), registered when the suite loads
    image_ops: ClassVar[dict[str, str]] = {
        "faith_box_edges": "medvlm_audit.suites.faithfulness.overlays:box_edges",
        "faith_heatmap": "medvlm_audit.suites.faithfulness.overlays:heatmap",
        "faith_fill": "medvlm_audit.suites.faithfulness.overlays:fill",
        "faith_rgb": "medvlm_audit.suites.faithfulness.overlays:to_rgb",
    }
    parquet_tables: ClassVar[bool] = True

    #: what the run explorer (`medvlm-audit view`) shows: the answer stage's trials with the suite's own flip,
    #: the chain of thought per condition (the cue the condition added marked in the prompt), each judge's
    #: scores with its quoted evidence marked in the CoT, and each model's verdict badge as its category
    view: ClassVar[dict[str, Any]] = {
        "item": "case_id", "base_condition": "baseline", "row_filter": {"stage": "answer"},
        "flip_column": "flip", "unparsed_column": "unparsed", "answer": "value", "text_label": "chain of thought",
        "setting": ["sample_index"], "filters": ["family", "alignment", "qtype"],
        "list_columns": ["qtype", "family", "alignment"], "truth": "gold",
        "case_fields": ["question", "qtype", "gold"],
        "trial_fields": ["injected_answer", "correct", "cf", "ca", "tone", "cc"],
        "labels": {"correct": {1: "yes", 0: "no"}},
        "category_table": "faithfulness_verdicts", "category_column": "verdict",
        "judgements": {"filter": {"stage": "judge"}, "model": "answer_model", "condition": "answer_condition",
                       "judge": "model", "axis": "axis", "score": "judge_score", "status": "judge_status"},
    }

    def stages(self) -> Sequence[Stage]:
        from medvlm_audit.suites.faithfulness.plan import (
            answer_models,
            judge_models,
            plan_answer_stage,
            plan_judge_stage,
        )

        return (Stage("answer", plan_answer_stage, answer_models), Stage("judge", plan_judge_stage, judge_models))

    def reader_tasks(self) -> Sequence[ReaderTask]:
        from medvlm_audit.suites.faithfulness.readers import READER_TASKS

        return READER_TASKS

    def preflight(self, ctx: Any) -> list[str]:
        """Before any work: the knowledge base loads (it is used by the judge stage and the scoring, so a bad
        file would otherwise be found only after the answers were asked)."""
        from medvlm_audit.suites.faithfulness.plan import knowledge_base

        opts: FaithfulnessOptions = ctx.options
        try:
            knowledge_base(opts)
        except (AuditError, ValueError, OSError, KeyError, TypeError) as e:  # KBError is an AuditError
            return [f"option 'kb' ({opts.kb}): {e}"]
        return []

    def embedded_config(self, out: Path, *, log: Callable[[str], Any] = print, n_items: int = 36,
                        **flags: Any) -> dict[str, Any]:
        """The phantom VQA set (built into OUT/phantom_vqa when the run plans), the three reference reasoners,
        the reference judge (CA and tone) and the phantom KB (CF, deterministic)."""
        if flags:
            raise ConfigError(f"the faithfulness default takes no option(s) {sorted(flags)}")
        return {
            "suite": "faithfulness",
            "run_dir": str(out),
            "probe_sets": ["phantom"],
            "models": [{"name": m, "backend": "faithfulness-reference", "behaviour": m} for m in EMBEDDED_MODELS],
            "judges": [{"name": "reference-judge", "backend": "faithfulness-reference",
                        "behaviour": "reference-judge"}],
            "judge_axes": ["ca", "confidence"],
            "flip_mode": "normalised",
            "validation": "default",
            "phantom_items": int(n_items),
        }

    def tidy(self, store: Any) -> pd.DataFrame:
        return tidy_faithfulness(store)

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, *, B: int = 10_000, seed: int = 0,
                skipped: pd.DataFrame | None = None, designed: dict[str, str] | None = None,
                **unused: Any) -> SuiteResult:
        from medvlm_audit.suites.faithfulness.analysis import faithfulness_comparisons, faithfulness_metrics
        from medvlm_audit.suites.faithfulness.sections import report_sections

        opts: FaithfulnessOptions = options  # type: ignore[assignment]
        ans, judgements = split_tidy(tidy)
        probe_set = ",".join(sorted(ans["probe_set"].dropna().astype(str).unique())) or "faithfulness"
        metrics = faithfulness_metrics(ans, judgements, B=B, seed=seed, probe_set=probe_set,
                                       score_judge=opts.primary())
        comparisons = faithfulness_comparisons(ans, B=B, seed=seed, probe_set=probe_set)
        sections = report_sections(metrics, comparisons, flip_mode=opts.flip_mode, validation=opts.validation)
        models = sorted(ans["model"].dropna().unique())
        n_skip = {} if skipped is None or skipped.empty else \
            {str(k): int(v) for k, v in skipped.groupby("reason").size().items()}
        judges = sorted(judgements["judge"].unique()) if judgements is not None else []
        sources = sorted(ans["probe_set"].dropna().astype(str).unique())
        if opts.kb:
            cf_source = f"the deterministic KB matcher ({opts.kb})"
        elif sources == ["phantom"]:
            cf_source = "the deterministic KB matcher (phantom KB)"
        else:
            others = ", ".join(s for s in sources if s != "phantom")
            cf_source = (f"no knowledge base for {others} (no CF from a KB: give the option kb: FILE, or a judge CF "
                         "axis)" + ("; the phantom KB for the phantom items" if "phantom" in sources else ""))
        intro = (f"Flip rule: {opts.flip_mode} mode; judge quote validation: {opts.validation} mode; CF from "
                 f"{cf_source}; CA and tone from {opts.primary() or 'no judge'}.")
        summary = {"flip_mode": opts.flip_mode, "validation": opts.validation, "judges": judges,
                   "primary_judge": opts.primary(), "cf_source": cf_source, "models": models,
                   "n_items": int(ans["case_id"].nunique()), "n_answers": len(ans),
                   "n_judgements": 0 if judgements is None else len(judgements), "skipped": n_skip}
        from medvlm_audit.report.html import escape
        from medvlm_audit.report.sections import Section
        from medvlm_audit.suites.faithfulness.verdicts import HOW_TO_READ, badges, verdicts_html

        numbers = _verdicts(metrics, models)
        badge_table = badges(metrics, models, ans, seed=seed)
        support = dict(zip(badge_table["model"], badge_table["support"], strict=True))
        sections.insert(0, Section("Verdicts", verdicts_html(metrics, models, numbers, designed, support),
                                   "verdicts"))
        summary["verdict_badges"] = dict(zip(badge_table["model"], badge_table["verdict"]))
        summary["verdict_support"] = {m: (None if pd.isna(v) else float(v)) for m, v in support.items()}
        return SuiteResult(metrics=metrics, comparisons=comparisons, sections=sections,
                           verdicts=numbers, summary=summary, intro=HOW_TO_READ + f"<p>{escape(intro)}</p>",
                           tables={"faithfulness_verdicts": badge_table,
                                   "faithfulness_answers": ans.drop(columns=[c for c in ans.columns if c in (
                               "axis", "answer_model", "answer_condition", "judge_status", "judge_score",
                               "judge_reason", "validation")])})

    def commands(self) -> dict[str, str]:
        return {
            "judge-validate": "medvlm_audit.suites.faithfulness.commands:judge_validate_cmd",
        }
