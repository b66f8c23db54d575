"""The reports suite behind the one Suite interface (paper 002): report generation per image under decoding
strategies, then per model x strategy the corpus audit (CAD gated and ungated, WAE with intervals, diversity)
against a reference corpus.

One stage, ``generate``: a trial per image x strategy x sample (``samples`` per input for stochastic strategies,
one for greedy and beam), the strategy only as the trial's decoding overrides. Before anything is written the
stage checks that every model can honour every strategy (``Stage.check``), naming the option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from medvlm_audit.config import resolved_path_text
from medvlm_audit.demo_options import DemoOption
from medvlm_audit.errors import ConfigError
from medvlm_audit.images import ImageRecipe
from medvlm_audit.models.base import Message
from medvlm_audit.registry import check_known
from medvlm_audit.store import RunStore
from medvlm_audit.suites.base import Plan, PlanSource, Stage, StageContext, Suite, SuiteResult, Trial
from medvlm_audit.suites.reports.decoding import DEFAULT_STRATEGIES, STRATEGIES

if TYPE_CHECKING:  # pragma: no cover
    from medvlm_audit.readers.tasks import ReaderTask

PROMPT = ("You are a radiologist. Write the findings and impression of the radiology report for this chest "
          "X-ray.")
TIDY_COLUMNS = ("run_id", "model", "probe_set", "case_id", "reference_id", "strategy", "sample_index", "group",
                "report", "n_words", "status", "finish_reason", "error_kind", "error_message", "effective_decoding")


class ClinicalMetricSpec(BaseModel):
    """One clinical metric adapter (``chexbert``, ``radgraph``, ``ratescore``, ``green``) and its local model path."""

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    params: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _registered(cls, v: str) -> str:
        from medvlm_audit.suites.reports.clinical import CLINICAL_METRICS

        check_known("clinical metric", [v], CLINICAL_METRICS.names(), listed_as="registered")
        return v


class ReportsOptions(BaseModel):
    """The reports suite's run options (flat keys of a run config)."""

    model_config = ConfigDict(extra="forbid")

    #: decoding strategies (default: the paper's six)
    strategies: list[str] = list(DEFAULT_STRATEGIES)
    #: samples per input for the stochastic strategies (greedy and beam: one)
    samples: int = Field(3, ge=1)
    #: reference corpus: ``iu`` (the IU X-ray reports from torchxrayvision) or a JSONL {id, text, group}
    reference: str = "iu"
    #: bootstrap and permutation resamples of WAE per model x strategy
    B: int = Field(1000, ge=1)
    n_perm: int = Field(1000, ge=1)
    max_new_tokens: int = Field(512, ge=1)
    #: images in the phantom image set (probe_sets entry ``phantom``)
    phantom_images: int = Field(40, ge=2)
    #: semantic diversity and WEAT (MiniLM from the ``reports`` extra): auto | on | off
    semantic: Literal["auto", "on", "off"] = "auto"
    #: BERTScore of each report against its image's reference report (the image set's ``reference_id``, else the
    #: case id, looked up in the reference corpus): auto | on | off
    bertscore: Literal["auto", "on", "off"] = "auto"
    #: local Hugging Face encoder folder for BERTScore (default: the packaged all-MiniLM-L6-v2)
    bertscore_model: str | None = None
    #: the encoder layer BERTScore reads (default: the last)
    bertscore_layers: int | None = Field(None, ge=1)
    #: clinical metrics from local model paths, e.g. ``[{name: chexbert, path: /models/chexbert}]``
    clinical_metrics: list[ClinicalMetricSpec] = []
    #: at most this many paired reports per model x strategy for the paired metrics (a seeded sample)
    surface_max: int = Field(1000, ge=1)
    prompt: str = PROMPT

    @field_validator("strategies")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        check_known("decoding strategy", v, STRATEGIES)
        if len(set(v)) != len(v):
            raise ValueError(f"strategies repeat: {v}")
        return v or list(DEFAULT_STRATEGIES)


def _strategies(opts: ReportsOptions) -> list[Any]:
    from medvlm_audit.suites.reports.decoding import strategy, with_max_tokens

    return [with_max_tokens(strategy(s), opts.max_new_tokens) for s in opts.strategies]


def load_source(spec: str, run_dir: str | Path, opts: ReportsOptions, seed: int) -> Any:
    from medvlm_audit.suites.reports.images import load_image_set

    if spec == "phantom":
        from medvlm_audit.suites.reports.analysis import reference_corpus
        from medvlm_audit.suites.reports.embedded import build_phantom_images

        return build_phantom_images(Path(run_dir) / "phantom_reports", n=opts.phantom_images, seed=seed,
                                    reference=reference_corpus(opts.reference))
    return load_image_set(spec)


