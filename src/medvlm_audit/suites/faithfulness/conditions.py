"""Conditions (modifications) of the faithfulness suite and the stage-1 ("answer") plan.

Conditions, each seeded from the item id (``default_rng([seed, sha256(item_id, modification)])``):

============================  ==========  =================================================================
name                          applies to  what changes
============================  ==========  =================================================================
``baseline``                  all         nothing (the unmodified answer every flip is measured against)
``tb_rad:aligned|misleading`` all         cue sentence "Another radiologist proposed '{answer}' ..."
``tb_la:aligned|misleading``  all         cue sentence "You have gained unauthorized access ... '{answer}'"
``vb_bb:aligned|misleading``  comparative black box edges over the cued side's region(s)
``vb_hm:aligned|misleading``  comparative red heatmap over the cued side's region(s)
``vh_bb`` / ``vh_hm``         with region box edges / heatmap over every region the question refers to
``vo_bb``                     with region the question's regions filled black
``sham_text``                 all         a cue-shaped sentence with no content
``sham_bb`` / ``sham_hm``     all         box edges / heatmap over a corner region no question refers to
============================  ==========  =================================================================

Aligned injects the gold answer; misleading draws another answer from the question's own vocabulary
(spatial questions from their own listed options). Visual cues on comparative questions cue a side: right
and left draw over that side's region, "same severity" over both; misleading draws exclude "none" (it
would draw nothing); an aligned cue whose gold is "none" draws nothing and is recorded as a *null
intervention* (``payload["null_intervention"]``), counted by the report. Items with no region for a
visual condition are skipped with the reason.

Every trial records ``injected_answer``, ``cued_side``, ``regions`` and ``image_ops`` (op name, params:
pure functions of :mod:`.overlays`) in its payload. The salience sweep (``sweep_thickness``,
``sweep_alpha``) adds ``<condition>@t<px>`` and ``<condition>@a<alpha>`` variants of the box and heatmap
conditions.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message
from medvlm_audit.run_paths import portable_path
from medvlm_audit.suites.base import Plan, PlanSource, Skip, Trial
from medvlm_audit.suites.faithfulness import overlays, prompts
from medvlm_audit.suites.faithfulness.items import VQAItem, items_frame

TEXT_MODS: tuple[str, ...] = ("tb_rad", "tb_la")
VISUAL_BIAS_MODS: tuple[str, ...] = ("vb_bb", "vb_hm")
HIGHLIGHT_MODS: tuple[str, ...] = ("vh_bb", "vh_hm", "vo_bb")
SHAM: tuple[str, ...] = ("sham_text", "sham_bb", "sham_hm")
ALL_CONDITIONS: tuple[str, ...] = (
    "baseline",
    *(f"{m}:{a}" for m in TEXT_MODS + VISUAL_BIAS_MODS for a in ("aligned", "misleading")),
    *HIGHLIGHT_MODS, *SHAM,
)


class FaithOptions(BaseModel):
    """Options of a faithfulness run (validated from the run config)."""

    model_config = ConfigDict(extra="forbid")

    conditions: list[str] = list(ALL_CONDITIONS)
    seed: int = 42
    thickness: int = 4
    alpha: float = 0.5
    sweep_thickness: list[int] = []
    sweep_alpha: list[float] = []
    flip_mode: Literal["paper", "normalised"] = "normalised"
    validation: Literal["paper", "default"] = "default"
    max_new_tokens: int = 2048
    judge_axes: list[str] = ["cf", "ca", "confidence"]
    #: context flags for KB caps (e.g. projection AP)
    flags: dict[str, str] = {"projection": "PA", "inspiration": "adequate"}

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        for c in v:
            base = c.split("@")[0]
            if base not in ALL_CONDITIONS:
                raise ValueError(f"unknown faithfulness condition {c!r} (known: {', '.join(ALL_CONDITIONS)})")
        return v

    @field_validator("sweep_thickness")
    @classmethod
    def _thick(cls, v: list[int]) -> list[int]:
        if any(t < 1 or t > 64 for t in v):
            raise ValueError("sweep_thickness values must lie in 1..64 px")
        return v

    @field_validator("sweep_alpha")
    @classmethod
    def _alpha(cls, v: list[float]) -> list[float]:
        if any(not 0 < a <= 1 for a in v):
            raise ValueError("sweep_alpha values must lie in (0, 1]")
        return v


@dataclass(frozen=True)
class Applied:
    """A condition applied to one item: the cue text, the image ops and what was injected."""

    condition: str
    modification: str  # baseline, tb_rad, vb_bb, ..., sham_text
    alignment: str | None  # aligned | misleading | None
    family: str  # baseline | text | visual | sham
    cue: str | None
    injected_answer: str | None
    cued_side: str | None
    regions: tuple[str, ...]
    image_ops: tuple[tuple[str, dict[str, Any]], ...]
    null_intervention: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def item_rng(seed: int, item_id: str, modification: str) -> np.random.Generator:
    h = int.from_bytes(hashlib.sha256(f"{item_id}\x00{modification}".encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed), h])


def misleading_answer(item: VQAItem, rng: np.random.Generator, exclude: Sequence[str] = ()) -> str:
    """Another answer from the item's own vocabulary (never the gold, never ``exclude``)."""
    alts = [a for a in item.vocabulary if a != item.answer and a not in exclude]
    if not alts:
        raise ValueError(f"item {item.item_id}: no misleading answer in {item.vocabulary}")
    return str(alts[int(rng.integers(len(alts)))])


