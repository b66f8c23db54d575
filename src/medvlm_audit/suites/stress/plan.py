"""Plan a stress run from its config: item sources -> seeded per-item conditions (T1-T6) -> trials.

``probe_sets`` entries of a stress config are item files (``.jsonl`` / ``.csv``), folders holding an
``items.jsonl``, ``<benchmark>:<folder>`` for a local benchmark copy (``vqa-rad``, ``slake``, ``pmc-vqa``,
``omnimedvqa``), or ``phantom`` for the embedded phantom MCQ set (built into ``<run_dir>/phantom_mcq``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medvlm_audit.errors import ConfigError
from medvlm_audit.suites.base import Plan, StageContext
from medvlm_audit.suites.stress.conditions import (
    CONDITIONS,
    DEFAULT_CONDITIONS,
    DEFAULT_T4_VARIANT,
    T4_VARIANTS,
    StressOptions,
)
from medvlm_audit.suites.stress.conditions import plan_stress as _plan_items
from medvlm_audit.suites.stress.items import ItemSet, load_items
from medvlm_audit.suites.stress.loaders import LOADERS, load_benchmark, merge_item_sets
from medvlm_audit.suites.stress.prompts import DEFAULT_PROTOCOL, PROTOCOLS


def load_item_source(spec: str, *, run_dir: str | Path = ".", seed: int = 42) -> ItemSet:
    """One ``probe_sets`` entry -> an ItemSet (see the module docstring for the forms)."""
    if spec == "phantom":
        from medvlm_audit.suites.stress.embedded import build_phantom_mcq

        out = Path(run_dir) / "phantom_mcq"
        if (out / "items.jsonl").exists():
            return load_items(out / "items.jsonl")
        return build_phantom_mcq(out, seed=seed)
    name, sep, rest = spec.partition(":")
    if sep and name.lower().replace("_", "-") in LOADERS:
        return load_benchmark(name, rest)
    p = Path(spec)
    if p.is_dir():
        p = p / "items.jsonl"
    return load_items(p)


def plan_stress(cfg: Any, conditions: list[str] | None = None, t4_variant: str | None = None,
                prompt_protocol: str | None = None, on_missing: str | None = None) -> Plan:
    """Plan a stress run from a RunConfig (conditions default to all T1-T6 conditions; ``t4_variant`` to the
    run options' or :data:`~medvlm_audit.suites.stress.conditions.DEFAULT_T4_VARIANT`)."""
    conds = list(conditions if conditions is not None else (cfg.options.get("conditions") or []))
    if not conds:
        conds = list(DEFAULT_CONDITIONS)
    unknown = [c for c in conds if c not in CONDITIONS]
    if unknown:
        raise ConfigError(f"unknown stress condition(s) {unknown}; known: {list(CONDITIONS)}")
    sets = [load_item_source(s, run_dir=cfg.run_dir, seed=cfg.seed) for s in cfg.probe_sets]
    items = sets[0] if len(sets) == 1 else merge_item_sets(sets)
    variant = t4_variant or cfg.options.get("t4_variant") or DEFAULT_T4_VARIANT
    if variant not in T4_VARIANTS:
        raise ConfigError(f"unknown t4_variant {variant!r}; known: {list(T4_VARIANTS)}")
    protocol = prompt_protocol or cfg.options.get("prompt_protocol") or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown prompt_protocol {protocol!r}; known: {list(PROTOCOLS)}")
    missing = on_missing or cfg.options.get("on_missing") or "raise"  # a missing image file fails the plan
    if missing not in ("raise", "exclude"):
        raise ConfigError(f"unknown on_missing {missing!r}; known: ['raise', 'exclude']")
    opts = StressOptions(conditions=tuple(conds), repeats=int(cfg.repeats), seed=int(cfg.seed), t4_variant=variant,
                         prompt_protocol=protocol, on_missing=missing)  # type: ignore[arg-type]
    return _plan_items(items, opts, run_dir=cfg.run_dir)



def plan_stage(ctx: StageContext) -> Plan:
    """The stress suite's one stage."""
    o = ctx.options
    return plan_stress(ctx.config, list(o.conditions), o.t4_variant, o.prompt_protocol,  # type: ignore[attr-defined]
                       o.on_missing)  # type: ignore[attr-defined]
