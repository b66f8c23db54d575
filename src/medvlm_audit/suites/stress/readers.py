"""The stress suite's reader tasks (paper 003): visual necessity (could a clinician answer a multiple-choice item
without its image? the agreed image-required items are the T2 subset) and the benchmark profile (each benchmark
rated on a rubric of ordinal axes, and the reasoning x visual-complexity landscape). Items come from an items
file or the run's stored multiple-choice items.

- visual necessity: the agreed image-required items (every reader who rated the item said the image is needed,
  and at least ``min_readers`` rated it) as an item list for the stress suite's T2; agreement.
- benchmark profile: median per benchmark and axis, Fleiss' kappa per axis with a bootstrap interval over
  benchmarks, and the reasoning x visual-complexity landscape.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit import stats
from medvlm_audit.images import ImageRecipe
from medvlm_audit.readers.agreement import agreement_rows, fleiss_row, metric_row, new_figure, wilson_row
from medvlm_audit.readers.sampling import item_id, need_columns, resolver, run_items, stratified, text_or_none
from medvlm_audit.readers.tasks import (
    AnalysisRequest,
    Choice,
    ReaderAnalysis,
    ReaderTask,
    SampleRequest,
    Scale,
    StudyError,
    TaskSpec,
)

__all__ = ["BENCHMARK_AXES", "BENCHMARK_PROFILE", "READER_TASKS", "THREE_POINT", "VISUAL_NECESSITY",
           "benchmark_scales"]

#: benchmark-profile rubric (paper 003, Fig. 6: ten axes on a 3-point ordinal scale). The paper names six of them
#: in its text; the other four are this project's reading of its figure and are configurable per study.
BENCHMARK_AXES: tuple[tuple[str, str], ...] = (
    ("reasoning_complexity", "Reasoning complexity: how many inferential steps does a typical item need?"),
    ("clinical_context", "Clinical context: how much patient history or scenario do the items give and need?"),
    ("uncertainty_handling", "Uncertainty handling: do items require weighing uncertain or conflicting evidence?"),
    ("visual_detail_required", "Visual detail required: how fine is the image detail the answer rests on?"),
    ("multi_view_alignment", "Multi-view alignment: do items require combining several images or views?"),
    ("text_only_solvable", "Text-only solvable: can items be answered from the text alone?"),
    ("medical_knowledge_depth", "Medical knowledge depth: how specialised is the knowledge required?"),
    ("cross_modal_integration", "Cross-modal integration: must text and image findings be combined?"),
    ("temporal_reasoning", "Temporal reasoning: do items involve disease course, timing or prior studies?"),
    ("distractor_plausibility", "Distractor plausibility: how plausible are the wrong options?"),
)
THREE_POINT = (Choice("1", "1 low", "1"), Choice("2", "2 medium", "2"), Choice("3", "3 high", "3"))


def benchmark_scales(axes: list[tuple[str, str]] | None = None) -> tuple[Scale, ...]:
    """The rubric as scales; ``axes`` (name, prompt) pairs replace the defaults (at most 9 keys per page row)."""
    return tuple(Scale(name, prompt, THREE_POINT, ordinal=True) for name, prompt in (axes or BENCHMARK_AXES))


# ------------------------------------------------------------------------------------------------ sampling


def _mcq_frame(run_dir: Path | None, items_df: pd.DataFrame | None) -> pd.DataFrame:
    """MCQ items (item_id, question, options, images, benchmark, gold) from a file or the run store's items."""
    if items_df is not None:
        df = items_df.copy()
        base = None
    else:
        assert run_dir is not None
        cases, sets = run_items(run_dir)
        recs = []
        for (ps, cid), row in cases.items():
            if row.get("question") is None or row.get("options") is None:
                continue
            recs.append({**row, "item_id": row.get("item_id", cid), "_set": ps})
        if not recs:
            raise StudyError(f"{run_dir}: the run holds no multiple-choice items (question + options); pass --items")
        df = pd.DataFrame(recs)
        base = sets
    need_columns(df, ["item_id", "question", "options"], "multiple-choice items")
    if "benchmark" not in df.columns:
        df["benchmark"] = "items"
    if "images" not in df.columns:
        df["images"] = [[p] if text_or_none(p) else [] for p in df.get("image", pd.Series([None] * len(df)))]

    def as_list(v: Any) -> list[Any]:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return []
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                return [v]
        return list(v)

    df["options"] = [[str(o) for o in as_list(v)] for v in df["options"]]
    imgs = []
    for r in df.itertuples(index=False):
        res = resolver((base or {}).get(getattr(r, "_set", ""), "")) if base is not None else resolver("")
        paths = []
        for p in as_list(r.images):
            try:
                paths.append(res(str(p)))
            except StudyError:
                paths.append(str(Path(p).resolve()))
        imgs.append(paths)
    df["images"] = imgs
    df["item_id"] = df["item_id"].astype(str)
    return df.reset_index(drop=True)


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _options_view(opts: list[str]) -> list[list[str]]:
    return [[LETTERS[i], o] for i, o in enumerate(opts)]


