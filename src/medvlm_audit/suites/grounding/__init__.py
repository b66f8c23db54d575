"""The grounding suite (paper 000): does a model's right answer come from the image?

Conditions original / swap / target_mask / irrelevant_mask / no_image at 224 (and 512 for the resolution
probe) under the default, terse and radiologist phrasings; CGR, UAR, IS, categories, per-finding, subgroup,
calibration and robustness analyses. Modules: :mod:`.suite`, :mod:`.conditions`, :mod:`.prompts`, :mod:`.plan`,
:mod:`.scoring`, :mod:`.analysis`, :mod:`.sections`, :mod:`.figures`, :mod:`.reference` (the embedded reference
panel), :mod:`.embedded`.
"""

from __future__ import annotations

from medvlm_audit.registry import lazy_exports

#: public name -> the module that defines it (imported on first use, so importing the package stays light)
_LAZY: dict[str, str] = {
    "DEFAULT_CONDITIONS": "medvlm_audit.suites.grounding.plan",
    "GroundingOptions": "medvlm_audit.suites.grounding.plan",
    "GroundingRunOptions": "medvlm_audit.suites.grounding.suite",
    "GroundingSuite": "medvlm_audit.suites.grounding.suite",
    "conditions_for": "medvlm_audit.suites.grounding.plan",
    "plan_grounding": "medvlm_audit.suites.grounding.plan",
    "score_grounding": "medvlm_audit.suites.grounding.scoring",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
