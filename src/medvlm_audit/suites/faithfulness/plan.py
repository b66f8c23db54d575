"""The faithfulness suite's options and its two stages' planners.

* ``answer``: every item source of ``probe_sets`` (``phantom``, a JSONL item file or a folder holding
  ``items.jsonl``, ``taix:<parquet folder>``) -> items x conditions -> trials
  (:func:`~medvlm_audit.suites.faithfulness.conditions.plan_answers`); the run's ``models`` answer.
* ``judge``: the stage-1 answers stored in the run store (subject models only) -> one trial per modified
  CoT and judge axis (:func:`~medvlm_audit.suites.faithfulness.analysis.plan_judge`); the ``judges``
  option's models answer. A killed judge stage resumes like any other: the judge trials are a pure
  function of the stored answers, and stage 1 asks nothing again.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field, field_validator

from medvlm_audit.config import ModelSpec
from medvlm_audit.errors import ConfigError
from medvlm_audit.suites.base import Plan, StageContext
from medvlm_audit.suites.faithfulness.conditions import FaithOptions, plan_answers
from medvlm_audit.suites.faithfulness.items import VQAItem, load_items, load_taix_parquet
from medvlm_audit.suites.faithfulness.kb import KnowledgeBase, phantom_kb


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


def source_name(spec: str) -> str:
    """The probe-set name of an item source: ``phantom``, ``taix`` or the file / folder stem."""
    if spec == "phantom":
        return "phantom"
    if spec.startswith("taix:"):
        return "taix"
    p = Path(spec)
    return p.name if p.is_dir() else p.stem


def load_item_source(spec: str, *, run_dir: str | Path = ".", seed: int = 42, n_items: int = 36) -> list[VQAItem]:
    """``phantom`` (built once into ``<run_dir>/phantom_vqa``, reused while its parameters match), a JSONL
    item file or a folder holding ``items.jsonl``, or ``taix:<parquet folder>``."""
    if spec == "phantom":
        from medvlm_audit.atomic import write_files_atomic
        from medvlm_audit.suites.faithfulness.embedded import build_phantom_vqa

        out = Path(run_dir) / "phantom_vqa"
        params = {"n_items": n_items, "seed": seed}
        marker = out / "params.json"
        if (out / "items.jsonl").exists() and marker.exists():
            try:
                same = json.loads(marker.read_text()) == params
            except (OSError, ValueError):
                same = False
            if same:
                return load_items(out / "items.jsonl")
        items = build_phantom_vqa(out, n_items=n_items, seed=seed)
        write_files_atomic(out, [("params.json", json.dumps(params).encode())])
        return items
    if spec.startswith("taix:"):
        return load_taix_parquet(spec[5:], Path(run_dir) / "taix_images")
    p = Path(spec)
    return load_items(p / "items.jsonl" if p.is_dir() else p)


def condition_options(ctx: StageContext) -> FaithfulnessOptions:
    """The suite's options with the run's construction seed."""
    return ctx.options.model_copy(update={"seed": int(ctx.config.seed)})  # type: ignore[return-value]


def knowledge_base(opts: FaithfulnessOptions) -> KnowledgeBase:
    return KnowledgeBase.from_json(opts.kb) if opts.kb else phantom_kb()


def plan_answer_stage(ctx: StageContext) -> Plan:
    """Stage 1: every item source x condition."""
    opts = condition_options(ctx)
    plan = Plan()
    names: set[str] = set()
    for spec in ctx.config.probe_sets:
        name = source_name(spec)
        if name in names:
            raise ConfigError(f"probe_sets: two item sources are both named {name!r}")
        names.add(name)
        items = load_item_source(spec, run_dir=ctx.run_dir, seed=opts.seed, n_items=opts.phantom_items)
        plan.extend(plan_answers(items, opts, name=name, source=spec))
    return plan


def answer_models(ctx: StageContext) -> list[ModelSpec]:
    return list(ctx.config.models)


def judge_models(ctx: StageContext) -> list[ModelSpec]:
    """The ``judges`` option; a judge may not share a name with a subject model (the store keys by name)."""
    opts: FaithfulnessOptions = ctx.options  # type: ignore[assignment]
    subjects = {m.name for m in ctx.config.models}
    clash = [j.name for j in opts.judges if j.name in subjects]
    if clash:
        raise ConfigError(f"judges {clash} share a name with a model of the answer stage; rename them")
    return list(opts.judges)


def stored_answers(store: Any, models: set[str] | None = None) -> pd.DataFrame:
    """The stage-1 answers in a run store: trials whose payload says ``stage: answer`` (answered or errored;
    never-asked trials left out), optionally of the named models only."""
    from medvlm_audit.export import raw_table

    raw = raw_table(store)
    stage = [json.loads(p).get("stage") if isinstance(p, str) else None for p in raw["payload"]]
    raw = raw[(pd.Series(stage, index=raw.index) == "answer") & (raw["error_kind"].fillna("") != "not_asked")]
    if models is not None:
        raw = raw[raw["model"].isin(models)]
    return raw.reset_index(drop=True)


def plan_judge_stage(ctx: StageContext) -> Plan:
    """Stage 2: the judges read the stored modified CoTs of this run's models."""
    opts = condition_options(ctx)
    if not opts.judges or ctx.store is None:
        return Plan()
    # imported only when there is a judge stage: the analysis module loads scipy (~0.5 s per invocation)
    from medvlm_audit.suites.faithfulness.analysis import plan_judge

    answers = stored_answers(ctx.store, {m.name for m in ctx.config.models})
    if not len(answers):
        return Plan()
    answers.loc[answers["error_kind"].notna(), "answer_text"] = None  # an errored call has no CoT to judge
    plan = Plan()
    for ps, g in answers.groupby("probe_set", sort=True):
        plan.extend(plan_judge(g, None, opts, kb=knowledge_base(opts), name=str(ps)))
    if opts.judge_max_new_tokens != 512:
        plan.trials = [replace(t, decoding=tuple((k, opts.judge_max_new_tokens if k == "max_new_tokens" else v)
                                                 for k, v in t.decoding)) for t in plan.trials]
    return plan
