"""The embedded default: phantom probe set + fitted reference panel + full grounding run, offline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from medvlm_audit.api import RunResult, run
from medvlm_audit.config import validate_config
from medvlm_audit.errors import AuditError

REFERENCE_KINDS = ("local_evidence", "finding_prior", "always_yes", "global_probe", "occlusion_unstable")


def demo_config(out: Path, gemma: bool = False, vision_probe: bool = False) -> dict[str, Any]:
    """The demo's run config (also written to OUT/demo.yaml so `medvlm-audit run` can resume or repeat it)."""
    train = str((out / "phantom" / "train").resolve())
    models: list[dict[str, Any]] = [
        {"name": k.replace("_", "-"), "backend": "reference", "kind": k, "train": train} for k in REFERENCE_KINDS
    ]
    if gemma:
        models.append({"name": "gemma3-270m", "backend": "gemma"})
    if vision_probe:  # the paper's vision-only probe on a small randomly initialised ViT (extra 'hf')
        models.append({"name": "vision-probe", "backend": "vision_probe", "train": train,
                       "encoder_path": str((out / "encoders" / "tiny-vit").resolve()),
                       "cache_dir": str((out / "feature-cache").resolve())})
    return {
        "suite": "grounding",
        "run_dir": str((out / "run").resolve()),
        "probe_sets": [str((out / "phantom" / "probeset").resolve())],
        "models": models,
        "conditions": ["original", "swap", "target_mask", "irrelevant_mask", "no_image"],
        "resolutions": [224, 512],
        "prompt_variants": ["default", "terse", "radiologist"],
        "prompt_subsample": 100,
    }


#: what a demo writes into its output folder
DEMO_OUTPUTS = ("demo.yaml", "phantom", "run", "encoders", "feature-cache")


def refuse_existing_demo(out: Path) -> None:
    """Raise before anything is written when ``out`` already holds (part of) a demo."""
    found = [name for name in DEMO_OUTPUTS if (out / name).exists()]
    if found:
        resume = (f" (to resume it: medvlm-audit run {out / 'demo.yaml'})" if (out / "demo.yaml").exists() else "")
        raise AuditError(f"{out} already holds a demo ({', '.join(found)}); nothing was overwritten: choose another "
                         f"--out or remove it{resume}")


def run_demo(
    out: str | Path,
    *,
    n_cases: int = 800,
    n_train: int = 1500,
    gemma: bool = False,
    vision_probe: bool = False,
    progress: bool = True,
    log: Callable[[str], Any] = print,
    exist_ok: bool = False,
) -> RunResult:
    """Build, fit and run the demo into ``out``. An ``out`` already holding a demo is refused before anything is
    written, unless ``exist_ok`` (the phantom is rebuilt identically and the run resumes)."""
    from medvlm_audit.models.registry import load_model
    from medvlm_audit.phantom import build_phantom

    out = Path(out)
    if not exist_ok:
        refuse_existing_demo(out)
    from medvlm_audit.extras import require_extra

    if gemma:  # before anything is built: one line naming the extra
        require_extra("gemma", "demo --gemma")
    if vision_probe:
        require_extra("hf", "demo --vision-probe")
    t0 = time.perf_counter()
    test, train = build_phantom(out / "phantom", n_cases=n_cases, n_train=n_train, seed=42)
    log(f"phantom probe set: {len(test)} cases, {len(train)} training cases ({time.perf_counter() - t0:.1f} s)")
    if vision_probe:
        from medvlm_audit.testing.tiny_models import build_tiny_vit

        enc = out / "encoders" / "tiny-vit"
        if not (enc / "config.json").exists():
            build_tiny_vit(enc)
    cfg_dict = demo_config(out, gemma, vision_probe)
    cfg = validate_config(cfg_dict, source="demo")
    (out / "demo.yaml").write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    t1 = time.perf_counter()
    context: dict[str, Any] = {}
    models = [load_model(m, context=context) for m in cfg.models]
    log(f"reference panel fitted: {', '.join(m.name for m in models)} ({time.perf_counter() - t1:.1f} s)")
    return run(cfg, models=models, progress=progress)
