"""Stress conditions T1-T6 as deterministic, seeded per-item transforms, and the planner.

Every transform seeds itself from (seed, item id, transform name) through sha256, so the same items and
seed give the same permutations and replacements byte for byte, whatever the input order, platform or
numpy version. The plan is the suite interface's :class:`~medvlm_audit.suites.base.Plan`: one Trial per
item x condition x repeat, its payload carrying what scoring needs (options as shown, gold letter, ...).

Conditions (``+no_image`` variants drop the image; everything else keeps question text unchanged):

* ``original`` / ``no_image`` (T1, all items; ``no_image`` on the required subset is T2)
* ``reordered`` (T3): a seeded non-identity permutation of the options, gold re-lettered
* ``replaced:k`` (T4, k = 1..4): k distractors replaced by options of other items of the same benchmark
  (never the gold, never a duplicate); levels are nested (2R keeps 1R's replacement). Two variants
  (:data:`T4_VARIANTS`): ``replace_then_reorder`` (default) replaces in place and then shows the options in
  T3's seeded order, so the gold's letter may move, as the paper describes ("its label (e.g., 'B') may shift
  due to shuffling") and as the authors' released T4 files are built (``test_reformat_{k}_replace_ans_reorder``,
  the k = 0 file being T3's reordered set); ``in_place`` keeps every option at its letter
* ``unknown`` (T4): one distractor replaced by "Unknown"
* ``substitution`` (T5): the image replaced by the item's substitute; the new gold is the option it supports
* ``cot`` (T6): the chain-of-thought prompt
Prompts: the authors' released system prompt and answer instruction by default (``prompt_protocol``, see
:mod:`medvlm_audit.suites.stress.prompts`).
T2-T4 run on the *required* subset: items flagged ``needs_image`` (all items when none is flagged).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from medvlm_audit.images import ImageRecipe
from medvlm_audit.run_paths import portable_path
from medvlm_audit.suites.base import Plan, PlanSource, Skip, Trial
from medvlm_audit.suites.stress.items import LETTERS, ItemError, ItemSet, MCQItem, norm_option
from medvlm_audit.suites.stress.prompts import DEFAULT_PROTOCOL, PROTOCOLS, mcq_messages

ImageMode = Literal["original", "none", "substitute"]
Subset = Literal["all", "required", "substitution"]
T4Variant = Literal["in_place", "replace_then_reorder"]
#: how T4's replaced:k conditions show the options (see the module docstring); the first is not the default
T4_VARIANTS: tuple[str, ...] = ("in_place", "replace_then_reorder")
DEFAULT_T4_VARIANT: T4Variant = "replace_then_reorder"
UNKNOWN_OPTION = "Unknown"


@dataclass(frozen=True, slots=True)
class StressCondition:
    """A named stress condition: what happens to the image, the options and the prompt, on which items."""

    name: str
    test: str
    image: ImageMode = "original"
    options: Literal["original", "reordered", "replaced", "unknown"] = "original"
    n_replaced: int = 0
    prompt: str = "default"
    subset: Subset = "all"

    @property
    def with_image(self) -> bool:
        return self.image != "none"


def _conds() -> dict[str, StressCondition]:
    c: dict[str, StressCondition] = {}
    for img, suffix in (("original", ""), ("none", "+no_image")):
        if img == "original":
            c["original"] = StressCondition("original", "T1", "original")
        else:
            c["no_image"] = StressCondition("no_image", "T1", "none")
        c["reordered" + suffix] = StressCondition("reordered" + suffix, "T3", img, "reordered", subset="required")
        for k in range(1, 5):
            n = f"replaced:{k}{suffix}"
            c[n] = StressCondition(n, "T4", img, "replaced", k, subset="required")
        c["unknown" + suffix] = StressCondition("unknown" + suffix, "T4", img, "unknown", subset="required")
    c["substitution"] = StressCondition("substitution", "T5", "substitute", subset="substitution")
    c["cot"] = StressCondition("cot", "T6", "original", prompt="cot")
    return c


#: every known condition by name
CONDITIONS: dict[str, StressCondition] = _conds()
#: the full design (16 conditions)
DEFAULT_CONDITIONS: tuple[str, ...] = tuple(CONDITIONS)
#: the least the robustness score R1-R5 needs
SCORE_CONDITIONS: tuple[str, ...] = (
    "original", "no_image", "reordered+no_image", "replaced:4", "replaced:4+no_image", "unknown+no_image",
    "substitution",
)


def get_condition(name: str) -> StressCondition:
    try:
        return CONDITIONS[name]
    except KeyError:
        raise ValueError(f"unknown stress condition {name!r}; known: {list(CONDITIONS)}") from None


# ------------------------------------------------------------------------------------------ seeded draws


def _u64(seed: int, item_id: str, tag: str, i: int) -> int:
    """A uniform 64-bit integer from (seed, item, tag, counter): platform- and library-independent."""
    h = hashlib.sha256(f"{seed}\x1f{item_id}\x1f{tag}\x1f{i}".encode()).digest()
    return int.from_bytes(h[:8], "big")


def reorder_permutation(item: MCQItem, seed: int) -> tuple[int, ...]:
    """perm[j] = original index of the option shown at position j; never the identity (k >= 2)."""
    k = item.k
    for attempt in range(64):
        perm = tuple(sorted(range(k), key=lambda i: (_u64(seed, item.item_id, f"reorder#{attempt}", i), i)))
        if perm != tuple(range(k)):
            return perm
    return tuple(range(1, k)) + (0,)  # pragma: no cover - 64 identities in a row


def distractor_order(item: MCQItem, seed: int, tag: str = "replace-order") -> list[int]:
    """The item's distractor indices in the seeded order in which they get replaced."""
    d = [i for i in range(item.k) if i != item.answer]
    return sorted(d, key=lambda i: (_u64(seed, item.item_id, tag, i), i))


