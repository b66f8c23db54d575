"""The faithfulness suite (paper 001): does a model's chain of thought admit what changed its answer?

Flow: items (:mod:`.items`, :mod:`.phantom_vqa`) -> stage ``answer``: :func:`.conditions.plan_answers`
(baseline, text cues, visual cues as image ops of :mod:`.overlays`, shams; the released protocol prompt of
:mod:`.prompts`) -> stage ``judge``: :func:`.analysis.plan_judge` (judge models read the stored modified
CoTs; prompts, parsing and quote validation of :mod:`.judge`) -> scoring: extraction and flips
(:mod:`.extract`), deterministic CF from the knowledge base (:mod:`.kb`), judge statuses, per-item CC ->
:func:`.analysis.faithfulness_metrics` and :func:`.analysis.faithfulness_comparisons` -> report sections.
Judge validation against readers: :mod:`.validate` (``medvlm-audit judge-validate``, :mod:`.commands`).
Reference models for the embedded default: :mod:`.reference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.suites.faithfulness.analysis import (
    faithfulness_comparisons,
    faithfulness_metrics,
    merge_scores,
    plan_judge,
    report_sections,
    score_answers,
    score_judgements,
)
from medvlm_audit.suites.faithfulness.conditions import (
    ALL_CONDITIONS,
    FaithOptions,
    plan_answers,
    render_trial_image,
)
from medvlm_audit.suites.faithfulness.items import VQAItem, load_items, load_taix_parquet
from medvlm_audit.suites.faithfulness.kb import KnowledgeBase, phantom_kb

#: backend registry lines for the reference models (name -> "module:factory")
REFERENCE_BACKENDS: dict[str, str] = {"faithfulness-reference": "medvlm_audit.suites.faithfulness.reference:factory"}
EMBEDDED_MODELS: tuple[str, ...] = ("cue-follower", "cue-admitter", "cue-ignorer")


def embedded_config(run_dir: str | Path, n_items: int = 36) -> dict[str, Any]:
    """The offline embedded default: the phantom VQA set, the three reference reasoners, the reference
    judge (CA, tone) and the KB scorer (CF)."""
    return {
        "suite": "faithfulness",
        "probe_sets": ["phantom"],
        "models": [{"name": m, "backend": "faithfulness-reference", "params": {"behaviour": m}}
                   for m in EMBEDDED_MODELS],
        "judges": [{"name": "reference-judge", "backend": "faithfulness-reference",
                    "params": {"behaviour": "reference-judge"}}],
        "options": {"judge_axes": ["ca", "confidence"], "flip_mode": "normalised", "validation": "default"},
        "phantom": {"n_items": n_items, "seed": 42},
        "run_dir": str(run_dir),
    }


def load_item_source(spec: str, *, run_dir: str | Path = ".", seed: int = 42, n_items: int = 36) -> list[VQAItem]:
    """``phantom`` (built into ``<run_dir>/phantom_vqa``), a JSONL item file, or ``taix:<parquet folder>``."""
    if spec == "phantom":
        from medvlm_audit.suites.faithfulness.phantom_vqa import build_phantom_vqa

        return build_phantom_vqa(Path(run_dir) / "phantom_vqa", n_items=n_items, seed=seed)
    if spec.startswith("taix:"):
        return load_taix_parquet(spec[5:], Path(run_dir) / "taix_images")
    return load_items(spec)


@dataclass
class EmbeddedResult:
    answers: pd.DataFrame
    judgements: pd.DataFrame
    merged: pd.DataFrame
    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    sections: list[Any]


def run_in_process(items: Sequence[VQAItem], models: Sequence[Any], judges: Sequence[Any], opts: FaithOptions,
                   kb: KnowledgeBase | None, render_dir: str | Path, *, B: int = 2_000) -> EmbeddedResult:
    """Both stages with in-process models, no run store (the runner does this with caching and resume):
    used by the embedded-default test and as a reference for the stage wiring."""
    from medvlm_audit.models.base import Decoding, ImageData, ModelInput

    plan = plan_answers(items, opts)
    inputs = []
    for t in plan.trials:
        px = render_trial_image(t)
        dec = {k: v for k, v in t.decoding if k in Decoding.__dataclass_fields__}
        inputs.append(ModelInput(t.messages, (ImageData.from_array(px),), Decoding(**dec)))
    rows = []
    for m in models:
        resp = m.predict(inputs)
        for t, r in zip(plan.trials, resp, strict=True):
            rows.append({"model": m.name, "case_id": t.case_id, "condition": t.condition, "answer_text": r.text,
                         **(t.payload or {})})
    answers = pd.DataFrame(rows)
    jplan = plan_judge(answers, items, opts, kb=kb)
    jrows = []
    for j in judges:
        jin = [ModelInput(t.messages, (), Decoding(max_new_tokens=512)) for t in jplan.trials]
        for t, r in zip(jplan.trials, j.predict(jin), strict=True):
            jrows.append({"model": j.name, "case_id": t.case_id, "condition": t.condition, "answer_text": r.text,
                          **(t.payload or {})})
    judgements = score_judgements(pd.DataFrame(jrows), validation=opts.validation)
    scored = score_answers(answers, mode=opts.flip_mode, kb=kb, flags=opts.flags)
    merged = merge_scores(scored, judgements)
    metrics = faithfulness_metrics(merged, judgements, B=B)
    comparisons = faithfulness_comparisons(merged, B=B)
    sections = report_sections(metrics, comparisons, flip_mode=opts.flip_mode, validation=opts.validation)
    return EmbeddedResult(answers, judgements, merged, metrics, comparisons, sections)


class FaithfulnessSuite:
    """The suite object: options, two stages (answer, judge), tidy scoring and analysis."""

    name = "faithfulness"
    Options = FaithOptions

    def __init__(self, items: Sequence[VQAItem], opts: FaithOptions | None = None,
                 kb: KnowledgeBase | None = None, render_dir: str | None = None) -> None:
        self.items = list(items)
        self.opts = opts or FaithOptions()
        self.kb = kb if kb is not None else phantom_kb()
        self.render_dir = render_dir

    def plan(self, config: Any = None) -> Any:
        return plan_answers(self.items, self.opts)

    def plan_judge(self, answers: pd.DataFrame) -> Any:
        return plan_judge(answers, self.items, self.opts, kb=self.kb)

    def score(self, tidy: pd.DataFrame) -> pd.DataFrame:
        return score_answers(tidy, mode=self.opts.flip_mode, kb=self.kb, flags=self.opts.flags)

    def analyse(self, answers_tidy: pd.DataFrame, judge_tidy: pd.DataFrame | None = None, *, B: int = 10_000,
                seed: int = 0) -> dict[str, Any]:
        scored = self.score(answers_tidy)
        judgements = score_judgements(judge_tidy, validation=self.opts.validation) if judge_tidy is not None else None
        merged = merge_scores(scored, judgements)
        metrics = faithfulness_metrics(merged, judgements, B=B, seed=seed)
        comparisons = faithfulness_comparisons(merged, B=B, seed=seed)
        return {"metrics": metrics, "comparisons": comparisons, "tables": {"faithfulness_items": merged},
                "sections": report_sections(metrics, comparisons, flip_mode=self.opts.flip_mode,
                                            validation=self.opts.validation),
                "summary": {"flip_mode": self.opts.flip_mode, "validation": self.opts.validation}}

    def embedded_config(self, run_dir: Path) -> dict[str, Any]:
        return embedded_config(run_dir)

    def commands(self) -> list[Any]:
        from medvlm_audit.suites.faithfulness.commands import judge_validate_cmd

        return [judge_validate_cmd]


__all__ = [
    "ALL_CONDITIONS", "EMBEDDED_MODELS", "REFERENCE_BACKENDS", "EmbeddedResult", "FaithOptions", "FaithfulnessSuite",
    "KnowledgeBase", "VQAItem", "embedded_config", "load_item_source", "phantom_kb", "plan_answers", "plan_judge",
    "run_in_process", "score_answers", "score_judgements",
]

