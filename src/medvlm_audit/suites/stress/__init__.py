"""The stress suite (paper 003): MCQ stress tests T1-T6, paired statistics and the robustness score.

Flow: items (:mod:`.items`, :mod:`.loaders`, :mod:`.embedded`) -> :func:`plan_stress` (seeded per-item
conditions, :mod:`.conditions`) -> the runner asks each model -> :func:`score_stress` (option parser,
:mod:`.parse`) -> :func:`analyse_stress` (accuracy, paired T-changes with BH-FDR, chance tests, robustness
score :mod:`.score` with bootstrap intervals, distractor curve, per-item view).
"""

from __future__ import annotations

from medvlm_audit.registry import lazy_exports

#: public name -> the module that defines it (imported on first use, so importing the package stays light)
_LAZY: dict[str, str] = {
    "CONDITIONS": "medvlm_audit.suites.stress.conditions",
    "Comparison": "medvlm_audit.suites.stress.analysis",
    "DEFAULT_COMPARISONS": "medvlm_audit.suites.stress.analysis",
    "DEFAULT_CONDITIONS": "medvlm_audit.suites.stress.conditions",
    "Exclusion": "medvlm_audit.suites.stress.items",
    "ItemError": "medvlm_audit.suites.stress.items",
    "ItemSet": "medvlm_audit.suites.stress.items",
    "LOADERS": "medvlm_audit.suites.stress.loaders",
    "MCQItem": "medvlm_audit.suites.stress.items",
    "ParsedOption": "medvlm_audit.scorers.option",
    "RobustnessScore": "medvlm_audit.suites.stress.robustness",
    "SCORE_CONDITIONS": "medvlm_audit.suites.stress.conditions",
    "StressAccuracies": "medvlm_audit.suites.stress.robustness",
    "StressAnalysis": "medvlm_audit.suites.stress.analysis",
    "StressCondition": "medvlm_audit.suites.stress.conditions",
    "StressOptions": "medvlm_audit.suites.stress.conditions",
    "StressRunOptions": "medvlm_audit.suites.stress.suite",
    "StressSuite": "medvlm_audit.suites.stress.suite",
    "accuracy_table": "medvlm_audit.suites.stress.analysis",
    "analyse_stress": "medvlm_audit.suites.stress.analysis",
    "apply_condition": "medvlm_audit.suites.stress.conditions",
    "chance_tests": "medvlm_audit.suites.stress.analysis",
    "distractor_curve": "medvlm_audit.suites.stress.analysis",
    "exclusion_log": "medvlm_audit.suites.stress.analysis",
    "exclusion_summary": "medvlm_audit.suites.stress.analysis",
    "exclusions_frame": "medvlm_audit.suites.stress.items",
    "item_table": "medvlm_audit.suites.stress.analysis",
    "load_benchmark": "medvlm_audit.suites.stress.loaders",
    "load_items": "medvlm_audit.suites.stress.items",
    "merge_item_sets": "medvlm_audit.suites.stress.loaders",
    "paired_changes": "medvlm_audit.suites.stress.analysis",
    "parse_option": "medvlm_audit.scorers.option",
    "plan_frame": "medvlm_audit.suites.stress.conditions",
    "plan_stress": "medvlm_audit.suites.stress.conditions",
    "robustness_inputs": "medvlm_audit.suites.stress.analysis",
    "robustness_score": "medvlm_audit.suites.stress.robustness",
    "robustness_table": "medvlm_audit.suites.stress.analysis",
    "save_items": "medvlm_audit.suites.stress.items",
    "score_stress": "medvlm_audit.suites.stress.analysis",
    "validate_items": "medvlm_audit.suites.stress.items",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
