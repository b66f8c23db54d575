"""Dataset builders: turn local copies of MIMIC-CXR/MS-CXR/ReXErr, CheXpert, NIH ChestX-ray14, VinDr-CXR or a
folder of images + CSV into probe sets (manifest + exclusions.csv + shortfall report), and MIMIC-CXR or CheXpert
into the vision-only probe's training sets (``probe_train``). See docs/datasets.md."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from medvlm_audit.suites.grounding.datasets.common import BuildResult, DatasetError, Shortfall

#: builder name -> "module:function" (imported lazily so ``import medvlm_audit`` stays light)
BUILDERS: dict[str, str] = {
    "mimic": "medvlm_audit.suites.grounding.datasets.mimic:build_mimic",
    "chexpert": "medvlm_audit.suites.grounding.datasets.chexpert:build_chexpert",
    "nih": "medvlm_audit.suites.grounding.datasets.nih:build_nih",
    "vindr": "medvlm_audit.suites.grounding.datasets.vindr:build_vindr",
    "folder": "medvlm_audit.suites.grounding.datasets.folder:build_folder",
    "probe_train": "medvlm_audit.suites.grounding.datasets.probe_train:build_probe_train",
}


def get_builder(name: str) -> Callable[..., BuildResult]:
    """The build function registered under ``name``; KeyError lists the known builders."""
    try:
        mod, fn = BUILDERS[name].split(":")
    except KeyError:
        raise KeyError(f"unknown dataset builder {name!r}; known: {sorted(BUILDERS)}") from None
    f: Any = getattr(importlib.import_module(mod), fn)
    return f


__all__ = ["BUILDERS", "BuildResult", "DatasetError", "Shortfall", "get_builder"]
