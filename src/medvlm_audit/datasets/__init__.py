"""Dataset builders: turn local copies of MIMIC-CXR/MS-CXR/ReXErr, CheXpert, NIH ChestX-ray14, VinDr-CXR or a
folder of images + CSV into probe sets (manifest + exclusions.csv + shortfall report)."""

from __future__ import annotations

from medvlm_audit.datasets.common import BuildResult, DatasetError, Shortfall

__all__ = ["BuildResult", "DatasetError", "Shortfall"]