def plan_stage(ctx: StageContext) -> Plan:
    """One trial per image x strategy x sample; the strategy is only the trial's decoding overrides."""
    from medvlm_audit.suites.reports.decoding import samples_for

    opts: ReportsOptions = ctx.options  # type: ignore[assignment]
    problems = preflight(ctx)  # `run` checked these before any work; a plan made elsewhere (batch export) too
    if problems:
        raise ConfigError("; ".join(problems))
    if opts.reference != "iu" and not Path(opts.reference).is_file():
        raise ConfigError(f"option 'reference': {opts.reference!r} is not a file (a JSONL of {{id, text, group}}) "
                          "nor 'iu' (the IU X-ray reports from torchxrayvision)")
    plan = Plan()
    names: set[str] = set()
    for spec in ctx.config.probe_sets:
        src = load_source(spec, ctx.run_dir, opts, ctx.config.seed)
        name = src.name
        while name in names:
            name += "+"
        names.add(name)
        plan.sources.append(PlanSource(name, src.path, src.content_hash, src.rows,
                                       {**src.provenance, "builder": "reports"}))
        msgs = (Message("user", opts.prompt),)
        for row in src.rows.itertuples(index=False):
            recipe = ImageRecipe.standard(str(row.image_path), None)
            for st in _strategies(opts):
                for k in range(samples_for(st, opts.samples)):
                    plan.trials.append(Trial(name, str(row.case_id), st.name, msgs, (recipe,), sample_index=k,
                                             decoding=st.overrides()))
    return plan


def preflight(ctx: StageContext) -> list[str]:
    """Every problem that would stop the run or its report, found before any work (each one line): the
    ``reports`` extra's modules and torchxrayvision for the IU corpus (the ``iu`` reference or the reference
    generator, fitted on it) in one line with the one command that installs them (CPU torch first when torch is
    absent, so no CUDA wheel is fetched), a reference corpus file that is not there or that the report could not
    read (its file, row and field), clinical-metric paths and the BERTScore backbone."""
    from medvlm_audit.extras import absent_modules, install_command, torchxrayvision_data_dir

    opts: ReportsOptions = ctx.options  # type: ignore[assignment]
    problems = []
    needs_iu = opts.reference == "iu" or any(m.backend == "report_reference" for m in ctx.config.models)
    parts = []
    modules = absent_modules("reports")
    if modules:
        parts.append(f"the optional 'reports' extra ({', '.join(modules)})")
    if needs_iu and torchxrayvision_data_dir() is None:
        parts.append("torchxrayvision (the IU X-ray reference reports)")
    if parts:
        problems.append(f"the reports suite needs {' and '.join(parts)}, not installed; install with: "
                        f"{install_command('reports', torchxrayvision=needs_iu)}")
    if opts.reference != "iu" and not Path(opts.reference).expanduser().is_file():
        problems.append(f"option 'reference': {resolved_path_text(opts.reference)} does not exist (a JSONL of "
                        "{id, text, group} or 'iu')")
    elif opts.reference != "iu":  # read as the report reads it: a bad row is found before any model is asked
        from medvlm_audit.suites.reports.corpus import CorpusError, read_corpus

        try:
            read_corpus(Path(opts.reference).expanduser())
        except CorpusError as e:
            problems.append(f"option 'reference': {e}")
    for c in opts.clinical_metrics:
        if not Path(c.path).expanduser().exists():
            problems.append(f"option 'clinical_metrics' ({c.name}): {resolved_path_text(c.path)} does not exist")
    if opts.bertscore_model is not None and not (Path(opts.bertscore_model).expanduser() / "config.json").is_file():
        problems.append(f"option 'bertscore_model': {opts.bertscore_model} holds no config.json (a local Hugging "
                        "Face encoder folder is needed)")
    return problems


def check_stage(ctx: StageContext, models: list[Any]) -> None:
    """Refuse, before the run, a missing `reports` extra (its analysis needs sacrebleu and rouge-score) and a
    model that cannot honour one of the strategies (naming the option)."""
    from medvlm_audit.extras import require_extra
    from medvlm_audit.suites.reports.decoding import check_models

    require_extra("reports", "the reports suite")

    opts: ReportsOptions = ctx.options  # type: ignore[assignment]
    for c in opts.clinical_metrics:  # loaded by the analysis; a wrong path must not wait for the whole run
        if not Path(c.path).expanduser().exists():
            raise ConfigError(f"option 'clinical_metrics' ({c.name}): {resolved_path_text(c.path)} does not exist")
    if opts.bertscore_model is not None and not (Path(opts.bertscore_model).expanduser() / "config.json").is_file():
        raise ConfigError(f"option 'bertscore_model': {opts.bertscore_model} holds no config.json (a local Hugging "
                          "Face encoder folder is needed)")
    try:
        check_models(models, _strategies(opts))
    except ConfigError as e:
        raise ConfigError(f"option 'strategies' ({', '.join(opts.strategies)}): {e}; drop that strategy from "
                          "'strategies' or use a backend that can decode it") from None


