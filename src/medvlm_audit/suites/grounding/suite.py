"""The grounding suite behind the one Suite interface: options, its one stage, tidy scoring, analysis, report
sections and the embedded default (phantom probe set + reference panel)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from medvlm_audit.demo_options import DemoOption
from medvlm_audit.errors import AuditError, ConfigError
from medvlm_audit.registry import check_known
from medvlm_audit.store import RunStore
from medvlm_audit.suites.base import Plan, Stage, StageContext, Suite, SuiteResult
from medvlm_audit.suites.grounding.conditions import IMAGE_OPS, RESOLUTIONS
from medvlm_audit.suites.grounding.prompts import PROMPT_VARIANTS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from medvlm_audit.columns import Columns
    from medvlm_audit.readers.tasks import ReaderTask

DEFAULT_IMAGE_CONDITIONS = ["original", "swap", "target_mask", "irrelevant_mask", "no_image"]


class GroundingRunOptions(BaseModel):
    """The grounding suite's run options (flat keys of a run config)."""

    model_config = ConfigDict(extra="forbid")

    conditions: list[str] = DEFAULT_IMAGE_CONDITIONS
    resolutions: list[int] = [224]
    prompt_variants: list[str] = ["default"]
    #: the non-default prompt variants run on this many finding- and label-balanced cases (0 = all cases)
    prompt_subsample: int = 100
    #: which probe sets the prompt subsample is drawn from: "primary" (the first), "all", or a list of names
    prompt_subsample_from: str | list[str] = "primary"
    #: the 512 resolution probe runs on boxed cases only (as in the paper) unless false
    res512_boxed_only: bool = True

    @field_validator("conditions")
    @classmethod
    def _known_conditions(cls, v: list[str]) -> list[str]:
        check_known("grounding condition", v, IMAGE_OPS)
        return v

    @field_validator("resolutions")
    @classmethod
    def _known_resolutions(cls, v: list[int]) -> list[int]:
        bad = [r for r in v if r not in RESOLUTIONS]
        if bad:
            raise ValueError(f"unsupported resolution(s) {bad}; known: {list(RESOLUTIONS)}")
        return v

    @field_validator("prompt_variants")
    @classmethod
    def _known_variants(cls, v: list[str]) -> list[str]:
        check_known("prompt variant", v, PROMPT_VARIANTS)
        return v


def plan_stage(ctx: StageContext) -> Plan:
    """Load and validate the probe sets (before any model is called) and plan the grounding trials.

    The non-default prompt variants run on ``prompt_subsample`` balanced cases of the first (primary) probe
    set; ``prompt_subsample_from: all`` draws that many from every probe set, a list names the sets."""
    from medvlm_audit.suites.grounding.plan import GroundingOptions, plan_grounding
    from medvlm_audit.suites.grounding.probeset import ProbeSet

    opts: GroundingRunOptions = ctx.options  # type: ignore[assignment]
    cfg = ctx.config
    sets = [ProbeSet.load(p) for p in cfg.probe_sets]
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise AuditError(f"probe-set names must be unique within a run, got {names}")
    prompt_ids: frozenset[str] | None = None
    if any(v != "default" for v in opts.prompt_variants) and opts.prompt_subsample > 0:
        from medvlm_audit.suites.grounding.subsample import run_prompt_subsample

        try:
            prompt_ids = run_prompt_subsample(sets, n=opts.prompt_subsample, seed=cfg.seed,
                                              source=opts.prompt_subsample_from)
        except ValueError as e:
            raise AuditError(str(e)) from None
    res_ids: frozenset[str] | None = None
    if any(r != 224 for r in opts.resolutions) and opts.res512_boxed_only:
        res_ids = frozenset(cid for s in sets for cid in s.boxed_case_ids())
    return plan_grounding(sets, GroundingOptions(
        conditions=tuple(opts.conditions),
        resolutions=tuple(opts.resolutions),
        prompt_variants=tuple(opts.prompt_variants),
        prompt_subsample=prompt_ids,
        res512_subsample=res_ids,
        repeats=cfg.repeats,
    ))