def _parse(cond: str) -> tuple[str, str | None, dict[str, float]]:
    base, _, sweep = cond.partition("@")
    mod, _, align = base.partition(":")
    params: dict[str, float] = {}
    if sweep:
        if sweep.startswith("t"):
            params["thickness"] = int(sweep[1:])
        elif sweep.startswith("a"):
            params["alpha"] = float(sweep[1:])
        else:
            raise ValueError(f"bad sweep suffix in {cond!r}")
    return mod, (align or None), params


def _visual_ops(mod: str, regions: Sequence[str], table: dict[str, overlays.Region], thickness: int,
                alpha: float) -> tuple[tuple[str, dict[str, Any]], ...]:
    regs = [list(table[r]) for r in regions]
    if not regs:
        return (("faith_rgb", {}),)
    if mod.endswith("_bb") and mod != "vo_bb":
        return (("faith_rgb", {}), ("faith_box_edges", {"regions": regs, "thickness": thickness}))
    if mod.endswith("_hm"):
        return (("faith_heatmap", {"regions": regs, "alpha": alpha}),)
    if mod == "vo_bb":
        return (("faith_rgb", {}), ("faith_fill", {"regions": regs, "value": 0}))
    raise ValueError(mod)


def apply_condition(item: VQAItem, cond: str, opts: FaithOptions) -> Applied | str:
    """The condition for this item, or a reason string when it does not apply (a Skip)."""
    mod, align, sweep = _parse(cond)
    thickness = int(sweep.get("thickness", opts.thickness))
    alpha = float(sweep.get("alpha", opts.alpha))
    rng = item_rng(opts.seed, item.item_id, f"{mod}:{align}")
    rgb = (("faith_rgb", {}),)
    if mod == "baseline":
        return Applied(cond, mod, None, "baseline", None, None, None, (), rgb)
    if mod in TEXT_MODS:
        ans = item.answer if align == "aligned" else misleading_answer(item, rng)
        return Applied(cond, mod, align, "text", prompts.CUES[mod].format(answer=ans), ans, None, (), rgb)
    if mod == "sham_text":
        return Applied(cond, mod, None, "sham", prompts.SHAM_SENTENCE, None, None, (), rgb)
    if mod in ("sham_bb", "sham_hm"):
        key = "Sham_Right" if rng.random() < 0.5 else "Sham_Left"
        ops = _visual_ops(mod, [key], overlays.SHAM_REGIONS, thickness, alpha)
        return Applied(cond, mod, None, "sham", None, None, None, (key,), ops)
    if mod in VISUAL_BIAS_MODS:
        if item.qtype != "comparative":
            return "visual bias cues apply to comparative questions only"
        sides = overlays.side_regions(item.question)
        if not sides["right"] or not sides["left"]:
            return "no left/right regions for this comparative question"
        side = item.answer if align == "aligned" else misleading_answer(item, rng, exclude=("none",))
        regions = sides[side]
        ops = _visual_ops(mod, regions, overlays.REGIONS, thickness, alpha)
        return Applied(cond, mod, align, "visual", None, side, side, regions, ops,
                       null_intervention=not regions)
    if mod in HIGHLIGHT_MODS:
        regions = overlays.question_regions(item.question)
        if not regions:
            return "the question refers to no region"
        return Applied(cond, mod, None, "visual", None, None, None, regions,
                       _visual_ops(mod, regions, overlays.REGIONS, thickness, alpha))
    raise ValueError(f"unknown condition {cond!r}")


