"""Analysis of a report-generation run: per model x strategy, :func:`~medvlm_audit.suites.reports.audit.corpus_audit`
of the model's reports (grouped by the patient's sex from the case metadata) against the reference corpus, in
the shared long metrics schema (``subset`` = the strategy) with the report's sections (their tables and figures:
:mod:`.sections`)."""

from __future__ import annotations

import math
import re
from html import escape as html_escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medvlm_audit.report.html import format_p
from medvlm_audit.report.sections import Section
from medvlm_audit.results import MetricRow, metrics_frame
from medvlm_audit.stats import rate_interval, rate_interval_method
from medvlm_audit.suites.base import SuiteResult
from medvlm_audit.suites.reports.assess import (
    ASSESSABLE_SHARE,
    MIN_CONTENT_WORDS,
    assessability,
    report_status,
    with_vocabulary,
)
from medvlm_audit.suites.reports.audit import CorpusAudit, corpus_audit
from medvlm_audit.suites.reports.corpus import (
    Corpus,
    CorpusError,
    iu_reference_corpus,
    make_corpus,
    read_corpus,
)
from medvlm_audit.suites.reports.decoding import STRATEGIES, effective_table
from medvlm_audit.suites.reports.sections import (
    _defined,
    _g,
    decoding_section,
    nothing_to_audit_section,
    strategy_sections,
)
from medvlm_audit.suites.reports.terms import report_tokens
from medvlm_audit.suites.reports.verdicts import (
    HOW_TO_READ,
    model_line,
    verdict_table,
    verdicts_html,
)
from medvlm_audit.suites.reports.verdicts import not_assessable_section as nothing_audited_verdicts

CATEGORIES = ("erasure", "new_bias", "bias_flip", "preservation")
STOCHASTIC = frozenset(n for n, s in STRATEGIES.items() if s.stochastic)


def reference_corpus(spec: str) -> Corpus:
    return iu_reference_corpus() if spec == "iu" else read_corpus(spec)


def predictions_corpus(rows: pd.DataFrame, source: str) -> tuple[Corpus, list[str]]:
    """A model x strategy's reports as a corpus (id ``case#sample``, the report, the patient's sex) and each
    report's paired reference id (the tidy table's ``reference_id``, else the case id)."""
    ok = rows[rows["report"].notna() & rows["group"].isin(["F", "M"])]
    ref_ids = ok["reference_id"] if "reference_id" in ok else ok["case_id"]
    corpus = make_corpus(({"id": f"{r.case_id}#{r.sample_index}", "text": str(r.report), "group": r.group}
                          for r in ok.itertuples(index=False)), source)
    return corpus, [str(x) for x in ref_ids]


def paired_rows(res: CorpusAudit, model: str, strategy: str, probe_set: str) -> list[MetricRow]:
    """Metrics rows of the surface and clinical metrics (reports paired with their reference report)."""
    rows: list[MetricRow] = []
    for frame in (res.surface, res.clinical):
        if frame is None:
            continue
        for r in frame.to_dict("records"):
            n = int(r.get("n_scored", 0))
            note = str(r.get("note", "") or "")
            if "n_pairs" in r and int(r["n_pairs"]) > n:
                note = (note + "; " if note else "") + f"{n} of {int(r['n_pairs'])} pairs scored (seeded sample)"
            rows.append(_row(model, str(r["metric"]), strategy, r["value"], n=n, unit=str(r.get("unit", "fraction")),
                             method=str(r["method"]), note=note, ci=(r["ci_low"], r["ci_high"]), probe_set=probe_set))
    return rows


def _row(model: str, metric: str, subset: str, point: float, *, n: int, unit: str, method: str, note: str = "",
         ci: tuple[float, float] = (math.nan, math.nan), probe_set: str = "") -> MetricRow:
    """A reports metric row: a value of the corpus audit's tables (no SE), undefined values with a note."""
    if not note and not _defined(point):  # an undefined value says why (the specific rows say more)
        note = "undefined: too few reports, or too few words in a group's reports, to compute it"
    return MetricRow("reports", probe_set, model, metric, subset, float(point), math.nan, float(ci[0]), float(ci[1]),
                     int(n), unit, method, note)