def _items_visual_necessity(run_dir: Path | None, items_df: pd.DataFrame | None, n: int,
                            seed: int) -> list[dict[str, Any]]:
    df = _mcq_frame(run_dir, items_df)
    rng = np.random.default_rng(seed)
    sample = stratified(df, ["benchmark"], n if n > 0 else len(df), rng)
    out = []
    for r in sample.itertuples(index=False):
        src = {"item_id": r.item_id, "benchmark": str(r.benchmark), "condition": "original",
               "gold": text_or_none(getattr(r, "gold", None)) or text_or_none(getattr(r, "answer", None)),
               "images": [ImageRecipe.standard(p, mode="RGB").to_record() for p in r.images]}
        view = {"question": str(r.question), "options": _options_view(list(r.options)), "n_images": len(r.images)}
        out.append({"item_id": item_id(seed, "vn", r.item_id), "unit": r.item_id, "view": view, "source": src})
    return out


def _items_benchmark_profile(run_dir: Path | None, items_df: pd.DataFrame | None, n: int,
                             seed: int) -> list[dict[str, Any]]:
    df = _mcq_frame(run_dir, items_df)
    rng = np.random.default_rng(seed)
    out = []
    for bench, g in df.groupby("benchmark", sort=True):
        sample = stratified(g, [], n if n > 0 else 5, rng)
        shown = [{"question": str(r.question), "options": _options_view(list(r.options))}
                 for r in sample.itertuples(index=False)]
        src = {"benchmark": str(bench), "sample_item_ids": [str(x) for x in sample["item_id"]],
               "n_items": len(g), "images": []}
        view = {"question": f"Benchmark {chr(65 + len(out))}: {len(shown)} sample items", "samples": shown,
                "n_images": 0}
        out.append({"item_id": item_id(seed, "bp", bench), "unit": str(bench), "view": view, "source": src})
    return out


# ------------------------------------------------------------------------------------------------ analysis


