"""The grounding suite's embedded default: phantom probe set + fitted reference panel, offline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

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


def prepare_demo(
    out: str | Path,
    *,
    n_cases: int = 800,
    n_train: int = 1500,
    gemma: bool = False,
    vision_probe: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Build the phantom probe set (and a tiny ViT for the vision probe) under ``out``; return the run config."""
    from medvlm_audit.extras import require_extra
    from medvlm_audit.suites.grounding.phantom_probeset import build_phantom

    out = Path(out)
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
    cfg = demo_config(out, gemma, vision_probe)
    (out / "demo.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def run_demo(out: str | Path, *, progress: bool = True, log: Callable[[str], Any] = print, exist_ok: bool = False,
             **flags: Any) -> Any:
    """Deprecated (kept for one release): ``medvlm_audit.api.demo("grounding", out, ...)``."""
    from medvlm_audit import api

    return api.demo("grounding", out, progress=progress, log=log, with_report=False, exist_ok=exist_ok, **flags)