def draw_replacements(item: MCQItem, pool: Sequence[str], n: int, seed: int) -> list[str] | None:
    """n distinct option texts from ``pool`` (another item's options) that clash with none of the item's.

    Draw j picks ``pool[u64(seed, item, j) % len(pool)]``, rejecting clashes and repeats, so level n's draws
    start with level n-1's (nested replacement levels). None when the pool has too few usable texts.
    """
    if n == 0:
        return []
    keys = _pool_keys(pool)
    own = {norm_option(o) for o in item.options}
    usable = len(pool) - sum(1 for k in own if k in keys)
    if usable < n:
        return None
    out: list[str] = []
    seen: set[str] = set()
    j = 0
    limit = 256 * n + 8 * len(pool)
    while len(out) < n and j < limit:
        i = _u64(seed, item.item_id, "replace-draw", j) % len(pool)
        j += 1
        key = keys[i]
        if key not in own and key not in seen:
            seen.add(key)
            out.append(pool[i])
    for i, t in enumerate(pool):  # pragma: no cover - only when rejection keeps failing on a tiny pool
        if len(out) == n:
            break
        if keys[i] not in own and keys[i] not in seen:
            seen.add(keys[i])
            out.append(t)
    return out


class _Keys(list):
    """Normalised keys of a pool, with a set for membership tests."""

    def __init__(self, pool: Sequence[str]) -> None:
        super().__init__(norm_option(p) for p in pool)
        self.set = frozenset(self)

    def __contains__(self, k: object) -> bool:
        return k in self.set


_KEY_CACHE: dict[int, tuple[Sequence[str], _Keys]] = {}


def _pool_keys(pool: Sequence[str]) -> _Keys:
    hit = _KEY_CACHE.get(id(pool))
    if hit is not None and hit[0] is pool:
        return hit[1]
    keys = _Keys(pool)
    if len(_KEY_CACHE) > 64:
        _KEY_CACHE.clear()
    _KEY_CACHE[id(pool)] = (pool, keys)
    return keys


def benchmark_pools(items: Iterable[MCQItem]) -> dict[str, list[str]]:
    """Distinct option texts per benchmark (sorted by normalised text; 'Unknown' left out)."""
    by: dict[str, dict[str, str]] = {}
    for it in items:
        d = by.setdefault(it.benchmark, {})
        for o in it.options:
            k = norm_option(o)
            if k != norm_option(UNKNOWN_OPTION) and k not in d:
                d[k] = o
    return {b: [d[k] for k in sorted(d)] for b, d in by.items()}


@dataclass(frozen=True, slots=True)
class ShownItem:
    """An item as one condition shows it: options, gold index, images, and the recorded transform."""

    options: tuple[str, ...]
    answer: int
    images: tuple[str, ...]
    transform: dict[str, Any] = field(default_factory=dict)


