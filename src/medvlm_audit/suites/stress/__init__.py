"""The stress suite (paper 003): MCQ stress tests T1-T6, paired statistics and the robustness score.

Flow: items (:mod:`.items`, :mod:`.loaders`, :mod:`.phantom_mcq`) -> :func:`plan_stress` (seeded per-item
conditions, :mod:`.conditions`) -> the runner asks each model -> :func:`score_stress` (option parser,
:mod:`.parse`) -> :func:`analyse_stress` (accuracy, paired T-changes with BH-FDR, chance tests, robustness
score :mod:`.score` with bootstrap intervals, distractor curve, per-item view).
"""

from __future__ import annotations

from medvlm_audit.scorers.option import ParsedOption, parse_option
from medvlm_audit.suites.stress.analysis import (
    DEFAULT_COMPARISONS,
    Comparison,
    StressAnalysis,
    accuracy_table,
    analyse_stress,
    chance_tests,
    distractor_curve,
    exclusion_log,
    exclusion_summary,
    item_table,
    paired_changes,
    robustness_inputs,
    robustness_table,
    score_stress,
)
from medvlm_audit.suites.stress.conditions import (
    CONDITIONS,
    DEFAULT_CONDITIONS,
    SCORE_CONDITIONS,
    StressCondition,
    StressOptions,
    apply_condition,
    plan_frame,
    plan_stress,
)
from medvlm_audit.suites.stress.items import (
    Exclusion,
    ItemError,
    ItemSet,
    MCQItem,
    exclusions_frame,
    load_items,
    save_items,
    validate_items,
)
from medvlm_audit.suites.stress.loaders import LOADERS, load_benchmark, merge_item_sets
from medvlm_audit.suites.stress.score import RobustnessScore, StressAccuracies, robustness_score
from medvlm_audit.suites.stress.suite import StressRunOptions, StressSuite  # noqa: E402

__all__ = [
    "CONDITIONS", "DEFAULT_COMPARISONS", "DEFAULT_CONDITIONS", "LOADERS", "SCORE_CONDITIONS", "Comparison",
    "Exclusion", "ItemError", "ItemSet", "MCQItem", "ParsedOption", "RobustnessScore", "StressAccuracies",
    "StressAnalysis", "StressCondition", "StressOptions", "StressRunOptions", "StressSuite", "accuracy_table", "analyse_stress",
    "apply_condition", "chance_tests", "distractor_curve", "exclusion_log", "exclusion_summary", "exclusions_frame",
    "item_table", "load_benchmark",
    "load_items", "merge_item_sets", "paired_changes", "parse_option", "plan_frame", "plan_stress",
    "robustness_inputs", "robustness_score", "robustness_table", "save_items", "score_stress", "validate_items",
]