TIDY_COLUMNS = [
    "run_id", "probe_set", "model", "modality", "case_id", "kind", "finding", "label", "source", "patient_id",
    "study_id", "age", "sex", "view", "split", "has_box", "ibox_overlaps", "condition", "resolution",
    "prompt_variant", "sample_index", "key", "image_sha256", "answer_text", "parsed", "confidence", "correct",
    "latency_s", "error_kind", "error_message", "case_order", "status", "confidence_note",
]

#: why a thinking model has no first-token confidence
THINKING_NOTE = ("thinking model: its first generated token opens its reasoning, not its answer, so the first-token "
                 "P(yes) is not a confidence in the answer; none is reported")


def tidy_grounding(store: RunStore) -> pd.DataFrame:
    """The scored tidy table of a grounding run (``condition`` is the image condition)."""
    import numpy as np
    import pandas as pd

    from medvlm_audit.export import raw_table
    from medvlm_audit.suites.grounding.scoring import score_grounding

    raw = raw_table(store, case_fields=("tbox_x0", "ibox_overlaps"), imported=True)
    # grounding's case columns: a case is boxed when it has a target box; its irrelevant box may overlap it
    raw["has_box"] = raw["tbox_x0"].notna()
    raw["ibox_overlaps"] = raw["ibox_overlaps"].astype("boolean").fillna(False).astype(bool)
    raw = raw.drop(columns=["tbox_x0"])
    cond = raw["condition"].str.partition("|prompt=")
    base = cond[0].str.partition("@")
    raw["image_condition"] = base[0]
    raw["resolution"] = pd.to_numeric(base[2].replace("", "224")).astype(int)
    raw["prompt_variant"] = cond[2].replace("", "default")
    scored = score_grounding(raw)
    scored["full_condition"] = scored["condition"]
    scored["condition"] = scored["image_condition"]
    scored["label"] = pd.to_numeric(scored["label"], errors="coerce").astype("Int64")
    scored.loc[scored["error_kind"].notna(), "parsed"] = -1
    scored.loc[scored["error_kind"].notna(), "correct"] = np.nan
    # the Score status vocabulary (the run's parse-rate warning reads it): a yes/no read, no read, or no response
    scored["status"] = np.where(scored["error_kind"].notna(), "no_response",
                                np.where(scored["parsed"].isin([0, 1]), "answer", "unparsed"))
    # a thinking model (the server returned its reasoning): no first-token confidence, and the table says why
    thinking = scored["reasoning"].notna() if "reasoning" in scored else pd.Series(False, index=scored.index)
    scored["confidence_note"] = np.where(thinking, THINKING_NOTE, None)
    scored.loc[thinking, "confidence"] = np.nan
    return scored[TIDY_COLUMNS].reset_index(drop=True)


