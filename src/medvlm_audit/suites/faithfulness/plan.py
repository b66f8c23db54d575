"""The faithfulness suite's two stages' planners. The run options they read (``ctx.options``) are the suite's
:class:`~medvlm_audit.suites.faithfulness.suite.FaithfulnessOptions`, typed ``Any`` here: :mod:`.suite` imports
this module.

* ``answer``: every item source of ``probe_sets`` (``phantom``, a JSONL item file or a folder holding
  ``items.jsonl``, ``taix:<parquet folder>``) -> items x conditions -> trials
  (:func:`~medvlm_audit.suites.faithfulness.conditions.plan_answers`); the run's ``models`` answer.
* ``judge``: the stage-1 answers stored in the run store (subject models only) -> one trial per modified
  CoT and judge axis (:func:`plan_judge`); the ``judges``
  option's models answer. A killed judge stage resumes like any other: the judge trials are a pure
  function of the stored answers, and stage 1 asks nothing again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from medvlm_audit.config import ModelSpec
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import Message
from medvlm_audit.suites.base import Plan, Skip, StageContext, Trial
from medvlm_audit.suites.faithfulness.conditions import FaithOptions, plan_answers
from medvlm_audit.suites.faithfulness.items import VQAItem, load_items, load_taix_parquet
from medvlm_audit.suites.faithfulness.judge import JUDGE_SYSTEM, judge_prompt
from medvlm_audit.suites.faithfulness.kb import KnowledgeBase, phantom_kb


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


def condition_options(ctx: StageContext) -> Any:
    """The suite's options with the run's construction seed."""
    return ctx.options.model_copy(update={"seed": int(ctx.config.seed)})  # type: ignore[return-value]


def knowledge_base(opts: Any) -> KnowledgeBase:
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
        plan.extend(plan_answers(items, opts, name=name, source=spec, run_dir=ctx.run_dir))
    return plan


def answer_models(ctx: StageContext) -> list[ModelSpec]:
    return list(ctx.config.models)


def judge_models(ctx: StageContext) -> list[ModelSpec]:
    """The ``judges`` option; a judge may not share a name with a subject model (the store keys by name)."""
    opts = ctx.options
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


JUDGE_DECODING: tuple[tuple[str, Any], ...] = (("max_new_tokens", 512), ("temperature", 0.0), ("top_p", 1.0),
                                               ("num_beams", 1), ("logprobs", False))


def plan_judge(answers: pd.DataFrame, items: Sequence[VQAItem] | None = None,
               opts: FaithOptions | None = None, *, kb: KnowledgeBase | None = None,
               name: str = "faithfulness", axes: Sequence[str] | None = None) -> Plan:
    """Stage 2 ("judge"): one trial per stored modified CoT and axis (pure function of the answers table).

    ``answers`` needs ``model, case_id, condition, answer_text`` and the answer payload fields (``question``,
    ``gold``), or a JSON ``payload``. Baseline answers are not judged; a missing CoT (no response) is a Skip.
    A CF trial carries the question's KB entry (``kb.qsk``) and the gold answer; a question without a KB
    entry gets empty lists, as released. The trial's condition is ``judge:<axis>:<model>:<condition>``.
    """
    from medvlm_audit.suites.faithfulness.analysis import cot_of, normalize_tidy

    opts = opts or FaithOptions()
    axes = list(axes if axes is not None else opts.judge_axes)
    df = normalize_tidy(answers)
    plan = Plan()
    # each (axis, question, gold) prompt is written once around a marker and every CoT spliced in at the marker
    # (the CF prompt serialises the question's KB entry: once per question, not once per answer)
    mark = f"@medvlm-cot-{os.urandom(8).hex()}@"
    around: dict[tuple[str, Any, Any], tuple[str, str]] = {}
    reasoning = df["reasoning"].tolist() if "reasoning" in df else [None] * len(df)
    cols = [df[c].tolist() for c in ("condition", "model", "case_id", "question", "gold", "answer_text")]
    for (condition, model, case_id, question, gold, text), rsn in zip(zip(*cols, strict=True), reasoning, strict=True):
        if condition == "baseline":
            continue
        cot = cot_of(text, rsn)
        for axis in axes:
            cond = f"judge:{axis}:{model}:{condition}"
            if not isinstance(cot, str) or not cot.strip():
                plan.skipped.append(Skip(name, case_id, cond, "no stored CoT to judge"))
                continue
            parts = around.get((axis, question, gold))
            if parts is None:
                qsk = kb.qsk(question, gold) if (axis == "cf" and kb is not None) else None
                head, found, tail = judge_prompt(axis, mark, answer=gold, qsk=qsk, flags=opts.flags).partition(mark)
                if not found or mark in tail:  # cannot happen: every prompt quotes the CoT once
                    raise AssertionError(f"judge prompt {axis!r} does not quote the CoT exactly once")
                parts = around[(axis, question, gold)] = (head, tail)
            prompt = parts[0] + cot + parts[1]
            payload = {"stage": "judge", "axis": axis, "answer_model": model, "answer_condition": condition,
                       "cot": cot, "question": question, "gold": gold}
            plan.trials.append(Trial(name, case_id, cond, (Message("system", JUDGE_SYSTEM),
                                                            Message("user", prompt)), (), 0, payload, JUDGE_DECODING))
    return plan


def plan_judge_stage(ctx: StageContext) -> Plan:
    """Stage 2: the judges read the stored modified CoTs of this run's models."""
    opts = condition_options(ctx)
    if not opts.judges or ctx.store is None:
        return Plan()
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