def apply_condition(
    item: MCQItem, cond: StressCondition, *, seed: int, pool: Sequence[str] = (),
    t4_variant: T4Variant = DEFAULT_T4_VARIANT,
) -> ShownItem | str:
    """The item under ``cond``, or the reason it cannot be shown (for the exclusion log).

    ``t4_variant`` applies to ``replaced:k``: ``in_place`` keeps every option at its letter; ``replace_then_reorder``
    then shows the options in T3's permutation of the item (:func:`reorder_permutation`, the same for every k,
    so the levels differ only in what was replaced). ``transform["replaced"]`` names the letters replaced
    before any reordering; ``transform["permutation"]`` is the order shown. ``unknown`` is in place in both."""
    if t4_variant not in T4_VARIANTS:
        raise ValueError(f"unknown T4 variant {t4_variant!r}; known: {T4_VARIANTS}")
    opts = list(item.options)
    answer = item.answer
    tr: dict[str, Any] = {}
    if cond.options == "reordered":
        perm = reorder_permutation(item, seed)
        opts = [item.options[i] for i in perm]
        answer = perm.index(item.answer)
        tr["permutation"] = list(perm)
    elif cond.options == "replaced":
        order = distractor_order(item, seed)
        if len(order) < cond.n_replaced:
            return f"has {len(order)} distractor(s); {cond.name} needs {cond.n_replaced}"
        repl = draw_replacements(item, pool, cond.n_replaced, seed)
        if repl is None:
            return (f"benchmark {item.benchmark!r} has too few options outside this item to replace "
                    f"{cond.n_replaced} distractor(s)")
        for pos, text in zip(order[: cond.n_replaced], repl, strict=True):
            opts[pos] = text
        tr["replaced"] = {LETTERS[p]: t for p, t in zip(order[: cond.n_replaced], repl, strict=True)}
        tr["t4_variant"] = t4_variant
        if t4_variant == "replace_then_reorder":
            perm = reorder_permutation(item, seed)
            opts = [opts[i] for i in perm]
            answer = perm.index(answer)
            tr["permutation"] = list(perm)
    elif cond.options == "unknown":
        if norm_option(UNKNOWN_OPTION) in {norm_option(o) for o in item.options}:
            return "already has an 'Unknown' option"
        pos = distractor_order(item, seed, "unknown-pos")[0]
        opts[pos] = UNKNOWN_OPTION
        tr["replaced"] = {LETTERS[pos]: UNKNOWN_OPTION}
    images: tuple[str, ...]
    if cond.image == "none":
        images = ()
    elif cond.image == "substitute":
        if item.substitute_image is None or item.substitute_answer is None:
            return "has no substitute image"
        images = (item.substitute_image,)
        answer = item.substitute_answer
        tr["substitute_for"] = LETTERS[item.substitute_answer]
    else:
        if not item.images:
            return "has no image"
        images = item.images
    return ShownItem(tuple(opts), answer, images, tr)


# -------------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class StressOptions:
    """What a stress run asks for: conditions, repeats per input, seed, image resolution and checks."""

    conditions: Sequence[str] = DEFAULT_CONDITIONS
    repeats: int = 1
    seed: int = 42
    resolution: int | None = None  # None = the image's native size
    required: Literal["auto", "needs_image", "all"] = "auto"
    check_files: bool = True
    #: an image file that does not exist: the conditions showing it are skipped ("exclude"), or the plan fails
    #: naming the item, field and path ("raise": what a run does unless its config says ``on_missing: exclude``)
    on_missing: Literal["exclude", "raise"] = "exclude"
    t4_variant: T4Variant = DEFAULT_T4_VARIANT
    prompt_protocol: Literal["paper", "project"] = DEFAULT_PROTOCOL  # type: ignore[assignment]


def required_ids(items: Sequence[MCQItem], mode: str = "auto") -> set[str]:
    """The T2-T4 subset: ``needs_image`` items ('auto': all items when none is flagged)."""
    flagged = {it.item_id for it in items if it.needs_image}
    if mode == "all" or (mode == "auto" and not flagged):
        return {it.item_id for it in items}
    if mode not in ("auto", "needs_image"):
        raise ValueError(f"required must be 'auto', 'needs_image' or 'all', got {mode!r}")
    return flagged


def items_hash(items: Sequence[MCQItem], run_dir: str | Path | None = None) -> str:
    """Content hash of the items (records in id order), each image path as
    :func:`~medvlm_audit.run_paths.portable_path` gives it (relative to ``run_dir`` for an image under it, else
    absolute), so a run folder copied or moved elsewhere, or named by a relative ``--run-dir`` from another
    working directory, keeps its hash."""
    return _hash_records(items, lambda p: portable_path(p, run_dir))


def legacy_items_hash(items: Sequence[MCQItem]) -> str:
    """The hash as versions before the portable paths computed it (image paths as the items hold them: absolute
    or relative to the working directory): a store that recorded it still resumes in place
    (:attr:`~medvlm_audit.plan.PlanSource.earlier_hashes`)."""
    return _hash_records(items, None)