def metric_rows(res: CorpusAudit, model: str, strategy: str, probe_set: str, B: int, n_perm: int) -> list[MetricRow]:
    div = res.diversity.set_index("corpus").loc["predictions"]
    n = int(div["n_reports"])
    rows = [
        _row(model, "template_diversity", strategy, div["template_diversity"], n=n, unit="fraction",
             method="share of unique reports", probe_set=probe_set),
        _row(model, "ttr", strategy, div["ttr"], n=n, unit="fraction", method="corpus type-token ratio",
             probe_set=probe_set),
        _row(model, "one_minus_self_bleu", strategy, div["one_minus_self_bleu"], n=n, unit="fraction",
             method=f"1 - Self-BLEU (sacrebleu; sample of {int(div['self_bleu_sample'])})", probe_set=probe_set),
        _row(model, "vocabulary_size", strategy, div["vocabulary_size"], n=n, unit="words",
             method="distinct words, stop words removed", probe_set=probe_set),
    ]
    if not math.isnan(float(div["semantic_diversity"])):
        rows.append(_row(model, "semantic_diversity", strategy, div["semantic_diversity"], n=n, unit="fraction",
                         method="1 - mean pairwise cosine", note=str(div["semantic_note"]), probe_set=probe_set))
    V = len(res.cad)
    gated, ungated = res.category_counts(True), res.category_counts(False)
    head = res.category_counts("headline")
    null = res.summary.get("categories_null", {})
    for c in CATEGORIES:
        rows.append(_row(model, f"{c}_count", strategy, gated[c], n=V, unit="words",
                         method="CAD, gated: BH q < p* = 0.05", probe_set=probe_set))
        rows.append(_row(model, f"{c}_count_ungated", strategy, ungated[c], n=V, unit="words",
                         method="CAD, ungated (cad.csv; not a headline)", probe_set=probe_set))
        rows.append(_row(model, f"{c}_count_headline", strategy, head[c], n=V, unit="words",
                         method=("CAD headline: BH-gated erasures + words strong in the reference never written"
                                 if c == "erasure" else "CAD headline: BH-gated"),
                         note=f"null (reference split in two at random): {int(null.get(c, 0))}", probe_set=probe_set))
        rows.append(_row(model, f"{c}_count_null", strategy, int(null.get(c, 0)), n=V, unit="words",
                         method="the headline rule on the reference corpus split in two at random (seed 0)",
                         probe_set=probe_set))
    rows.append(_row(model, "absent_strong_count", strategy, int(res.summary.get("absent_strong", 0)), n=V,
                     unit="words", method="words with |z_ref| > 2 that the predictions never write",
                     note="WAE falls when such words are erased (their z_disp^2 < 0.8)", probe_set=probe_set))
    matched = res.summary.get("absent_strong_null_matched")
    if matched:
        rows.append(_row(model, "absent_strong_null_p95", strategy, matched["p95"], n=V, unit="words",
                         method=(f"95th percentile, over {int(matched['draws'])} random samples of the predictions' "
                                 "size (F and M reports) from the reference, of the strong words none writes"),
                         note=f"mean {matched['mean']:.1f}: words a corpus this small leaves unwritten by chance",
                         probe_set=probe_set))
        rows.append(_row(model, "absent_strong_null_p5", strategy, matched.get("p5", math.nan), n=V, unit="words",
                         method="5th percentile of the same draws (below it, the model writes more of the strong "
                                "words than human reports of its size)", probe_set=probe_set))
        rows.append(_row(model, "strong_count", strategy, matched.get("strong", math.nan), n=V, unit="words",
                         method="words strong in the reference (|z_ref| > 2)", probe_set=probe_set))
    w = res.wae.set_index(["weighting", "group"])
    for metric, key in (("wae_pred", ("pred", "all")), ("wae_ref", ("ref", "all")), ("delta_wae", ("pred", "delta")),
                        ("delta_wae_ref", ("ref", "delta")), ("wae_pred_F", ("pred", "F")),
                        ("wae_pred_M", ("pred", "M"))):
        r = w.loc[key]
        if _defined(r["value"]):
            note = (f"permutation test p = {format_p(r['p_perm'])} (null median {_g(r['null_median'])}, 95th "
                    f"percentile {_g(r['null_p95'])}); every bootstrap interval in wae.csv")
        else:
            note = ("undefined: no word is scored in both groups' reports (too few reports or words, e.g. one-word "
                    "reports)")
        meth = (f"interval: {r['ci_print_method']} over reports (B = {B}); p: label permutation ({n_perm})")
        rows.append(_row(model, metric, strategy, r["value"], n=n, unit="z^2", method=meth,
                         note=note, ci=(r["ci_low_print"], r["ci_high_print"]), probe_set=probe_set))
    base = res.baselines.set_index(["metric", "corpus"])
    if ("delta_dir", "predictions") in base.index:
        rows.append(_row(model, "delta_dir", strategy, base.loc[("delta_dir", "predictions"), "value"], n=n,
                         unit="ratio", method="DIR(pred) - DIR(ref); DIR = tokens per M / per F report",
                         note="" if _defined(base.loc[("delta_dir", "predictions"), "value"]) else
                         "undefined: a group has no reports, or the F reports have no words (DIR divides by them)",
                         probe_set=probe_set))
    return rows


