"""The grounding suite (paper 000): does a model's right answer come from the image?

Conditions original / swap / target_mask / irrelevant_mask / no_image at 224 (and 512 for the resolution
probe) under the default, terse and radiologist phrasings; CGR, UAR, IS, categories, per-finding, subgroup,
calibration and robustness analyses. Modules: :mod:`.conditions`, :mod:`.prompts`, :mod:`.plan`,
:mod:`.analysis`, :mod:`.figures`, :mod:`.reference` (the embedded reference panel), :mod:`.demo`.
"""

from __future__ import annotations

from medvlm_audit.suites.grounding.plan import (
    DEFAULT_CONDITIONS,
    GroundingOptions,
    conditions_for,
    plan_grounding,
    score_grounding,
)
from medvlm_audit.suites.grounding.suite import GroundingRunOptions, GroundingSuite

__all__ = ["DEFAULT_CONDITIONS", "GroundingOptions", "GroundingRunOptions", "GroundingSuite", "conditions_for", "plan_grounding",
           "score_grounding"]