def _visual_necessity(ans: pd.DataFrame, B: int, out: ReaderAnalysis, min_readers: int) -> None:
    a = ans[ans["scale"] == "answer"]
    readers = sorted(a["reader"].unique())
    per = a.groupby(["case_id", "benchmark"]).agg(n=("answer", "size"),
                                                  n_required=("answer", lambda s: int((s == "no").sum())))
    per = per.reset_index()
    need = min(min_readers, len(readers))
    per["needs_image"] = (per["n"] >= need) & (per["n_required"] == per["n"])
    out.item_lists["image_required"] = sorted(per.loc[per["needs_image"], "case_id"].astype(str))
    out.tables["needs_image"] = per.rename(columns={"case_id": "item_id"})
    rows = []
    for bench, g in per.groupby("benchmark"):
        rows.append(wilson_row(str(bench), "readers", "image_required_share", "agreed",
                                int(g["needs_image"].sum()), len(g), f"all of at least {need} readers said the "
                                                                     f"image is required"))
    if len(readers) > 1:
        wide = a.pivot_table(index="case_id", columns="reader", values="answer", aggfunc="first")
        rows += agreement_rows("visual-necessity", "visual-necessity", wide, weights=None, categories=None, B=B)
        rows.append(fleiss_row("visual-necessity", "visual-necessity", wide, ["yes", "no"], B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)


def _benchmark_profile(ans: pd.DataFrame, man: dict[str, Any], B: int, out: ReaderAnalysis,
                       landscape: tuple[str, str]) -> None:
    rows = []
    med = ans.assign(v=ans["answer"].astype(int)).groupby(["benchmark", "scale"])["v"].agg(
        median=lambda x: stats.ordinal_median_iqr(x)[0], q1=lambda x: stats.ordinal_median_iqr(x)[1],
        q3=lambda x: stats.ordinal_median_iqr(x)[2], size="size")
    for (bench, scale), r in med.iterrows():
        rows.append(metric_row(str(bench), "readers", f"rubric:{scale}", "median", float(r["median"]), np.nan, np.nan,
                               np.nan, int(r["size"]), "score (1-3)",
                               "median category over readers (an ordinal scale: a category, never a midpoint)",
                               f"IQR {int(r['q1'])}-{int(r['q3'])}"))
    readers = sorted(ans["reader"].unique())
    for scale in man["scales"]:
        wide = ans[ans["scale"] == scale].pivot_table(index="benchmark", columns="reader", values="answer",
                                                      aggfunc="first")
        if len(readers) > 1:
            rows.append(fleiss_row("benchmark-profile", f"axis={scale}", wide, ["1", "2", "3"], B))
    out.metrics = pd.concat([out.metrics, pd.DataFrame(rows)], ignore_index=True)
    table = med["median"].unstack("scale")
    out.tables["benchmark_profile"] = table.reset_index()
    out.figures["benchmark-profile"] = benchmark_landscape_figure(table, *landscape)
    out.figure_titles["benchmark-profile"] = "Benchmark profile"


# ------------------------------------------------------------------------------------------------ figures


def benchmark_landscape_figure(table: pd.DataFrame, x: str, y: str) -> Any:
    """Benchmarks in the reasoning x visual-complexity plane, medians of the readers (as in paper 003's Fig. 5).
    Benchmarks with the same medians share one point, labelled once with their names one per line (medians are
    categories, so two benchmarks often share a cell: separate labels would overlap)."""
    fig = new_figure(4.2, 4.0)
    ax = fig.subplots()
    if x in table.columns and y in table.columns:
        cells: dict[tuple[float, float], list[str]] = {}
        for bench, r in table.iterrows():
            if np.isfinite(float(r[x])) and np.isfinite(float(r[y])):
                cells.setdefault((float(r[x]), float(r[y])), []).append(str(bench))
        for (cx, cy), names in cells.items():
            ax.scatter([cx], [cy], s=40 + 20 * len(names), edgecolors="black")
            ax.annotate("\n".join(names), (cx, cy), fontsize=8, xytext=(6, -4), textcoords="offset points",
                        va="top")
    ax.set_xlim(0.5, 3.5)
    ax.set_ylim(0.5, 3.5)
    ax.set_xlabel(x.replace("_", " ") + " (median, 1-3)")
    ax.set_ylabel(y.replace("_", " ") + " (median, 1-3)")
    ax.set_title("Benchmark landscape", loc="left", fontsize=9)
    return fig




# ------------------------------------------------------------------------------------------------ the tasks


def _sample_visual_necessity(req: SampleRequest) -> list[dict[str, Any]]:
    return _items_visual_necessity(req.run_dir, req.items, req.n, req.seed)


def _sample_benchmark_profile(req: SampleRequest) -> list[dict[str, Any]]:
    return _items_benchmark_profile(req.run_dir, req.items, req.n, req.seed)


def _analyse_visual_necessity(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    _visual_necessity(req.answers, req.B, out, int(req.options.get("min_readers", 2)))


def _analyse_benchmark_profile(req: AnalysisRequest, out: ReaderAnalysis) -> None:
    landscape = tuple(req.options.get("landscape", ("reasoning_complexity", "visual_detail_required")))
    _benchmark_profile(req.answers, req.manifest, req.B, out, landscape)  # type: ignore[arg-type]


def _finish_visual_necessity(res: ReaderAnalysis) -> None:
    """The agreed image-required items as a section and as needs_image.jsonl (the stress suite's T2 subset)."""
    from medvlm_audit.report.sections import Section, table_to_html

    if res.item_lists.get("image_required") is not None:
        ids = res.item_lists["image_required"]
        res.task_sections.append(Section("Agreed image-required items (stress T2 subset)",
                                         table_to_html(pd.DataFrame({"item_id": ids}), table_id="image-required")
                                         if ids else "<p>No item was agreed to require its image.</p>"))
        if "needs_image" in res.tables:
            nd = res.tables["needs_image"]
            res.files["needs_image.jsonl"] = "".join(
                json.dumps({"item_id": str(r.item_id), "needs_image": bool(r.needs_image)}) + "\n"
                for r in nd.itertuples(index=False)).encode()


VISUAL_NECESSITY = ReaderTask(
    TaskSpec("visual-necessity", "Image necessity",
             "Could a clinician answer this multiple-choice question correctly without seeing its image?",
             (Scale("answer", "Answerable without the image?",
                    (Choice("yes", "Yes, answerable without the image", "y"),
                     Choice("no", "No, the image is required", "n"))),)),
    sample=_sample_visual_necessity, analyse=_analyse_visual_necessity, finish=_finish_visual_necessity,
    answer_fields=("benchmark",),
    n_means="multiple-choice items (--items: item_id, question, options, images, benchmark; default the run's)")
BENCHMARK_PROFILE = ReaderTask(
    TaskSpec("benchmark-profile", "Benchmark profile",
             "Look at the sample items of this benchmark, then rate the benchmark on each axis (1 low, 2 medium, "
             "3 high).",
             benchmark_scales(), shows_image=False),
    sample=_sample_benchmark_profile, analyse=_analyse_benchmark_profile, axis_choices=THREE_POINT,
    answer_fields=("benchmark",),
    n_means="sample items shown per benchmark (--axis: the rubric; default the ten axes of paper 003)")

#: the stress suite's reader tasks (``StressSuite.reader_tasks()``)
READER_TASKS: tuple[ReaderTask, ...] = (VISUAL_NECESSITY, BENCHMARK_PROFILE)