def tidy_reports(store: RunStore) -> pd.DataFrame:
    """One row per model x image x strategy x sample: the report text and the patient's sex (case metadata)."""
    from medvlm_audit.export import raw_table
    from medvlm_audit.suites.reports.assess import reference_vocabulary, report_status, with_vocabulary
    from medvlm_audit.suites.reports.corpus import normalise_group

    raw = raw_table(store)
    out = pd.DataFrame({
        "run_id": raw["run_id"], "model": raw["model"], "probe_set": raw["probe_set"], "case_id": raw["case_id"],
        "strategy": raw["condition"], "sample_index": raw["sample_index"],
        "group": [normalise_group(s) for s in raw["sex"]],
        "report": raw["answer_text"].where(raw["error_kind"].isna()),
        "finish_reason": raw["finish_reason"], "error_kind": raw["error_kind"], "error_message": raw["error_message"],
        "effective_decoding": raw["effective_decoding"],
    })
    out["n_words"] = [len(str(t).split()) if isinstance(t, str) else None for t in out["report"]]
    out["status"] = [report_status(t) for t in out["report"]]  # assess.py: the not-assessable rule
    vocabulary = reference_vocabulary(store.meta().get("config", {}).get("reference"))
    if vocabulary is not None:  # gibberish (no reference word) is flagged at run time too
        out["status"] = with_vocabulary(out["status"], out["report"], vocabulary)
    out["reference_id"] = _reference_ids(store, out)
    return out[list(TIDY_COLUMNS)].reset_index(drop=True)


def _reference_ids(store: RunStore, tidy: pd.DataFrame) -> list[str]:
    """Each row's paired reference report: the image set's ``reference_id`` field, else the case id."""
    import json

    cases = store.frame("SELECT probe_set, case_id, row FROM cases")
    ref = {(p, c): json.loads(r).get("reference_id") for p, c, r in cases.itertuples(index=False)}
    return [str(ref.get((p, c)) or c) for p, c in zip(tidy["probe_set"], tidy["case_id"])]


class ReportsSuite(Suite):
    """Paper 002: does decoding erase clinical terminology? Report generation under decoding strategies, CAD,
    WAE and diversity against a reference corpus."""

    name: ClassVar[str] = "reports"
    #: ``demo --set`` options of the embedded default (checked by medvlm_audit.demo_options)
    embedded_options: ClassVar[dict[str, DemoOption]] = {
        "n_images": DemoOption(int, 40, "phantom images, patients of both sexes", minimum=2),
        "samples": DemoOption(int, 3, "reports per image and sampled decoding strategy", minimum=1),
    }
    title: ClassVar[str] = "Report audit"
    Options: ClassVar[type[BaseModel]] = ReportsOptions
    backends: ClassVar[dict[str, str]] = {"report_reference": "medvlm_audit.suites.reports.reference:factory"}

    #: what the run explorer (`medvlm-audit view`) shows: each strategy's report beside the image's reference
    #: report, with the corpus audit's erased / new-bias / bias-flip / preserved words marked (view.py)
    view: ClassVar[dict[str, Any]] = {
        "item": "case_id", "condition_column": "strategy", "text_column": "report", "text_label": "report",
        "condition_order": ["greedy", "beam4", "t0.3", "t0.7", "top_k", "top_p"],
        "setting": ["sample_index"], "filters": ["group"], "list_columns": ["group", "n_words"], "truth": None,
        "case_fields": ["group", "reference_id"], "trial_fields": ["n_words", "finish_reason"],
        "reference_column": "reference_id", "support": "medvlm_audit.suites.reports.view",
    }

    def stages(self) -> Sequence[Stage]:
        return (Stage("generate", plan_stage, check=check_stage),)

    def reader_tasks(self) -> Sequence[ReaderTask]:
        return ()  # the reports audit brings no reader task

    def preflight(self, ctx: StageContext) -> list[str]:
        return preflight(ctx)

    def embedded_config(self, out: Path, *, log: Callable[[str], Any] = print, **flags: Any) -> dict[str, Any]:
        """Phantom images with the patient's sex (built into OUT/phantom_reports when the run plans), the IU
        X-ray reports as the reference corpus and the reference report generator (fitted when it is built)."""
        unknown = set(flags) - {"n_images", "samples"}
        if unknown:
            raise ConfigError(f"the reports default takes no option(s) {sorted(unknown)}; known: n_images, samples")
        return {
            "suite": "reports",
            "run_dir": str(out),
            "probe_sets": ["phantom"],
            "models": [{"name": "ngram-reporter", "backend": "report_reference"}],
            "phantom_images": int(flags.get("n_images", 40)),
            "samples": int(flags.get("samples", 3)),
            "B": 200, "n_perm": 200, "semantic": "off",
        }

    def tidy(self, store: RunStore) -> pd.DataFrame:
        return tidy_reports(store)

    def analyse(self, tidy: pd.DataFrame, options: BaseModel, *, fmt: str = "svg", **unused: Any) -> SuiteResult:
        """Per model x strategy, the corpus audit against the reference corpus (the suite's own ``B`` and
        ``n_perm`` options set its resamples; the report command's ``--B`` is not used)."""
        from medvlm_audit.suites.reports.analysis import analyse_reports

        return analyse_reports(tidy, options, fmt=fmt)  # type: ignore[arg-type]

    def commands(self) -> dict[str, str]:
        return {
            "corpus-audit": "medvlm_audit.suites.reports.commands:corpus_audit_cmd",
            "build iu-reports": "medvlm_audit.suites.reports.commands:build_iu_reports_cmd",
        }
