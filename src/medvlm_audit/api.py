"""Python API mirroring the CLI, so the same run works from a notebook: run, export, report, demo."""

from __future__ import annotations

import asyncio
import json
import platform
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medvlm_audit import __version__
from medvlm_audit.config import RunConfig, load_config, redact_urls, validate_config
from medvlm_audit.errors import AuditError
from medvlm_audit.export import export_run
from medvlm_audit.models.base import Decoding, Model
from medvlm_audit.models.registry import load_model
from medvlm_audit.probeset import ProbeSet
from medvlm_audit.runner import RunSummary, TrialIndex, check_models, check_sources, execute
from medvlm_audit.store import STORE_FILE, RunStore
from medvlm_audit.suites.base import Plan


@dataclass
class RunResult:
    run_dir: Path
    summary: RunSummary
    results_parquet: Path
    results_csv: Path


def _as_config(config: RunConfig | dict[str, Any] | str | Path) -> RunConfig:
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_config(config)


def embedded_config(suite: str, run_dir: str | Path) -> RunConfig:
    """The embedded default of a suite: phantom data and the reference panel, runnable offline."""
    if suite == "stress":
        kinds = ("first_option", "text_prior", "image_reader")
        return validate_config({
            "suite": "stress",
            "run_dir": str(run_dir),
            "probe_sets": ["phantom"],
            "models": [{"name": k.replace("_", "-"), "backend": "stress_reference", "kind": k} for k in kinds],
        }, source="embedded stress default")
    if suite == "grounding":
        from medvlm_audit.demo import demo_config

        out = Path(run_dir)
        cfg = demo_config(out.parent if out.name == "run" else out)
        cfg["run_dir"] = str(run_dir)
        return validate_config(cfg, source="embedded grounding default")
    raise AuditError(f"unknown suite {suite!r}")


def plan_for(cfg: RunConfig, *, prompt_subsample_from: str | list[str] = "primary") -> Plan:
    """Load and validate the probe sets (before any model is called) and plan the suite's trials.

    The non-default prompt variants run on ``cfg.prompt_subsample`` balanced cases of the first (primary) probe
    set; ``prompt_subsample_from="all"`` draws that many from every probe set, a list names the sets."""
    if cfg.suite == "grounding":
        from medvlm_audit.suites.grounding import GroundingOptions, plan_grounding

        sets = [ProbeSet.load(p) for p in cfg.probe_sets]
        names = [s.name for s in sets]
        if len(set(names)) != len(names):
            raise AuditError(f"probe-set names must be unique within a run, got {names}")
        prompt_ids: frozenset[str] | None = None
        if any(v != "default" for v in cfg.prompt_variants) and cfg.prompt_subsample > 0:
            from medvlm_audit.datasets.subsample import run_prompt_subsample

            try:
                prompt_ids = run_prompt_subsample(sets, n=cfg.prompt_subsample, seed=cfg.seed,
                                                  source=prompt_subsample_from)
            except ValueError as e:
                raise AuditError(str(e)) from None
        res_ids: frozenset[str] | None = None
        if any(r != 224 for r in cfg.resolutions) and cfg.res512_boxed_only:
            res_ids = frozenset(cid for s in sets for cid in s.df.loc[s.df["tbox_x0"].notna(), "case_id"])
        opts = GroundingOptions(
            conditions=tuple(cfg.conditions),
            resolutions=tuple(cfg.resolutions),
            prompt_variants=tuple(cfg.prompt_variants),
            prompt_subsample=prompt_ids,
            res512_subsample=res_ids,
            repeats=cfg.repeats,
        )
        return plan_grounding(sets, opts)
    if cfg.suite == "stress":
        from medvlm_audit.suites.stress.run import plan_stress

        return plan_stress(cfg)
    raise AuditError(f"unknown suite {cfg.suite!r}")


def run(
    config: RunConfig | dict[str, Any] | str | Path,
    *,
    models: list[Model] | None = None,
    retry_errors: bool = False,
    progress: bool = True,
    prompt_subsample_from: str | list[str] = "primary",
    retry_missing_logprobs: bool = False,
) -> RunResult:
    """Execute (or resume) a run: plan, ask every pending input, commit answers, export the tidy table.

    ``models`` overrides ``config.models`` with already-built Model objects (e.g. a fitted panel).
    ``prompt_subsample_from``: see :func:`plan_for` (default: the first probe set only, as the paper).
    """
    cfg = _as_config(config)
    run_dir = Path(cfg.run_dir)
    plan = plan_for(cfg, prompt_subsample_from=prompt_subsample_from)
    if not plan.trials:
        raise AuditError("the plan is empty: no case has an applicable condition")
    built = models if models is not None else [load_model(m) for m in cfg.models]
    check_models(built)
    source_keys = check_sources(TrialIndex(plan.trials))  # a bad image fails before the store exists
    store = RunStore.open_for_run(run_dir, lock_wait_s=cfg.store_lock_wait_s)  # refuses a second writer
    try:
        meta = store.meta()
        store.set_meta(
            run_id=meta.get("run_id") or f"{run_dir.name}-{uuid.uuid4().hex[:8]}",
            suite=cfg.suite,
            config=redact_urls(json.loads(cfg.model_dump_json())),  # credentials in base URLs redacted
            package_version=__version__,
            python=platform.python_version(),
            seeds={"construction": cfg.seed, "resampling": 0},
            started_at=meta.get("started_at") or time.time(),
        )
        dec = Decoding(**cfg.decoding.model_dump())
        per_model = {m.name: Decoding(**m.decoding.model_dump()) for m in cfg.models if m.decoding is not None}
        summary = asyncio.run(execute(store, plan, built, dec, retry_errors=retry_errors, progress=progress,
                                      retry_missing_logprobs=retry_missing_logprobs,
                                      workers=cfg.workers, model_decoding=per_model,
                                      source_keys=source_keys, render_in=cfg.render_in))
        store.set_meta(last_summary=summary.as_dict(), finished_at=time.time())
    finally:
        store.close()
    pq, csv = export_run(run_dir)
    return RunResult(run_dir, summary, pq, csv)


def export(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Tidy Parquet + CSV of a run (one row per model x case x condition x sample)."""
    if not (Path(run_dir) / STORE_FILE).exists():
        raise AuditError(f"{run_dir}: no run store ({STORE_FILE}) found")
    return export_run(run_dir, out_dir)
