"""The grounding suite (paper 000): original / swap / target_mask / irrelevant_mask / no_image, at 224 and
optionally 512, under the default prompt and optionally the terse and radiologist phrasings."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message
from medvlm_audit.plan import CompactTrials
from medvlm_audit.suites.base import Plan, PlanSource, Skip, Trial
from medvlm_audit.suites.grounding.conditions import IMAGE_OPS, Condition
from medvlm_audit.suites.grounding.probeset import ProbeSet
from medvlm_audit.suites.grounding.prompts import grounding_prompt

DEFAULT_CONDITIONS: tuple[str, ...] = ("original", "swap", "target_mask", "irrelevant_mask", "no_image")


@dataclass(frozen=True)
class GroundingOptions:
    conditions: Sequence[str] = DEFAULT_CONDITIONS
    resolutions: Sequence[int] = (224,)
    prompt_variants: Sequence[str] = ("default",)
    #: case ids that get the non-default prompt variants (None = all cases)
    prompt_subsample: frozenset[str] | None = None
    #: case ids that get the 512 resolution probe (None = all cases)
    res512_subsample: frozenset[str] | None = None
    repeats: int = 1


def conditions_for(opts: GroundingOptions) -> list[Condition]:
    """Every (image op, resolution, prompt variant) combination the options ask for."""
    for c in opts.conditions:
        if c not in IMAGE_OPS:
            raise ValueError(f"unknown grounding condition {c!r}; known: {IMAGE_OPS}")
    out = []
    for res in opts.resolutions:
        for variant in opts.prompt_variants:
            for op in opts.conditions:
                if res != 224 and (op == "no_image" or variant != "default"):
                    continue  # the resolution probe uses the default phrasing; no_image has no resolution
                out.append(Condition(op, res, variant))
    return out


def plan_grounding(probe_sets: Iterable[ProbeSet], opts: GroundingOptions) -> Plan:
    """The trials of every case under every condition, held compactly (:class:`CompactTrials`: a 10,000-case
    plan has 50,000 trials). An image two trials show (a case's image is another case's swap image) is one
    recipe object."""
    plan = Plan(trials=CompactTrials())
    conds = conditions_for(opts)
    messages: dict[str, tuple[Message, ...]] = {}
    recipes: dict[ImageRecipe, ImageRecipe] = {}  # planning only: one object per distinct recipe
    for ps in probe_sets:
        plan.sources.append(PlanSource(ps.name, str(ps.image_root), ps.content_hash, ps.case_records(),
                                       ps.provenance))
        resolve = functools.cache(lambda p, ps=ps: str(ps.resolve(p)))  # a source serves several conditions
        for case in ps.cases():
            for cond in conds:
                sub = opts.prompt_subsample if cond.prompt_variant != "default" else None
                if sub is not None and case.case_id not in sub:
                    continue
                sub = opts.res512_subsample if cond.resolution != 224 else None
                if sub is not None and case.case_id not in sub:
                    continue
                reason = cond.skip_reason(case)
                if reason is not None:
                    plan.skipped.append(Skip(ps.name, case.case_id, cond.name, reason))
                    continue
                recipe = cond.recipe(case, resolve)
                if recipe is not None:
                    recipe = recipes.setdefault(recipe, recipe)
                text = grounding_prompt(case, cond.prompt_variant)
                msgs = messages.get(text)  # one message tuple per distinct question: a run holds few
                if msgs is None:
                    msgs = messages[text] = (Message("user", text),)
                for s in range(opts.repeats):
                    plan.trials.append(
                        Trial(ps.name, case.case_id, cond.name, msgs, (recipe,) if recipe else (), s)
                    )
    return plan