def report_statuses(rows: pd.DataFrame, vocabulary: set[str]) -> list[str]:
    """Each report's status (assess.py): the tidy table's ``status`` (from the text where an older run lacks
    it), ``no_vocabulary`` where an otherwise assessable report has no word of the reference's ``vocabulary``."""
    base = rows["status"] if "status" in rows else rows["report"].map(report_status)
    return with_vocabulary([str(x) for x in base], rows["report"], vocabulary)


def assessable_row(model: str, strategy: str, k: int, n: int, reason: str, probe_set: str) -> MetricRow:
    """The share of assessable reports (the reports suite's parse rate), with the interval every rate gets."""
    lo, hi = rate_interval(k, n) if n else (math.nan, math.nan)
    return _row(model, "assessable_share", strategy, k / n if n else math.nan, n=n, unit="fraction",
                method=("share of reports that are not empty, a refusal, too short or without a reference word "
                        f"(assess.py); {rate_interval_method(k, n)}"), note=reason, ci=(lo, hi),
                probe_set=probe_set)


def not_assessable_rows(model: str, strategy: str, n: int, reason: str, probe_set: str) -> list[MetricRow]:
    """A not-assessable model x strategy: every headline metric undefined, its note the reason (the gate reads
    it as ``FAIL (not assessable)``); no CAD category or WAE is computed."""
    return [_row(model, m, strategy, math.nan, n=n, unit="words" if "count" in m or m == "vocabulary_size" else
                 "z^2" if "wae" in m else "fraction", method="not computed: the reports are not assessable",
                 note=reason, probe_set=probe_set) for m in TABLE_METRICS]


#: the metrics the strategy table shows (a column each, NaN where undefined)
TABLE_METRICS: tuple[str, ...] = (
    "template_diversity", "ttr", "one_minus_self_bleu", "vocabulary_size",
    *(f"{c}_count{u}" for c in CATEGORIES for u in ("", "_ungated", "_headline", "_null")), "absent_strong_count",
    "absent_strong_null_p95", "absent_strong_null_p5", "strong_count", "wae_pred", "wae_ref", "delta_wae", "delta_wae_ref", "wae_pred_F", "wae_pred_M")


def _count_or_none(v: Any) -> int | None:
    """A count for summary.json, or None (JSON null) when undefined."""
    return int(v) if _defined(v) else None


def strategy_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per model x strategy with the headline numbers (for the report and ``by_strategy.csv``)."""
    # every headline column is present even where no row defines it (a WAE of one-word reports is undefined:
    # NaN, shown as "—", never a KeyError); pivot_table would drop an all-NaN metric
    def pivot(values: str) -> pd.DataFrame:
        t = metrics.pivot_table(index=["model", "subset"], columns="metric", values=values, aggfunc="first",
                                dropna=False)
        return t.reindex(columns=list(dict.fromkeys([*t.columns, *TABLE_METRICS])))

    wide, lo, hi = pivot("point"), pivot("ci_low"), pivot("ci_high")
    n = metrics[metrics["metric"] == "template_diversity"].set_index(["model", "subset"])["n"]
    out = wide.copy()
    for m in ("wae_pred", "wae_ref", "delta_wae"):
        out[f"{m}_ci_low"], out[f"{m}_ci_high"] = lo[m], hi[m]
    out["n_reports"] = n
    out = out.reset_index().rename(columns={"subset": "strategy"})
    order = {s: i for i, s in enumerate(STRATEGIES)}
    out["_o"] = out["strategy"].map(order)
    return out.sort_values(["model", "_o"]).drop(columns="_o").reset_index(drop=True)


def not_assessable_section(not_assessable: dict[str, str]) -> Section:
    """The model x strategy pairs whose reports are degenerate (assess.py), each with its counts."""
    items = "".join(f"<li>{html_escape(k)}: {html_escape(v)}</li>" for k, v in not_assessable.items())
    return Section("Not assessable", (
        "<p>A model x strategy whose reports are mostly empty, refusals, too short (fewer than "
        f"{MIN_CONTENT_WORDS} words besides stop words) or without a word of the reference corpus's vocabulary "
        f"(fewer than {100 * ASSESSABLE_SHARE:g}% assessable) gets no CAD category, WAE, diversity or verdict: "
        f"its rows in the tables read '—'.</p><ul>{items}</ul>"))


def _undefined_verdict(model: str, not_assessable: dict[str, str]) -> str:
    """The verdict of a model with nothing audited: its strategies' not-assessable reasons, else undefined."""
    why = [f"{k.split(' / ', 1)[1]} {v}" for k, v in not_assessable.items() if k.split(" / ", 1)[0] == model]
    return "; ".join(why) if why else "undefined: no reports of both groups to audit"