def tidy_grounding_columns(store: RunStore) -> Columns | None:
    """:func:`tidy_grounding` without pandas (the run's end-of-run export: issue 23): the same table as plain
    columns with the dtypes pandas gives them there, so that the files written are the same bytes
    (tests/test_lean_run_path.py checks it against :func:`tidy_grounding`). None where it does not mirror the
    pandas table (see :func:`medvlm_audit.export.raw_columns`; case fields of other types): use
    :func:`tidy_grounding` then."""
    import math

    from medvlm_audit.columns import Columns
    from medvlm_audit.export import raw_columns
    from medvlm_audit.scorers.yesno import UNPARSED, p_yes, parse_yes_no_each

    raw = raw_columns(store, case_fields=("tbox_x0", "ibox_overlaps"), imported=True)
    if raw is None:
        return None
    d, dt = raw.data, raw.dtypes
    n = len(raw)
    has_box = [not (v is None or v != v) for v in d["tbox_x0"]]
    if dt["ibox_overlaps"] is None or dt["ibox_overlaps"] == "str":
        return None
    if any(v is not None and v == v and v not in (0, 1) for v in d["ibox_overlaps"]):
        return None  # astype("boolean") refuses it
    ibox = [v is not None and v == v and bool(v) for v in d["ibox_overlaps"]]
    image_condition, resolution, prompt_variant = [], [], []
    for c in d["condition"]:
        base, _, variant = c.partition("|prompt=")
        op, _, res = base.partition("@")
        if res and not (res.isascii() and res.isdigit()):
            return None
        image_condition.append(op)
        resolution.append(int(res) if res else 224)
        prompt_variant.append(variant or "default")
    # score_grounding
    parsed = parse_yes_no_each(d["answer_text"])
    for i, v in enumerate(d["imported_parsed"]):
        if v is not None and v == v:
            if not -128 <= v < 128 or v != int(v):
                return None
            parsed[i] = int(v)
    conf = [p_yes(tl) for tl in d["top_logprobs"]]
    for i, v in enumerate(d["imported_parsed"]):
        if v is not None and v == v:
            ic = d["imported_confidence"][i]
            conf[i] = math.nan if ic is None else float(ic)
    if dt["label"] not in ("int64", "float64", "object"):
        return None
    labels = [None if v is None or v != v else float(v) for v in d["label"]]
    if any(v is not None and (v != int(v) or abs(v) >= 2**63) for v in labels):
        return None  # astype("Int64") refuses it
    correct = [float(p == lab) if p != UNPARSED and lab is not None else math.nan for p, lab in zip(parsed, labels)]
    failed = [v is not None for v in d["error_kind"]]
    thinking = [v is not None for v in d["reasoning"]]
    status = []
    for i in range(n):
        if failed[i]:
            parsed[i], correct[i] = -1, math.nan
        if thinking[i]:
            conf[i] = math.nan
        status.append("no_response" if failed[i] else "answer" if parsed[i] in (0, 1) else "unparsed")
    out = Columns()
    made: dict[str, tuple[list[Any], str | None]] = {
        "label": ([None if v is None else int(v) for v in labels], "Int64"),
        "has_box": (has_box, "bool"), "ibox_overlaps": (ibox, "bool"),
        "condition": (image_condition, "str"), "resolution": (resolution, "int64"),
        "prompt_variant": (prompt_variant, "str"), "parsed": (parsed, "int8"), "confidence": (conf, "float64"),
        "correct": (correct, "float64"), "status": (status, "str"),
        "confidence_note": ([THINKING_NOTE if t else None for t in thinking], "str" if any(thinking) else "object"),
    }
    for col in TIDY_COLUMNS:
        vals, dtype = made[col] if col in made else (d[col], dt[col])
        if dtype is None or (dtype == "object" and any(v is not None and not isinstance(v, str) for v in vals)):
            return None
        out.add(col, vals, dtype)
    return out


#: the files a grounding report folder holds, in the order they are written (report.html last)
REPORT_FILES: tuple[str, ...] = (
    "metrics.parquet", "metrics.csv", "comparisons.csv", "categories.csv", "summary.json", "report.html",
)


def grounding_result(analysis: Any, *, figures: Sequence[Any] | None = None, fmt: str = "svg",
                     extra_sections: Sequence[Any] | None = None,
                     designed: dict[str, str] | None = None) -> SuiteResult:
    """A GroundingAnalysis as the suite result the report writer renders (its fields checked first, errors naming
    the field and the column)."""
    import pandas as pd

    from medvlm_audit.report.write import validate_result
    from medvlm_audit.suites.grounding.sections import CATEGORIES_COLUMNS, INTRO, grounding_sections

    for f in ("metrics", "comparisons", "categories", "threshold_sweep", "robustness", "verdicts", "summary"):
        if not hasattr(analysis, f):
            raise ValueError(f"analysis lacks field {f!r} (expected a GroundingAnalysis)")
    cats = analysis.categories
    if not isinstance(cats, pd.DataFrame):
        raise TypeError(f"analysis.categories must be a pandas DataFrame, got {type(cats).__name__}")
    if cats.empty and len(cats.columns) == 0:
        cats = pd.DataFrame(columns=list(CATEGORIES_COLUMNS))
    missing = [c for c in CATEGORIES_COLUMNS if c not in cats.columns]
    if missing:
        raise ValueError(f"analysis.categories lacks column(s) {missing}; has {list(cats.columns)}")
    cats = cats[[*CATEGORIES_COLUMNS, *[c for c in cats.columns if c not in CATEGORIES_COLUMNS]]]
    result = SuiteResult(metrics=analysis.metrics, comparisons=analysis.comparisons, verdicts=analysis.verdicts,
                         summary=analysis.summary, tables={"categories": cats},
                         sections=list(extra_sections or []))
    validate_result(result)
    result.verdicts, result.summary = dict(analysis.verdicts), dict(analysis.summary)
    if figures is None:  # built in the report's prepared process where there is one (report.parallel.prepare)
        from medvlm_audit.report.parallel import call_prepared

        sections = call_prepared(f"{grounding_sections.__module__}:grounding_sections", analysis, fmt=fmt,
                                 designed=designed)
    else:
        sections = grounding_sections(analysis, figures=figures, fmt=fmt, designed=designed)
    result.sections = [*sections, *result.sections]
    result.intro = INTRO
    return result