def _hash_records(items: Sequence[MCQItem], image_path: Callable[[str], str] | None) -> str:
    h = hashlib.sha256()
    for it in sorted(items, key=lambda x: x.item_id):
        rec = it.to_record()
        if image_path is not None:
            rec["images"] = [image_path(p) for p in rec["images"]]
            if rec.get("substitute_image") is not None:
                rec["substitute_image"] = image_path(rec["substitute_image"])
        h.update(json.dumps(rec, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def plan_stress(item_set: ItemSet, opts: StressOptions | None = None, *, name: str = "stress",
                run_dir: str | Path | None = None) -> Plan:
    """Items x conditions x repeats -> Trials (payload: options shown, gold, benchmark, ...) and Skips.
    ``run_dir``: the run folder, whose images the item set's hash names by their path inside it
    (:func:`items_hash`)."""
    opts = opts or StressOptions()
    if opts.prompt_protocol not in PROTOCOLS:
        raise ValueError(f"unknown prompt_protocol {opts.prompt_protocol!r}; known: {PROTOCOLS}")
    if opts.repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {opts.repeats}")
    conds = [get_condition(c) for c in opts.conditions]
    items = item_set.items
    pools = benchmark_pools(items)
    req = required_ids(items, opts.required)
    plan = Plan()
    # the run store keys source rows by case_id; the rows as the store records them (what the item table's
    # records are: no column here mixes numbers with missing values, so no value changes type), without pandas
    rows = [{"case_id": r["item_id"], **r} for r in item_set.rows()]
    content_hash, legacy = items_hash(items, run_dir), legacy_items_hash(items)
    plan.sources.append(
        PlanSource(
            name, item_set.source or "", content_hash, rows,
            {"builder": "stress", "seed": opts.seed, "conditions": [c.name for c in conds],
             "repeats": opts.repeats, "required": opts.required, "n_required": len(req),
             "t4_variant": opts.t4_variant, "prompt_protocol": opts.prompt_protocol},
            earlier_hashes=(legacy,) if legacy != content_hash else (),
        )
    )
    for e in item_set.exclusions:
        plan.skipped.append(Skip(name, e.item_id, "*", e.reason))
    exists: dict[str, bool] = {}

    def file_ok(p: str) -> bool:
        if p not in exists:
            exists[p] = os.path.exists(p)
        return exists[p]

    for it in items:
        mode = str(it.meta.get("image_mode", "RGB"))
        for cond in conds:
            if cond.subset == "required" and it.item_id not in req:
                continue
            if cond.subset == "substitution" and it.substitute_image is None:
                continue
            shown = apply_condition(it, cond, seed=opts.seed, pool=pools.get(it.benchmark, ()),
                                    t4_variant=opts.t4_variant)
            if isinstance(shown, str):  # the item lacks what the condition needs (no image, no substitute)
                plan.skipped.append(Skip(name, it.item_id, cond.name, shown))
                continue
            if opts.check_files and shown.images:
                missing = [p for p in shown.images if not file_ok(p)]
                if missing:
                    reason = f"image file {missing[0]} does not exist"
                    if opts.on_missing == "raise":  # one line naming the file, item, field and path
                        key = "substitute_image" if missing[0] == it.substitute_image else "images"
                        raise ItemError(f"{item_set.source or name}: item {it.item_id!r}: field {key!r}: "
                                        f"{reason} (condition {cond.name})")
                    plan.skipped.append(Skip(name, it.item_id, cond.name, reason))
                    continue
            msgs = mcq_messages(it.question, shown.options, cond.prompt, opts.prompt_protocol)
            recipes = tuple(ImageRecipe.standard(p, opts.resolution, None, mode) for p in shown.images)
            payload = {
                "item_id": it.item_id,
                "benchmark": it.benchmark,
                "test": cond.test,
                "options": list(shown.options),
                "n_options": len(shown.options),
                "gold": LETTERS[shown.answer],
                "needs_image": it.needs_image,
                "required": it.item_id in req,
                "with_image": cond.with_image,
                "image_paths": list(shown.images),
                "transform": shown.transform,
                "t4_variant": opts.t4_variant if cond.options == "replaced" else None,
                # a hint for the runner's decoding: CoT answers need room to reason
                "max_new_tokens": 1024 if cond.prompt == "cot" else 64,
            }
            for s in range(opts.repeats):
                plan.trials.append(Trial(name, it.item_id, cond.name, msgs, recipes, s, payload,
                                         (("max_new_tokens", payload["max_new_tokens"]),)))
    return plan


def plan_frame(plan: Plan) -> pd.DataFrame:  # noqa: F821
    """The plan's trials as a table (one row per trial, payload fields as columns)."""
    import pandas as pd

    rows = []
    for t in plan.trials:
        p = t.payload or {}
        rows.append({"case_id": t.case_id, "condition": t.condition, "sample_index": t.sample_index,
                     "prompt": t.messages[-1].content, **p})
    return pd.DataFrame(rows)