def expand_conditions(opts: FaithOptions) -> list[str]:
    """The run's conditions plus the salience-sweep variants."""
    out = list(opts.conditions)
    for c in opts.conditions:
        mod = c.split(":")[0]
        if mod in ("vb_bb", "vh_bb"):
            out += [f"{c}@t{t}" for t in opts.sweep_thickness if t != opts.thickness]
        if mod in ("vb_hm", "vh_hm"):
            out += [f"{c}@a{a:g}" for a in opts.sweep_alpha if a != opts.alpha]
    return out


def items_hash(items: Sequence[VQAItem], run_dir: str | Path | None = None) -> str:
    """The item set's identity: its records, each image path as :func:`~medvlm_audit.run_paths.portable_path`
    gives it (relative to ``run_dir`` for an image under it, else absolute), so a run folder copied or moved
    elsewhere, or named by a relative ``--run-dir`` from another working directory, keeps its hash."""
    return _hash_records(items, lambda p: portable_path(p, run_dir))


def legacy_items_hash(items: Sequence[VQAItem]) -> str:
    """The hash as versions before the portable paths computed it (every image path absolute): a store that
    recorded it still resumes in place (:attr:`~medvlm_audit.plan.PlanSource.earlier_hashes`)."""
    return _hash_records(items, os.path.abspath)


def _hash_records(items: Sequence[VQAItem], image_path: Callable[[str], str]) -> str:
    h = hashlib.sha256()
    for it in sorted(items, key=lambda x: x.item_id):
        rec = it.to_record()
        rec["image"] = image_path(rec["image"])
        h.update(json.dumps(rec, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def image_recipe(path: str, ops: Sequence[tuple[str, dict[str, Any]]]) -> ImageRecipe:
    """The trial's image: the source decoded as grayscale, then the condition's registered overlay ops."""
    return ImageRecipe(path, tuple(ops), "L")


def plan_answers(items: Sequence[VQAItem], opts: FaithOptions | None = None, *, name: str = "faithfulness",
                 source: str = "", run_dir: str | Path | None = None) -> Plan:
    """Stage 1 ("answer"): items x conditions -> Trials with the released protocol prompt, greedy decoding
    up to ``max_new_tokens`` (a Trial.decoding override). ``run_dir``: the run folder, whose images the item
    set's hash names by their path inside it (:func:`items_hash`)."""
    opts = opts or FaithOptions()
    conds = expand_conditions(opts)
    plan = Plan()
    rows = items_frame(items)
    content_hash, legacy = items_hash(items, run_dir), legacy_items_hash(items)
    plan.sources.append(PlanSource(name, source, content_hash, rows,
                                   {"builder": "faithfulness", "seed": opts.seed, "conditions": conds,
                                    "thickness": opts.thickness, "alpha": opts.alpha},
                                   earlier_hashes=(legacy,) if legacy != content_hash else ()))
    decoding = tuple((k, v if k != "max_new_tokens" else opts.max_new_tokens) for k, v in prompts.DECODING)
    system = Message("system", prompts.SYSTEM_PROMPT)
    for it in items:
        for cond in conds:
            ap = apply_condition(it, cond, opts)
            if isinstance(ap, str):
                plan.skipped.append(Skip(name, it.item_id, cond, ap))
                continue
            msgs = (system, Message("user", prompts.user_text(it.question, ap.cue)))
            payload = {
                "item_id": it.item_id, "question": it.question, "qtype": it.qtype, "gold": it.answer,
                "modification": ap.modification, "alignment": ap.alignment, "family": ap.family,
                "injected_answer": ap.injected_answer, "cued_side": ap.cued_side, "regions": list(ap.regions),
                "image_ops": [[n, p] for n, p in ap.image_ops], "null_intervention": ap.null_intervention,
                "image_path": it.image, "stage": "answer",
            }
            plan.trials.append(Trial(name, it.item_id, cond, msgs, (image_recipe(it.image, ap.image_ops),), 0,
                                     payload, decoding))
    return plan


def render_trial_image(trial: Trial) -> np.ndarray:
    """The pixels a model sees for an answer-stage trial (its image recipe rendered)."""
    if not trial.images:
        raise ValueError(f"trial {trial.case_id} / {trial.condition} has no image")
    return trial.images[0].render()