def write_grounding_report(analysis: Any, out_dir: str | Path, *, title: str = "medvlm-audit grounding report",
                           run_info: dict[str, Any] | None = None, extra_sections: Sequence[Any] | None = None,
                           fmt: str = "svg") -> Path:
    """Render a GroundingAnalysis with the one report writer (report.html, metrics, comparisons, categories,
    summary.json) and return the path of report.html."""
    from medvlm_audit.report import write_report

    return write_report(grounding_result(analysis, fmt=fmt, extra_sections=extra_sections), out_dir,
                        suite="grounding", title=title, run_info=run_info)


def answer_models(ctx: StageContext) -> list[Any]:
    """The run's models; a ``vision_probe`` model is told which probe sets it is audited on (``audited``, unless
    its config names them), so that a training image or patient among them is refused (or reported with
    ``on_overlap: report``) before it answers."""
    out = []
    for spec in ctx.config.models:
        if spec.backend == "vision_probe" and "audited" not in spec.params():
            spec = type(spec).model_validate({**spec.model_dump(exclude_none=True),
                                              "audited": [str(p) for p in ctx.config.probe_sets]})
        out.append(spec)
    return out


REFERENCE_KINDS = ("local_evidence", "finding_prior", "always_yes", "global_probe", "occlusion_unstable")