#: the columns of the corpus audit's tables as written (cad.csv and cad_<strategy>.csv, wae.csv, diversity.csv):
#: a run with nothing to audit writes them with these headers and no rows, so ``pd.read_csv`` reads them
#: (tests/test_reports_assessable.py checks them against a real audit)
CAD_COLUMNS: tuple[str, ...] = (
    "model", "strategy", "word", "z_ref", "z_pred", "z_disp", "p", "q", "category", "category_ungated", "s_ref",
    "s_pred", "count_ref_F", "count_ref_M", "count_pred_F", "count_pred_M", "category_headline", "absent_strong")
WAE_COLUMNS: tuple[str, ...] = (
    "model", "strategy", "weighting", "group", "value", "ci_low", "ci_high", "p_perm", "n_boot", "n_perm",
    "null_median", "null_p95", "point_outside_ci", "boot_bias", "value_bias_corrected", "ci_low_basic",
    "ci_high_basic", "ci_low_bc", "ci_high_bc", "ci_low_print", "ci_high_print", "ci_print_method")
DIVERSITY_COLUMNS: tuple[str, ...] = (
    "corpus", "n_reports", "template_diversity", "ttr", "one_minus_self_bleu", "semantic_diversity",
    "vocabulary_size", "self_bleu_sample", "semantic_note", "model", "strategy")
_WAE_PRED_COLUMNS = ("p_perm", "null_median", "null_p95")


def _empty_tables(metrics: pd.DataFrame, strategies: list[str], reasons: dict[str, str]) -> dict[str, pd.DataFrame]:
    """The tables of a run with nothing to audit: headers and no rows (empty files would not parse), the strategy
    table with a row per model x strategy (every audit column empty) and a verdict per model x strategy."""
    if len(metrics):
        by = strategy_table(metrics)
    else:
        by = pd.DataFrame(columns=["model", "strategy", *TABLE_METRICS, "n_reports"])
    for col in _WAE_PRED_COLUMNS:
        by[f"wae_pred_{col}"] = math.nan
    vt = pd.DataFrame([(m, s, "not assessable", reasons.get(f"{m} / {s}") or
                        "no reports of both groups (F and M) to audit")
                       for m, s in zip(by["model"], by["strategy"], strict=True)],
                      columns=["model", "strategy", "verdict", "reason"])
    cad = pd.DataFrame(columns=list(CAD_COLUMNS))
    return {"by_strategy": by, "cad": cad, "wae": pd.DataFrame(columns=list(WAE_COLUMNS)),
            "diversity": pd.DataFrame(columns=list(DIVERSITY_COLUMNS)), "reports_verdicts": vt,
            **{"cad_" + re.sub(r"[^A-Za-z0-9]", "_", s): cad for s in strategies}}


