"""The stress suite behind the one Suite interface: options, its one stage, tidy scoring, analysis and the
embedded default (the phantom MCQ set and the MCQ reference answerers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, field_validator

from medvlm_audit.errors import ConfigError
from medvlm_audit.registry import check_known
from medvlm_audit.store import RunStore
from medvlm_audit.suites.base import Stage, Suite, SuiteResult
from medvlm_audit.suites.stress.conditions import (
    CONDITIONS,
    DEFAULT_CONDITIONS,
    DEFAULT_T4_VARIANT,
    T4Variant,
)

if TYPE_CHECKING:  # pragma: no cover
    from medvlm_audit.readers.tasks import ReaderTask


class StressRunOptions(BaseModel):
    """The stress suite's run options (flat keys of a run config)."""

    model_config = ConfigDict(extra="forbid")

    #: T1-T6 conditions (default: all of them)
    conditions: list[str] = list(DEFAULT_CONDITIONS)
    #: T4's replaced:k options: replaced, then shown in T3's order (the paper and the authors' files), or in place
    t4_variant: T4Variant = DEFAULT_T4_VARIANT
    #: the prompts: the authors' released system prompt and answer instruction, verbatim ("paper"), or the
    #: project's earlier wording ("project"); see medvlm_audit.suites.stress.prompts
    prompt_protocol: Literal["paper", "project"] = "paper"

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        check_known("stress condition", v, CONDITIONS)
        return v or list(DEFAULT_CONDITIONS)


REFERENCE_KINDS = ("first_option", "text_prior", "image_reader")


class StressSuite(Suite):
    """Paper 003: multiple-choice stress tests T1-T6 and the robustness score."""

    name: ClassVar[str] = "stress"
    title: ClassVar[str] = "Stress audit"
    Options: ClassVar[type[BaseModel]] = StressRunOptions
    backends: ClassVar[dict[str, str]] = {
        "stress_reference": "medvlm_audit.suites.stress.reference:build_stress_reference"}
    #: the stress tables are written as CSV and Parquet
    parquet_tables: ClassVar[bool] = True

    #: what the run explorer (`medvlm-audit view`) shows: per condition the options as the model saw them (gold
    #: re-lettered) with the chosen one, the raw answer and whether correctness changed from the original
    view: ClassVar[dict[str, Any]] = {
        "item": "item_id", "base_condition": "original", "flip_on": "correct", "answer": "parsed",
        "parsed_status": {"status": "answer"},
        "condition_order": ["original", "no_image", "reordered", "reordered+no_image", "unknown", "unknown+no_image",
                            "replaced:1", "replaced:2", "replaced:3", "replaced:4", "substitution", "cot"],
        "setting": ["sample_index"], "filters": ["benchmark", "test"], "list_columns": ["benchmark", "test"],
        "truth": "gold", "case_fields": ["benchmark", "required", "n_options"],
        "trial_fields": ["status", "correct", "via"], "labels": {"correct": {1: "yes", 0: "no"}},
        "options_column": "options", "gold_column": "gold",
    }

    def stages(self) -> Sequence[Stage]:
        from medvlm_audit.suites.stress.plan import plan_stage

        return (Stage("answer", plan_stage),)

    def reader_tasks(self) -> Sequence[ReaderTask]:
        from medvlm_audit.suites.stress.readers import READER_TASKS

        return READER_TASKS

    def embedded_config(self, out: Path, *, log: Callable[[str], Any] = print, **flags: Any) -> dict[str, Any]:
        """The phantom MCQ set (built into OUT/phantom_mcq when the run plans) and the three answerers."""
        if flags:
            raise ConfigError(f"the stress default takes no option(s) {sorted(flags)}")
        return {
            "suite": "stress",
            "run_dir": str(out),
            "probe_sets": ["phantom"],
            "models": [{"name": k.replace("_", "-"), "backend": "stress_reference", "kind": k}
                       for k in REFERENCE_KINDS],
        }

    def tidy(self, store: RunStore) -> pd.DataFrame:
        from medvlm_audit.suites.stress.sections import tidy_stress

        return tidy_stress(store)

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, *, B: int = 10_000, seed: int = 0,
                skipped: pd.DataFrame | None = None, fmt: str = "svg", designed: dict[str, str] | None = None,
                **unused: Any) -> SuiteResult:
        from medvlm_audit.suites.stress.analysis import analyse_stress
        from medvlm_audit.suites.stress.sections import stress_result

        res = analyse_stress(tidy, B=B, seed=seed, plan_skips=skipped)
        probe_set = ",".join(sorted(tidy["probe_set"].dropna().astype(str).unique())) or "stress"
        return stress_result(res, probe_set, fmt=fmt, designed=designed)