class GroundingSuite(Suite):
    """Paper 000: does a model's right answer come from the image?"""

    name: ClassVar[str] = "grounding"
    #: what its report's sections import (matplotlib among them): imported while the run is read and analysed
    report_modules: ClassVar[tuple[str, ...]] = ("medvlm_audit.suites.grounding.sections",
                                                 "medvlm_audit.suites.grounding.figures")
    analysis_modules: ClassVar[tuple[str, ...]] = ("medvlm_audit.suites.grounding.analysis",)
    tidy_by_model: ClassVar[bool] = True  # raw_table's rows, scored row by row (tidy_grounding)
    #: ``demo --set`` options of the embedded default (checked by medvlm_audit.demo_options)
    embedded_options: ClassVar[dict[str, DemoOption]] = {
        "n_cases": DemoOption(int, 800, "phantom probe cases", minimum=60),
        "n_train": DemoOption(int, 1500, "phantom training cases for the reference models", minimum=60),
        "gemma": DemoOption(bool, False, "add Gemma 3 270M as a text-only baseline, extra gemma"),
        "vision_probe": DemoOption(bool, False, "add a tiny ViT vision probe"),
    }
    title: ClassVar[str] = "Grounding audit"
    Options: ClassVar[type[BaseModel]] = GroundingRunOptions
    backends: ClassVar[dict[str, str]] = {
        "reference": "medvlm_audit.suites.grounding.reference:build_reference",
        "vision_probe": "medvlm_audit.suites.grounding.vision_probe:build_vision_probe",
    }

    #: what the run explorer (`medvlm-audit view`) shows of this suite's tidy table: the item column, the
    #: condition flips are measured against, the columns that make two trials comparable, the filters, the
    #: columns shown per trial (with value labels) and the report table holding each model's category
    view: ClassVar[dict[str, Any]] = {
        "item": "case_id", "base_condition": "original",
        "condition_order": ["original", "target_mask", "irrelevant_mask", "swap", "no_image"],
        "setting": ["resolution", "prompt_variant", "sample_index"],
        "default_setting": {"resolution": 224, "prompt_variant": "default"},
        "filters": ["finding", "resolution", "prompt_variant"],
        "answer": "parsed", "unparsed": -1,
        "labels": {"parsed": {1: "Yes", 0: "No", -1: "unparsed"}, "label": {1: "Yes", 0: "No"},
                   "correct": {1: "yes", 0: "no"}},
        "case_fields": ["finding", "label", "kind", "source", "sex", "age", "view", "has_box"],
        "trial_fields": ["parsed", "confidence", "correct"],
        "titles": {"confidence": "P(yes)"},  # the first-token P(yes), not a confidence in the answer given
        "category_table": "categories",
    }

    def stages(self) -> Sequence[Stage]:
        return (Stage("answer", plan_stage, answer_models),)

    def reader_tasks(self) -> Sequence[ReaderTask]:
        from medvlm_audit.suites.grounding.readers import READER_TASKS

        return READER_TASKS

    def embedded_config(self, out: Path, *, n_cases: int = 800, n_train: int = 1500, gemma: bool = False,
                        vision_probe: bool = False, log: Callable[[str], Any] = print, **flags: Any
                        ) -> dict[str, Any]:
        """Build the phantom probe set (and a tiny ViT for the vision probe) under ``out`` and return the demo's
        run config (also written to OUT/demo.yaml so `medvlm-audit run` can resume or repeat it)."""
        if flags:
            raise ConfigError(f"the grounding default takes no option(s) {sorted(flags)}")
        for key, v in (("n_cases", n_cases), ("n_train", n_train)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"the grounding default's {key} must be a whole number, got {v!r}")
        for key, v in (("gemma", gemma), ("vision_probe", vision_probe)):
            if not isinstance(v, bool):
                raise ConfigError(f"the grounding default's {key} must be true or false, got {v!r}")
        from medvlm_audit.suites.grounding.embedded import prepare_demo

        return prepare_demo(Path(out), n_cases=n_cases, n_train=n_train, gemma=gemma, vision_probe=vision_probe,
                            log=log)

    def tidy(self, store: RunStore) -> pd.DataFrame:
        return tidy_grounding(store)

    def tidy_columns(self, store: RunStore) -> Columns | None:
        return tidy_grounding_columns(store)

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, *, B: int = 10_000, seed: int = 0,
                mode: Literal["exact-counts", "index"] = "exact-counts",
                is_denominator: Literal["correct", "all"] = "correct", cluster_by_patient: bool = False,
                fmt: str = "svg", run_dir: Path | None = None, designed: dict[str, str] | None = None,
                **unused: Any) -> SuiteResult:
        from medvlm_audit.suites.grounding.analysis import analyse_grounding

        analysis = analyse_grounding(tidy, B=B, seed=seed, mode=mode, is_denominator=is_denominator,
                                     cluster_by_patient=cluster_by_patient)
        readers: list[Any] = []
        # reader-study exports under RUN/readers/: the readers beside the models (their code imported only then)
        if run_dir is not None and (Path(run_dir) / "readers").is_dir():
            from medvlm_audit.readers.analysis import reader_sections

            readers = reader_sections(run_dir, tidy, B=B)
        notes = tidy.loc[tidy["confidence_note"].notna(), "model"].unique() if "confidence_note" in tidy else []
        if len(notes):  # say why these models have no confidence-based metrics
            from html import escape

            from medvlm_audit.report.sections import Section

            readers = [*readers, Section("Confidence of thinking models", (
                f"<p>No first-token confidence for {escape(', '.join(map(str, notes)))}: {escape(THINKING_NOTE)}."
                "</p>"))]
        return grounding_result(analysis, fmt=fmt, extra_sections=readers, designed=designed)

    def commands(self) -> dict[str, str]:
        from medvlm_audit.suites.grounding.commands import COMMANDS

        return dict(COMMANDS)