def analyse_reports(tidy: pd.DataFrame, opts: Any, *, fmt: str = "svg") -> SuiteResult:
    """Run the corpus audit per model x strategy and assemble the suite result."""
    from medvlm_audit.suites.reports.clinical import load_clinical_metric

    ref = reference_corpus(opts.reference)
    flags = {"auto": "auto", "on": True, "off": False}
    sem = flags[opts.semantic]
    clinical = [load_clinical_metric(c.name, c.path, where=f"option 'clinical_metrics' ({c.name})", **c.params)
                for c in opts.clinical_metrics]
    probe_set = ",".join(sorted(tidy["probe_set"].dropna().astype(str).unique())) or "reports"
    rows: list[MetricRow] = []
    cads, waes, divs = [], [], []
    skipped: dict[str, str] = {}
    paired_names: set[str] = set()
    ref_div: dict[str, Any] = {}
    not_assessable: dict[str, str] = {}
    shares: dict[str, dict[str, Any]] = {}
    group_n: dict[tuple[str, str], dict[str, int]] = {}  # reports per group of each audited model x strategy
    vocabulary = {w for t in ref.texts for w in report_tokens(t)}
    order = {s: i for i, s in enumerate(STRATEGIES)}
    for model in sorted(tidy["model"].unique()):
        m = tidy[tidy["model"] == model]
        for strategy in sorted(m["strategy"].unique(), key=lambda s: order.get(s, 99)):
            g = m[m["strategy"] == strategy]
            k, n, reason = assessability(report_statuses(g, vocabulary))
            shares[f"{model} / {strategy}"] = {"assessable": k, "n": n}
            rows.append(assessable_row(model, strategy, k, n, reason, probe_set))
            if reason:  # degenerate output: no CAD category, WAE, diversity or verdict (assess.py)
                not_assessable[f"{model} / {strategy}"] = reason
                rows += not_assessable_rows(model, strategy, n, reason, probe_set)
                continue
            try:
                pred, ref_ids = predictions_corpus(g, f"{model} / {strategy}")
            except CorpusError as e:
                skipped[f"{model} / {strategy}"] = str(e)
                continue
            res = corpus_audit(ref, pred, None, B=opts.B, n_perm=opts.n_perm, seed=0, semantic=sem,
                               reference_ids=ref_ids, bertscore=flags[opts.bertscore],
                               bertscore_model=opts.bertscore_model, bertscore_layers=opts.bertscore_layers,
                               clinical=clinical, surface_max=opts.surface_max, assess=False)
            group_n[(str(model), str(strategy))] = pred.counts()
            rows += metric_rows(res, model, strategy, probe_set, opts.B, opts.n_perm)
            rows += paired_rows(res, model, strategy, probe_set)
            paired_names |= {str(m) for f in (res.surface, res.clinical) if f is not None for m in f["metric"]}
            cads.append(res.cad.assign(model=model, strategy=strategy))
            waes.append(res.wae.assign(model=model, strategy=strategy))
            d = res.diversity.assign(model=model, strategy=strategy)
            divs.append(d[d["corpus"] == "predictions"])
            if not ref_div:
                ref_div = res.diversity.set_index("corpus").loc["reference"].to_dict()
                divs.insert(0, d[d["corpus"] == "reference"].assign(model="", strategy=""))
    metrics = metrics_frame(rows)
    if not cads:  # a report that says why, not a traceback (every answer errored, one group only, ...)
        # each model its own reason (its strategies' 'too short' / refusal counts, or why it was left out)
        why = {**{k: f"undefined: {v}" for k, v in skipped.items()}, **not_assessable}
        skipped = {**skipped, **not_assessable}
        models = sorted(map(str, tidy["model"].unique()))
        own = {m: _undefined_verdict(m, why) for m in models}
        # tables with their headers and no audit rows, so that a report written again over an older one leaves
        # no stale CAD labels and pd.read_csv reads each
        empty = _empty_tables(metrics, [str(s) for s in tidy["strategy"].dropna().unique()], why)
        return SuiteResult(
            metrics=metrics, sections=[nothing_audited_verdicts(models, own), nothing_to_audit_section(skipped)],
            verdicts=own,
            summary={"reference": {"spec": opts.reference, "source": ref.source, "n": len(ref), **ref.counts()},
                     "B": opts.B, "n_perm": opts.n_perm, "headline_rule": "ungated", "skipped": skipped,
                     "not_assessable": not_assessable, "assessable_reports": shares,
                     "verdict_badges": {f"{r.model} / {r.strategy}": r.verdict
                                        for r in empty["reports_verdicts"].itertuples()},
                     "undefined": "no model x strategy has reports of both groups to audit"},
            tables=empty,
            intro="No reports to audit: see the section below for why.")
    table = strategy_table(metrics)
    cad = pd.concat(cads, ignore_index=True)
    front = ["model", "strategy"]
    cad = cad[front + [c for c in cad.columns if c not in front]]
    tables = {"by_strategy": table, "cad": cad, "wae": pd.concat(waes, ignore_index=True)[
        ["model", "strategy", *waes[0].columns.drop(["model", "strategy"])]],
        "diversity": pd.concat(divs, ignore_index=True)}
    for s in tidy["strategy"].unique():  # every strategy run, empty where none is assessable (no stale file)
        tables["cad_" + re.sub(r"[^A-Za-z0-9]", "_", s)] = cad[cad["strategy"] == s].reset_index(drop=True)
    wae_by = {(str(f["model"].iloc[0]), str(f["strategy"].iloc[0])): f for f in waes}
    sections = strategy_sections(table, ref_div, wae_by, metrics, paired_names, cad, fmt=fmt)
    if not_assessable:
        sections.insert(0, not_assessable_section(not_assessable))
    for col in ("p_perm", "null_median", "null_p95"):
        table[f"wae_pred_{col}"] = [float(wae_by[(m, s)].set_index(["weighting", "group"]).loc[("pred", "all"), col])
                                    if (m, s) in wae_by else math.nan
                                    for m, s in zip(table["model"], table["strategy"], strict=True)]
    for g in ("F", "M"):  # the verdict's floor of reports per group (verdicts.MIN_REPORTS_PER_GROUP)
        table[f"n_reports_{g}"] = [group_n[(m, s)][g] if (m, s) in group_n else math.nan
                                   for m, s in zip(table["model"], table["strategy"], strict=True)]
    vt = verdict_table(table)
    for i, r in vt.iterrows():  # a degenerate model x strategy (assess.py) says why, not 'no defined count'
        why = not_assessable.get(f"{r['model']} / {r['strategy']}")
        if why is not None:
            vt.loc[i, ["verdict", "reason"]] = ["not assessable", why]
    labels = {s: STRATEGIES[s].label for s in table["strategy"].unique() if s in STRATEGIES}
    verdicts: dict[str, str] = {str(m): model_line(vt, m) for m in table["model"].unique()}
    summary = {"reference": {"spec": opts.reference, "source": ref.source, "n": len(ref), **ref.counts()},
               "reference_diversity": {k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v)
                                       for k, v in ref_div.items()},
               "B": opts.B, "n_perm": opts.n_perm, "headline_rule": "headline", "skipped": skipped,
               "not_assessable": not_assessable, "assessable_reports": shares,
               "categories_headline": {f"{m} / {s}": {c: _count_or_none(r[f"{c}_count_headline"]) for c in CATEGORIES}
                                       for m, s, r in ((r["model"], r["strategy"], r) for _, r in table.iterrows())},
               "categories_null": {f"{m} / {s}": {c: _count_or_none(r[f"{c}_count_null"]) for c in CATEGORIES}
                                   for m, s, r in ((r["model"], r["strategy"], r) for _, r in table.iterrows())},
               "verdict_badges": {f"{r.model} / {r.strategy}": r.verdict for r in vt.itertuples()},
               "strategies": {s: STRATEGIES[s].label for s in table["strategy"].unique() if s in STRATEGIES}}
    eff = effective_table(tidy, getattr(opts, "max_new_tokens", None))
    if len(eff):
        tables["effective_decoding"] = eff
        flagged = eff[(eff["mismatch"].astype(str).str.len() > 0) & (eff["mismatch"] != "not recorded")]
        summary["decoding_mismatches"] = {f"{r.model} / {r.strategy}": r.mismatch for r in flagged.itertuples()}
        for r in flagged.itertuples():
            if r.model in verdicts:
                verdicts[r.model] += f"; decoding of {r.strategy} differs from its label ({r.mismatch})"
            hit = (vt["model"] == r.model) & (vt["strategy"] == r.strategy)
            vt.loc[hit, "reason"] += f"; the decoding as run differs from its label ({r.mismatch})"
        sections.append(decoding_section(eff))
    tables["reports_verdicts"] = vt
    sections.insert(0, Section("Verdicts", verdicts_html(vt, labels), "verdicts"))
    name = "the IU X-ray reports (from the installed torchxrayvision)" if opts.reference == "iu" else \
        Path(str(opts.reference)).name
    intro = HOW_TO_READ + (f"<p>Reference corpus: {html_escape(name)}, {len(ref):,} reports with the patient's sex; "
                           f"{len(table)} model x strategy pairs audited, each against it.</p>")
    return SuiteResult(metrics=metrics, sections=sections, verdicts=verdicts, summary=summary, tables=tables,
                       intro=intro)
